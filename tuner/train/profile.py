"""``tuner profile``'s engine: a short run of a study's training under ``torch.profiler``, and where
each step's time goes: waiting for data, computing, host-device synchronisation.

What is profiled is what ``tuner train`` runs: ``run_training`` with the study's fixed
hyperparameters, in a throw-away run folder (a temp folder, removed after), so a profile never
touches the user's runs or checkpoints. The instrumentation comes from outside the loop, through a
callback that, at ``fit_start``, wraps the trainer's batch stream (its ``get(step)``) and its
augmentation in timers and hooks the model's forward and the optimizer's step: the loop and the
data stream stay exactly the ones that train. Each timed part is also a labelled span in the trace
(``tuner/data``, ``tuner/augment``, ``tuner/forward``; the optimizer labels itself), so what the
verdict counts is what a user sees in Perfetto.

The first steps are not measured (the profiler's own start-up, lazy initialisation, the first
batch's contract check): a ``schedule(wait, warmup, active)`` records only the ``active`` ones,
and the timers count the same steps. No evaluation and no checkpoint happen during a profile:
the run stops right after the last measured step.
"""

from __future__ import annotations

import contextlib
import enum
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, record_function
from torch.profiler import profile as torch_profile
from torch.profiler import schedule as profiler_schedule

from tuner.errors import TrainingError, UsageError, WorkloadCodeError
from tuner.spec import StudySpec
from tuner.train.events import Callback, StopReason
from tuner.train.run import resolve_device, run_training

#: Waiting for data above this share of step time is "input-bound" (the device idles that long).
INPUT_BOUND_SHARE = 0.20
#: Steps run before measuring: the profiler ignores ``WAIT_STEPS``, then traces ``WARMUP_STEPS``
#: and throws them away (its own start-up cost), then records the measured steps.
WAIT_STEPS, WARMUP_STEPS = 4, 1
SKIPPED_STEPS = WAIT_STEPS + WARMUP_STEPS
#: CUDA runtime calls in which the host blocks until the device has caught up.
SYNC_EVENTS = frozenset({"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize"})
#: The trace's own labels and step markers: not operators.
_NOT_OPERATORS = ("tuner/", "ProfilerStep")


class Bound(str, enum.Enum):
    INPUT = "input-bound"
    COMPUTE = "compute-bound"


@dataclass(frozen=True)
class StepTimes:
    """Mean seconds per measured step, by what the training thread was doing.

    ``data`` is the wait for the batch (the data stream's ``get``); ``sync`` the host blocked on the
    device (0 without an accelerator); everything else is computing: ``augment``, ``forward``,
    ``backward`` (the loss, backward pass and gradient clipping: from the end of the forward to the
    optimizer's step), ``optimizer``, and ``other`` (the loop's bookkeeping and its callbacks).
    On an accelerator these are host times: kernels run asynchronously, and the host's wait for
    them shows up as ``sync``.
    """

    step: float
    data: float
    augment: float
    forward: float
    backward: float
    optimizer: float
    sync: float

    @property
    def compute(self) -> float:
        return max(0.0, self.step - self.data - self.sync)

    @property
    def other(self) -> float:
        return max(0.0, self.compute - self.augment - self.forward - self.backward - self.optimizer)


@dataclass(frozen=True)
class OperatorTime:
    """One operator's self time (host) per measured step, from the profiler."""

    name: str
    seconds: float
    calls: float


@dataclass(frozen=True)
class ProfileResult:
    """What a profile measured, and the verdict: ``bound`` is ``Bound.INPUT`` when waiting for data
    takes more than ``threshold`` of the mean step time."""

    study: str
    trace_path: Path
    device: str
    accelerator: bool
    skipped_steps: int
    measured_steps: int
    batch_size: int
    threads: int  # torch's intra-op threads (torch.get_num_threads())
    data_workers: int
    prefetch_batches: int
    times: StepTimes
    top_operators: tuple[OperatorTime, ...]
    #: each measured step's seconds, in order: how far the mean can be trusted (a busy machine,
    #: a garbage collection or a slow read shows up as a few outliers)
    step_seconds: tuple[float, ...] = ()
    notes: tuple[str, ...] = ()
    threshold: float = INPUT_BOUND_SHARE

    def share(self, seconds: float) -> float:
        return seconds / self.times.step if self.times.step > 0 else 0.0

    @property
    def data_share(self) -> float:
        return self.share(self.times.data)

    @property
    def compute_share(self) -> float:
        return self.share(self.times.compute)

    @property
    def sync_share(self) -> float:
        return self.share(self.times.sync)

    @property
    def mean_over_median(self) -> float:
        """How far a few slow steps pull the mean up: ~1 for steady steps; above 2, some steps
        stalled (another process on the same cores, garbage collection, a slow read), and the
        shares describe those stalls as much as the training."""
        if not self.step_seconds:
            return 1.0
        median = statistics.median(self.step_seconds)
        return self.times.step / median if median > 0 else 1.0

    @property
    def bound(self) -> Bound:
        return Bound.INPUT if self.data_share > self.threshold else Bound.COMPUTE

    def to_json(self) -> dict[str, Any]:
        """Plain data for ``--json`` (seconds, shares as fractions of the mean step time)."""
        data = asdict(self)
        data["trace_path"] = str(self.trace_path)
        data["times"] = {**asdict(self.times), "compute": self.times.compute, "other": self.times.other}
        data["mean_over_median"] = self.mean_over_median
        data["shares"] = {"data": self.data_share, "compute": self.compute_share, "sync": self.sync_share}
        data["bound"] = self.bound.value
        data["notes"] = list(self.notes)
        data["top_operators"] = [asdict(op) for op in self.top_operators]
        return data


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
    clock = _StepClock(first_measured=skip_steps, last=skip_steps + steps - 1)
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
    )


