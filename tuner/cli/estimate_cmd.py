"""``tuner estimate STUDY``: what the search costs, per phase and in total: what ran plus what is
still planned.

The figures come from ``tuner.playbook.estimate``; this module only prints them (a table, or
``--json`` with the keys docs/guide/estimate.md documents).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from tuner.cli._console import err, out
from tuner.cli._errors import guarded
from tuner.cli._options import (
    devices_option,
    output_dir_option,
    set_option,
    storage_option,
    study_argument,
    workers_option,
)

if TYPE_CHECKING:
    from tuner.playbook.estimate import Estimate, PhaseEstimate


def _number(value: float) -> str:
    """3 significant digits, never scientific notation for the sizes a search has."""
    if value == 0:
        return "0"
    if value >= 100:
        return f"{value:,.0f}"
    digits = max(0, 2 - int(f"{value:e}".split("e")[1]))
    return f"{value:.{min(digits, 8)}f}"


def duration(seconds: float) -> str:
    """``4.2 s``, ``42 s``, ``3.5 min``, ``7.2 h``, ``3.1 days``: hours and days people can read."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def _source(phase: PhaseEstimate) -> str:
    cost = phase.cost
    if cost is None:
        return ""
    return f"{cost.trials} trials" if cost.source.value == "measured" else "probe"


# a space between columns, always; a phase of unknown length has only the counts, then why
COUNTS = "{:<9}{:>6} {:>4} {:>7} {:>9} {:>9}"
ROW = COUNTS + " {:>8} {:>8} {:>4} {:>8} {:>9}  {}"


def table_lines(result: Estimate) -> list[str]:
    """One row per phase: trials in all and run, the trial length, steps in all and trained, then
    the formulas' inputs and results (JSON has them unrounded)."""
    unit = "GPU-h" if result.workers.device == "cuda" else "CPU-h"
    header = ("phase", "trials", "ran", "length", "steps", "trained", "s/step", "trial", "par", unit, "wall")
    lines = [ROW.format(*header, "source").rstrip()]
    for phase in result.phases:
        length = phase.length
        steps = "?" if length.steps is None else f"{'<=' if length.upper_bound else ''}{length.steps}"
        # sweep-lr's trials still to run stop once they fit: their steps are at most the cap's
        bound = "<=" if length.upper_bound and phase.trials_to_run else ""
        total = "?" if phase.steps_total is None else f"{bound}{phase.steps_total:,}"
        counts = (phase.phase, phase.trials_total, phase.ran.trials, steps, total, f"{phase.ran.steps:,}")
        if not phase.known:
            lines.append(COUNTS.format(*counts) + f"   {length.unknown}")
            continue
        assert phase.cost is not None or phase.steps_to_run == 0
        # a planned trial's duration: none for a phase with nothing left to start
        hours = phase.hours_per_trial if phase.trials_to_run else None
        lines.append(
            ROW.format(
                *counts,
                _number(phase.cost.seconds_per_step(phase.eval_every)) if phase.cost else "",
                "" if hours is None else duration(hours * 3600),
                phase.parallel,
                _number(phase.cost_hours or 0.0),
                duration((phase.days or 0.0) * 86400),
                _source(phase),
            ).rstrip()
        )
    total = ROW.format(
        "total",
        result.total_trials,
        result.total_trials_ran,
        "",
        f"{result.total_steps:,}",
        f"{result.total_steps_ran:,}",
        "",
        "",
        "",
        _number(result.total_cost_hours),
        duration(result.total_days * 86400),
        "" if result.complete else "(known phases)",
    )
    lines.append(total.rstrip())
    return lines


def report_lines(result: Estimate) -> list[str]:
    length = (
        f"max_train_steps {result.max_train_steps} ({result.max_train_steps_source.value})"
        if result.max_train_steps_source is not None
        else "max_train_steps unknown until tuner sweep-lr"
    )
    lines = [f"estimate for {result.study}: {length}", *table_lines(result)]
    known = "" if result.complete else " (of the phases whose length is known)"
    lines.append(
        f"steps: {result.total_steps_ran:,} trained + {result.total_steps_to_run:,} to run = "
        f"{result.total_steps:,}{known}"
    )
    sources = sorted({p.cost.detail for p in result.phases if p.cost is not None})
    if sources:
        lines.append("s/step from: " + "; ".join(sources))
    lines.append("assumes: " + "; ".join(result.notes))
    return lines


@guarded
def estimate(
    path: Path = study_argument(),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
    set_: list[str] = set_option(),
    output_dir: Path = output_dir_option(),
    storage: str | None = storage_option(),
    workers: int | None = workers_option("CPU workers (default: as run-round would start)."),
    devices: str | None = devices_option(),
    probe_steps: int = typer.Option(
        30, "--probe-steps", metavar="N", help="Steps the probe times when a phase has not run."
    ),
) -> None:
    """Each phase's trials, steps, cost and days: what ran plus what is planned."""
    from tuner.cli._phase_run import parse_devices
    from tuner.orchestrate import resolve_storage_url
    from tuner.playbook.estimate import estimate as compute
    from tuner.spec import load_study
    from tuner.workloads import check_study

    loaded = load_study(path, set_)
    check_study(loaded)
    gpus = parse_devices(devices)
    url = storage or resolve_storage_url(loaded.spec.storage, output_dir, loaded.spec.name)

    def announce(text: str) -> None:
        err.print(text, markup=False)

    result = compute(
        loaded, storage_url=url, workers=workers, devices=gpus, probe_steps=probe_steps, announce=announce
    )
    from tuner.playbook.tune.projection import stored_plan

    tuned = stored_plan(loaded, list(set_), output_dir, storage)  # None: tuner tune never ran on it
    if as_json:
        payload = result.as_json()
        if tuned is not None:
            payload["tune"] = tuned.to_json()
        out.print(json.dumps(payload, indent=2), markup=False)
        return
    for line in report_lines(result):
        out.print(line, markup=False)
    if tuned is not None:
        out.print(
            f"tuner tune's plan within its budget of {tuned.budget_steps:,} training steps:", markup=False
        )
        for line in tuned.lines():
            out.print(f"  {line}", markup=False)
