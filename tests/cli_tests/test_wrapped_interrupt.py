"""A Ctrl-C that lands in an import can come out wrapped in another exception (Python 3.11 turns
one raised in a class body's ``__set_name__`` into a RuntimeError, as when torch imports
``torch._dynamo`` lazily): the command still says "interrupted" and exits 130, not 70."""

from __future__ import annotations

import pytest
import typer

from tuner.cli._errors import EXIT_INTERRUPTED, caused_by_interrupt, guarded


class _InterruptedDescriptor:
    def __set_name__(self, owner: type, name: str) -> None:
        raise KeyboardInterrupt


def _define_a_class() -> None:
    class Owner:
        attribute = _InterruptedDescriptor()


def test_an_interrupt_wrapped_by_class_creation_is_still_an_interrupt(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(RuntimeError) as caught:  # not a KeyboardInterrupt any more
        _define_a_class()
    assert caused_by_interrupt(caught.value)
    assert not caused_by_interrupt(RuntimeError("a bug")) and not caused_by_interrupt(None)

    with pytest.raises(typer.Exit) as stopped:
        guarded(_define_a_class)()
    assert stopped.value.exit_code == EXIT_INTERRUPTED
    assert "interrupted; run the same command again to continue" in capsys.readouterr().err
