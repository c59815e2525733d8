"""``tuner run-round PATH --round 1``: a phase of trials on every local device, within budgets."""

from __future__ import annotations

from pathlib import Path

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
from tuner.errors import UsageError


@guarded
def run_round(
    path: Path = study_argument(),
    round_number: int = typer.Option(
        ...,
        "--round",
        metavar="N",
        help="1: many short exploration trials; 2 (3...): round N-1's best, longer.",
    ),
    set_: list[str] = set_option("Override a study field (repeatable), e.g. --set batch_size=128."),
    output_dir: Path = output_dir_option(),
    workers: int | None = workers_option(),
    devices: str | None = devices_option(),
    trials: int | None = typer.Option(
        None, "--trials", metavar="N", help="Round 1's trial budget (default: rounds.round1.trials)."
    ),
    max_failed: int | None = typer.Option(
        None, "--max-failed", metavar="N", help="Failure budget (default: a third)."
    ),
    max_parallel: int | None = typer.Option(
        None, "--max-parallel", metavar="N", help="Trials running at once, over all workers and machines."
    ),
    max_retries: int | None = typer.Option(
        None, "--max-retries", metavar="N", help="Retries of a crashed trial."
    ),
    trial_timeout_s: float | None = typer.Option(
        None, "--trial-timeout", metavar="SECONDS", help="Seconds before a trial is killed (reason: timeout)."
    ),
    storage: str | None = storage_option(),
    progress: bool = progress_option(),
) -> None:
    """Run a round's trials, one worker per device; re-run to continue after an interruption."""
    from tuner.cli._phase_run import PhaseRequest, run_phase
    from tuner.playbook.phases import round_phase

    if round_number < 1:
        raise UsageError(f"--round {round_number}: rounds are numbered from 1")
    run_phase(
        PhaseRequest(
            path=path,
            phase=round_phase(round_number),
            set_=set_,
            output_dir=output_dir,
            workers=workers,
            devices=devices,
            storage=storage,
            progress=progress,
            budget={
                "max_trials": trials,
                "max_failed": max_failed,
                "max_parallel": max_parallel,
                "max_retries": max_retries,
                "trial_timeout_s": trial_timeout_s,
            },
        )
    )
