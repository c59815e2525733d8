"""``tuner run-round PATH --round 1``: a phase of trials on every local device, within budgets."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from tuner.cli._console import err, out
from tuner.cli._errors import EXIT_FAILED, EXIT_INTERRUPTED, guarded
from tuner.cli._phase_view import PhaseView, headline, now
from tuner.errors import UsageError

if TYPE_CHECKING:
    from tuner.orchestrate import LocalWorker
    from tuner.orchestrate.progress import PhaseSnapshot


def parse_devices(text: str | None) -> list[str] | None:
    if text is None:
        return None
    devices = [part.strip() for part in text.split(",") if part.strip()]
    if not devices or not all(device.isdigit() for device in devices):
        raise UsageError(f"--devices expects GPU ids like 0,1 — got {text!r}")
    return devices


@guarded
def run_round(
    path: Path = typer.Argument(..., metavar="STUDY", help="The study file."),
    round_number: int = typer.Option(..., "--round", metavar="N", help="1: many short exploration trials."),
    set_: list[str] = typer.Option(
        [], "--set", metavar="KEY=VALUE", help="Override a study field (repeatable), e.g. --set batch_size=128."
    ),
    output_dir: Path = typer.Option(
        Path("runs"), "--output-dir", metavar="DIR", envvar="TUNER_OUTPUT_DIR", help="Output folder."
    ),
    workers: int | None = typer.Option(
        None, "--workers", metavar="N", help="CPU workers (default: one per GPU, else one per core)."
    ),
    devices: str | None = typer.Option(
        None, "--devices", metavar="IDS", help="GPU ids, one worker each, e.g. 0,1."
    ),
    trials: int | None = typer.Option(
        None, "--trials", metavar="N", help="Trial budget (default: rounds.round1.trials)."
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
    storage: str | None = typer.Option(
        None,
        "--storage",
        metavar="URL",
        help="Storage URL (default: $TUNER_STORAGE, the study's storage, or SQLite).",
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Live view on a terminal."),
) -> None:
    """Run a round's trials, one worker per device; re-run to continue after an interruption."""
    if round_number != 1:
        raise UsageError(f"--round {round_number}: only round 1 exists so far (round 2 is not built yet)")
    from tuner.spec import load_study
    from tuner.workloads import check_study

    loaded = load_study(path, set_)
    check_study(loaded)
    from tuner.orchestrate import LocalPool, local_workers, redact_url
    from tuner.orchestrate.progress import PhaseWatcher
    from tuner.playbook import create_round, prepare_round

    spec = loaded.spec
    started = prepare_round(
        loaded,
        "round-1",
        output_dir,
        storage_url=storage,
        max_trials=trials,
        max_failed=max_failed,
        max_parallel=max_parallel,
        max_retries=max_retries,
        trial_timeout_s=trial_timeout_s,
    )
    settings, phase = started.settings, started.plan.phase
    chosen = local_workers(
        workers=workers,
        devices=parse_devices(devices),
        max_parallel=settings.max_parallel,
        budget=settings.max_trials,
    )

    def command_for(worker: LocalWorker) -> list[str]:
        words = [sys.executable, "-m", "tuner", "worker", str(path), "--phase", phase]
        for override in set_:
            words += ["--set", override]
        words += ["--output-dir", str(output_dir), "--label", worker.label, "--quiet"]
        return words + (["--threads", str(worker.threads)] if worker.threads else [])

    pool = LocalPool(
        command_for,
        chosen,
        env={"TUNER_STORAGE": started.storage_url},  # not on the command line: ps would show a password
        log_dir=started.folder / ".workers",
    )
    pool.start()  # workers warm up (import torch) while the phase is created
    try:
        create_round(loaded, started)
    except BaseException:
        pool.stop()
        raise
    err.print(
        f"{phase}: {settings.max_trials} trials of {started.plan.trial_steps} steps "
        f"({started.plan.sampler_name}), {len(chosen)} workers ({', '.join(w.label for w in chosen)}), "
        f"storage {redact_url(started.storage_url)}"
    )
    metric = spec.objective.metric
    view = PhaseView(err, phase, metric, live=progress and err.is_terminal, since=now())
    watcher = PhaseWatcher(started.study, started.folder)
    try:
        codes = pool.wait(tick=lambda: view.update(watcher.snapshot()))
    finally:
        view.close()
    summarize(watcher.snapshot(), codes, started.folder, phase, metric, started.study)


def summarize(
    snapshot: PhaseSnapshot, codes: dict[str, int], folder: Path, phase: str, metric: str, study: Any
) -> None:
    """Print the outcome; exit 1 if the failure budget is spent, 130 if the phase is unfinished."""
    counts, settings = snapshot.counts, snapshot.settings
    out.print(headline(snapshot, phase, metric))
    out.print(f"run folders  {folder}")
    if counts.best_number is not None:
        best = study.trials[counts.best_number]
        step = best.user_attrs.get("best_step")
        out.print(f"best trial   {best.number}: {metric} = {best.value:.6g} at step {step}")
        out.print(f"reproduce    {best.user_attrs.get('reproduce')}")
    if counts.failed >= settings.max_failed:
        err.print(
            f"[red]stopped:[/] the failure budget is spent: {counts.failed} trials failed "
            f"({counts.failure_summary()}), limit {settings.max_failed}. Read the failed trials' error.log; "
            "raise the limit with --max-failed to go on"
        )
        raise typer.Exit(EXIT_FAILED)
    broken = {label: code for label, code in codes.items() if code not in (0, 1, EXIT_INTERRUPTED)}
    if broken:
        raise UsageError(
            f"workers stopped with errors ({', '.join(f'{k}: exit {v}' for k, v in broken.items())}); "
            f"their output is in {folder / '.workers'}"
        )
    if counts.to_start(settings) or counts.running:
        err.print(
            f"interrupted at {counts.finished}/{settings.max_trials} trials; "
            "run the same command again to continue"
        )
        raise typer.Exit(EXIT_INTERRUPTED)
