"""Small OS helpers for workers: resident memory, signal flags, interruptible sleeps."""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from types import TracebackType
from typing import Any

SIGNAL_BURST_S = 0.5


def resident_memory_mb() -> float | None:
    """This process's resident set size (Linux ``/proc``), or None elsewhere."""
    try:
        with open("/proc/self/statm") as handle:
            pages = int(handle.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


class SignalFlag:
    """Counts SIGINT/SIGTERM instead of dying: the first asks for a clean stop, the second insists."""

    def __init__(self) -> None:
        self.count = 0
        self._last = -math.inf
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> SignalFlag:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        # Linux may deliver a parent-death signal more than once (as the dying parent's threads
        # exit one by one): a burst is one request, or it would turn a clean stop into a kill.
        now = time.monotonic()
        if now - self._last >= SIGNAL_BURST_S:
            self.count += 1
        self._last = now

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def sleep(self, seconds: float) -> None:
        """Sleep, but wake within 0.1 s of a signal."""
        deadline = time.monotonic() + seconds
        while not self.count and time.monotonic() < deadline:
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
