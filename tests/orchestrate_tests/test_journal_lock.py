"""The journal file's lock (``tuner.orchestrate.journal_lock``): a holder paused past the grace
loses its lock to the next writer, and when it resumes it neither takes the new holder's lock
away nor raises after its own write went through (Optuna's own lock does both: shown first)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from optuna.storages.journal import JournalFileSymlinkLock

from tuner.orchestrate.journal_lock import OwnedSymlinkLock

HOLDER = """
import sys
from tuner.orchestrate.journal_lock import OwnedSymlinkLock
lock = OwnedSymlinkLock(sys.argv[1], grace_s=3600)
lock.acquire()
print("held", flush=True)
sys.stdin.readline()
lock.release()
print("released", flush=True)
"""


def _holder(journal: Path) -> subprocess.Popen[str]:
    """A process that takes the journal's lock and holds it until told (a line on stdin)."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(journal)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout is not None and process.stdout.readline() == "held\n"
    return process


@pytest.mark.filterwarnings("ignore:The value of `grace_period` might be too small")
def test_optunas_own_lock_is_taken_from_its_new_holder_by_the_thawed_one_which_then_raises(
    tmp_path: Path,
) -> None:
    """Why tuner has its own: with Optuna's lock the resumed holder's release removes its
    successor's lock, and the successor's release raises after its write (grace 1 s here)."""
    journal = str(tmp_path / "study.log")
    Path(journal).touch()  # its lock links to it: a waiter stats the journal to time the holder
    paused, waiter = JournalFileSymlinkLock(journal, grace_period=3), JournalFileSymlinkLock(journal, 1)
    paused.acquire()
    waiter.acquire()  # breaks the lock after a second
    paused.release()  # renames the waiter's lock away: no error here
    assert not os.path.lexists(journal + ".lock")
    with pytest.raises(RuntimeError, match="did not possess lock"):
        waiter.release()


