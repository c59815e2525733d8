"""User errors -> one red line on stderr and an exit code; tracebacks only with TUNER_DEBUG=1.

Exit codes: 0 success; 1 the work failed; 2 bad input or usage, or a bad environment (a full or
read-only disk, a denied path, memory exhausted: ``tuner._environment_faults``); 70 internal error
(a bug in tuner: EX_SOFTWARE of sysexits.h, so scripts and ``run-round`` can tell it from a spent
failure budget); 130 interrupted.
"""

from __future__ import annotations

import functools
import os
import signal
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from rich.markup import escape

from tuner._environment_faults import environment_fault
from tuner.cli._console import error_line
from tuner.errors import TunerError

F = TypeVar("F", bound=Callable[..., Any])

EXIT_FAILED, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 1, 2, 70, 130
INTERNAL_ERROR_PREFIX = "internal error"


def debug() -> bool:
    return os.environ.get("TUNER_DEBUG", "") not in ("", "0")


# Set by ``tuner.cli.app.main``: this process is the command (not a test's in-process runner),
# and ends with it.
ENDS_WITH_THE_COMMAND = False


def guarded(command: F) -> F:
    """Wrap a command so no error reaches the user as a traceback; and, in ``main``, so a Ctrl-C
    once it has ended (its result said, its exit chosen) is ignored right there: typer turns a
    KeyboardInterrupt that reaches it into a silent exit 130 (CI: a completed ``tuner train``,
    Ctrl-C'd as it ended, exited 130 with nothing said), and ``main`` ignores them only later."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return _guarded_call(command, *args, **kwargs)
        finally:
            if ENDS_WITH_THE_COMMAND:
                signal.signal(signal.SIGINT, signal.SIG_IGN)

    return wrapper  # type: ignore[return-value]


def caused_by_interrupt(error: BaseException | None) -> bool:
    """Whether ``error`` is a Ctrl-C, or was raised because of one: an interrupt that lands in an
    import can come out as another exception (Python wraps one raised in a class body's
    ``__set_name__`` in a RuntimeError, as when torch imports ``torch._dynamo`` lazily), with the
    KeyboardInterrupt in its chain."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, KeyboardInterrupt):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def _guarded_call(command: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``command``, its errors made one line and an exit code."""
    try:
        return command(*args, **kwargs)
    except (typer.Exit, typer.Abort):
        raise
    except TunerError as error:
        if debug():
            raise
        error_line(escape(str(error)))
        raise typer.Exit(error.exit_code) from None
    except KeyboardInterrupt:
        error_line("interrupted; run the same command again to continue")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except Exception as error:
        if caused_by_interrupt(error):
            error_line("interrupted; run the same command again to continue")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        if debug():
            raise
        fault = environment_fault(error)
        if fault is not None:  # the machine's, not a bug: the user can fix it
            error_line(escape(fault.message))
            raise typer.Exit(EXIT_USAGE) from None
        first_line = (str(error).strip().splitlines() or [""])[0]
        error_line(
            escape(
                f"{INTERNAL_ERROR_PREFIX} ({type(error).__name__}): {first_line} "
                "(set TUNER_DEBUG=1 for the traceback)"
            )
        )
        raise typer.Exit(EXIT_INTERNAL) from None
