"""Start the N processes of a multi-process run, watch them, and turn their ends into one.

The calling process (``tuner train``, or a trial's child) becomes the ranks' launcher, as
``torchrun``'s agent is: it starts ``world_size`` processes, each joining one process group
(gloo on CPU, nccl on CUDA; the rendezvous is a file in a private temporary folder, so no port
can clash), forwards stop signals to them, and waits. The ranks run in their own process group:
a Ctrl-C in the terminal reaches the launcher once and is forwarded once, as a SIGTERM (a clean
stop with a checkpoint), instead of reaching every rank *and* being forwarded (which would be
two signals: a kill).

When a rank fails, the others usually fail a moment later inside a collective ("connection
closed by peer"): that is a consequence, not the cause. The launcher waits a short grace for
every rank's report, then names the cause: an error raised by a rank's own code first, then a
rank that died of a signal (``RankKilled``, which a trial mirrors as its own death: a kill -9
of a rank is a killed trial), then a failed collective; the lowest rank among equals.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
import pickle
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, TextIO, TypeVar

from tuner._environment_faults import SMALLER_BATCH
from tuner._lifetime import children_allowed, die_with_parent, release_stop_signals, stop_signals_held
from tuner.errors import TunerError
from tuner.train.distributed import Ranks

T = TypeVar("T")

#: After the first failure, how long the other ranks get to report theirs before they are killed.
FAILURE_GRACE_S = 5.0


class RankError(TunerError):
    """A rank other than 0 failed (rank 0's own errors are raised as they are)."""

    def __init__(self, message: str, out_of_memory: bool = False) -> None:
        super().__init__(message)
        self.out_of_memory = out_of_memory
        if out_of_memory:  # the machine's limit, not a bug nor a failure of the code: bad environment
            self.exit_code = 2

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.out_of_memory))


