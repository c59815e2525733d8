"""``tuner`` commands started the way ``run-round`` starts its workers: forked from a process that
has already imported torch (tuner's zygote, ``tuner.orchestrate.warm_start``), one per test process.

Why: the chaos, preemption and multi-machine tests start "a worker on another machine" by hand,
about 50 in a suite run. As commands of their own they each imported torch and ``torch._dynamo``
(3.7 CPU s each here, 186 CPU s of a suite with 685 s of CPU-bound wall time on 2 cores); forked
they cost a third of a second. The same holds for every command a test runs to its end or starts
(``run_tuner``, ``start_tuner`` in ``tests/orchestrate_tests/conftest.py``: ``tuner train`` 1.5
CPU s cold, a ``run-round`` command 0.9 s before its own zygote; about 220 a suite run) unless it
asks for a cold start. A command that starts workers (``POOL_COMMANDS``) is also given a spare
copy of the zygote to fork them from (``tuner.orchestrate.zygote``), instead of a zygote of its
own that imports torch again (2.8 CPU s; one file of run-round tests took 49 s instead of 104 s).
A zygote's own start stays tested in test_warm_start and wherever a test asks for a cold command.
What such a test is about (claims, retries, beats, signals, exit codes) is the command's code
after its imports, and that is the same: the zygote runs ``python -m tuner ARGS`` in the child
with ``runpy``, in a session of its own, with the test's environment, folder and command line
(``ps`` shows it), as it does for every worker a ``run-round`` starts. A worker's start from a
cold interpreter stays tested where it matters: ``test_cli``, ``test_examples``,
``test_slurm_example``, ``test_storage_outage``, ``test_env_settings``, test_preemption's orphaned
and stopped-while-starting workers and test_worker_imports's import list still run ``tuner
worker`` as a command of its own.

``spawn_warm_tuner`` returns a ``WarmTuner``: the part of ``subprocess.Popen`` the tests use
(``pid``, which is its process group; ``poll``, ``wait``, ``communicate``, ``send_signal``,
``kill``), its output, stdout and stderr merged as text (or apart, ``separate_stderr``), read
from its log files. The autouse fixture of ``tests/conftest.py`` kills it and its descendants
when the test ends.
"""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests._processes import PATIENCE_S, POLL_S, register, tuner_args
from tuner.cli._phase_run import WORKER_MODULES
from tuner.orchestrate.trial_process import ENGINE_MODULES
from tuner.orchestrate.warm_start import WarmProcess, WarmStarter

# the commands whose workers a zygote forks (``tuner.cli._phase_run``): each imports torch again
# in one of its own unless given a spare (about 3 CPU s a command, a hundred commands a suite run)
POOL_COMMANDS = frozenset({"run-round", "sweep-lr", "tune", "smoke"})
# what ``tune`` imports to read its rounds' reports (``scipy.special`` for the verdicts' tests,
# the report's modules), not imported by run-round's zygote: a third of a CPU second a ``tune``
# command, about fifty a suite run
REPORT_MODULES = ("scipy.special", "tuner.report.build")
_starter: WarmStarter | None = None
_logs: Path | None = None
_labels = itertools.count()


def _warm_starter() -> WarmStarter:
    """This test process's zygote, started on first use (and again if it died)."""
    global _starter, _logs
    if _logs is None:
        _logs = Path(tempfile.mkdtemp(prefix="tuner-test-warm-"))
        atexit.register(shutil.rmtree, _logs, True)
    if _starter is None or _starter.server.poll() is not None:
        # the zygote dies with this process (SIGKILL from the kernel), its workers with it
        _starter = WarmStarter(
            (*WORKER_MODULES, *ENGINE_MODULES, *REPORT_MODULES),
            log_path=_logs / "zygote.log",
            env=dict(os.environ),
        )
    return _starter


class WarmTuner:
    """A ``tuner`` command forked from the zygote, used as the tests use ``subprocess.Popen``."""

    stdin = stdout = stderr = None  # its output is in its log (``communicate``)

    def __init__(
        self, args: list[str], process: WarmProcess, log_path: Path, err_path: Path | None = None
    ) -> None:
        self.args, self.process, self.log_path, self.err_path = args, process, log_path, err_path
        deadline = time.monotonic() + PATIENCE_S  # the zygote may still be importing torch
        while process.pid is None and process.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the zygote did not start {' '.join(args[:4])} within {PATIENCE_S:.0f} s"
                )
            time.sleep(POLL_S)
        if process.pid is None:  # never a made-up pid: a killer would signal it
            raise AssertionError(f"the zygote ended before it started {' '.join(args[:4])}")
        self.pid: int = process.pid

    @property
    def returncode(self) -> int | None:
        """As ``Popen.returncode`` after a ``poll``: never stale, so a killer never signals a pid
        the zygote has already reaped (and the kernel may have given to someone else)."""
        return self.process.poll()

    def poll(self) -> int | None:
        return self.process.poll()

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.process.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(POLL_S)
        return code

    def communicate(self, timeout: float | None = None) -> tuple[str, None]:
        self.wait(timeout)
        return self.output(), None

    def output(self) -> str:
        """Its stdout, and its stderr too unless started with ``separate_stderr``."""
        return _read(self.log_path)

    def errors(self) -> str:
        """Its stderr when started with ``separate_stderr`` (else empty: it is in ``output``)."""
        return _read(self.err_path) if self.err_path is not None else ""

    def send_signal(self, sig: int) -> None:
        self.process.send_signal(sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def spawn_warm_tuner(
    *args: str, env: dict[str, str] | None = None, separate_stderr: bool = False
) -> WarmTuner:
    """``tuner ARGS`` forked from this test process's zygote, in a session of its own (always),
    killed with the test; ``separate_stderr``: its stderr in a file of its own (``errors()``)."""
    starter = _warm_starter()
    label = f"w{next(_labels)}"
    assert _logs is not None
    log_path = _logs / f"{label}.log"
    err_path = _logs / f"{label}.err" if separate_stderr else None
    argv = [sys.executable, "-m", "tuner", *tuner_args(args)]
    environment = dict(env if env is not None else os.environ)
    # a command that starts workers of its own gets a spare of the zygote for them
    # (``tuner.orchestrate.zygote``); another would show it as a child it does not have
    spare = bool(args) and args[0] in POOL_COMMANDS
    process = starter.start(label, argv, env=environment, log_path=log_path, err_path=err_path, spare=spare)
    return register(WarmTuner(argv, process, log_path, err_path))


def run_warm_tuner(
    *args: str, env: dict[str, str] | None = None, timeout: float = 2 * PATIENCE_S
) -> subprocess.CompletedProcess[str]:
    """``spawn_warm_tuner`` run to its end, as ``subprocess.run`` gives it: stdout and stderr apart."""
    process = spawn_warm_tuner(*args, env=env, separate_stderr=True)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{' '.join(args[:3])} ... did not finish within {timeout:.0f} s") from None
    return subprocess.CompletedProcess(process.args, process.wait(), output, process.errors())
