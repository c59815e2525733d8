"""All console styling in one place: one rich Console for stdout, one for stderr."""

from __future__ import annotations

from rich.console import Console

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def error_line(message: str) -> None:
    err.print(f"[bold red]error:[/] {message}", markup=True, highlight=False)


def warning_line(message: str) -> None:
    err.print(f"[yellow]warning:[/] {message}", markup=True, highlight=False)


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """``1 trial``, ``2 trials``, ``0 trials``."""
    return f"{count} {noun if count == 1 else (plural_form or noun + 's')}"