class RankKilled(TunerError):
    """A rank died of a signal (kill -9, the OOM killer, a segfault)."""

    def __init__(self, rank: int, signum: int) -> None:
        self.rank, self.signum = rank, signum
        super().__init__(f"rank {rank} was killed by {signal.Signals(signum).name}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.rank, self.signum))


@dataclass(frozen=True)
class RankFailure:
    """How one rank failed, as its process saw it (sent to the launcher before it exits)."""

    rank: int
    text: str  # one line
    traceback: str
    error: BaseException | None  # the exception itself when it survives pickling
    secondary: bool  # a collective failed: most likely because another rank died first
    interrupted: bool  # a second Ctrl-C / SIGTERM: not a failure of the code
    out_of_memory: bool = False  # judged in the rank, where the error is whether it pickles or not


def _dumps(message: Any) -> bytes:
    """Plain pickle, not multiprocessing's: that one shares a tensor through shared memory, which
    a rank that exits right after sending takes with it."""
    return pickle.dumps(message)


def _is_collective_failure(error: BaseException) -> bool:
    import torch.distributed as dist

    backend_error = getattr(dist, "DistBackendError", ())
    text = str(error).lower()
    return isinstance(error, backend_error) or any(
        words in text for words in ("connection closed by peer", "connection reset by peer", "gloo")
    )


def _portable(error: BaseException) -> BaseException | None:
    try:
        return pickle.loads(pickle.dumps(error))
    except Exception:
        return None


class LineStream(io.TextIOBase):
    """A rank's stdout / stderr: whole lines, each written in one call and flushed at once.

    The ranks share the terminal (or the pipe of whoever started ``tuner train``). ``print``
    writes its text and its newline in two calls, so two ranks printing at once interleaved
    mid-line ("built the model[rank 1] built the model"); a line written in one call under
    ``PIPE_BUF`` bytes reaches a pipe whole. A partial line goes out only on ``flush``. Ranks > 0
    get ``[rank k] `` in front of every line and never claim a terminal (no live progress there).
    """

    def __init__(self, stream: TextIO, prefix: str = "") -> None:
        self.stream, self.prefix, self.at_line_start, self.pending = stream, prefix, True, ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.pending += text
        end = self.pending.rfind("\n") + 1
        if end:
            lines, self.pending = self.pending[:end], self.pending[end:]
            self._emit(lines)
        return len(text)

    def _emit(self, text: str) -> None:
        out = []
        for piece in text.splitlines(keepends=True):
            out.append(self.prefix + piece if self.at_line_start else piece)
            self.at_line_start = piece.endswith(("\n", "\r"))
        self.stream.write("".join(out))
        self.stream.flush()

    def flush(self) -> None:
        if self.pending:
            text, self.pending = self.pending, ""
            self._emit(text)
        else:
            self.stream.flush()

    def isatty(self) -> bool:
        return not self.prefix and self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.stream.encoding


def describe_failure(error: BaseException, rank: int) -> RankFailure:
    """How ``rank`` failed, told to its launcher (called in the ``except`` that caught ``error``)."""
    from tuner.train.workload_errors import is_out_of_memory

    interrupted = isinstance(error, KeyboardInterrupt)
    first = (str(error).strip().splitlines() or [type(error).__name__])[0][:500]
    return RankFailure(
        rank=rank,
        text=first if isinstance(error, TunerError) else f"{type(error).__name__}: {first}",
        traceback=traceback.format_exc(),
        error=_portable(error),
        secondary=not interrupted and _is_collective_failure(error),
        interrupted=interrupted,
        out_of_memory=is_out_of_memory(error),
    )


def _rank_main(
    target: Callable[[Ranks], Any],
    ranks: Ranks,
    store: str,
    backend: str,
    connection: Connection,
    parent_pid: int,
    threads: int | None,
) -> None:
    """A rank's process: join the group, run ``target``, report how it went, exit.

    Stop signals were blocked when it started (``tuner._lifetime.stop_signals_held``): its own handlers come
    first, then the ones held back are delivered. A SIGTERM before training starts is a Ctrl-C of
    a one-process run there (``KeyboardInterrupt``: the rank reports itself interrupted, never
    killed); training installs its clean stop; after the work is done, one is ignored.
    """
    signal.signal(signal.SIGTERM, interrupt_now)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal's Ctrl-C comes through the launcher
    die_with_parent(signal.SIGKILL, parent_pid)
    os.setpgid(0, 0)  # out of the terminal's process group: signals come through the launcher
    os.environ.update(
        RANK=str(ranks.rank),
        LOCAL_RANK=str(ranks.rank),
        WORLD_SIZE=str(ranks.world_size),
        LOCAL_WORLD_SIZE=str(ranks.world_size),
    )
    prefix = "" if ranks.is_main else f"[rank {ranks.rank}] "
    sys.stdout = LineStream(sys.stdout, prefix)  # type: ignore[assignment]
    sys.stderr = LineStream(sys.stderr, prefix)  # type: ignore[assignment]
    code = 1
    try:
        # inside the try: a stop held back while the rank started is delivered here, and is
        # reported as an interrupt like any other (not a traceback from multiprocessing)
        release_stop_signals()
        import torch
        import torch.distributed as dist

        if threads:
            torch.set_num_threads(threads)
        if backend == "nccl":
            torch.cuda.set_device(ranks.rank)
        dist.init_process_group(
            backend, init_method=f"file://{store}", rank=ranks.rank, world_size=ranks.world_size
        )
        result = target(ranks)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # done: nothing left to stop
        connection.send_bytes(_dumps(("done", result)))
        code = 0
    except BaseException as error:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # ending already: a second stop must not cut the report
        with contextlib.suppress(Exception):
            connection.send_bytes(_dumps(("failed", describe_failure(error, ranks.rank))))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # no atexit, no process-group teardown that could wait on a dead peer


def launch(
    target: Callable[[Ranks], T],
    world_size: int,
    *,
    backend: str = "gloo",
    start_method: str = "spawn",
    threads_per_rank: int | None = None,
) -> T:
    """Run ``target(ranks)`` in ``world_size`` processes; rank 0's return value.

    ``start_method="fork"`` starts ranks in milliseconds, and is only safe in a process that has
    not run a torch operation yet (a forked OpenMP thread pool hangs the child): ``tuner train``
    and a trial's child use it. ``"spawn"`` (the default) is safe anywhere, and needs ``target``
    and what it holds to pickle. Raises rank 0's own error, ``RankError``, ``RankKilled`` or
    ``KeyboardInterrupt`` (see the module docstring); the raised error's ``rank_tracebacks``
    holds every failed rank's traceback.
    """
    context = multiprocessing.get_context(start_method)
    folder = tempfile.mkdtemp(prefix="tuner-ranks-")
    processes: dict[int, multiprocessing.process.BaseProcess] = {}
    connections: dict[int, Connection] = {}
    try:
        with _forward_stop_signals(processes) as requested:
            with stop_signals_held():  # a Ctrl-C now reaches every rank once its handlers are set
                for rank in range(world_size):
                    if requested:  # a Ctrl-C before the first rank: none is started
                        raise KeyboardInterrupt
                    reader, writer = context.Pipe(duplex=False)
                    process = context.Process(
                        target=_rank_main,
                        args=(
                            target,
                            Ranks(rank, world_size),
                            os.path.join(folder, "store"),
                            backend,
                            writer,
                            os.getpid(),
                            threads_per_rank,
                        ),
                        daemon=True,
                        name=f"tuner-rank-{rank}",
                    )
                    with children_allowed():  # a trial process is a daemon; its ranks die with it
                        process.start()
                    writer.close()
                    processes[rank], connections[rank] = process, reader
            results, failures = _wait_for_ranks(processes, connections)
    finally:
        for process in processes.values():
            if process.is_alive():
                process.kill()
            process.join()
        shutil.rmtree(folder, ignore_errors=True)
    if failures:
        raise cause_of(failures)
    return results[0]


@contextlib.contextmanager
def _forward_stop_signals(
    processes: dict[int, multiprocessing.process.BaseProcess],
) -> Iterator[list[int]]:
    """SIGINT / SIGTERM to the launcher -> SIGTERM to every rank (each one forwarded); yields the
    signals received so far.

    Installed before the first rank starts: a Ctrl-C while they start is forwarded like any other,
    never a ``KeyboardInterrupt`` in the launcher that would kill half-started ranks."""
    requested: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield requested
        return

    def forward(signum: int, frame: Any) -> None:
        requested.append(signum)
        for process in processes.values():
            if process.pid is not None and process.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield requested
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def interrupt_now(signum: int, frame: Any) -> None:
    """A rank's stop before (or between) the trainer's own handler: an interrupt, reported as one."""
    raise KeyboardInterrupt


def _wait_for_ranks(
    processes: dict[int, multiprocessing.process.BaseProcess], connections: dict[int, Connection]
) -> tuple[dict[int, Any], dict[int, RankFailure | RankKilled]]:
    results: dict[int, Any] = {}
    failures: dict[int, RankFailure | RankKilled] = {}
    running = set(processes)
    failed_at: float | None = None
    while running:
        wait([connections[r] for r in running] + [processes[r].sentinel for r in running], timeout=0.2)
        for rank in sorted(running):
            connection, process = connections[rank], processes[rank]
            exited = process.exitcode is not None  # read first: a report sent before exiting is
            with contextlib.suppress(EOFError, OSError):  # then surely in the pipe
                while connection.poll():
                    kind, payload = pickle.loads(connection.recv_bytes())
                    (results if kind == "done" else failures)[rank] = payload
            if not exited:
                continue
            running.discard(rank)
            if rank not in results and rank not in failures:
                code = process.exitcode
                failures[rank] = (
                    RankKilled(rank, -code)
                    if code < 0
                    else RankFailure(rank, f"rank {rank} exited with code {code}", "", None, False, False)
                )
        if failures and failed_at is None:
            failed_at = time.monotonic()
        if failed_at is not None and running and time.monotonic() - failed_at > FAILURE_GRACE_S:
            for rank in running:  # stuck in a collective with a dead peer: no cause of their own
                processes[rank].kill()
                processes[rank].join()
            running.clear()
    return results, failures


def cause_of(failures: dict[int, RankFailure | RankKilled]) -> BaseException:
    """The failure that explains the others (see the module docstring), with every traceback."""

    def precedence(item: tuple[int, RankFailure | RankKilled]) -> tuple[int, int]:
        rank, failure = item
        if isinstance(failure, RankKilled):
            return (2, rank)
        if failure.interrupted:
            return (0, rank)
        return (3 if failure.secondary else 1, rank)

    rank, failure = min(failures.items(), key=precedence)
    error: BaseException
    if isinstance(failure, RankKilled):
        error = failure
    elif failure.interrupted:
        error = KeyboardInterrupt()
    elif rank == 0 and failure.error is not None:
        error = failure.error
    else:
        text = failure.text if rank == 0 else f"rank {rank}: {failure.text}"
        if failure.out_of_memory:
            text = f"out of memory in {text}; {SMALLER_BATCH}"
        error = RankError(text, out_of_memory=failure.out_of_memory)
    error.rank_tracebacks = "".join(  # type: ignore[attr-defined]
        f"--- rank {r} ---\n" + (f.traceback if isinstance(f, RankFailure) else f"{f}\n")
        for r, f in sorted(failures.items())
    )
    return error
