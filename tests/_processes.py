"""Processes a test starts, and waits that hold on a busy machine.

A CI box often runs at a load average of 10x its cores. There, a fixed ``time.sleep`` followed by
an assert, or a deadline of "N steps within 60 s", fails at random while nothing is wrong. So:

- ``wait_for(predicate, timeout, what)`` polls progress (a ``status.json`` field, a file, a row)
  until it is there, with a generous timeout and a message that says what never came;
- ``finish(process, progress, ...)`` waits for a process to end for as long as it makes progress
  (a stalled process fails the test; a slow one does not);
- ``spawn(...)`` starts a process in a session (process group) of its own and remembers it: the
  autouse fixture in ``tests/conftest.py`` kills every group a test started, and their
  descendants, when the test ends, whether it passed, failed or timed out. A test that gives up
  never leaves a ``tuner train`` running for 20 minutes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
P = TypeVar("P")

#: Seconds a test waits for a sign of progress before it gives up: far beyond what a quiet
#: machine needs (a second or two), so that a machine at load 20 still passes.
PATIENCE_S = float(os.environ.get("TUNER_TEST_PATIENCE_S", "300"))
POLL_S = 0.05

_started: list[Any] = []  # Popen, or tests._warm_processes.WarmTuner

#: Commands that start local workers, one per core unless told otherwise.
_STARTS_WORKERS = ("run-round", "sweep-lr", "tune")


def tuner_args(args: tuple[str, ...] | list[str]) -> list[str]:
    """``tuner ARGS`` with ``--workers 1`` added to a command that starts local workers and was
    given neither ``--workers`` nor ``--devices``: each worker is a process that imports torch
    (about 3.5 CPU s here), and most tests are not about parallelism. A test that is asks for
    its workers; the default count (one per core) has its own test."""
    args = list(args)
    if args and args[0] in _STARTS_WORKERS and not {"--workers", "--devices"} & set(args):
        args += ["--workers", "1"]
    return args


def wait_for(
    predicate: Callable[[], T | None],
    timeout: float = PATIENCE_S,
    what: str = "the condition",
    *,
    process: subprocess.Popen[Any] | None = None,
) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that.

    Fails with "timed out after N s waiting for WHAT" when ``timeout`` passes, and at once when
    ``process`` (the one expected to make the progress) has exited: waiting on would be pointless.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if process is not None and process.poll() is not None:
            value = predicate()  # its last act may have been the progress
            if value:
                return value
            raise AssertionError(
                f"the process exited ({process.returncode}) before {what}{_output_of(process)}"
            )
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(POLL_S)


def finish(
    process: subprocess.Popen[Any],
    progress: Callable[[], Hashable],
    *,
    stall_s: float = PATIENCE_S,
    what: str = "the process",
) -> tuple[Any, Any]:
    """Wait for ``process`` to end while ``progress()`` keeps changing; return its (stdout, stderr).

    No overall deadline: a slow machine is allowed to be slow. Only ``stall_s`` seconds without
    any change in ``progress()`` (e.g. the last step in ``metrics.csv``) fail the test, after the
    process group is killed.
    """
    last, changed = progress(), time.monotonic()
    while True:
        try:
            return process.communicate(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
        now = progress()
        if now != last:
            last, changed = now, time.monotonic()
        elif time.monotonic() - changed > stall_s:
            kill_group(process)
            raise AssertionError(f"{what} made no progress for {stall_s:.0f} s (last: {last!r})")


def spawn(args: list[str], **popen: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen(args, **popen)`` in a session of its own, killed with its whole group
    (and descendants) when the test ends."""
    popen.pop("start_new_session", None)  # always
    return register(subprocess.Popen(args, start_new_session=True, **popen))


def forget(process: Any) -> None:
    """Leave ``process`` alive when the test ends: a fixture that outlives the test stops it."""
    _started.remove(process)


def register(process: P) -> P:
    """Remember ``process`` (a ``Popen``, or anything with its ``pid``, ``returncode`` and
    ``wait``) to be killed with its group when the test ends."""
    _started.append(process)
    return process


def run(
    args: list[str], *, timeout: float = 2 * PATIENCE_S, **popen: Any
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(args, capture_output=True, text=True)``, but a timeout kills the whole
    process group and its descendants (``subprocess.run`` kills only the direct child: a
    ``tuner run-round``'s workers and trials would live on)."""
    process = spawn(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(process)
        raise AssertionError(f"{' '.join(args[:4])} ... did not finish within {timeout:.0f} s") from None
    _started.remove(process)
    return subprocess.CompletedProcess(args, process.returncode, out, err)


def spawn_tuner(*args: str, env: dict[str, str] | None = None, **popen: Any) -> subprocess.Popen[str]:
    """``tuner ARGS`` as a real process, output merged on stdout as text (see ``spawn``)."""
    popen = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True, **popen}
    return spawn([sys.executable, "-m", "tuner", *tuner_args(args)], env=env, **popen)


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, exited but not yet collected, is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children, grandchildren, ...), from ``/proc``."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_group(process: subprocess.Popen[Any]) -> None:
    """SIGKILL ``process``'s group and every descendant (a worker in a session of its own too).

    Only while ``process`` is not yet reaped (alive, or a zombie): its pid, which is its group's
    id, is then still ours. Once reaped, the pid may already name another process group (pids
    wrap at 32768 on a busy machine), and a ``killpg`` would kill a stranger's processes.
    """
    if process.returncode is None:  # not reaped: the pid (and the group id) are still ours
        below = descendants(process.pid)
        for kill in (lambda: os.killpg(process.pid, signal.SIGKILL), *[_killer(pid) for pid in below]):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=30)
    for stream in (process.stdout, process.stderr, process.stdin):
        if stream is not None:
            stream.close()


def _killer(pid: int) -> Callable[[], None]:
    return lambda: os.kill(pid, signal.SIGKILL)


def kill_everything_started() -> None:
    """What the autouse fixture runs after each test."""
    while _started:
        kill_group(_started.pop())


def _output_of(process: subprocess.Popen[Any]) -> str:
    if process.stdout is None and not hasattr(process, "output"):  # a WarmTuner reads its log
        return ""
    try:
        out, err = process.communicate(timeout=10)
    except (subprocess.TimeoutExpired, ValueError):
        return ""
    text = (out or "") + (err or "")
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return f":\n{text[-3000:]}"
