"""A child process that must not outlive its parent (a trial, a rank of a multi-process run, a
data worker), nor die of a stop signal that reached it before its own handlers were set."""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
from collections.abc import Iterator

PR_SET_PDEATHSIG = 1

STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}
# the pid a worker must die with (run-round, or the zygote that forked it for run-round)
DIE_WITH_PARENT_ENV = "TUNER_DIE_WITH_PARENT"


def die_with_parent(sig: int = signal.SIGKILL, parent_pid: int | None = None) -> None:
    """Linux: deliver ``sig`` to this process when its parent dies (no orphan keeps training).

    The request only covers a death that happens after it: a parent (``parent_pid``, the pid
    it had before forking us) already gone by then would never signal, so that is checked after.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the pipe's EOF still stops the child at its next report
        pass
    if parent_pid is not None and os.getppid() != parent_pid:
        os.kill(os.getpid(), sig)


@contextlib.contextmanager
def children_allowed() -> Iterator[None]:
    """Let a daemonic process start children that ``die_with_parent``: a trial process is one
    (its worker makes it a daemon, so it dies with the worker), and multiprocessing refuses
    children to a daemon for fear of orphans. Children that die with their parent cannot be
    orphaned, so the flag is lifted while they start, and put back."""
    process = multiprocessing.current_process()
    daemonic = process.daemon
    if daemonic:
        process.daemon = False
    try:
        yield
    finally:
        if daemonic:
            process.daemon = True


@contextlib.contextmanager
def stop_signals_held() -> Iterator[None]:
    """Hold SIGINT / SIGTERM back in this thread while it forks children.

    A forked child starts with its parent's handlers (a ``KeyboardInterrupt`` there) or SIGTERM's
    default action, until it sets its own: a Ctrl-C in that gap killed a just-started rank or
    data worker, and a run that should have stopped cleanly failed instead. The children inherit
    the mask and unblock once their own handlers are set (``release_stop_signals``); here the
    held ones are delivered when the block ends.
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def release_stop_signals() -> None:
    """In a child started under ``stop_signals_held``, once its handlers are set."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
