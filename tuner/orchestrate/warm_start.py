"""Local workers forked from one process that has already imported torch (a "zygote").

Why: every ``tuner worker`` pays about 3 CPU seconds of imports (torch 1.4 s, ``torch._dynamo``
with the optimizers 1.6 s, Optuna and SQLAlchemy 0.5 s) before its first trial, and N workers
started side by side pay it N times over, on the cores their trials need. Forked from a warm
process each pays nothing: one import per command, the pages shared copy-on-write, the first
trial claimed sooner.

What a worker keeps, exactly as if ``python -m tuner worker ...`` had been run: its own session
(a terminal's Ctrl-C reaches only run-round, which forwards it once), its log file as stdout and
stderr, its environment and folder, its command line as ``ps`` shows it (``setproctitle``: the
chaos tests, ``pkill -f``, and a user reading ``ps`` find it by that), its exit code, and its
death with the command: the zygote dies with run-round (``PR_SET_PDEATHSIG``, SIGKILL) and each
worker with the zygote (SIGTERM, so it stops cleanly, as it did with run-round as its parent).

Why not ``multiprocessing``'s forkserver, the standard library's zygote: each of its children
holds the server's liveness pipe, so the server outlives a killed command while any worker runs,
and its workers would never be told to stop; it signals children by pid from outside, where a
pid freed and reused between the exit and the signal is someone else's (here the zygote, the
only one that reaps its children, delivers every signal); and it is one server per process,
started with that process's environment of the moment (a pytest run starts many commands).

This module is the command's side; the zygote's, with the protocol between them, is ``zygote``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

from tuner.orchestrate import zygote

POLL_S = 0.05  # how often ``WarmProcess.wait`` asks


class WarmProcess:
    """A worker the zygote forked: the part of ``subprocess.Popen`` that ``LocalPool`` uses."""

    def __init__(self, starter: WarmStarter, label: str) -> None:
        self.starter, self.label = starter, label
        self.pid: int | None = None
        self.returncode: int | None = None

    def poll(self) -> int | None:
        self.starter.pump()
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            self.starter.send({"op": "signal", "label": self.label, "signal": int(sig)})

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self) -> int:
        while self.poll() is None:
            time.sleep(POLL_S)
        assert self.returncode is not None
        return self.returncode


class SpareZygote:
    """A spare zygote this process was given (``zygote.fork_spare``): the part of
    ``subprocess.Popen`` a ``WarmStarter`` uses of the zygote it starts otherwise."""

    def __init__(self, pid: int, requests: int, replies: int) -> None:
        self.pid = pid
        self.stdin: BinaryIO | None = os.fdopen(requests, "wb")
        self.stdout: BinaryIO | None = os.fdopen(replies, "rb")
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped by someone else: how it ended is not known
                self.returncode = 1
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"zygote {self.pid}", timeout or 0.0)
            time.sleep(POLL_S)
        return code

    def kill(self) -> None:
        if self.poll() is None:  # not reaped: the pid is still ours
            os.kill(self.pid, signal.SIGKILL)


def take_spare() -> SpareZygote | None:
    """The spare zygote named in ``SPARE_ENV``, if it is this process's and alive; the name is
    taken out of the environment either way (the workers, a second pool, never see it)."""
    named = os.environ.pop(zygote.SPARE_ENV, "")
    try:
        owner, pid, requests, replies = (int(part) for part in named.split(":"))
    except ValueError:
        return None
    if owner != os.getpid():  # inherited by a process the owner started: not its child
        return None
    spare = SpareZygote(pid, requests, replies)
    if spare.poll() is None:
        return spare
    for stream in (spare.stdin, spare.stdout):
        if stream is not None:
            stream.close()
    return None


class WarmStarter:
    """Starts the zygote at once (it imports ``preload`` while the command goes on), then forks
    each worker asked of it as soon as those imports are done. A spare this process was given
    serves instead, when there is one: it has imported them already."""

    def __init__(self, preload: Sequence[str], *, log_path: Path, env: dict[str, str]) -> None:
        self.processes: dict[str, WarmProcess] = {}
        self._unread = b""
        self.server: subprocess.Popen[bytes] | SpareZygote
        spare = take_spare()
        if spare is not None:
            self.server = spare
            log_path.open("ab").close()  # there from the start, as a zygote started afresh has it
        else:
            with log_path.open("ab") as log:
                self.server = subprocess.Popen(
                    [sys.executable, "-m", zygote.MODULE, str(os.getpid()), *preload],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    env=env,
                    start_new_session=True,  # a terminal's Ctrl-C is run-round's to forward, not ours
                )
        assert self.server.stdout is not None
        os.set_blocking(self.server.stdout.fileno(), False)
        if spare is not None:
            self.send({"op": "setup", "log": str(log_path), "preload": list(preload)})

    def start(
        self,
        label: str,
        argv: list[str],
        *,
        env: dict[str, str],
        log_path: Path,
        err_path: Path | None = None,
        spare: bool = False,
    ) -> WarmProcess:
        """Fork ``argv`` (``[python, "-m", module, ...]``) as a worker logging to ``log_path``
        (its stderr to ``err_path`` instead, when given: the tests read a command's two apart);
        ``spare``: it is a command that may start workers of its own, give it a spare zygote."""
        process = self.processes[label] = WarmProcess(self, label)
        request = {"op": "start", "label": label, "argv": argv, "env": env, "cwd": os.getcwd()}
        request.update(log=str(log_path), err_log=str(err_path) if err_path else None, spare=spare)
        self.send(request)
        return process

    def send(self, request: dict[str, Any]) -> None:
        assert self.server.stdin is not None
        try:
            self.server.stdin.write(json.dumps(request).encode() + b"\n")
            self.server.stdin.flush()
        except (BrokenPipeError, ValueError):  # the zygote is gone: pump() says what became of its workers
            self.pump()

    def pump(self) -> None:
        """Read what the zygote said since last time."""
        assert self.server.stdout is not None
        try:
            chunk = self.server.stdout.read()
        except (OSError, ValueError):
            chunk = b""
        if chunk is None:  # nothing new
            return
        if chunk:
            *lines, self._unread = (self._unread + chunk).split(b"\n")
            for line in lines:
                event = json.loads(line)
                process = self.processes[event["label"]]
                if event["event"] == "started":
                    process.pid = event["pid"]
                else:
                    process.returncode = int(event["code"])
            return
        # end of file: the zygote died (killed, out of memory); its workers got a SIGTERM from
        # the kernel as it went and are stopping, but how each ends is no longer known here
        code = self.server.wait()
        for process in self.processes.values():
            if process.returncode is None:
                process.returncode = code if code < 0 else 1

    def close(self) -> None:
        """Let the zygote go: at once if a worker asked of it was never forked (it is still
        importing: a refused command must not wait seconds for that), else once it has reaped
        the workers (each killed, or exited, before this is called)."""
        self.pump()
        if any(process.pid is None and process.returncode is None for process in self.processes.values()):
            self.server.kill()
        if self.server.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                self.server.stdin.close()
        try:
            self.server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.server.kill()  # its workers get their SIGTERM from the kernel
            self.server.wait()
        self.pump()


class SharedWarmStart:
    """One zygote for every phase a command runs one after another (``tune``, ``smoke``), instead
    of one per phase: each phase's pool would otherwise import torch again (about 3 CPU s and
    1.5 s of wall time a phase here). The first pool that needs one starts it, with its own log
    and environment (the zygote's imports depend on neither; each worker gets its own); a zygote
    that died is replaced. Its owner closes it when the last phase is over."""

    def __init__(self) -> None:
        self.starter: WarmStarter | None = None

    def get(self, preload: Sequence[str], *, log_path: Path, env: dict[str, str]) -> WarmStarter:
        if self.starter is not None and self.starter.server.poll() is not None:
            self.close()
        if self.starter is None:
            self.starter = WarmStarter(preload, log_path=log_path, env=env)
        return self.starter

    def close(self) -> None:
        if self.starter is not None:
            self.starter.close()
            self.starter = None

    def __enter__(self) -> SharedWarmStart:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
