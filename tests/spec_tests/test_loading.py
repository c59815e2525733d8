"""The public loading API: ``tuner.spec.load_study`` + ``tuner.workloads.check_study``."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.spec_tests._support import BASE_YAML, REPO, mutate, write_study
from tuner.errors import SpecError, UsageError
from tuner.spec import LoadedStudy, StudySpec, load_study
from tuner.workloads import check_study

STUDIES = sorted((REPO / "studies").glob("*.yaml"))

MINIMAL_YAML = "name: minimal\nworkload: {name: digits-mlp}\n"


def load(path: Path, *overrides: str) -> LoadedStudy:
    loaded = load_study(path, overrides)
    check_study(loaded)
    return loaded


def test_there_are_example_studies() -> None:
    assert len(STUDIES) >= 4


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.name)
def test_example_studies_load(path: Path) -> None:
    loaded = load(path)
    assert loaded.spec.name == path.stem
    assert loaded.path == path
    assert loaded.base_dir == path.parent
    assert loaded.overrides == {}
    assert loaded.spec.training.max_train_steps  # `tuner train` needs it in every example


@pytest.mark.parametrize("as_text", [True, False])
def test_load_study_accepts_str_and_path(tmp_path: Path, as_text: bool) -> None:
    path = write_study(tmp_path)
    loaded = load_study(str(path) if as_text else path)
    assert isinstance(loaded.spec, StudySpec)
    assert loaded.path == path


def test_defaults(tmp_path: Path) -> None:
    spec = load(write_study(tmp_path, MINIMAL_YAML)).spec
    assert spec.description == ""
    assert spec.seed == 0
    assert spec.workload.options == {}
    assert (spec.objective.metric, spec.objective.direction) == ("val/error_rate", "minimize")
    training = spec.training
    assert training.batch_size == 64
    assert training.eval_batch_size is None
    assert training.resolved_eval_batch_size == 256
    assert training.max_train_steps is None
    assert (training.eval_every, training.log_every, training.keep_best_checkpoints) == (100, 10, 3)
    assert (training.device, training.tensorboard, training.grad_clip_norm) == ("auto", True, None)
    assert (training.optimizer.name, training.optimizer.lr, training.optimizer.weight_decay) == (
        "adamw",
        1e-3,
        0.0,
    )
    assert [(s.shape, s.steps, s.fraction, s.start) for s in training.schedule] == [
        ("constant", None, None, 1.0)
    ]
    assert spec.search_space == {}
    assert (spec.rounds.round1.trials, spec.rounds.round1.length_fraction) == (20, 0.2)
    round2 = spec.rounds.round2
    assert (round2.top_k, round2.seeds, round2.lr_multipliers) == (3, 1, [1.0])
    assert spec.storage is None


@pytest.mark.parametrize(
    ("overrides", "eval_batch_size"),
    [((), 256), (("training.batch_size=32",), 128), (("eval_batch_size=100",), 100)],
)
def test_eval_batch_size_defaults_to_four_times_batch_size(
    tmp_path: Path, overrides: tuple[str, ...], eval_batch_size: int
) -> None:
    spec = load(write_study(tmp_path), *overrides).spec
    assert spec.training.resolved_eval_batch_size == eval_batch_size


def test_explicit_eval_batch_size_is_kept(tmp_path: Path) -> None:
    text = mutate("  max_train_steps: 100", "  eval_batch_size: 48")
    spec = load(write_study(tmp_path, text)).spec
    assert spec.training.eval_batch_size == spec.training.resolved_eval_batch_size == 48


def _lr(spec: StudySpec) -> Any:
    return spec.training.optimizer.lr


@pytest.mark.parametrize(
    ("override", "read", "value"),
    [
        ("optimizer.lr=0.01", _lr, 0.01),
        ("training.optimizer.lr=0.01", _lr, 0.01),
        ("optimizer.lr=1e-2", _lr, 0.01),
        ("workload.dropout=0.1", lambda s: s.workload.options["dropout"], 0.1),
        ("workload.options.dropout=0.1", lambda s: s.workload.options["dropout"], 0.1),
        ("workload.hidden_sizes=[16, 8]", lambda s: s.workload.options["hidden_sizes"], [16, 8]),
        ("workload.val_fraction=0.3", lambda s: s.workload.options.get("val_fraction"), 0.3),
        ("training.batch_size=32", lambda s: s.training.batch_size, 32),
        ("batch_size=32", lambda s: s.training.batch_size, 32),
        ("seed=3", lambda s: s.seed, 3),
        ("optimizer.name=sgd", lambda s: s.training.optimizer.name, "sgd"),
        ("objective.direction=maximize", lambda s: s.objective.direction, "maximize"),
        ("grad_clip_norm=1.0", lambda s: s.training.grad_clip_norm, 1.0),
        ("description=a b=c", lambda s: s.description, "a b=c"),
    ],
)
def test_overrides_apply(tmp_path: Path, override: str, read: Callable[[StudySpec], Any], value: Any) -> None:
    base = load(write_study(tmp_path)).spec
    assert read(base) != value
    loaded = load(write_study(tmp_path), override)
    assert read(loaded.spec) == value
    assert list(loaded.overrides.values()) == [override]


def test_override_of_workload_name_checks_options_against_the_new_workload(tmp_path: Path) -> None:
    loaded = load_study(write_study(tmp_path), ["workload.name=digits-cnn"])
    assert loaded.spec.workload.name == "digits-cnn"
    with pytest.raises(SpecError) as caught:
        check_study(loaded)
    assert (caught.value.field, caught.value.line, caught.value.column) == (
        "workload.options.hidden_sizes",
        6,
        5,
    )
    assert caught.value.detail.startswith("unknown field 'hidden_sizes' (expected one of: channels,")


def test_overrides_apply_in_order_and_do_not_touch_the_file(tmp_path: Path) -> None:
    path = write_study(tmp_path)
    spec = load(path, "optimizer.lr=0.5", "seed=3", "optimizer.lr=0.01").spec
    assert (spec.training.optimizer.lr, spec.seed) == (0.01, 3)
    assert path.read_text() == BASE_YAML


def test_invalid_override_raises_usage_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as caught:
        load_study(write_study(tmp_path), ["optimizer.lr=abc"])
    assert str(caught.value).startswith("--set optimizer.lr=abc: training.optimizer.lr: ")
    assert caught.value.exit_code == 2
    with pytest.raises(UsageError, match=r"^--set nosuchfield=1: training\.nosuchfield is not a field"):
        load_study(write_study(tmp_path), ["nosuchfield=1"])


def test_with_values_returns_spec_with_value(tmp_path: Path) -> None:
    loaded = load(write_study(tmp_path))
    spec = loaded.with_values({"optimizer.lr": 0.1})
    assert isinstance(spec, StudySpec)
    assert spec.training.optimizer.lr == 0.1
    assert loaded.spec.training.optimizer.lr == 3e-3  # the loaded study is unchanged
    assert loaded.document["training"]["optimizer"]["lr"] == 3e-3
    assert loaded.with_values({}) == loaded.spec


def test_with_values_several_keys(tmp_path: Path) -> None:
    loaded = load(write_study(tmp_path))
    spec = loaded.with_values(
        {"optimizer.lr": 0.02, "workload.dropout": 0.25, "batch_size": 16, "optimizer.name": "sgd"}
    )
    assert spec.training.optimizer.lr == 0.02
    assert spec.workload.options["dropout"] == 0.25
    assert spec.training.batch_size == 16
    assert spec.training.resolved_eval_batch_size == 64
    assert spec.training.optimizer.name == "sgd"


def test_with_values_keeps_overrides(tmp_path: Path) -> None:
    loaded = load(write_study(tmp_path), "seed=7")
    spec = loaded.with_values({"optimizer.lr": 0.1})
    assert (spec.seed, spec.training.optimizer.lr) == (7, 0.1)


def test_with_values_rejects_a_bad_value_with_a_located_error(tmp_path: Path) -> None:
    loaded = load(write_study(tmp_path))
    with pytest.raises(SpecError) as caught:
        loaded.with_values({"optimizer.lr": -1.0})
    assert caught.value.field == "training.optimizer.lr"
    assert caught.value.line == 14
    assert "expected a number > 0" in caught.value.detail


def test_search_space_is_parsed(tmp_path: Path) -> None:
    text = BASE_YAML + (
        "  batch_size: {type: int, low: 16, high: 128, log: true, step: 1, role: fixed}\n"
        "  optimizer.name: {type: categorical, choices: [adamw, sgd], role: scientific}\n"
    )
    space = load(write_study(tmp_path, text)).spec.search_space
    assert list(space) == ["optimizer.lr", "batch_size", "optimizer.name"]
    lr = space["optimizer.lr"]
    assert (lr.type, lr.low, lr.high, lr.log, lr.role) == ("float", 1e-4, 1e-2, True, "nuisance")
    assert (space["batch_size"].type, space["batch_size"].role) == ("int", "fixed")
    assert space["optimizer.name"].choices == ["adamw", "sgd"]


@pytest.mark.parametrize("text", ["lr: 1e-3", "lr: 1E-3", "lr: 1.0e-3", "lr: 0.001", "lr: +1e-3"])
def test_exponent_floats(tmp_path: Path, text: str) -> None:
    spec = load(write_study(tmp_path, mutate("lr: 3.0e-3", text))).spec
    assert spec.training.optimizer.lr == pytest.approx(1e-3)
    assert isinstance(spec.training.optimizer.lr, float)


USER_WORKLOAD = "def build(ctx):\n    raise AssertionError('validation must not call or import this')\n"


@pytest.mark.parametrize("cwd_is_study_folder", [True, False])
@pytest.mark.parametrize("absolute", [True, False])
def test_file_entry_point_is_relative_to_the_study_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cwd_is_study_folder: bool, absolute: bool
) -> None:
    study_dir = tmp_path / "experiments"
    (study_dir / "workloads").mkdir(parents=True)
    marker = tmp_path / "imported"
    (study_dir / "workloads" / "my_workload.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n" + USER_WORKLOAD
    )
    path = write_study(study_dir, mutate("name: digits-mlp", "name: workloads/my_workload.py:build"))
    monkeypatch.chdir(study_dir if cwd_is_study_folder else tmp_path)
    if not absolute:
        path = path.relative_to(Path.cwd())
    loaded = load(path)
    assert loaded.spec.workload.name == "workloads/my_workload.py:build"
    assert not marker.exists(), "check_study must not import the user's file"


def test_file_entry_point_next_to_cwd_but_not_study_is_rejected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "my_workload.py").write_text(USER_WORKLOAD)
    path = write_study(tmp_path / "sub", mutate("name: digits-mlp", "name: my_workload.py:build"))
    monkeypatch.chdir(tmp_path)
    loaded = load_study(path)
    with pytest.raises(SpecError, match=r"no such file") as caught:
        check_study(loaded)
    assert (caught.value.field, caught.value.line, caught.value.column) == ("workload.name", 4, 9)


@pytest.fixture
def user_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An importable package ``tuner_spec_test_pkg`` in tmp_path, removed from sys.modules after."""
    root = tmp_path / "site"
    package = root / "tuner_spec_test_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(root))
    yield package
    for name in [m for m in sys.modules if m.split(".")[0] == "tuner_spec_test_pkg"]:
        del sys.modules[name]


