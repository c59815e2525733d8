"""The journal file's lock: Optuna's symlink lock, with an owner.

A ``journal:///PATH`` storage appends every write to one file under a lock that each writer, on
any machine mounting it, takes for the append. Optuna's own lock (``JournalFileSymlinkLock``,
optuna 5, ``storages/journal/_file.py``) is a symlink ``PATH.lock`` created atomically (NFS
too), which a waiter breaks when it has not changed for a grace period (30 s). Its link points
at the journal itself, the same target for every holder, so the lock has no owner, and a holder
paused for longer than the grace (SIGSTOP, a suspended VM, a swap storm) meets two faults when
it resumes:

- its ``release`` renames whatever lock is there now: its successor's, whose own ``release``
  then raises ``RuntimeError("Error: did not possess lock")`` *after its append was written*.
  tuner took that for a failed write: a claim whose RUNNING record had landed was tried again,
  the trial was left running with nobody training it, and the reaper failed it a grace later
  (seen in CI: the SIGSTOP chaos test on a journal spent a retry and the failure budget);
- a waiter interrupted in ``acquire`` (Ctrl-C) releases, i.e. removes, the holder's lock.

Here the link's target is a token of the holder (host, pid, a uuid per acquisition), which
``readlink`` shows, and a lock is removed only by its holder or by a waiter that saw the same
token for the whole grace. A lock broken while its holder was paused is left to its new holder;
both say so in one line. The rest is Optuna's: the file name (tuner and Optuna writers exclude
each other), removal by rename then unlink, and the grace (``$TUNER_JOURNAL_LOCK_GRACE_S``, 30 s:
longer than any append, even on a slow NFS server; shorter with a short heartbeat grace,
``journal_lock_grace_s``). Not its wait (1 ms doubling to 1 s between
tries): a writer that had backed off to 1 s lost every race to one appending in a loop (seen
here, 8 processes claiming on a loaded machine: one made 198 of the 200 claims). Here the wait doubles from
1 ms to at most ``LONGEST_WAIT_S`` (0.1 s), each drawn at random below it (full jitter), so waiters
neither sleep through the releases nor poll in step: about 20 looks a second per waiter, and
only while the lock is busy.
An Optuna process that finds our lock busy cannot follow the link to stat it and retries at once
until we release (a millisecond): tuner's own writers are the ones expected here.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import time
import uuid
from collections.abc import Callable

from optuna.storages.journal import JournalFileSymlinkLock

from tuner.orchestrate.outage import warn_line

GRACE_ENV = "TUNER_JOURNAL_LOCK_GRACE_S"
DEFAULT_GRACE_S = 30.0  # Optuna's ``grace_period``
LOCK_SUFFIX = ".lock"  # Optuna's ``LOCK_FILE_SUFFIX``: the same file, so both kinds exclude each other
FIRST_WAIT_S, LONGEST_WAIT_S = 0.001, 0.1


def journal_lock_grace_s() -> float:
    """``$TUNER_JOURNAL_LOCK_GRACE_S`` (seconds >= 0); by default 30 s, or half the heartbeat
    grace when that is shorter (``$TUNER_HEARTBEAT_S`` 1 gives a 12 s grace, a 6 s lock grace).

    Why: while a paused writer holds the lock, no trial can beat. A heartbeat grace shorter than
    the lock's let every trial go quiet for longer than the beat watch allows, so once the lock was
    broken, live trials were failed as stale and retried. Broken at half the heartbeat grace, the
    stall leaves the beats time to land. An explicit setting is the operator's and is kept."""
    from tuner.orchestrate.env_settings import seconds_setting
    from tuner.orchestrate.heartbeat import heartbeat_settings

    beat_grace_s = heartbeat_settings()[1]
    if not os.environ.get(GRACE_ENV, "").strip():
        return min(DEFAULT_GRACE_S, beat_grace_s / 2)
    grace_s = seconds_setting(GRACE_ENV, DEFAULT_GRACE_S)
    if grace_s > beat_grace_s / 2 and (grace_s, beat_grace_s) not in _WARNED:
        _WARNED.add((grace_s, beat_grace_s))
        warn_line(
            f"${GRACE_ENV}={grace_s:g} s is more than half the heartbeat grace ({beat_grace_s} s): "
            "a writer paused while it holds the journal's lock can get live trials failed as stale; "
            f"keep it at {beat_grace_s / 2:g} s or less (or unset it)"
        )
    return grace_s


