"""A fleet under faults, larger than CI runs it: ``tests/orchestrate_tests/test_fleet_under_faults.py``
with ``TUNER_TEST_FLEET_SLOTS`` slots (default 200) on 8 workers, half of them through the gRPC
proxy, while connections are cut every second, the proxy is killed and restarted, a worker is
killed with SIGKILL and one worker's clock runs 10 minutes fast.

Figures, from the test's own line: the slots completed (each once: the test fails otherwise),
the trials it took (retries and duplicates set aside included), the connections cut, and the
longest stall of any worker (the longest time a worker went between two trials it ended, by the
storage's stamps). Needs PostgreSQL (``$TUNER_TEST_POSTGRES_URL``, or the local server).

``python -m benchmarks.fleet_faults [--slots N]``
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

from benchmarks._common import REPO_ROOT, Result, report

NAME = "fleet_faults"
LINE = re.compile(
    r"fleet: (\d+) slots completed once each; (\d+) trials .*; (\d+) connections cut; "
    r"longest stall of a worker ([\d.]+) s"
)


def run(slots: int = 200) -> list[Result]:
    env = {**os.environ, "TUNER_TEST_FLEET_SLOTS": str(slots)}
    test = "tests/orchestrate_tests/test_fleet_under_faults.py"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:xdist", test],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    found = LINE.search(done.stdout)
    if done.returncode != 0 or found is None:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
        raise RuntimeError(f"the fleet test failed (exit {done.returncode}):\n{tail}")
    completed, trials, cut, stall = found.groups()
    return [
        Result(
            NAME,
            "slots completed, each once",
            float(completed),
            "{:.0f}",
            f"= {slots}",
            int(completed) == slots,
        ),
        Result(NAME, "trials (retries and duplicates included)", float(trials), "{:.0f}"),
        Result(NAME, "connections cut", float(cut), "{:.0f}"),
        Result(NAME, "longest stall of a worker", float(stall), "{:.1f} s", "< 120 s", float(stall) < 120),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=200)
    args = parser.parse_args()
    report(NAME, run(args.slots))


if __name__ == "__main__":
    main()
