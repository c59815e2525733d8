"""``tuner smoke STUDY``: every phase on a tiny budget in a throw-away folder (exit 0: all completed)."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import typer

from tuner.cli._console import err, out, plural
from tuner.cli._errors import EXIT_FAILED, guarded
from tuner.cli._options import set_option, study_argument, workers_option


def _failed_trials(outcome: object, phase: str) -> list[str]:
    """Trials that did not complete (a diverged sweep LR is a result, not a failure)."""
    from tuner.orchestrate.budget import superseded

    snapshot = outcome.snapshot  # type: ignore[attr-defined]
    replaced = superseded(snapshot.trials)
    bad = []
    for trial in snapshot.trials:
        if trial.state.name == "COMPLETE" or trial.user_attrs.get("retried") or trial.number in replaced:
            continue
        reason = trial.user_attrs.get("failure_reason", trial.state.name.lower())
        if phase == "sweep-lr" and reason == "diverged":
            continue
        slot = trial.user_attrs.get("slot", trial.number)
        bad.append(f"trial {slot} {reason}: {trial.user_attrs.get('error', '')}")
    return bad


@guarded
def smoke(
    path: Path = study_argument(),
    set_: list[str] = set_option(),
    workers: int | None = workers_option("CPU workers (default: one per core)."),
    keep: Path | None = typer.Option(
        None, "--keep", metavar="DIR", help="Keep the run folders and storage in DIR (default: deleted)."
    ),
) -> None:
    """Run every phase of a study on a tiny budget (a user's CI check): exit 0 only if all completed."""
    from tuner.cli._phase_run import PhaseRequest, run_phase
    from tuner.orchestrate.warm_start import SharedWarmStart
    from tuner.playbook.smoke import smoke_plan
    from tuner.spec import load_study
    from tuner.workloads import check_study

    loaded = load_study(path, set_)
    check_study(loaded)
    plan = smoke_plan(loaded.spec)
    overrides = [*set_, *plan.overrides]
    load_study(path, overrides)  # the tiny study must itself be valid: say so before any worker starts
    folder = Path(keep) if keep is not None else Path(tempfile.mkdtemp(prefix="tuner-smoke-"))
    folder.mkdir(parents=True, exist_ok=True)
    storage = f"sqlite:///{(folder / 'study.db').resolve()}"
    started = time.perf_counter()
    done: list[str] = []
    warm_start = SharedWarmStart()  # one zygote for every phase's workers
    try:
        for phase in plan.phases:
            err.print(f"smoke: {phase}", style="bold")
            try:
                outcome = run_phase(
                    PhaseRequest(
                        path=path,
                        phase=phase,
                        set_=overrides,
                        output_dir=folder / "runs",
                        workers=workers,
                        storage=storage,
                        progress=False,
                    ),
                    warm_start=warm_start,
                )
            except typer.Exit as stop:
                if stop.exit_code:
                    err.print(f"[red]smoke failed:[/] {phase} did not complete (exit {stop.exit_code})")
                    raise typer.Exit(EXIT_FAILED) from None
                raise
            failures = _failed_trials(outcome, phase)
            if failures:
                err.print(f"[red]smoke failed:[/] {phase}: " + "; ".join(failures[:3]), markup=True)
                raise typer.Exit(EXIT_FAILED)
            done.append(f"{phase} ({plural(len(outcome.snapshot.trials), 'trial')})")
    finally:
        warm_start.close()
        if keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    where = f"kept in {keep}" if keep is not None else "in a temporary folder, now deleted"
    out.print(
        f"smoke: every phase completed in {time.perf_counter() - started:.0f} s: {', '.join(done)}; "
        f"run folders and storage were {where}"
    )
