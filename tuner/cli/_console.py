"""All console styling in one place: one rich Console for stdout, one for stderr.

Both go quiet rather than exit when their reader has gone (see ``tuner._streams``).
"""

from __future__ import annotations

# counts read the same in the commands' lines and in tune's decision log (the playbook's): one helper
from tuner._format import plural
from tuner._streams import PipeSafeConsole

out = PipeSafeConsole(highlight=False, soft_wrap=True)
err = PipeSafeConsole(stderr=True, highlight=False, soft_wrap=True)

__all__ = ["err", "error_line", "out", "plural", "warning_line"]


def error_line(message: str) -> None:
    _always(f"[bold red]error:[/] {message}")


def warning_line(message: str) -> None:
    _always(f"[yellow]warning:[/] {message}")


def _always(line: str) -> None:
    """An error or a warning is printed even while the console is quiet (``tuner.tune(...,
    quiet=True)`` silences the rest): only a reader that has gone keeps it unsaid."""
    was_quiet = err.quiet
    err.quiet = err.broken
    try:
        err.print(line, markup=True, highlight=False)
    finally:
        err.quiet = was_quiet
