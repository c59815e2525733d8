"""A node's launcher agent: ``torchrun`` itself, ending in one line rather than a traceback.

``python -m tuner.train.node_agent ARGS`` is ``torchrun ARGS`` (``torch.distributed.run``'s own
``parse_args`` and ``run``: the c10d rendezvous, the ranks it starts and watches). When a rank
fails, torchrun ends with an uncaught ``ChildFailedError`` (a traceback and an error report in
the user's terminal or the trial's log) although the rank has already told its owner why
(``node_rank``: its ``failure-K.pkl``); here it says in one line which rank ended how, and exits
1. Its own log lines are shown only from ``CRITICAL`` (``LOGLEVEL``, torch's knob, set to debug).
"""

from __future__ import annotations

import logging
import os
import sys


def main(argv: list[str] | None = None) -> None:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    # torch's elastic loggers read LOGLEVEL once, when their module is imported (the tuner.train
    # package may have done that already): set theirs, unless the user set LOGLEVEL to debug
    level = os.environ.get("LOGLEVEL", "CRITICAL")
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if name.startswith("torch.distributed") and isinstance(logger, logging.Logger):
            logger.setLevel(level)

    args = sys.argv[1:] if argv is None else argv
    try:
        run(parse_args(args))
    except ChildFailedError as error:
        rank, failure = error.get_first_failure()
        how = f"signal {-failure.exitcode}" if failure.exitcode < 0 else f"exit code {failure.exitcode}"
        print(f"tuner node agent: rank {rank} ended with {how}", file=sys.stderr, flush=True)
        sys.exit(1)
    except Exception as error:  # a rendezvous that timed out, a stop signal (SignalException)...
        said = (str(error).strip().splitlines() or [""])[0][:300]
        print(f"tuner node agent: {type(error).__name__}: {said}", file=sys.stderr, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
