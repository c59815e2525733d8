"""Which of a workload's options its entry point read: an option it never reads does nothing.

A misspelled option (``hiden: 8`` for ``hidden``) would otherwise train with the workload's
default and say nothing. The engine hands the entry point a ``RecordedOptions`` (a ``dict``, for
the user's code a plain one) that notes every key the code asks for, present or not, and after
the call ``check_options_read`` names each given option that was never asked for.

A read is any look at a key: ``options[k]``, ``options.get(k)``, ``k in options``, ``pop`` and
``setdefault``; anything that sees every key counts as reading them all (iterating, ``keys``,
``items``, ``values``, ``copy``, ``dict(options)``, ``{**options}``, comparing, pickling).
pydantic's ``Model.model_validate(options)`` asks for each field by name, and for every key when
the model forbids extra fields. Only top-level keys are recorded: reading ``options["model"]``
counts for all of ``model: {hidden: 8}``. No torch here: ``tuner validate --no-build`` imports it.
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Iterable, Iterator
from typing import Any

from tuner.errors import WorkloadError


class RecordedOptions(dict[str, Any]):
    """A workload's options that note every key read (see the module's docstring).

    Copies (``copy``, ``copy.copy``, ``copy.deepcopy``, pickling) are plain dicts: a copy is the
    user's own, and making it counts as reading every key.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.given: frozenset[str] = frozenset(super().keys())
        self.asked: set[str] = set()

    def _all_read(self) -> None:
        self.asked.update(super().keys())

    def __getitem__(self, key: str) -> Any:
        self.asked.add(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.asked.add(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.asked.add(key)
        return super().__contains__(key)

    def pop(self, key: str, *default: Any) -> Any:
        self.asked.add(key)
        return super().pop(key, *default)

    def setdefault(self, key: str, default: Any = None) -> Any:
        self.asked.add(key)
        return super().setdefault(key, default)

    def popitem(self) -> tuple[str, Any]:
        key, value = super().popitem()
        self.asked.add(key)
        return key, value

    def __iter__(self) -> Iterator[str]:
        self._all_read()
        return super().__iter__()

    def keys(self) -> Any:
        self._all_read()
        return super().keys()

    def items(self) -> Any:
        self._all_read()
        return super().items()

    def values(self) -> Any:
        self._all_read()
        return super().values()

    def __eq__(self, other: object) -> bool:
        self._all_read()
        return super().__eq__(other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = None  # type: ignore[assignment]  # a dict's: unhashable

    def copy(self) -> dict[str, Any]:
        self._all_read()
        return dict(super().items())

    def __copy__(self) -> dict[str, Any]:
        return self.copy()

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return copy.deepcopy(self.copy(), memo)

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (self.copy(),))

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return self.__reduce__()

    def unread(self, also_expected: Iterable[str] = ()) -> list[str]:
        """The given options (and ``also_expected`` keys, present or not) never asked for."""
        expected = [*sorted(self.given), *(key for key in also_expected if key not in self.given)]
        return [key for key in dict.fromkeys(expected) if key not in self.asked]


def check_options_read(workload: str, options: RecordedOptions, searched: Iterable[str] = ()) -> None:
    """Raise ``WorkloadError`` naming each option ``workload``'s entry point never read.

    ``searched`` are the options the search space sets (``workload.<option>``): each trial hands
    them to the workload, so a search over one it never reads is the same mistake, found here
    even when the study file gives the option no value of its own.
    """
    searched = list(searched)
    unread = options.unread(searched)
    if not unread:
        return
    asked = sorted(options.asked)
    named = ", ".join(f"'{key}'" + (" (in the search space)" if key in searched else "") for key in unread)
    verb = "was" if len(unread) == 1 else "were"
    read = f"it read: {', '.join(asked)}" if asked else "it read none"
    guesses = []
    for key in unread:
        for close in difflib.get_close_matches(key, asked, n=1):
            guesses.append(f"'{close}'" + (f" for '{key}'" if len(unread) > 1 else ""))
    hint = f"; did you mean {', '.join(guesses)}?" if guesses else ""
    raise WorkloadError(
        f"workload option{'s' if len(unread) > 1 else ''} {named} {verb} never read by {workload} "
        f"({read}{hint})"
    )
