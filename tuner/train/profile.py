"""``tuner profile``'s engine: a short run of a study's training under ``torch.profiler``, and where
each step's time goes: waiting for data, computing, host-device synchronisation.

What is profiled is what ``tuner train`` runs: ``run_training`` with the study's fixed
hyperparameters, in a throw-away run folder (a temp folder, removed after), so a profile never
touches the user's runs or checkpoints. The instrumentation comes from outside the loop
(``tuner.train.profile_clock``); the numbers and the verdict are ``tuner.train.profile_result``'s.

The first steps are not measured (the profiler's own start-up, lazy initialisation, the first
batch's contract check): a ``schedule(wait, warmup, active)`` records only the ``active`` ones,
and the timers count the same steps. No evaluation and no checkpoint happen during a profile:
the run stops right after the last measured step.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity
from torch.profiler import profile as torch_profile
from torch.profiler import schedule as profiler_schedule

from tuner.errors import TrainingError, UsageError, WorkloadCodeError
from tuner.spec import StudySpec
from tuner.train.profile_clock import StepClock, quiet_native_stderr
from tuner.train.profile_result import INPUT_BOUND_SHARE, Bound, OperatorTime, ProfileResult, StepTimes
from tuner.train.run import resolve_device, run_training

__all__ = [
    "INPUT_BOUND_SHARE",
    "SKIPPED_STEPS",
    "Bound",
    "OperatorTime",
    "ProfileResult",
    "StepTimes",
    "check_trace_path",
    "profile_training",
]

#: Steps run before measuring: the profiler ignores ``WAIT_STEPS``, then traces ``WARMUP_STEPS``
#: and throws them away (its own start-up cost), then records the measured steps.
WAIT_STEPS, WARMUP_STEPS = 4, 1
SKIPPED_STEPS = WAIT_STEPS + WARMUP_STEPS
#: CUDA runtime calls in which the host blocks until the device has caught up.
SYNC_EVENTS = frozenset({"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize"})
#: The trace's own labels and step markers: not operators.
_NOT_OPERATORS = ("tuner/", "ProfilerStep")


def check_trace_path(path: Path) -> None:
    """A trace file we can write: refused before any training, in one line."""
    if path.is_dir():
        raise UsageError(f"cannot write the trace to {path}: it is a folder; give a file path")
    if not path.parent.is_dir():
        raise UsageError(f"cannot write the trace to {path}: the folder {path.parent} does not exist")
    if not os.access(path.parent, os.W_OK):
        raise UsageError(f"cannot write the trace to {path}: the folder {path.parent} is not writable")


def profile_training(
    spec: StudySpec, base_dir: Path, *, steps: int, trace_path: Path, skip_steps: int = SKIPPED_STEPS
) -> ProfileResult:
    """Train ``skip_steps + steps`` steps of ``spec`` under the profiler; write the chrome-trace
    JSON of the ``steps`` measured ones to ``trace_path`` (atomically) and return the numbers.

    Raises ``UsageError`` for a bad ``steps`` or trace path (before training), ``TrainingError``
    if the run diverges before the last measured step, and whatever ``run_training`` raises.
    A workload error keeps the temp run folder, where its ``error.log`` is.
    """
    if steps < 1:
        raise UsageError(f"steps must be at least 1, got {steps}")
    if skip_steps < WARMUP_STEPS:
        raise ValueError(f"skip_steps must be at least {WARMUP_STEPS}")
    trace_path = Path(trace_path)
    check_trace_path(trace_path)
    profiled, notes = _profiled_spec(spec, skip_steps + steps)
    device = resolve_device(profiled.training.device)
    accelerator = device.type != "cpu"
    if not accelerator:
        notes.append("no accelerator: no host-device synchronisation")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    # the same suffix as the trace: export_chrome_trace gzips a path ending in .gz
    partial = trace_path.with_name(f".{trace_path.stem}.{os.getpid()}.tmp{trace_path.suffix}")
    clock = StepClock(first_measured=skip_steps, last=skip_steps + steps - 1)
    safe_name = re.sub(r"[^A-Za-z0-9_.-]", "_", spec.name[:40])
    run_dir = Path(tempfile.mkdtemp(prefix=f"tuner-profile-{safe_name}-"))
    keep_run_dir = False
    try:
        prof = torch_profile(
            activities=activities,
            schedule=profiler_schedule(
                wait=skip_steps - WARMUP_STEPS, warmup=WARMUP_STEPS, active=steps, repeat=1
            ),
            on_trace_ready=lambda prof: prof.export_chrome_trace(str(partial)),
        )
        clock.profiler = prof
        with quiet_native_stderr():
            prof.start()
        try:
            result = run_training(
                profiled, run_dir, base_dir=base_dir, extra_callbacks=[clock], progress=False, stop_signals=()
            )
        finally:
            with quiet_native_stderr():
                prof.stop()  # a no-op after the measured steps; else (an error) ends the recording
        if clock.measured < steps or not partial.exists():
            raise TrainingError(
                f"training stopped ({result.status}: {result.message}) at step {result.step}, before the "
                f"{skip_steps + steps} steps a profile needs"
            )
        averages = prof.key_averages()
        os.replace(partial, trace_path)
    except WorkloadCodeError:
        keep_run_dir = True  # its message points at error.log in there
        raise
    finally:
        partial.unlink(missing_ok=True)
        if not keep_run_dir:
            shutil.rmtree(run_dir, ignore_errors=True)
    sync = sum(a.self_cpu_time_total for a in averages if a.key in SYNC_EVENTS) / 1e6 / steps
    times = clock.mean_times(sync)
    return ProfileResult(
        study=spec.name,
        trace_path=trace_path,
        device=str(device),
        accelerator=accelerator,
        skipped_steps=skip_steps,
        measured_steps=steps,
        batch_size=profiled.training.batch_size,
        threads=torch.get_num_threads(),
        data_workers=profiled.training.data_workers,
        prefetch_batches=profiled.training.prefetch_batches,
        times=times,
        top_operators=_top_operators(averages, steps),
        step_seconds=tuple(clock.step_seconds),
        notes=tuple(notes),
        core_wait_measured=clock.measures_core_wait,
        load_average=os.getloadavg()[0],
        cores=len(os.sched_getaffinity(0)),
    )


def _profiled_spec(spec: StudySpec, total_steps: int) -> tuple[StudySpec, list[str]]:
    """The study as profiled: long enough for ``total_steps`` (the study's schedule when it is), no
    evaluation or TensorBoard on the way, one process."""
    training = spec.training
    notes: list[str] = []
    length = max(training.max_train_steps or 0, total_steps + 1)  # +1: the run stops before any eval
    update: dict[str, Any] = {"max_train_steps": length, "eval_every": length, "tensorboard": False}
    processes = training.processes_per_trial
    if processes > 1:
        update.update(processes_per_trial=1, batch_size=training.batch_size // processes)
        notes.append(
            f"processes_per_trial is {processes}: one process profiled on its share of the batch "
            f"({training.batch_size // processes} of {training.batch_size}); the gradient all-reduce "
            "between processes is not measured"
        )
    return spec.model_copy(update={"training": training.model_copy(update=update)}), notes


def _top_operators(averages: Any, steps: int, count: int = 5) -> tuple[OperatorTime, ...]:
    operators = [a for a in averages if not a.key.startswith(_NOT_OPERATORS) and a.key not in SYNC_EVENTS]
    operators.sort(key=lambda a: a.self_cpu_time_total, reverse=True)
    return tuple(
        OperatorTime(a.key, a.self_cpu_time_total / 1e6 / steps, a.count / steps) for a in operators[:count]
    )
