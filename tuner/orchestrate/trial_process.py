"""The child process that trains one trial, isolated from its worker.

A crash, a segfault, an out-of-memory kill or a hang ends this process, never the worker or the
study; device memory goes back to the driver when it exits, so nothing grows across trials. It
is forked from the worker, which has torch imported but has never run a torch op (so no thread
pool is copied half-alive) and never touches the storage from here: the child only talks to its
worker through a pipe, and the worker does every storage write.
"""

from __future__ import annotations

import contextlib
import faulthandler
import importlib
import math
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner._lifetime import die_with_parent
from tuner.errors import TunerError, UsageError, WorkloadCodeError
from tuner.orchestrate.disk_full import disk_full_path
from tuner.orchestrate.failures import FailureReason
from tuner.orchestrate.messages import Errored, Finished
from tuner.orchestrate.outpaced import OutpacedCheck, StepLimit
from tuner.orchestrate.stall import STACKS_SIGNAL, ProgressBeacon
from tuner.spec import StudySpec


@dataclass(frozen=True)
class TrialJob:
    """Everything a child needs to train one trial."""

    spec: StudySpec
    base_dir: Path
    run_dir: Path
    command: str
    data_seed: int | None = None
    attrs: dict[str, Any] = field(default_factory=dict)  # recorded on the trial (e.g. its source trial)
    # callbacks the trial adds to its engine (e.g. sweep-lr's fit criterion); called in the child.
    # A callback with ``trial_attrs() -> dict`` has those attributes recorded on the trial.
    extra_callbacks: Callable[[], list[Any]] | None = None


# what every trial imports, imported by its worker first (run-round's zygote imports them once
# for all its workers): ``torch.optim`` imports ``torch._dynamo`` on the first step and
# ``zero_grad``, ``torch.save`` ``torch.utils.serialization``, an optimizer step the profiler's
# CUPTI monitor; ``tuner.train.run`` is the whole engine, ``trial_reporter`` its callback to the worker
ENGINE_MODULES = (
    "torch._dynamo",
    "torch.optim",
    "torch.utils.serialization",
    "torch.profiler._cupti_monitor",
    "tuner.train.run",
    "tuner.orchestrate.trial_reporter",
)


def warm_up(spec: StudySpec, base_dir: Path) -> None:
    """Import in the worker what every trial needs, so each forked trial starts warm.

    Without this each trial paid about a second: ``torch.optim`` imports ``torch._dynamo`` on
    first use. A module a child imports is imported again by every child (the worker never
    sees it). Imports only: no torch op runs here (a forked child must not inherit a busy
    thread pool). The workload's module is imported here only when that is known to be safe
    (``tuner.workloads.preload_module``: a built-in, or a user's module with
    ``TUNER_PRELOAD_WORKLOAD=1``): code that touches CUDA (or anything else that does not
    survive a fork) at import time would break every trial, so a user's module is otherwise
    imported by each child itself.
    """
    for module in ENGINE_MODULES:
        with contextlib.suppress(ImportError):  # a torch build without one (e.g. no profiler)
            importlib.import_module(module)
    from tuner.workloads import preload_module

    preload_module(spec.workload.name, base_dir)


def _reporter(connection: Any, metric: str, beacon: ProgressBeacon | None) -> Any:
    # imports the engine: here in the child, not when the worker imports this module
    from tuner.orchestrate.trial_reporter import PipeReporter

    return PipeReporter(connection, metric, beacon)


def _redirect_output(run_dir: Path) -> None:
    """stdout and stderr (Python's and C's) go to ``run_dir/trial.log``: a crash leaves its words."""
    run_dir.mkdir(parents=True, exist_ok=True)
    log = os.open(run_dir / "trial.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)


def trial_main(
    connection: Any,
    job: TrialJob,
    threads: int | None,
    parent_pid: int | None = None,
    beacon: ProgressBeacon | None = None,
    limit: StepLimit | None = None,
) -> None:
    """Entry point of the forked child: train, report, send the result, exit.

    ``limit``: the step from which the trial no longer matters to its phase (``outpaced.py``);
    the child stops at its first evaluation at or after it.

    ``STACKS_SIGNAL`` writes every thread's stack to ``trial.log``: the worker asks for them
    before it kills a stalled trial, so its ``error.log`` says where it hung.
    """
    # The worker froze its objects just before forking us (and unfroze them right after, in
    # itself). They stay frozen here on purpose: unfreezing would make our first full
    # collection touch, and so copy, every page holding one (what the freeze avoids).
    die_with_parent(parent_pid=parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches us through the worker, as SIGTERM
    _redirect_output(job.run_dir)
    faulthandler.register(STACKS_SIGNAL, file=sys.stderr, all_threads=True)
    import torch

    from tuner.train import run_training

    if threads:
        torch.set_num_threads(threads)
    started = time.perf_counter()
    own = job.extra_callbacks() if job.extra_callbacks is not None else []
    if limit is not None:
        own.append(OutpacedCheck(limit))
    try:
        result = run_training(
            job.spec,
            job.run_dir,
            base_dir=job.base_dir,
            extra_callbacks=[*own, _reporter(connection, job.spec.objective.metric, beacon)],
            data_seed=job.data_seed,
            command=job.command,
            progress=False,
            stop_signals=(signal.SIGTERM,),
            lock_wait_s=60.0,
            start_method="fork",  # this process has run no torch operation: ranks fork safely
        )
    except BaseException as error:
        from tuner.train import RankKilled
        from tuner.train.workload_errors import is_out_of_memory

        if isinstance(error, RankKilled):
            # a rank killed (kill -9, the OOM killer) is this trial killed: die the same way, and
            # the worker records it as it would a single-process trial's death
            sys.stderr.flush()
            os.kill(os.getpid(), error.signum)
        oom = is_out_of_memory(error) or getattr(error, "out_of_memory", False)
        full = disk_full_path(error, job.run_dir)
        reason = FailureReason.OOM if oom else FailureReason.CRASHED
        # tuner's own errors (e.g. "the workload raised KeyError ... at my_workload.py:7") say
        # what they are; a class name in front would only repeat it
        text = str(error) if isinstance(error, TunerError) else f"{type(error).__name__}: {error}"
        summary = (text.strip().splitlines() or [type(error).__name__])[0][:500]
        workload = isinstance(error, (WorkloadCodeError, UsageError)) and not oom
        if full is not None:  # the machine's fault: the worker stops, the trial continues later
            reason, summary = FailureReason.DISK_FULL, f"disk full: {full} ({summary})"[:500]
            workload = False
        connection.send(Errored(reason, summary, workload))
        sys.stderr.flush()
        os._exit(1)
    best = result.best_value
    attrs: dict[str, Any] = {}
    for callback in own:
        if hasattr(callback, "trial_attrs"):
            attrs.update(callback.trial_attrs())
    final_loss = result.last_eval.get("train/loss")
    if final_loss is not None:
        attrs["final_train_loss"] = float(final_loss) if math.isfinite(final_loss) else None
    connection.send(
        Finished(
            status=result.status,
            message=result.message,
            step=result.step,
            best_value=best if best is None or math.isfinite(best) else None,
            best_step=result.best_step,
            resumed_from_step=result.resumed_from_step,
            train_s=time.perf_counter() - started,
            attrs=attrs,
        )
    )
