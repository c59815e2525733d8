"""Running one phase from the command line: what ``run-round`` and ``sweep-lr`` share.

Start the local workers (they import torch while the phase is created), create or continue the
phase with its stored plan, print its header, show the live view until the workers exit, then
the summary. The caller adds what is particular to its phase (sweep-lr's table and verdicts).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from tuner.cli._console import err, error_line, plural, warning_line
from tuner.cli._errors import EXIT_FAILED, EXIT_INTERNAL, EXIT_USAGE
from tuner.errors import UsageError

if TYPE_CHECKING:
    from tuner.orchestrate import LocalWorker
    from tuner.orchestrate.progress import PhaseSnapshot
    from tuner.orchestrate.warm_start import SharedWarmStart
    from tuner.playbook.phases import StartedPhase


@dataclass
class PhaseRequest:
    """What the command line asked for."""

    path: Path
    phase: str
    set_: list[str]
    output_dir: Path
    workers: int | None = None
    devices: str | None = None
    storage: str | None = None
    progress: bool = True
    budget: dict[str, Any] = field(default_factory=dict)
    extend: bool = False
    quiet_summary: bool = False  # --json: the caller prints the only stdout


@dataclass
class PhaseOutcome:
    started: StartedPhase
    snapshot: PhaseSnapshot
    codes: dict[str, int]
    crashed: bool


def parse_devices(text: str | None) -> list[str] | None:
    if text is None:
        return None
    devices = [part.strip() for part in text.split(",") if part.strip()]
    if not devices or not all(device.isdigit() for device in devices):
        raise UsageError(f"--devices expects GPU ids like 0,1 — got {text!r}")
    return devices


def expected_trials(spec: Any, phase: str) -> int | None:
    """How many trials the phase will have, as far as the study file tells (no more workers are
    started than trials can use); None when only the plan will know."""
    from tuner.playbook.phases import SWEEP_PHASE, round_number
    from tuner.playbook.sweep_lr import default_grid

    number = round_number(phase)
    if phase == SWEEP_PHASE:
        sweep = spec.sweep_lr
        return len(sweep.grid or default_grid(spec.training.optimizer.lr)) * sweep.seeds
    round_spec = spec.rounds.get(number) if number is not None else None
    if round_spec is None:
        return None
    if number == 1:
        return round_spec.trial_budget
    return round_spec.top_k * round_spec.seeds * len(round_spec.lr_multipliers)


def header_lines(started: StartedPhase, chosen: list[LocalWorker]) -> list[str]:
    from tuner.orchestrate import redact_url
    from tuner.playbook.runnable_plan import GP_STARTUP

    plan, settings = started.plan, started.settings
    assert plan is not None and settings is not None
    stored = plan.stored
    what = {
        "quasi-random": "quasi-random",
        "random": "random",
        "tpe": "TPE",
        "gp": f"quasi-random, then Gaussian-process BO from the {plural(GP_STARTUP, 'point')} on",
        "fixed": "planned points",
    }[stored.sampler]
    lines = [
        f"{started.phase}: {plural(settings.max_trials, 'trial')} of {stored.trial_steps} steps ({what}), "
        + (
            f"{plural(len(chosen), 'worker')} ({', '.join(w.label for w in chosen)}), "
            if chosen
            else "nothing left to run (no worker started), "
        )
        + f"storage {redact_url(started.storage_url)}"
    ]
    if stored.max_train_steps is not None and stored.max_train_steps_source:
        lines.append(f"  max_train_steps {stored.max_train_steps} (from {stored.max_train_steps_source})")
    if started.started_over:
        lines.append(f"  {started.started_over}")
    if not started.created:
        lines.append("  continuing the phase's stored plan")
    lines += [f"  {note}" for note in stored.notes]
    return lines


# what ``tuner worker`` imports before it trains (its command, the storage, Optuna's schema
# check), as Python's import log (PYTHONPROFILEIMPORTTIME) lists them: 0.6 CPU s per worker
WORKER_MODULES = (
    "tuner.cli.app",
    "tuner.cli._phase_view",
    "tuner.playbook.phases",
    "tuner.orchestrate.worker",
    "optuna",
    "sqlalchemy.orm",
    "sqlalchemy.dialects.sqlite",
    "alembic.command",
    "alembic.context",
    "alembic.op",
    "multiprocessing.sharedctypes",
    "multiprocessing.popen_fork",
)


def run_phase(
    request: PhaseRequest,
    *,
    after_create: Callable[[StartedPhase], None] | None = None,
    before_summary: Callable[[PhaseOutcome], None] | None = None,
    warm_start: SharedWarmStart | None = None,
) -> PhaseOutcome:
    """Run the phase until its workers exit, then summarise it (``summarize`` raises
    ``typer.Exit`` for a failed, interrupted or crashed phase). ``before_summary`` sees the outcome
    first, whatever it is (sweep-lr prints its table there). ``warm_start``: the zygote of a
    command that runs several phases (its workers are forked from it; else one for this phase)."""
    from tuner.cli._phase_outcome import environment_errors, report_workers, summarize
    from tuner.cli._phase_view import PhaseView, now
    from tuner.orchestrate import LocalPool, local_workers
    from tuner.orchestrate.pool import check_devices, check_worker_settings
    from tuner.orchestrate.progress import PhaseWatcher
    from tuner.orchestrate.trial_process import ENGINE_MODULES
    from tuner.playbook.phases import create_phase, prepare_phase, round_number
    from tuner.spec import load_study
    from tuner.workloads import check_study

    loaded = load_study(request.path, request.set_)
    check_study(loaded)
    check_worker_settings()  # a typo in $TUNER_HEARTBEAT_S is one line here, not N failed workers
    spec = loaded.spec
    started = prepare_phase(
        loaded,
        request.phase,
        request.output_dir,
        storage_url=request.storage,
        extend=request.extend,
        **request.budget,
    )
    gpus = parse_devices(request.devices)
    number = round_number(request.phase)
    round_spec = spec.rounds.get(number) if number is not None else None
    budget = request.budget.get("max_trials") or expected_trials(spec, request.phase)
    if request.extend:
        budget = None  # the extension adds trials the file does not list
    chosen = local_workers(
        workers=request.workers,
        devices=gpus,
        max_parallel=request.budget.get("max_parallel") or (round_spec.parallel if round_spec else None),
        budget=budget or 10**6,
        processes_per_trial=spec.training.processes_per_trial,
    )
    if gpus:
        check_devices(gpus)  # before anything is created: a refused run leaves nothing behind
    from tuner.train.node_launchers import check_launcher_here

    check_launcher_here(spec.training)  # its local workers would each fail every trial

    def command_for(worker: LocalWorker) -> list[str]:
        words = [sys.executable, "-m", "tuner", "worker", str(request.path), "--phase", request.phase]
        for override in request.set_:
            # the storage reaches workers through TUNER_STORAGE (it may hold a password: ps shows
            # command lines); it is not part of what a worker checks against the phase
            if override.split("=", 1)[0].strip() != "storage":
                words += ["--set", override]
        words += ["--output-dir", str(request.output_dir), "--label", worker.label, "--quiet"]
        return words + (["--threads", str(worker.threads)] if worker.threads else [])

    pool = LocalPool(
        command_for,
        chosen,
        env={"TUNER_STORAGE": started.storage_url},  # not on the command line: ps would show a password
        log_dir=started.folder / ".workers",
        # imported once, by the zygote CPU workers fork from, not by each (3.5 CPU s each)
        preload=(*WORKER_MODULES, *ENGINE_MODULES),
        shared=warm_start,
    )
    existed = started.folder.exists()
    if not existed:
        pool.start()  # workers warm up (import torch) while the phase is created
    try:
        create_phase(started)
        if after_create is not None:
            after_create(started)
    except BaseException:
        pool.stop()
        if not existed:  # refused (e.g. round 2 before round 1): leave no empty phase folder behind
            pool.remove_logs()  # ours only: a command that won a race to create it works in it
            for folder in (started.folder / ".workers", started.folder):
                with contextlib.suppress(OSError):  # not empty: not only ours
                    folder.rmdir()
        raise
    metric = spec.objective.metric
    watcher = PhaseWatcher(started.study, started.folder)
    # a re-run of a finished phase starts no worker (each imports torch: seconds for nothing);
    # it goes straight to the summary, which says the phase is done
    before = watcher.snapshot() if existed else None
    idle = before is not None and before.nothing_to_run
    for line in header_lines(started, [] if idle else chosen):
        err.print(escape(line))
    codes: dict[str, int] = {}
    if not idle:
        if existed:
            pool.start()
        view = PhaseView(err, request.phase, metric, live=request.progress and err.is_terminal, since=now())

        def refresh() -> None:  # never raises for a storage error: a stale view, the workers go on
            view.update(watcher.refresh(), watcher.unreachable_since)

        try:
            codes = pool.wait(tick=refresh)
        finally:
            view.close()
    for error in pool.tick_errors[:1]:
        warning_line(f"the progress view failed ({type(error).__name__}); the workers were not affected")
    for label, times in sorted(pool.replaced.items()):
        warning_line(
            f"worker {label} was killed by SIGKILL (as the kernel's OOM killer does) and started again "
            f"({plural(times, 'time')}); its trial was retried as a lost trial is"
        )
    crashed = report_workers(codes, started.folder)
    environment = environment_errors(codes, started.folder)
    try:
        # each read waits out an outage ($TUNER_STORAGE_OUTAGE_S); no worker ran: nothing changed
        final = before if idle and before is not None else watcher.snapshot()
    except Exception as error:
        first = (str(error).strip().splitlines() or [""])[0][:200]
        error_line(
            escape(
                f"cannot read the outcome of {request.phase} from the storage "
                f"({type(error).__name__}: {first}); "
                "the workers have exited. Run the same command again once the storage is reachable: "
                "it shows the summary (finished trials are not run again)"
            )
        )
        code = EXIT_INTERNAL if crashed else EXIT_USAGE if environment else EXIT_FAILED
        raise typer.Exit(code) from None
    outcome = PhaseOutcome(started, final, codes, crashed)
    if before_summary is not None:
        before_summary(outcome)
    summarize(
        final, codes, started.folder, request.phase, metric, crashed=crashed, environment=environment,
        plan=started.plan.stored if started.plan is not None else None,
        direction=started.loaded.spec.objective.direction,
    )  # fmt: skip
    return outcome
