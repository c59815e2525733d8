"""The progress watchdog: a trial that stops making steps is ``stalled``, killed and recorded.

``trial_timeout_s`` is off by default (a trial's length is not known in advance), so without
this a trial hung in workload code (a deadlocked data loader, a dead network file system) ran
on "running" forever. The watchdog needs no setting to be useful: it measures the trial's own
pace. A trial is stalled when it made no progress for

    max(stall_multiple x its median step time, stall_min_s)      (defaults: 20 x, 300 s)

Progress is a finished training step, and also the start and end of an evaluation, a
checkpoint and the run's end (so a long evaluation is judged from its start). The median is
over the last ``MEDIAN_WINDOW`` intervals between two step ends (an eval in between makes one
interval long; the median does not care). The watchdog is armed once one interval is measured:
start-up (imports, data download, compilation) is not judged, since it has no pace to compare
with. 20 x the median leaves room for a machine whose load varies many-fold; the 5-minute floor
keeps fast trials (milliseconds a step) from being killed by a slow eval, a checkpoint to a
slow disk or a pause of the machine. ``stall_multiple: null`` in the study file turns it off.

The child and its supervisor share a few numbers through memory created before the fork
(``ProgressBeacon``): a message per step through the pipe would cost more than the step of a
small model.
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_STALL_MULTIPLE = 20.0
DEFAULT_STALL_MIN_S = 300.0
MEDIAN_WINDOW = 50

STACKS_SIGNAL = signal.SIGUSR1  # the child dumps every thread's stack to trial.log (faulthandler)
STACKS_WAIT_S = 2.0
STACKS_HEADER = "--- tuner: the trial made no progress; the stacks of its threads follow ---"
_LAST_MARK, _MEDIAN_S, _STEP, _MARKS = range(4)


class ProgressBeacon:
    """When the child last made progress, at which step, and its median step time.

    Created by the supervisor before the fork (shared memory); the child writes, the supervisor
    reads. Times are ``time.monotonic()``, one clock for every process of the machine.
    """

    def __init__(self, context: Any) -> None:
        self._values = context.RawArray("d", 4)
        self._intervals: deque[float] = deque(maxlen=MEDIAN_WINDOW)  # the child's own copy
        self._last_step_end: float | None = None

    # -- the child ------------------------------------------------------------------------------
    def mark(self) -> None:
        """A sign of life that is not a step (an eval, a checkpoint)."""
        self._values[_LAST_MARK] = time.monotonic()
        self._values[_MARKS] += 1

    def step_done(self, step: int) -> None:
        now = time.monotonic()
        if self._last_step_end is not None:
            self._intervals.append(now - self._last_step_end)
            self._values[_MEDIAN_S] = statistics.median(self._intervals)
        self._last_step_end = now
        self._values[_STEP] = step
        self.mark()

    # -- the supervisor ---------------------------------------------------------------------------
    @property
    def last_mark(self) -> float:
        """``time.monotonic()`` of the last progress; 0.0 before any."""
        return float(self._values[_LAST_MARK])

    @property
    def marks(self) -> int:
        """How many signs of life so far (a change tells that the child moved)."""
        return int(self._values[_MARKS])

    @property
    def median_step_s(self) -> float | None:
        value = float(self._values[_MEDIAN_S])
        return value if value > 0 else None

    @property
    def step(self) -> int:
        return int(self._values[_STEP])


@dataclass(frozen=True)
class StallRule:
    """``max(multiple x median step, min_s)``; ``multiple`` None: the watchdog is off."""

    multiple: float | None = DEFAULT_STALL_MULTIPLE
    min_s: float = DEFAULT_STALL_MIN_S

    def limit_s(self, median_step_s: float | None) -> float | None:
        """Seconds without progress that make a trial stalled; None while there is no pace yet."""
        if self.multiple is None or median_step_s is None:
            return None
        return max(self.multiple * median_step_s, self.min_s)


@dataclass(frozen=True)
class Stalled:
    """The supervisor's finding: ``idle_s`` without progress, over ``limit_s``."""

    idle_s: float
    limit_s: float
    step: int
    median_step_s: float
    rule: StallRule
    stacks: str = ""  # where it hung (faulthandler's dump), when the child could say

    @property
    def message(self) -> str:
        return (
            f"no training step for {self.idle_s:.0f} s after step {self.step}, over the limit of "
            f"{self.limit_s:.3g} s = max(stall_multiple {self.rule.multiple:g} x median step "
            f"{self.median_step_s:.3g} s, stall_min_s {self.rule.min_s:g} s); killed"
        )


def check_stall(beacon: ProgressBeacon, rule: StallRule, now: float | None = None) -> Stalled | None:
    """The trial is stalled now, or None."""
    median = beacon.median_step_s
    limit = rule.limit_s(median)
    if limit is None or median is None or not beacon.last_mark:
        return None
    idle = (time.monotonic() if now is None else now) - beacon.last_mark
    return Stalled(idle, limit, beacon.step, median, rule) if idle > limit else None


def dump_stacks(pid: int, log: Path) -> str:
    """Ask the child (``pid``) for its threads' stacks, written to ``log`` (its trial.log);
    returns them ("" if the child could not say: a C call holding the process, a dead child).

    faulthandler writes from a C signal handler, even while Python code is stuck in a C call.
    """
    try:
        with log.open("a") as handle:
            handle.write(f"\n{STACKS_HEADER}\n")
        start = log.stat().st_size
        os.kill(pid, STACKS_SIGNAL)
    except OSError:
        return ""
    deadline, size = time.monotonic() + STACKS_WAIT_S, start
    while time.monotonic() < deadline:  # until the dump stops growing
        time.sleep(0.2)
        with contextlib.suppress(OSError):
            now = log.stat().st_size
            if now > start and now == size:
                break
            size = now
    try:
        with log.open("rb") as handle:
            handle.seek(start)
            return handle.read(20_000).decode(errors="replace").strip()
    except OSError:
        return ""