_WARNED: set[tuple[float, int]] = set()  # said once per process, not at every journal opened


def _holder(path: str) -> str | None:
    """The token a lock link names, None when there is no lock."""
    try:
        return os.readlink(path)
    except FileNotFoundError:
        return None
    except OSError:  # a lock that is not a link (Optuna's ``JournalFileOpenLock``): timed the same
        return "a lock file that is not a link"


class OwnedSymlinkLock(JournalFileSymlinkLock):
    """``PATH.lock -> host:pid:uuid``, taken for each append to the journal ``PATH``.

    A subclass of Optuna's lock because its base class is not public (``lock_obj`` of
    ``JournalFileBackend`` asks for one): ``acquire`` and ``release`` are replaced whole."""

    def __init__(
        self,
        journal_path: str,
        grace_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(journal_path, grace_period=None)  # Optuna's attributes, unused
        self.journal_path = journal_path
        self.lock_path = journal_path + LOCK_SUFFIX
        self.grace_s = journal_lock_grace_s() if grace_s is None else grace_s
        self.clock = clock
        self._token: str | None = None  # ours while we hold the lock

    def acquire(self) -> bool:
        token = f"{socket.gethostname().replace('/', '_')}:{os.getpid()}:{uuid.uuid4().hex}"
        wait_s = FIRST_WAIT_S
        seen: tuple[str, float] | None = None  # (the holder's token, since when on our clock)
        while True:
            try:
                os.symlink(token, self.lock_path)
            except FileExistsError:
                pass
            else:
                self._token = token
                return True
            holder = _holder(self.lock_path)
            if holder is None:  # released between our two calls: try again at once
                continue
            now = self.clock()
            if seen is None or seen[0] != holder:
                seen = (holder, now)
            elif now - seen[1] >= self.grace_s:
                self._break(holder)
                seen, wait_s = None, FIRST_WAIT_S
                continue
            time.sleep(random.uniform(0, wait_s))
            wait_s = min(2 * wait_s, LONGEST_WAIT_S)

    def release(self) -> None:
        token, self._token = self._token, None
        holder = _holder(self.lock_path)
        if token is not None and holder == token:
            self._remove(token)
            return
        warn_line(
            f"journal {self.journal_path}: this process held its lock longer than "
            f"{self.grace_s:g} s (paused?) and another writer broke it; the write went through "
            f"and the lock is left to {holder or 'nobody'}"
        )

    def _break(self, holder: str) -> None:
        """Remove the lock ``holder`` has held unchanged for the grace (a process paused or lost
        while it wrote); a lock taken by someone else meanwhile is put back."""
        if self._remove(holder):
            warn_line(
                f"journal {self.journal_path}: broke a lock held for {self.grace_s:g} s by "
                f"{holder} (a writer paused or lost in the middle of a write)"
            )

    def _remove(self, token: str) -> bool:
        """Take the lock link away if it names ``token`` (rename, then unlink: Optuna's way, safe
        on NFS); whether it did."""
        aside = f"{self.lock_path}.{uuid.uuid4().hex}.removed"
        try:
            os.rename(self.lock_path, aside)
        except FileNotFoundError:
            return False
        taken = _holder(aside)
        if taken != token and taken is not None:  # a new holder locked between our look and the rename
            # (a third writer locked since: the new holder will say so at its release)
            with contextlib.suppress(FileExistsError):
                os.symlink(taken, self.lock_path)
            os.unlink(aside)
            return False
        os.unlink(aside)
        return True
