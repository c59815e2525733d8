"""``tuner run-round PATH --round 1``: a phase of trials on every local device, within budgets."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from tuner.cli._console import err, out
from tuner.cli._errors import EXIT_FAILED, EXIT_INTERRUPTED, guarded
from tuner.cli._phase_view import PhaseView, now
from tuner.errors import UsageError
from tuner.spec import load_study
from tuner.workloads import check_study


def parse_devices(text: str | None) -> list[str] | None:
    if text is None:
        return None
    devices = [part.strip() for part in text.split(",") if part.strip()]
    if not devices or not all(device.isdigit() for device in devices):
        raise UsageError(f"--devices expects GPU ids like 0,1 — got {text!r}")
    return devices


@guarded
def run_round(
    path: Path = typer.Argument(..., help="The study file."),
    round_number: int = typer.Option(..., "--round", help="1: many short exploration trials."),
    set_: list[str] = typer.Option([], "--set", help="Override a study field, e.g. --set batch_size=128."),
    output_dir: Path = typer.Option(
        Path("runs"), "--output-dir", envvar="TUNER_OUTPUT_DIR", help="Output folder."
    ),
    workers: int | None = typer.Option(
        None, "--workers", help="CPU workers (default: one per GPU, else per core)."
    ),
    devices: str | None = typer.Option(None, "--devices", help="GPU ids, one worker each, e.g. 0,1."),
    trials: int | None = typer.Option(None, "--trials", help="Trial budget (default: rounds.roundN.trials)."),
    max_failed: int | None = typer.Option(None, "--max-failed", help="Failure budget (default: a third)."),
    max_parallel: int | None = typer.Option(
        None, "--max-parallel", help="Trials running at once, all workers."
    ),
    max_retries: int | None = typer.Option(None, "--max-retries", help="Retries of a crashed trial."),
    trial_timeout_s: float | None = typer.Option(
        None, "--trial-timeout", help="Seconds before a trial is killed."
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Live view on a terminal."),
) -> None:
    """Run a round's trials with one worker per device; re-run to continue after an interruption."""
    if round_number != 1:
        raise UsageError(
            f"--round {round_number}: only round 1 exists so far (round 2 comes with the playbook)"
        )
    loaded = load_study(path, set_)
    check_study(loaded)
    from tuner.orchestrate import (
        local_workers,
        open_storage,
        redact_url,
        resolve_storage_url,
        run_local_workers,
    )
    from tuner.orchestrate.phase import start_phase
    from tuner.orchestrate.progress import PhaseWatcher
    from tuner.playbook import phase_plan
    from tuner.playbook.phases import CONFIG_HASH_ATTR, training_config_hash
    from tuner.train.run_folder import phase_dir
    from tuner.train.schedules import build_schedule

    spec = loaded.spec
    plan = phase_plan(loaded, "round-1", output_dir)
    try:
        build_schedule(spec.training.schedule, plan.trial_steps)
    except ValueError as error:
        raise UsageError(
            f"training.schedule does not fit round 1's {plan.trial_steps} steps: {error}"
        ) from None
    settings = plan.settings(
        max_trials=trials,
        max_failed=max_failed,
        max_parallel=max_parallel,
        max_retries=max_retries,
        trial_timeout_s=trial_timeout_s,
    )
    folder = phase_dir(output_dir, spec.name, plan.phase)
    url = resolve_storage_url(spec.storage, output_dir, spec.name)
    storage = open_storage(url)
    config_hash = training_config_hash(spec)
    study = start_phase(
        storage,
        spec.name,
        plan.phase,
        settings,
        direction=spec.objective.direction,
        params_for_slot=plan.params_for_slot,
        sampler=plan.sampler(),
        expected_attrs={CONFIG_HASH_ATTR: config_hash},
        extra_attrs={"tuner:study_file": str(path.resolve()), "tuner:trial_steps": plan.trial_steps},
    )
    chosen = local_workers(
        workers=workers,
        devices=parse_devices(devices),
        max_parallel=settings.max_parallel,
        budget=settings.max_trials,
    )
    err.print(
        f"{plan.phase}: {settings.max_trials} trials of {plan.trial_steps} steps ({plan.sampler_name}), "
        f"{len(chosen)} workers ({', '.join(w.label for w in chosen)}), storage {redact_url(url)}"
    )
    view = PhaseView(err, plan.phase, spec.objective.metric, live=progress and err.is_terminal, since=now())
    watcher = PhaseWatcher(study, folder)

    def command_for(worker: object) -> list[str]:
        words = [sys.executable, "-m", "tuner", "worker", str(path), "--phase", plan.phase]
        for override in set_:
            words += ["--set", override]
        words += ["--output-dir", str(output_dir), "--label", worker.label, "--quiet"]  # type: ignore[attr-defined]
        threads = worker.threads  # type: ignore[attr-defined]
        return words + (["--threads", str(threads)] if threads else [])

    try:
        codes = run_local_workers(
            command_for,
            chosen,
            env={"TUNER_STORAGE": url},
            log_dir=folder / ".workers",
            tick=lambda: view.update(watcher.snapshot()),
        )
    finally:
        view.close()
    _finish(watcher.snapshot(), codes, folder, plan.phase, spec.objective.metric, study)


def _finish(
    snapshot: object, codes: dict[str, int], folder: Path, phase: str, metric: str, study: object
) -> None:
    from tuner.cli._phase_view import headline

    counts = snapshot.counts  # type: ignore[attr-defined]
    settings = snapshot.settings  # type: ignore[attr-defined]
    out.print(headline(snapshot, phase, metric))  # type: ignore[arg-type]
    out.print(f"run folders  {folder}")
    if counts.best_number is not None:
        best = study.trials[counts.best_number]  # type: ignore[attr-defined]
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
    if any(code == EXIT_INTERRUPTED for code in codes.values()) or counts.waiting or counts.running:
        broken = {label: code for label, code in codes.items() if code not in (0, 1, EXIT_INTERRUPTED)}
        if broken:
            log = folder / ".workers"
            raise UsageError(f"workers failed ({broken}); their output is in {log}")
        err.print(
            f"interrupted at {counts.finished}/{settings.max_trials}; run the same command again to continue"
        )
        raise typer.Exit(EXIT_INTERRUPTED)
