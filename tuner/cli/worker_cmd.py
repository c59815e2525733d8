"""``tuner worker PATH --phase round-1``: join a running phase from this process or machine."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.markup import escape

from tuner.cli._console import err, error_line, out, plural
from tuner.cli._errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, guarded
from tuner.cli._options import output_dir_option, set_option, storage_option
from tuner.errors import UsageError
from tuner.orchestrate._process import SignalFlag
from tuner.orchestrate.disk_full import DiskFull
from tuner.orchestrate.pool import DIE_WITH_PARENT_ENV

PHASE_WAIT_S = 300.0


def _exit_disk_full(full: DiskFull) -> NoReturn:
    """Exit 2 even though the error line may not fit on the disk that holds our log (``run-round``
    then reads the reason from the worker's status file, written after the reserve was freed)."""
    with contextlib.suppress(OSError, ValueError):
        error_line(escape(str(full)))
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(EXIT_USAGE)


def _stop_if_signalled(signals: SignalFlag) -> None:
    """A stop that came while we were starting up: leave now, cleanly (exit 130)."""
    if signals.count:
        raise KeyboardInterrupt


class _Waiting:
    """One wait for a phase that does not exist yet (its SQLite file, then the phase in it), with
    one deadline for both, so "up to N s" is what it lasts. How long: ``--wait-for-phase`` (a
    cluster's worker array submitted with the job that starts the phase), else ``PHASE_WAIT_S``
    for a worker ``run-round`` started (it may be up before the phase is created; it waits
    unannounced, its phase is seconds away), else 0: a wrong path or study name is said at once.
    Says once, when the wait begins, how long it may last."""

    def __init__(self, phase: str, asked: float | None) -> None:
        by_run_round = bool(os.environ.get(DIE_WITH_PARENT_ENV))
        self.phase, self.said = phase, by_run_round
        self.wait_s = asked if asked is not None else PHASE_WAIT_S if by_run_round else 0.0
        self.deadline = time.monotonic() + self.wait_s

    def begins(self) -> None:
        if not self.said and self.wait_s:
            err.print(f"waiting up to {self.wait_s:g} s for phase {escape(self.phase)} to be started")
        self.said = True

    def over(self) -> bool:
        return time.monotonic() >= self.deadline


def _wait_for_phase(storage: Any, study: str, phase: str, signals: SignalFlag, waiting: _Waiting) -> Any:
    """The phase, once someone has started it (before ``waiting`` is over)."""
    from tuner.orchestrate.phase import open_phase

    while True:
        try:
            return open_phase(storage, study, phase)
        except UsageError:
            waiting.begins()
            if waiting.over():
                raise
            _stop_if_signalled(signals)
            signals.sleep(0.2)


def _wait_for_sqlite_file(url: str, signals: SignalFlag, waiting: _Waiting) -> None:
    """A worker never creates a storage: an SQLite file that does not exist is a wrong path
    (another --output-dir, a study file with another name), or, for a worker that ``run-round``
    started, one the command is about to create."""
    from tuner.orchestrate.storage_url import sqlite_file
    from tuner.output import shown_path

    path = sqlite_file(url)
    if path is None:
        return
    while not path.exists():
        waiting.begins()
        if waiting.over():
            raise UsageError(
                f"no study storage at {shown_path(path)}: start the phase first (tuner run-round), "
                "or give the --output-dir or --storage it was started with"
            )
        _stop_if_signalled(signals)
        signals.sleep(0.2)


@guarded
def worker(
    path: Path = typer.Argument(
        ..., metavar="STUDY", help="The study file (the same one that started the phase)."
    ),
    phase: str = typer.Option(..., "--phase", metavar="PHASE", help="The phase to serve, e.g. round-1."),
    set_: list[str] = set_option("The same overrides the phase was started with."),
    output_dir: Path = output_dir_option(),
    storage: str | None = storage_option(
        "Storage URL (default: $TUNER_STORAGE, the study's storage, or the local SQLite file)."
    ),
    device: str | None = typer.Option(
        None, "--device", metavar="ID", help="GPU id for this worker (sets CUDA_VISIBLE_DEVICES)."
    ),
    threads: int | None = typer.Option(None, "--threads", metavar="N", help="CPU threads per trial."),
    label: str | None = typer.Option(
        None, "--label", metavar="NAME", help="Name shown in progress (default host:pid)."
    ),
    quiet: bool = typer.Option(False, "--quiet", help="No line per finished trial."),
    wait_for_phase: float | None = typer.Option(
        None,
        "--wait-for-phase",
        metavar="SECONDS",
        min=0,
        help="Wait this long for the phase to be started (default: fail at once).",
    ),
) -> None:
    """Serve a phase until its budget is met; any number of workers, on any machine, may join."""
    from tuner.orchestrate.trial_process import die_with_parent

    # signals are counted from the start: a stop while starting up (importing torch takes
    # seconds) is a clean interruption at the next safe point (exit 130), not a death by SIGTERM
    signals = SignalFlag().__enter__()
    try:  # until the worker holds them: a refusal while starting puts the handlers back
        # (a command run in-process, as by tests or from Python, keeps its own after it)
        if os.environ.get(DIE_WITH_PARENT_ENV):
            # started by run-round: stop cleanly when it goes, or at once if it already went while we
            # started up (the kernel only signals a death that comes after the request)
            parent = os.environ[DIE_WITH_PARENT_ENV]
            die_with_parent(signal.SIGTERM, parent_pid=int(parent) if parent.isdigit() else None)
        if device is not None:
            if not device.isdigit():
                raise UsageError(f"--device expects a GPU id like 0, got {device!r}")
            from tuner.orchestrate.pool import check_devices

            check_devices([device], "--device")
            os.environ["CUDA_VISIBLE_DEVICES"] = device  # before anything initialises CUDA
        from tuner.spec import load_study
        from tuner.workloads import check_study, workload_code

        loaded = load_study(path, set_)
        check_study(loaded)
        from tuner.orchestrate.pool import check_worker_settings

        check_worker_settings()  # before any connection: a typo in a deployment shows at once
        from tuner.train.node_launchers import check_launcher_here

        check_launcher_here(loaded.spec.training)
        from tuner.cli._phase_view import trial_line
        from tuner.orchestrate import WorkerOptions, resolve_storage_url, run_worker
        from tuner.orchestrate.trial_process import warm_up
        from tuner.orchestrate.worker import open_worker_storage
        from tuner.output import phase_dir
        from tuner.playbook.phases import check_against_plan, check_phase_input, load_stored_plan, phase_plan

        spec = loaded.spec
        check_phase_input(loaded, phase)
        url = storage or resolve_storage_url(spec.storage, output_dir, spec.name)
        waiting = _Waiting(phase, wait_for_phase)
        _wait_for_sqlite_file(url, signals, waiting)
        opened = open_worker_storage(url)
        opened_phase = _wait_for_phase(opened, spec.name, phase, signals, waiting)
        # the phase's plan, not this file, says what its trials train; the file must still match it
        stored = load_stored_plan(opened_phase)
        check_against_plan(loaded, stored, opened_phase.study_name)
        plan = phase_plan(loaded, stored, output_dir)
        from tuner.orchestrate.storage_pointer import remember_storage

        remember_storage(output_dir, spec.name, url)  # a machine of a fleet: its ``tuner list`` finds it
    except BaseException:
        signals.__exit__(None, None, None)
        raise

    def report_trial(trial: Any) -> None:
        out.print(trial_line(trial, spec.objective.metric))

    try:
        result = run_worker(
            WorkerOptions(
                storage_url=url,
                study=spec.name,
                phase=phase,
                phase_dir=phase_dir(output_dir, spec.name, phase),
                search_space=plan.search_space(),
                make_job=plan.make_job,
                params_for_slot=plan.params_for_slot,
                code_dir=loaded.base_dir,
                workload_code=workload_code(spec.workload.name, loaded.base_dir),
                threads=threads,
                label=label or "",
                sampler=plan.sampler(),
                on_trial_end=None if quiet else report_trial,
                outpaced_from=plan.outpaced_from(),
                pruner=plan.pruner(),
                # before the first trial, not here: a worker with nothing to claim (a finished
                # phase, a fleet larger than what is left) never imports torch (~5 CPU s, ~300 MB)
                warm_up=lambda: warm_up(spec, loaded.base_dir),
            ),
            opened,
            signals,
        )
    except DiskFull as full:
        _exit_disk_full(full)
    detail = f": {result.message}" if result.message else ""
    out.print(f"worker: {plural(result.trials_run, 'trial')} run; {result.outcome}{detail}")
    if result.outcome == "failed":
        err.print(f"[red]stopped:[/] {result.message}")
    code = {"failed": EXIT_FAILED, "interrupted": EXIT_INTERRUPTED}.get(result.outcome, 0)
    if os.environ.get(DIE_WITH_PARENT_ENV):
        # run-round waits for us: skip the second or so of interpreter teardown (torch's).
        # Everything is already in the storage; only our own output needs flushing.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    if code:
        raise typer.Exit(code)
