"""Click's usage errors as tuner's one ``error:`` line.

A mistyped command line (``--max-searches abc``, a missing ``STUDY``, ``--bogus``, an unknown
command) got click's four lines: the usage line, a hint, a blank line and ``Error: ...`` last.
Every other bad input tuner meets is one line starting ``error:`` with exit 2 (the docs'
promise, and what scripts grep for), so these are too: the message, then where help is.

Which class: typer raises click's ``UsageError``, from click itself (older typer) or from the
copy of click it ships (``typer._click``, typer 0.2x, not public). Both are found through the
one name typer exports, ``typer.BadParameter``, a subclass of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO, Any

import typer

CLICK_USAGE_ERROR: type[Exception] = next(
    base for base in typer.BadParameter.__mro__ if base.__name__ == "UsageError"
)


class OneLineUsageError(CLICK_USAGE_ERROR):  # type: ignore[valid-type,misc]
    """A usage error shown as ``error: MESSAGE (tuner CMD -h for help)``; exit 2, as click's."""

    def __init__(self, error: Any) -> None:
        super().__init__(error.format_message(), ctx=error.ctx)

    def show(self, file: IO[Any] | None = None) -> None:
        path = self.ctx.command_path if self.ctx is not None else "tuner"
        typer.echo(f"error: {self.format_message()} ({path} -h for help)", file=file, err=True)


def parse_args_in_one_line(parse: Callable[..., Any], ctx: Any, args: list[str]) -> Any:
    """``parse(ctx, args)`` (a command's ``parse_args``, a group's ``resolve_command``), its
    usage errors made one line."""
    try:
        return parse(ctx, args)
    except CLICK_USAGE_ERROR as error:
        if type(error).__name__ == "NoArgsIsHelpError":  # bare ``tuner``: click's help, as asked
            raise
        raise OneLineUsageError(error) from None
