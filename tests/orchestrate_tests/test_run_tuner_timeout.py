"""A ``tuner`` command a test gives up on leaves nothing running below it.

``subprocess.run(timeout=...)`` kills only the direct child: a ``tuner run-round`` that timed out
in a test could leave its workers and their trials (its grandchildren) running on the CI box.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests._processes import alive, wait_for
from tests.orchestrate_tests.conftest import run_tuner, tuner_env

#: stands in for ``tuner``: starts a grandchild in its group and one in a session of its own (as
#: run-round starts its workers), writes their pids, then hangs
FAKE_TUNER = """
import subprocess, sys, time
sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
in_group = subprocess.Popen(sleep)
own_session = subprocess.Popen(sleep, start_new_session=True)
with open(sys.argv[-1] + ".tmp", "w") as pids:
    pids.write(f"{in_group.pid} {own_session.pid}")
import os; os.replace(sys.argv[-1] + ".tmp", sys.argv[-1])
time.sleep(600)
"""


def test_a_tuner_command_that_times_out_takes_its_grandchildren_with_it(tmp_path: Path) -> None:
    """``python -m tuner`` resolves to a stand-in that hangs with two grandchildren (a cold start:
    a warm one runs the tuner its zygote imported). The timeout
    must fall after they started, which a busy machine may delay: the test tries again with twice
    the timeout until the pids were written before the command was given up on."""
    fake = tmp_path / "fake" / "tuner"
    fake.mkdir(parents=True)
    (fake / "__main__.py").write_text(FAKE_TUNER)
    env = tuner_env(PYTHONPATH=str(fake.parent), PYTHONSAFEPATH="1")  # not the tuner in the cwd
    timeout = 5.0
    for attempt in range(6):
        pids = tmp_path / f"pids{attempt}"
        with pytest.raises((AssertionError, subprocess.TimeoutExpired)):
            run_tuner(str(pids), env=env, timeout=timeout, cold=True)
        if pids.exists():
            for pid in map(int, pids.read_text().split()):
                wait_for(lambda pid=pid: not alive(pid), 30, f"grandchild {pid} to die")
            return
        timeout *= 2
    pytest.fail("the stand-in never started its grandchildren before the timeout")
