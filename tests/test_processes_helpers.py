"""The helpers that keep tests honest on a busy machine: waits on progress, no orphans."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests._processes import alive, descendants, finish, kill_everything_started, spawn, wait_for

#: a process that starts a child in a session of its own (as run-round starts its workers),
#: writes both pids, then sleeps
PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
open(sys.argv[1], "w").write(f"{child.pid}")
time.sleep(600)
"""


def test_everything_a_test_started_is_killed_at_its_end_even_in_another_session(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    parent = spawn([sys.executable, "-c", PARENT, str(pids)])
    child = int(wait_for(lambda: pids.exists() and pids.read_text(), 120, "the child's pid", process=parent))
    assert child in descendants(parent.pid) and os.getpgid(child) != os.getpgid(parent.pid)
    kill_everything_started()  # what the autouse fixture does after each test
    assert parent.returncode is not None
    wait_for(lambda: not alive(child), 30, "the child in its own session to die")


def test_wait_for_says_what_never_came_and_stops_when_the_process_exits(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="timed out after 0 s waiting for a file"):
        wait_for(lambda: (tmp_path / "never").exists(), 0.2, "a file")
    quitter = spawn([sys.executable, "-c", "print('gave up'); raise SystemExit(3)"], stdout=-1, text=True)
    with pytest.raises(AssertionError, match=r"exited \(3\) before a file:\ngave up"):
        wait_for(lambda: (tmp_path / "never").exists(), 300, "a file", process=quitter)


def test_finish_fails_a_stalled_process_and_kills_it() -> None:
    sleeper = spawn([sys.executable, "-c", "import time; time.sleep(600)"])
    with pytest.raises(AssertionError, match="made no progress for 2 s"):
        finish(sleeper, lambda: 0, stall_s=2, what="the sleeper")
    assert sleeper.returncode is not None
