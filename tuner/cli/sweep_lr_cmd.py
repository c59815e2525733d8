"""``tuner sweep-lr STUDY``: a constant-LR grid; the fewest steps to fit the training set is the
first ``max_train_steps`` (the playbook's way to choose it when training is not compute-bound)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from tuner.cli._console import out
from tuner.cli._errors import guarded
from tuner.cli._options import (
    devices_option,
    output_dir_option,
    progress_option,
    set_option,
    storage_option,
    study_argument,
    workers_option,
)
from tuner.errors import UsageError

if TYPE_CHECKING:
    from tuner.cli._phase_run import PhaseOutcome


def show_result(outcome: PhaseOutcome, as_json: bool) -> None:
    """The table and verdicts (or their JSON); stores the recommendation once the grid is done."""
    from tuner.playbook.sweep_lr import render_lines
    from tuner.playbook.sweep_phase import record_result, sweep_result

    started, snapshot = outcome.started, outcome.snapshot
    assert started.plan is not None
    stored = started.plan.stored
    result = sweep_result(started.study, stored, study_ref=str(started.loaded.path))
    finished = not (snapshot.counts.to_start(snapshot.settings) or snapshot.counts.running)
    record_result(started.study, result, finished)
    assert stored.fit is not None
    if as_json:
        payload = {"phase": "sweep-lr", "finished": finished, **result.to_json()}
        typer.echo(json.dumps(payload, indent=2, sort_keys=True))
        out.quiet = True  # stdout holds the JSON alone; the summary's lines are in it
        return
    for line in render_lines(result, stored.fit.metric, stored.fit.threshold, stored.trial_steps):
        out.print(line, markup=False, highlight=False)
    recommended = result.recommended_max_train_steps
    if finished and recommended is not None:
        in_file = started.loaded.spec.training.max_train_steps
        if in_file is None:
            line = (
                f"stored       max_train_steps = {recommended} for this study: round 1, round 2 and "
                "tuner train use it while the study file leaves training.max_train_steps out"
            )
        elif in_file == recommended:
            line = f"stored       max_train_steps = {recommended}, the value the study file already has"
        else:
            line = (
                f"stored       max_train_steps = {recommended}, but the study file sets {in_file}, which "
                f"wins: set it to {recommended} (or remove it) to use the sweep's value"
            )
        out.print(line, markup=False)


@guarded
def sweep_lr(
    path: Path = study_argument(),
    extend: bool = typer.Option(
        False, "--extend", help="Add the grid points beyond the edge the fastest LR sits on, and run them."
    ),
    set_: list[str] = set_option(),
    output_dir: Path = output_dir_option(),
    workers: int | None = workers_option(),
    devices: str | None = devices_option(),
    max_failed: int | None = typer.Option(
        None, "--max-failed", metavar="N", help="Failure budget (crashes; divergence is not a failure)."
    ),
    max_retries: int | None = typer.Option(
        None, "--max-retries", metavar="N", help="Retries of a crashed trial."
    ),
    trial_timeout_s: float | None = typer.Option(
        None, "--trial-timeout", metavar="SECONDS", help="Seconds before a trial is killed."
    ),
    storage: str | None = storage_option(),
    max_total_steps: str | None = typer.Option(
        None,
        "--max-total-steps",
        metavar="N",
        help="Train at most N steps over all grid trials (sets sweep_lr.max_total_steps).",
    ),
    progress: bool = progress_option(),
    as_json: bool = typer.Option(False, "--json", help="Print the table and verdicts as JSON."),
) -> None:
    """Train each grid LR at a constant schedule until it fits the training set; re-run to continue."""
    from tuner.cli._phase_run import PhaseRequest, run_phase

    if max_total_steps is not None:
        if not max_total_steps.strip().isdigit() or int(max_total_steps) < 1:
            raise UsageError(
                f"--max-total-steps expects a positive whole number of steps, got {max_total_steps!r}"
            )
        set_ = [*set_, f"sweep_lr.max_total_steps={int(max_total_steps)}"]
    run_phase(
        PhaseRequest(
            path=path,
            phase="sweep-lr",
            set_=set_,
            output_dir=output_dir,
            workers=workers,
            devices=devices,
            storage=storage,
            progress=progress,
            extend=extend,
            budget={"max_failed": max_failed, "max_retries": max_retries, "trial_timeout_s": trial_timeout_s},
        ),
        before_summary=lambda outcome: show_result(outcome, as_json),
    )