@pytest.mark.parametrize(
    "source",
    [
        USER_WORKLOAD,
        "def _make(ctx):\n    return None\n\nbuild = _make\n",
        "from tuner_spec_test_pkg.impl import build\n",
        "class build:\n    pass\n",
    ],
    ids=["def", "assignment", "import", "class"],
)
def test_module_entry_point_is_accepted(tmp_path: Path, user_package: Path, source: str) -> None:
    (user_package / "workload.py").write_text(source)
    (user_package / "impl.py").write_text(USER_WORKLOAD)
    text = mutate("name: digits-mlp", "name: tuner_spec_test_pkg.workload:build")
    loaded = load(write_study(tmp_path, text))
    assert loaded.spec.workload.name == "tuner_spec_test_pkg.workload:build"
    assert "tuner_spec_test_pkg.workload" not in sys.modules, "check_study must not import the module"


def test_module_entry_point_without_the_function(tmp_path: Path, user_package: Path) -> None:
    (user_package / "workload.py").write_text(USER_WORKLOAD)
    text = mutate("name: digits-mlp", "name: tuner_spec_test_pkg.workload:buld")
    with pytest.raises(SpecError) as caught:
        load(write_study(tmp_path, text))
    assert caught.value.detail == (
        "entry point 'tuner_spec_test_pkg.workload:buld': "
        "module 'tuner_spec_test_pkg.workload' has no function 'buld'"
    )
    assert (caught.value.field, caught.value.line, caught.value.column) == ("workload.name", 4, 9)


def _user_study(tmp_path: Path, search_key: str) -> Path:
    (tmp_path / "wl.py").write_text(USER_WORKLOAD)
    text = mutate("name: digits-mlp", "name: wl.py:build")
    text = mutate("    hidden_sizes: [32]\n", "    width: 8\n", text)
    text += f"  {search_key}: {{type: int, low: 4, high: 16}}\n"
    return write_study(tmp_path, text)


def test_user_workload_options_are_free_and_searchable(tmp_path: Path) -> None:
    loaded = load(_user_study(tmp_path, "workload.width"))
    assert loaded.spec.workload.options == {"width": 8, "dropout": 0.0}
    assert loaded.with_values({"workload.width": 12}).workload.options["width"] == 12


def test_user_workload_search_key_must_be_an_option(tmp_path: Path) -> None:
    loaded = load_study(_user_study(tmp_path, "workload.depth"))
    with pytest.raises(SpecError) as caught:
        check_study(loaded)
    assert caught.value.detail == "matches no config field (looked for workload.options.depth)"
    assert (caught.value.field, caught.value.line, caught.value.column) == (
        "search_space[workload.depth]",
        17,
        3,
    )
