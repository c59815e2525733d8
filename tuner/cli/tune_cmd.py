"""``tuner tune STUDY --budget N``: the whole procedure within one budget, as one resumable command.

sweep-lr when ``max_train_steps`` is unknown, round 1, the report (its suggestions applied to a
next study, searched by its own round 1), round 2 (and 3...), then the delivered model. The
procedure is the playbook's (``tuner/playbook/tune/``, its budget rule ``tuner/playbook/budget.py``);
this command parses the flags, passes in what the procedure needs from above the playbook (the
report's reading of a round, a phase run with its live view) and renders what it says
(``_tune_view``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer

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

if TYPE_CHECKING:
    from tuner.cli._phase_run import PhaseOutcome
    from tuner.orchestrate.warm_start import SharedWarmStart
    from tuner.playbook.tune.phase_runner import PhaseToRun


@dataclass
class CommandLinePhases:
    """``tune``'s ``PhaseRunner``: each phase run as ``sweep-lr`` / ``run-round`` run it (the same
    ``run_phase``: live view, summary, ``typer.Exit`` on Ctrl-C or a spent failure budget),
    sweep-lr's table and verdicts before its summary, every phase's workers forked from one
    zygote (``warm_start``)."""

    warm_start: SharedWarmStart
    progress: bool

    def run(self, phase: PhaseToRun) -> None:
        from tuner.cli._phase_run import PhaseRequest, run_phase
        from tuner.playbook.phase_names import SWEEP_PHASE

        run_phase(
            PhaseRequest(
                path=phase.path,
                phase=phase.phase,
                set_=phase.sets,
                output_dir=phase.output_dir,
                workers=phase.workers,
                devices=phase.devices,
                storage=phase.storage,
                progress=self.progress,
                budget={
                    "max_trials": phase.max_trials,
                    "timeout_h": phase.timeout_h,
                    "max_failed": phase.max_failed,
                },
            ),
            before_summary=_sweep_table if phase.phase == SWEEP_PHASE else None,
            warm_start=self.warm_start,
        )


def _sweep_table(outcome: PhaseOutcome) -> None:
    """sweep-lr's table and verdicts, as ``tuner sweep-lr`` prints them before its summary."""
    from tuner.cli.sweep_lr_cmd import show_result

    show_result(outcome, as_json=False)


@guarded
def tune(
    path: Path = study_argument(),
    budget: str = typer.Option(
        ...,
        "--budget",
        metavar="N",
        help="Training steps for everything (e.g. 5000), or a duration (2h, 30m).",
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan and its step totals; run nothing."),
    no_sweep: bool = typer.Option(
        False, "--no-sweep", help="Never run sweep-lr (max_train_steps must be known)."
    ),
    no_apply: bool = typer.Option(
        False, "--no-apply-suggestions", help="Report round 1's suggestions, but search no next study."
    ),
    no_apply_ranges: bool = typer.Option(
        False, "--no-apply-ranges", help="Apply no change to the search space (ranges, categorical values)."
    ),
    no_apply_length: bool = typer.Option(
        False, "--no-apply-length", help="Apply no change to max_train_steps, eval_every or rounds' steps."
    ),
    no_extra_seeds: bool = typer.Option(
        False,
        "--no-extra-seeds",
        help="No runs on more seeds: the extra round only if it trains longer (with --no-extra-round, "
        "round 2 keeps the file's seeds).",
    ),
    no_extra_round: bool = typer.Option(
        False,
        "--no-extra-round",
        help="No round decided on the last round's report (longer runs, or more seeds); 20% less kept.",
    ),
    short_round1: bool = typer.Option(
        False,
        "--short-round1",
        help="Round 1 at the study file's length (a fraction of max_train_steps), searched again on its "
        "report's suggestions (default: round 1 at full length, its suggestions reported only).",
    ),
    nothing_fits_scale: float = typer.Option(
        1.0,
        "--nothing-fits-scale",
        hidden=True,  # an ablation of the outcome benchmark (docs/benchmarks.md), not a user's knob
        help="When no LR fit within sweep-lr's cap: the rounds train this multiple of the cap.",
    ),
    max_searches: int = typer.Option(
        2, "--max-searches", metavar="N", help="Round-1 searches at most: the study's, then next studies'."
    ),
    search_seed: int | None = typer.Option(
        None,
        "--search-seed",
        metavar="N",
        help="A fresh search (other points, inits, data order; the same data split), as STUDY-searchN.",
    ),
    max_failed: int | None = typer.Option(
        None,
        "--max-failed",
        metavar="N",
        help="Failure budget of each phase it runs (default: each phase's own, a third of its trials).",
    ),
    set_: list[str] = set_option(),
    output_dir: Path = output_dir_option(),
    workers: int | None = workers_option(),
    devices: str | None = devices_option(),
    storage: str | None = storage_option(),
    as_json: bool = typer.Option(False, "--json", help="End with the decision log and the model as JSON."),
    progress: bool = progress_option(),
) -> None:
    """Tune a study within one budget: sweep-lr, round 1, the report's suggestions, round 2, the model."""
    from tuner.cli._console import out
    from tuner.cli._tune_view import TuneView
    from tuner.errors import UsageError
    from tuner.orchestrate.warm_start import SharedWarmStart
    from tuner.playbook.budget import parse_budget
    from tuner.playbook.tune import TuneRequest
    from tuner.playbook.tune import tune as run_tune
    from tuner.playbook.tune_plan import Switches
    from tuner.report.tune_advice import ReportAdvisor

    parsed = parse_budget(budget)
    if max_searches < 1:
        raise UsageError(f"--max-searches {max_searches}: at least 1 (round 1 of the study itself)")
    if search_seed is not None and search_seed < 0:
        raise UsageError(f"--search-seed {search_seed}: must be 0 or more")
    if not 0.1 <= nothing_fits_scale <= 10:
        raise UsageError(f"--nothing-fits-scale {nothing_fits_scale:g}: between 0.1 and 10")
    if max_failed is not None and max_failed < 1:
        raise UsageError(f"--max-failed {max_failed}: must be 1 or more")
    request = TuneRequest(
        path=path,
        budget=parsed,
        sets=list(set_),
        output_dir=output_dir,
        storage=storage,
        workers=workers,
        devices=devices,
        switches=Switches(
            sweep=not no_sweep,
            apply_suggestions=not no_apply,
            extra_seeds=not no_extra_seeds,
            extra_round=not no_extra_round,
            max_searches=max_searches,
            apply_ranges=not no_apply_ranges,
            apply_length=not no_apply_length,
            full_length_round1=not short_round1,
            nothing_fits_scale=nothing_fits_scale,
        ),
        dry_run=dry_run,
        search_seed=search_seed,
        max_failed=max_failed,
    )
    view = TuneView(as_json)
    was_quiet = out.quiet
    out.quiet = was_quiet or as_json  # stdout holds the JSON alone; the phases' summaries are in it
    try:
        with SharedWarmStart() as warm_start:
            run_tune(
                request,
                advisor=ReportAdvisor(),
                runner=CommandLinePhases(warm_start, progress),
                emit=view.show,
            )
    finally:
        out.quiet = was_quiet
