"""The clock of ``tuner profile``: each measured step, and its parts, timed from outside the loop.

A callback that, at ``fit_start``, wraps the trainer's batch stream (its ``get(step)``) and its
augmentation in timers and hooks the model's forward and the optimizer's step, so the loop and
the data stream stay exactly the ones that train. Each timed part is also a labelled span in the
trace (``tuner/data``, ``tuner/augment``, ``tuner/forward``), so what the verdict counts is what a
user sees in Perfetto. It also steps the profiler, and stops the run after the last measured step.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.profiler import record_function

from tuner.train.events import Callback, StopReason
from tuner.train.profile_result import StepTimes


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


_SCHEDSTAT = Path("/proc/thread-self/schedstat")


def core_wait() -> float | None:
    """Seconds this thread has so far spent runnable but waiting for a CPU core (Linux's run-queue
    delay, the second field of ``/proc/thread-self/schedstat``); None where it is not available.

    Sleeping and blocking on I/O are not in it: a slow read stays a wait for data, while the time
    another process held the core (a busy machine) can be told apart and left out.
    """
    try:
        return int(_SCHEDSTAT.read_text().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def _waited_since(start: float | None) -> float:
    now = core_wait() if start is not None else None
    return max(0.0, now - start) if now is not None and start is not None else 0.0


_SUMMED = ("data", "augment", "forward", "backward", "optimizer", "core_wait", "data_core_wait")


@dataclass
class _StepParts:
    """Seconds spent in each timed part of the current step (``*_core_wait``: of which waiting for
    a CPU core)."""

    data: float = 0.0
    data_core_wait: float = 0.0
    core_wait: float = 0.0
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
        start, waited = time.perf_counter(), core_wait()
        with record_function("tuner/data"):
            batch = self._inner.get(step)
        parts = self._parts()
        parts.data_core_wait += _waited_since(waited)  # read inside the timed window, not after it
        parts.data += time.perf_counter() - start
        return batch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@dataclass
class StepClock(Callback):
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
    _start_wait: float | None = None
    #: whether the wait for a CPU core could be read (Linux), at the start of the run
    measures_core_wait: bool = field(default_factory=lambda: core_wait() is not None)
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
        self._start, self._start_wait = time.perf_counter(), core_wait()

    def on_train_step_end(self, loop: Any) -> None:
        self._parts.core_wait = _waited_since(self._start_wait)  # inside the timed window
        elapsed = time.perf_counter() - self._start  # before the profiler's own work in step()
        done = loop.step - 1
        if done >= self.first_measured:
            self.measured += 1
            self.step_seconds.append(elapsed)
            for part in (
                "data",
                "augment",
                "forward",
                "backward",
                "optimizer",
                "core_wait",
                "data_core_wait",
            ):
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
            core_wait=totals.core_wait / n,
            data_core_wait=totals.data_core_wait / n,
        )