def test_a_holder_stopped_past_the_grace_loses_the_lock_and_leaves_the_new_holders_alone(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A real process holds the lock and is SIGSTOPped; a writer breaks it after the grace and
    holds it; the thawed process releases while the writer still holds it: the writer's lock
    stays, the thawed one says so in one line (no error), and the writer releases cleanly."""
    journal = tmp_path / "study.log"
    paused = _holder(journal)
    os.kill(paused.pid, signal.SIGSTOP)
    try:
        writer = OwnedSymlinkLock(str(journal), grace_s=0.5)
        writer.acquire()
        assert "broke a lock held for 0.5 s by" in capfd.readouterr().err
        mine = os.readlink(journal.with_name("study.log.lock"))
        assert mine.split(":")[1] == str(os.getpid())
    finally:
        os.kill(paused.pid, signal.SIGCONT)
    out, err = paused.communicate("release\n", timeout=60)
    assert paused.returncode == 0 and out == "released\n", err
    assert "another writer broke it; the write went through" in err and "Traceback" not in err
    assert os.readlink(journal.with_name("study.log.lock")) == mine  # still the writer's
    writer.release()
    assert not os.path.lexists(journal.with_name("study.log.lock"))
    assert not list(tmp_path.glob("*.removed"))  # nothing left beside the journal


def test_a_journal_storage_writes_past_a_lock_left_by_a_writer_killed_while_holding_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """kill -9 of a process holding the lock: tuner's journal storage waits the grace
    (``$TUNER_JOURNAL_LOCK_GRACE_S``), breaks it with one warning, and its writes go through."""
    import optuna

    from tuner.orchestrate import open_storage

    journal = tmp_path / "study.log"
    killed = _holder(journal)
    killed.kill()
    killed.wait()
    monkeypatch.setenv("TUNER_JOURNAL_LOCK_GRACE_S", "0.5")
    storage = open_storage(f"journal:///{journal}")
    study = optuna.create_study(study_name="s", storage=storage)
    study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=1.0))
    err = capfd.readouterr().err
    assert err.count("broke a lock") == 1 and "Traceback" not in err
    reread = optuna.load_study(study_name="s", storage=open_storage(f"journal:///{journal}"))
    assert [t.value for t in reread.trials] == [1.0]
    assert not os.path.lexists(journal.with_name("study.log.lock"))


def test_a_waiter_interrupted_while_it_waits_leaves_the_holders_lock(tmp_path: Path) -> None:
    """Ctrl-C in ``acquire`` (Optuna's lock then removes whoever holds it): the lock stays."""
    journal = str(tmp_path / "study.log")
    holder = OwnedSymlinkLock(journal, grace_s=3600)
    holder.acquire()
    interrupted = threading.Event()

    def clock() -> float:
        interrupted.set()
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        OwnedSymlinkLock(journal, grace_s=3600, clock=clock).acquire()
    assert interrupted.is_set() and os.path.lexists(journal + ".lock")
    holder.release()
    assert not os.path.lexists(journal + ".lock")


def test_a_grace_that_is_not_seconds_is_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tuner.errors import UsageError
    from tuner.orchestrate import open_storage

    monkeypatch.setenv("TUNER_JOURNAL_LOCK_GRACE_S", "soon")
    with pytest.raises(
        UsageError, match=r"\$TUNER_JOURNAL_LOCK_GRACE_S='soon': expected a number of seconds"
    ):
        open_storage(f"journal:///{tmp_path / 'study.log'}")


@pytest.mark.parametrize(
    ("settings", "grace_s"),
    [
        ({}, 30.0),  # the heartbeat grace is 60 s: Optuna's 30 s is shorter
        ({"TUNER_HEARTBEAT_S": "1"}, 6.0),  # a 12 s heartbeat grace: broken after half of it
        ({"TUNER_HEARTBEAT_GRACE_S": "40"}, 20.0),
        ({"TUNER_HEARTBEAT_S": "1", "TUNER_JOURNAL_LOCK_GRACE_S": "45"}, 45.0),  # the operator's
    ],
    ids=["default", "short-beats", "short-grace", "explicit"],
)
def test_the_lock_is_broken_before_a_stalled_journal_makes_live_trials_look_dead(
    settings: dict[str, str],
    grace_s: float,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """While a paused writer holds the lock nobody beats; a lock grace at most half the heartbeat
    grace leaves the beats time to land once it is broken, before the beat watch fails trials."""
    for name in ("TUNER_HEARTBEAT_S", "TUNER_HEARTBEAT_GRACE_S", "TUNER_JOURNAL_LOCK_GRACE_S"):
        monkeypatch.delenv(name, raising=False)
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    assert OwnedSymlinkLock(str(tmp_path / "study.log")).grace_s == grace_s
    said = capsys.readouterr().err
    if "TUNER_JOURNAL_LOCK_GRACE_S" in settings:  # the operator's, kept, and said to be too long
        assert said == (
            "warning: $TUNER_JOURNAL_LOCK_GRACE_S=45 s is more than half the heartbeat grace (12 s): "
            "a writer paused while it holds the journal's lock can get live trials failed as stale; "
            "keep it at 6 s or less (or unset it)\n"
        )
        OwnedSymlinkLock(str(tmp_path / "other.log"))
        assert capsys.readouterr().err == ""  # once per process
    else:
        assert said == ""


def test_a_lock_file_that_is_not_a_link_is_broken_after_the_grace_too(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Optuna's other lock (``JournalFileOpenLock``) is a plain file: one left behind is timed and
    broken like a link, not polled forever."""
    journal = str(tmp_path / "study.log")
    Path(journal + ".lock").write_text("")
    lock = OwnedSymlinkLock(journal, grace_s=0.3)
    lock.acquire()
    assert os.path.islink(journal + ".lock")
    assert "broke a lock held for 0.3 s by a lock file that is not a link" in capfd.readouterr().err
    lock.release()
    assert not os.path.lexists(journal + ".lock")
