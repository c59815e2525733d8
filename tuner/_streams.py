"""A console whose reader going away (``tuner train ... | head -1``) drops output, not the work.

rich's default answer to ``BrokenPipeError`` is ``SystemExit(1)`` from inside ``print``: raised
in a progress callback, it ended a healthy training run as ``failed``. The user asked for the
run, not for its chatter: once the pipe is gone, the stream is pointed at ``/dev/null`` and the
work carries on (and the exit code is the work's).
"""

from __future__ import annotations

import contextlib
import os

from rich.console import Console


class PipeSafeConsole(Console):
    """A rich ``Console`` that goes quiet, instead of exiting, when its reader has gone."""

    #: the reader has gone: nothing is printed any more, not even an error line
    broken = False

    def on_broken_pipe(self) -> None:
        self.quiet = self.broken = True
        with contextlib.suppress(OSError, ValueError, AttributeError):
            # the descriptor itself, so Python's own flush at exit does not fail on it either
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.file.fileno())
            os.close(devnull)
