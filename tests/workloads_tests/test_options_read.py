"""The options an entry point is handed note what it reads, and stay a dict for the user's code;
an option never read is one line naming it, what was read, and the closest of those."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle
from collections.abc import Callable

import pytest
from pydantic import BaseModel, ConfigDict

from tuner.errors import WorkloadError
from tuner.workloads import RecordedOptions, WorkloadContext, check_options_read


def _message(options: RecordedOptions, searched: tuple[str, ...] = ()) -> str:
    with pytest.raises(WorkloadError) as caught:
        check_options_read("wine.py:build", options, searched)
    return str(caught.value)


def test_each_way_of_looking_at_one_key_counts_as_reading_it() -> None:
    options = RecordedOptions(a=1, b=2, c=3, d=4, e=5)
    assert options["a"] == 1
    assert options.get("b") == 2
    assert "c" in options
    assert options.pop("d") == 4
    assert options.setdefault("e", 0) == 5
    assert options.get("absent", 7) == 7 and "gone" not in options
    assert options.unread() == []
    assert options.asked == {"a", "b", "c", "d", "e", "absent", "gone"}


READ_ALL: dict[str, Callable[[RecordedOptions], object]] = {
    "iter": list,
    "keys": lambda o: list(o.keys()),
    "items": lambda o: list(o.items()),
    "values": lambda o: list(o.values()),
    "dict": dict,
    "unpack": lambda o: {**o},
    "copy": lambda o: o.copy(),
    "copy.copy": copy.copy,
    "deepcopy": copy.deepcopy,
    "eq": lambda o: o == {"a": 1, "b": 2},
    "or": lambda o: o | {},
    "json": json.dumps,
    "pickle": lambda o: pickle.loads(pickle.dumps(o)),
}


@pytest.mark.parametrize("way", READ_ALL)
def test_what_sees_every_key_reads_them_all(way: str) -> None:
    read_all = READ_ALL[way]
    options = RecordedOptions(a=1, b=2)
    read_all(options)
    assert options.unread() == []


def test_length_and_repr_read_nothing() -> None:
    options = RecordedOptions(a=1)
    assert len(options) == 1 and repr(options) == "{'a': 1}" and options
    assert options.unread() == ["a"]


def test_it_stays_a_dict_and_its_copies_are_plain_dicts() -> None:
    options = RecordedOptions(hidden=8, layers=[1, 2])
    context = WorkloadContext(options=options)
    assert isinstance(context.options, dict) and context.options == {"hidden": 8, "layers": [1, 2]}
    for made in (
        options.copy(),
        copy.copy(options),
        copy.deepcopy(options),
        pickle.loads(pickle.dumps(options)),
    ):
        assert type(made) is dict and made == {"hidden": 8, "layers": [1, 2]}
    assert copy.deepcopy(options)["layers"] is not options["layers"]
    assert dataclasses.asdict(context)["options"] == {"hidden": 8, "layers": [1, 2]}
    options["new"] = 1  # the user's own key: nothing it has to read
    assert options.unread() == []


def test_pydantic_reads_each_field_by_name_and_every_key_when_it_forbids_extras() -> None:
    class Lax(BaseModel):
        hidden: int = 64
        dropout: float = 0.0

    class Strict(Lax):
        model_config = ConfigDict(extra="forbid")

    lax = RecordedOptions(hidden=8, hiden=16)
    Lax.model_validate(lax)
    assert lax.unread() == ["hiden"] and lax.asked == {"hidden", "dropout"}
    strict = RecordedOptions(hidden=8)
    Strict.model_validate(strict)
    assert strict.unread() == []


def test_one_unread_option_names_what_was_read_and_the_closest() -> None:
    options = RecordedOptions(hiden=8, dropout=0.1)
    options.get("hidden", 64), options.get("dropout", 0.0)
    assert _message(options) == (
        "workload option 'hiden' was never read by wine.py:build (it read: dropout, hidden; "
        "did you mean 'hidden'?)"
    )


def test_several_unread_options_each_get_their_closest() -> None:
    options = RecordedOptions(hiden=8, dropot=0.1, zzz=1)
    options.get("hidden"), options.get("dropout")
    assert _message(options) == (
        "workload options 'dropot', 'hiden', 'zzz' were never read by wine.py:build (it read: dropout, "
        "hidden; did you mean 'dropout' for 'dropot', 'hidden' for 'hiden'?)"
    )


def test_a_searched_option_is_one_too_even_without_a_value_in_the_file() -> None:
    options = RecordedOptions(hidden=8)
    options["hidden"]
    assert _message(options, ("dropout",)) == (
        "workload option 'dropout' (in the search space) was never read by wine.py:build (it read: hidden)"
    )
    options.get("dropout")
    check_options_read("wine.py:build", options, ("dropout",))


def test_a_workload_that_reads_nothing_says_so() -> None:
    assert _message(RecordedOptions(hidden=8)) == (
        "workload option 'hidden' was never read by wine.py:build (it read none)"
    )
