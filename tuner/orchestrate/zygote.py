"""The zygote's side of ``warm_start``: a process that has imported torch once and forks each
worker run-round asks of it (see ``warm_start`` for why, and for what a worker keeps).

The protocol: the command writes one JSON request per line on the zygote's stdin (``start``:
label, argv, env, folder, log, an optional log of its own for stderr, and ``spare``; ``signal``:
label, signal number; ``setup``: the log and the modules of a spare, below), and reads one JSON
event per line from its stdout (``started``: label, pid; ``exited``: label, exit code as
``subprocess`` gives it, negative for a signal). The zygote's own errors go to its log.

A spare: a worker started with ``spare`` (a ``tuner`` command forked from a zygote, as the test
suite starts about a hundred ``run-round`` commands) forks, before it runs, a copy of the zygote
it came from, and names it in ``SPARE_ENV``. Its first pool takes it (``warm_start.take_spare``)
instead of starting a zygote that imports torch again (about 3 CPU s a command). It serves
exactly as a zygote started afresh; it is forked while the command is still the zygote's clean
copy (no storage open, no thread), and it dies with the command.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import select
import shlex
import signal
import sys
import traceback
from collections.abc import Sequence
from typing import Any

import setproctitle

from tuner._lifetime import DIE_WITH_PARENT_ENV, die_with_parent

MODULE = "tuner.orchestrate.zygote"  # ``__name__`` is "__main__" in a zygote started afresh
SPARE_ENV = "TUNER_WARM_SPARE"  # "owner pid:spare pid:requests fd:replies fd", for the owner only


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
        if request.get("spare"):
            fork_spare()
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


def fork_spare() -> None:
    """Fork a copy of this process as a zygote of its own (a spare, see the module's docstring)
    and name it in ``SPARE_ENV``; the caller is a worker about to run, still the clean copy of
    its zygote."""
    owner = os.getpid()
    requests_read, requests_write = os.pipe()
    replies_read, replies_write = os.pipe()
    pid = os.fork()
    if pid > 0:
        os.close(requests_read)
        os.close(replies_write)
        os.environ[SPARE_ENV] = f"{owner}:{pid}:{requests_write}:{replies_read}"
        return
    code = 1
    try:
        os.close(requests_write)
        os.close(replies_read)
        os.setsid()  # as a zygote started afresh: a terminal's Ctrl-C is the command's to forward
        die_with_parent(signal.SIGKILL, parent_pid=owner)
        # never mistaken for the command (``pkill -f``, a test reading ``ps``)
        setproctitle.setproctitle(shlex.join([sys.executable, "-m", MODULE, str(owner)]))
        os.environ.pop(SPARE_ENV, None)
        os.dup2(requests_read, 0)
        os.close(requests_read)
        os.dup2(2, 1)  # until ``setup`` gives it a log of its own
        _Zygote(replies_write).serve()
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(code)


def _preload(modules: Sequence[str]) -> None:
    """Import ``modules``, then freeze every object alive, as Python's gc docs advise before
    forking: what the zygote imported (torch's, ~360,000 objects) is never garbage, and in a
    forked command a collection then walks only the command's own objects (the one at its exit,
    ``cli.app._skip_the_collections_at_exit``: 0.18-0.21 CPU s over all of them, 0.001-0.015 s
    over its own) and touches, so copies, none of the pages the zygote shares with it. Not
    collected first: that would hold up the first worker (and the freeze is a list splice)."""
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as error:  # the worker will import it again and say what is wrong
            print(f"warm start: cannot preload {module}: {type(error).__name__}: {error}", file=sys.stderr)
    gc.freeze()


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
        elif request["op"] == "setup":  # a spare's first request: its log, then its imports
            log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.close(log)
            _preload(request["preload"])
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
    _preload(preload)
    _Zygote(replies).serve()


if __name__ == "__main__":
    serve(int(sys.argv[1]), sys.argv[2:])
    # every worker has been reaped and reported: skip the second or more of interpreter teardown
    # (torch's) that run-round would otherwise wait for before it can print its summary
    sys.stderr.flush()
    os._exit(0)
