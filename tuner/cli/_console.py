"""All console styling in one place: one rich Console for stdout, one for stderr.

Both go quiet rather than exit when their reader has gone (see ``tuner._streams``).
"""

from __future__ import annotations

from tuner._streams import PipeSafeConsole

out = PipeSafeConsole(highlight=False, soft_wrap=True)
err = PipeSafeConsole(stderr=True, highlight=False, soft_wrap=True)


def error_line(message: str) -> None:
    err.print(f"[bold red]error:[/] {message}", markup=True, highlight=False)


def warning_line(message: str) -> None:
    err.print(f"[yellow]warning:[/] {message}", markup=True, highlight=False)


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """``1 trial``, ``2 trials``, ``0 trials``."""
    return f"{count} {noun if count == 1 else (plural_form or noun + 's')}"
