"""``tuner train PATH``: one run with the study's fixed hyperparameters (resumable)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import typer

from tuner.cli._console import err, out
from tuner.cli._errors import EXIT_FAILED, EXIT_INTERRUPTED, guarded
from tuner.cli._options import output_dir_option, set_option, study_argument
from tuner.output import shown_path

if TYPE_CHECKING:
    from tuner.train import RunResult


@guarded
def train(
    path: Path = study_argument(),
    set_: list[str] = set_option("Override a field, e.g. --set optimizer.lr=0.01."),
    output_dir: Path = output_dir_option("Where run folders go: DIR/<study>/train/run-NNN."),
    fresh: bool = typer.Option(False, "--fresh", help="Start a new run even if an unfinished one matches."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show live progress."),
) -> None:
    """Train once with the fixed hyperparameters. Re-run after an interruption to continue."""
    from tuner.spec import load_study
    from tuner.workloads import check_study

    loaded = load_study(path, set_)
    check_study(loaded)
    if loaded.spec.training.max_train_steps is None:
        # sweep-lr's result, if the study has one: the file (or --set) would win, but says nothing
        from tuner.cli.validate_cmd import stored_production_length

        production = stored_production_length(loaded.spec, None, output_dir)
        if production.steps is not None:
            set_ = [*set_, f"max_train_steps={production.steps}"]
            loaded = load_study(path, set_)
            err.print(f"max_train_steps {production.describe()}")
    from tuner.playbook.reproduce import reproduce_command
    from tuner.train import choose_run_dir, run_training  # torch: only when training

    run_dir = choose_run_dir(output_dir, loaded.spec, "train", fresh=fresh)
    if (run_dir / "checkpoints" / "latest.pt").exists():
        err.print(f"resuming {shown_path(run_dir)}")
    # While training runs, the engine's own handlers stop it cleanly (and restore this one after)
    previous = signal.signal(signal.SIGINT, _interrupt_unless_ended(run_dir))
    try:
        result = run_training(
            loaded.spec,
            run_dir,
            base_dir=loaded.base_dir,
            console=err,
            command=reproduce_command(path, {}, None, output_dir, set_),  # no trial values
            progress=progress,
            start_method="fork",  # no torch operation has run in this process: ranks fork safely
        )
        _summarise(loaded.spec.objective.metric, result)
    finally:
        signal.signal(signal.SIGINT, previous)


def _interrupt_unless_ended(run_dir: Path) -> Callable[[int, FrameType | None], None]:
    """A Ctrl-C handler: ``KeyboardInterrupt`` until the run's ``status.json`` says it has ended.

    Why: a run of several processes ends in its rank 0, and this process learns it only when the
    ranks have exited. A Ctrl-C in between, or while the result is said, has nothing left to stop:
    the run is complete on disk, and the command must say so (exit 0), not "interrupted" (130).
    ``choose_run_dir`` gives a new or an unfinished folder, so an ended status is this run's end.
    """
    from tuner.train import has_ended

    def handler(signum: int, frame: FrameType | None) -> None:
        if not has_ended(run_dir):
            raise KeyboardInterrupt

    return handler


def _summarise(metric: str, result: RunResult) -> None:
    out.print(f"run folder   {shown_path(result.run_dir)}")
    # target_reached: a callback's goal was met before max_train_steps, a normal end; say which
    status = f"target reached ({result.message})" if result.status == "target_reached" else result.status
    out.print(
        f"stopped      {status} at step {result.step}/{result.max_train_steps}"
        + (f" (resumed from step {result.resumed_from_step})" if result.resumed_from_step else "")
    )
    if result.best_value is not None:
        out.print(f"best         {metric} = {result.best_value:.6g} at step {result.best_step}")
    if result.status == "diverged":
        err.print(f"[red]training diverged:[/] {result.message}; lower optimizer.lr or add warmup")
        raise typer.Exit(EXIT_FAILED)
    if result.status == "interrupted":
        err.print("interrupted; run the same command again to continue from the last checkpoint")
        raise typer.Exit(EXIT_INTERRUPTED)
