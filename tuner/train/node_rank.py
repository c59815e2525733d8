"""One rank of a multi-node trial, as ``torchrun`` starts it: ``python -m tuner.train.node_rank DIR``.

``torchrun`` (the launcher agent of its node) sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and
the rendezvous address; this joins the process group through them (``env://``), trains its part
of the run that ``DIR/job.pkl`` describes (``NodeJob``: ``run.run_rank``, where rank 0 alone
writes the run folder and runs the owner's callbacks), and leaves its end in ``DIR`` for the trial's owner:
``result.pkl`` from rank 0, ``failure-K.pkl`` from a rank that failed (``node_files``).

A rank dies with its agent (PDEATHSIG): a node lost takes its ranks with it, so the ranks on the
other nodes fail in their next collective at once instead of training half a gang.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path

from tuner._lifetime import die_with_parent
from tuner.train.distributed import Ranks
from tuner.train.launch import LineStream, describe_failure, interrupt_now
from tuner.train.node_files import THREADS_ENV, NodeAttempt, NodeJob

#: how often a rank checks that its attempt still exists (a stat of the shared folder)
ORPHAN_CHECK_S = 5.0


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    attempt = NodeAttempt(Path(args[0]))
    signal.signal(signal.SIGTERM, interrupt_now)  # before training's own clean stop: an interrupt
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C comes through the owner's stop file
    die_with_parent(signal.SIGKILL, os.getppid())
    ranks = Ranks(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
    prefix = "" if ranks.is_main else f"[rank {ranks.rank}] "  # whole lines, never two ranks' in one
    sys.stdout = LineStream(sys.stdout, prefix)  # type: ignore[assignment]
    sys.stderr = LineStream(sys.stderr, prefix)  # type: ignore[assignment]
    _exit_when_the_attempt_ends(attempt)
    code = 1
    try:
        import torch
        import torch.distributed as dist

        job: NodeJob = attempt.read(attempt.job)
        if os.environ.get(THREADS_ENV):
            torch.set_num_threads(int(os.environ[THREADS_ENV]))
        backend = "gloo"
        if job.device == "cuda" or (job.device == "auto" and torch.cuda.is_available()):
            backend = "nccl"
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend, init_method="env://")
        result, states = job.target(ranks)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # done: nothing left to stop
        if ranks.is_main:
            attempt.write(attempt.result, (result, states))
        code = 0
    except BaseException as error:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # ending already: a second stop must not cut the report
        # the folder may be gone (the attempt ended) or unwritable: the exit code still says it
        with contextlib.suppress(Exception):
            attempt.write(attempt.failure(ranks.rank), describe_failure(error, ranks.rank))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # no process-group teardown that could wait on a dead peer


def _exit_when_the_attempt_ends(attempt: NodeAttempt) -> None:
    """End this rank once its attempt's folder is gone: the owner removes it when the attempt
    ends, whatever ended it. An agent started on another machine may not die with the command
    that started it (``kubectl exec`` or ``ssh`` without a terminal leave it running when they are
    killed); its ranks would hold their devices, and wait in a collective, forever."""

    def watch() -> None:
        while True:
            time.sleep(ORPHAN_CHECK_S)
            if not attempt.folder.exists():
                os._exit(1)

    threading.Thread(target=watch, name="tuner-attempt-watch", daemon=True).start()


if __name__ == "__main__":
    main()