@contextlib.contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """Silence file descriptor 2 for a moment: the profiler's C++ side (kineto) prints
    ``USDT: ... profiler_start`` lines there when it starts and stops recording, whatever its log
    level; only the profiler's own calls are wrapped, so nothing of the user's is lost."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no stderr at all: nothing to silence
        yield
        return
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    os.close(null)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


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


@dataclass
class _StepParts:
    """Seconds spent in each timed part of the current step."""

    data: float = 0.0
    augment: float = 0.0
    forward: float = 0.0
    backward: float = 0.0
    optimizer: float = 0.0
    forward_end: float | None = None


class _TimedBatches:
    """The trainer's batch stream, its ``get`` timed and labelled ``tuner/data``; all else delegated."""

    def __init__(self, inner: Any, parts: Callable[[], _StepParts]) -> None:
        self._inner, self._parts = inner, parts

    def get(self, step: int) -> Any:
        start = time.perf_counter()
        with record_function("tuner/data"):
            batch = self._inner.get(step)
        self._parts().data += time.perf_counter() - start
        return batch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@dataclass
class _StepClock(Callback):
    """Times each step and its parts, steps the profiler, and stops the run after the last
    measured step (before any evaluation)."""

    first_measured: int
    last: int
    profiler: Any = None
    measured: int = 0
    totals: _StepParts = field(default_factory=_StepParts)
    step_seconds: list[float] = field(default_factory=list)
    _parts: _StepParts = field(default_factory=_StepParts)
    _start: float = 0.0
    _hooks: list[Any] = field(default_factory=list)

    order = 1000  # after the run's own callbacks at a step's end: their time counts as "other"

    def on_fit_start(self, loop: Any) -> None:
        loop.batches = _TimedBatches(loop.batches, lambda: self._parts)
        if loop.augment is not None:
            loop.augment = self._timed_augment(loop.augment)
        forward_span: list[Any] = []

        def before_forward(module: Any, args: Any) -> None:
            forward_span.append((time.perf_counter(), record_function("tuner/forward").__enter__()))

        def after_forward(module: Any, args: Any, output: Any) -> None:
            if forward_span:
                start, span = forward_span.pop()
                span.__exit__(None, None, None)
                self._parts.forward_end = time.perf_counter()
                self._parts.forward += self._parts.forward_end - start

        optimizer_start: list[float] = []

        def before_step(optimizer: Any, args: Any, kwargs: Any) -> None:
            now = time.perf_counter()
            optimizer_start.append(now)
            if self._parts.forward_end is not None:
                self._parts.backward += now - self._parts.forward_end
                self._parts.forward_end = None

        def after_step(optimizer: Any, args: Any, kwargs: Any) -> None:
            if optimizer_start:
                self._parts.optimizer += time.perf_counter() - optimizer_start.pop()

        self._hooks = [
            loop.model.register_forward_pre_hook(before_forward),
            loop.model.register_forward_hook(after_forward),
            loop.optimizer.register_step_pre_hook(before_step),
            loop.optimizer.register_step_post_hook(after_step),
        ]

    def _timed_augment(self, augment: Callable[..., Any]) -> Callable[..., Any]:
        def timed(inputs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
            start = time.perf_counter()
            with record_function("tuner/augment"):
                augmented = augment(inputs, generator)
            self._parts.augment += time.perf_counter() - start
            return augmented

        return timed

    def on_train_step_start(self, loop: Any) -> None:
        self._parts = _StepParts()
        self._start = time.perf_counter()

    def on_train_step_end(self, loop: Any) -> None:
        elapsed = time.perf_counter() - self._start  # before the profiler's own work in step()
        done = loop.step - 1
        if done >= self.first_measured:
            self.measured += 1
            self.step_seconds.append(elapsed)
            for part in ("data", "augment", "forward", "backward", "optimizer"):
                setattr(self.totals, part, getattr(self.totals, part) + getattr(self._parts, part))
        with quiet_native_stderr():
            self.profiler.step()
        if done >= self.last:
            loop.request_stop(StopReason.STOPPED, "profiled")

    def on_fit_end(self, loop: Any) -> None:
        for hook in self._hooks:
            hook.remove()

    def mean_times(self, sync: float) -> StepTimes:
        n = max(1, self.measured)
        totals = self.totals
        return StepTimes(
            step=sum(self.step_seconds) / n,
            data=totals.data / n,
            augment=totals.augment / n,
            forward=totals.forward / n,
            # the host's wait for the device happens inside this window (loss.item())
            backward=max(0.0, totals.backward / n - sync),
            optimizer=totals.optimizer / n,
            sync=sync,
        )
