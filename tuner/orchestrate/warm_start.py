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

The protocol: run-round writes one JSON request per line on the zygote's stdin (``start``:
label, argv, env, folder, log, and an optional log of its own for stderr; ``signal``: label,
signal number), and reads one JSON event per line from its stdout (``started``: label, pid;
``exited``: label, exit code as ``subprocess`` gives it, negative for a signal). The zygote's
own errors go to its log.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import shlex
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import setproctitle

from tuner._lifetime import DIE_WITH_PARENT_ENV, die_with_parent

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


class WarmStarter:
    """Starts the zygote at once (it imports ``preload`` while the command goes on), then forks
    each worker asked of it as soon as those imports are done."""

    def __init__(self, preload: Sequence[str], *, log_path: Path, env: dict[str, str]) -> None:
        with log_path.open("ab") as log:
            self.server = subprocess.Popen(
                [sys.executable, "-m", __name__, str(os.getpid()), *preload],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
                start_new_session=True,  # a terminal's Ctrl-C is run-round's to forward, not ours
            )
        assert self.server.stdout is not None
        os.set_blocking(self.server.stdout.fileno(), False)
        self.processes: dict[str, WarmProcess] = {}
        self._unread = b""

    def start(
        self,
        label: str,
        argv: list[str],
        *,
        env: dict[str, str],
        log_path: Path,
        err_path: Path | None = None,
    ) -> WarmProcess:
        """Fork ``argv`` (``[python, "-m", module, ...]``) as a worker logging to ``log_path``
        (its stderr to ``err_path`` instead, when given: the tests read a command's two apart)."""
        process = self.processes[label] = WarmProcess(self, label)
        request = {"op": "start", "label": label, "argv": argv, "env": env, "cwd": os.getcwd()}
        request.update(log=str(log_path), err_log=str(err_path) if err_path else None)
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


def _become_worker(request: dict[str, Any], zygote: int, replies: int) -> None:
    """In the forked child: turn into the worker the request describes; never returns."""
    code = 1
    try:
        os.close(replies)
        die_with_parent(signal.SIGTERM, parent_pid=zygote)  # a stop it can checkpoint on
        os.setsid()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        log = os.open(request["log"], flags, 0o644)
        errors = os.open(request.get("err_log") or request["log"], flags, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(errors, 2)
        for fd in (log, errors, null):
            os.close(fd)
        argv = request["argv"]
        # before the environment changes: setproctitle finds its room in the original one
        setproctitle.setproctitle(shlex.join(argv))
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        if DIE_WITH_PARENT_ENV in os.environ:
            os.environ[DIE_WITH_PARENT_ENV] = str(zygote)  # our parent now; it dies with run-round
        sys.argv = [argv[2], *argv[3:]]
        import runpy

        runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            code = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed or broken stream: nothing more to say
                stream.flush()
        os._exit(code)


class _Zygote:
    """The serving side: forks a worker per ``start``, delivers each ``signal`` to a worker it
    has not reaped yet (so never to a reused pid), and reports each exit as it reaps it. It
    sleeps until a request or a child's exit (SIGCHLD, through Python's wakeup fd) wakes it."""

    def __init__(self, replies: int) -> None:
        self.replies = replies
        self.children: dict[int, str] = {}
        self.wake_read, self.wake_write = os.pipe()
        for fd in (self.wake_read, self.wake_write):
            os.set_blocking(fd, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd hears it
        signal.set_wakeup_fd(self.wake_write)

    def serve(self) -> None:
        unread, reading = b"", True
        while reading or self.children:
            watched = [0, self.wake_read] if reading else [self.wake_read]
            ready, _, _ = select.select(watched, [], [], 1.0)
            if self.wake_read in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(self.wake_read, 1 << 12)
            if 0 in ready:
                chunk = os.read(0, 1 << 16)
                reading = bool(chunk)
                *lines, unread = (unread + chunk).split(b"\n")
                for line in lines:
                    self.handle(json.loads(line))
            self.reap()

    def handle(self, request: dict[str, Any]) -> None:
        if request["op"] == "start":
            sys.stdout.flush()
            sys.stderr.flush()
            zygote = os.getpid()
            pid = os.fork()
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.close(self.wake_read)
                os.close(self.wake_write)
                _become_worker(request, zygote, self.replies)
            self.children[pid] = request["label"]
            self.reply({"event": "started", "label": request["label"], "pid": pid})
        elif request["op"] == "signal":
            for pid, label in self.children.items():
                if label == request["label"]:
                    os.kill(pid, request["signal"])  # not reaped yet: still ours

    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            label = self.children.pop(pid, None)
            if label is not None:
                self.reply({"event": "exited", "label": label, "code": os.waitstatus_to_exitcode(status)})

    def reply(self, event: dict[str, Any]) -> None:
        os.write(self.replies, json.dumps(event).encode() + b"\n")


def serve(parent: int, preload: Sequence[str]) -> None:
    """The zygote: import ``preload``, then fork a worker per request until stdin closes."""
    die_with_parent(signal.SIGKILL, parent_pid=parent)
    replies = os.dup(1)
    os.dup2(2, 1)  # a stray print of an imported module goes to the log, not into the replies
    for module in preload:
        try:
            importlib.import_module(module)
        except Exception as error:  # the worker will import it again and say what is wrong
            print(f"warm start: cannot preload {module}: {type(error).__name__}: {error}", file=sys.stderr)
    _Zygote(replies).serve()


if __name__ == "__main__":
    serve(int(sys.argv[1]), sys.argv[2:])
    # every worker has been reaped and reported: skip the second or more of interpreter teardown
    # (torch's) that run-round would otherwise wait for before it can print its summary
    sys.stderr.flush()
    os._exit(0)
