"""Which folder a trial trains in: its slot's own, or its predecessor's when a retry resumes there.

A retry continues from its predecessor's checkpoints only where that folder is this worker's to
write: under the same phase folder (this machine, or a file system shared under the same path),
and no longer held by the process that trained it (a frozen machine's trial, not declared dead
yet, still holds its lock). Anything else starts over in a folder of its own: two processes
never write into one folder, and no worker writes into another machine's tree.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

HELD_POLL_S = 0.2  # how often a held folder is looked at again


def own_dir(phase_dir: Path, slot: int, attempt: int) -> Path:
    """``trial-0007`` for a slot's first attempt, ``trial-0007.2`` for a retry starting over."""
    name = f"trial-{slot:04d}" if attempt == 0 else f"trial-{slot:04d}.{attempt}"
    return phase_dir / name


def trial_dir(phase_dir: Path, slot: int, attempt: int, resume_dir: str | None) -> Path:
    """A retry resumes in its predecessor's folder when that folder belongs to ``phase_dir``; a
    folder of another output folder is another machine's, even if visible here: the retry starts
    over in a folder of its own rather than write into someone else's tree."""
    if resume_dir and Path(resume_dir).resolve().parent == phase_dir.resolve():
        return Path(resume_dir)
    return own_dir(phase_dir, slot, attempt)


def folder_freed(
    run_dir: Path, wait_s: float, give_up: Callable[[], bool], on_wait: Callable[[], None]
) -> bool:
    """Wait up to ``wait_s`` for another process to let go of ``run_dir``; False when it still
    holds it then, or as soon as ``give_up()`` says so. ``on_wait`` runs at each look that finds
    the folder held (the worker says so in its status file)."""
    from tuner.train.run_folder import is_locked

    deadline = time.monotonic() + wait_s
    while run_dir.is_dir() and is_locked(run_dir):
        if time.monotonic() >= deadline or give_up():
            return False
        on_wait()
        time.sleep(HELD_POLL_S)
    return True
