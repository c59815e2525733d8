"""The worker profile's table: each part is its function's cumulative time per trial, read off a
profile whose times are known (modules named as tuner's and Optuna's, a clock that only moves
when the code says so)."""

from __future__ import annotations

import cProfile
import importlib.util
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

from benchmarks.worker_profile import results_of

CLOCK = [0.0]


def advance(ms: float) -> None:
    CLOCK[0] += ms / 1000


SOURCES = {
    "tuner/orchestrate/worker.py": """
        def _serve(trials):
            for _ in range(trials):
                _warm()
                claim.claim()
                _run_trial()
        def _warm():
            if not WARMED:
                WARMED.append(1)
                trial_process.warm_up()
        def _run_trial():
            advance(1)
            record.on_message()
            supervise._join()
            record.record()
            _write_status()
        def _write_status():
            advance(17)
        WARMED = []
    """,
    "tuner/orchestrate/trial_process.py": """
        def warm_up():
            advance(3000)
    """,
    "tuner/orchestrate/claim.py": """
        def claim():
            advance(2)
            _claim_new()
        def _claim_new():
            advance(3)
            storage.RDBStorage().create_new_trial()
            _start()
        def _start():
            advance(5)
    """,
    "tuner/orchestrate/record.py": """
        def on_message():
            advance(7)
        def record():
            advance(11)
    """,
    "tuner/orchestrate/supervise.py": """
        def _join():
            advance(13)
    """,
    "optuna/storages/_rdb/storage.py": """
        class RDBStorage:
            def create_new_trial(self):
                advance(19)
    """,
}


def _load(root: Path) -> dict[str, ModuleType]:
    modules: dict[str, ModuleType] = {}
    for relative, source in SOURCES.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
        name = Path(relative).stem
        spec = importlib.util.spec_from_file_location(f"profiled_{name}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        module.advance = advance  # type: ignore[attr-defined]
        spec.loader.exec_module(module)
        modules[name] = module
    for module in modules.values():  # each finds the others by their short names
        vars(module).update({k: v for k, v in modules.items() if k not in vars(module)})
    return modules


def test_each_part_is_its_functions_cumulative_time_per_trial(tmp_path: Path) -> None:
    worker = _load(tmp_path)["worker"]
    profiler = cProfile.Profile(lambda: CLOCK[0])
    profiler.runcall(worker._serve, 4)
    profiler.dump_stats(tmp_path / "worker.prof")
    shown = {r.figure: r.value for r in results_of(tmp_path / "worker.prof", trials=4)}
    assert shown[
        "start-up: importing the engine once, for every trial to fork (torch, torch._dynamo, tuner.train)"
    ] == (pytest.approx(3.0))
    per_trial = {figure.removeprefix("per trial: ").strip(): value for figure, value in shown.items()}
    assert per_trial["the claim"] == pytest.approx(2 + 3 + 19 + 5)  # what it calls included
    assert per_trial["the new trial with its attributes (one transaction)"] == pytest.approx(3 + 19 + 5)
    assert per_trial["the start (compare-and-set to RUNNING, the owner)"] == pytest.approx(5)
    assert per_trial["the trial's progress in the storage (started, evals)"] == pytest.approx(7)
    assert per_trial["the result (its attributes, then its state)"] == pytest.approx(11)
    assert per_trial["joining the ended process"] == pytest.approx(13)
    assert per_trial["the worker's status file (atomic rewrites)"] == pytest.approx(17)
    # the loop's own work: everything but the start-up (and the wait, none here)
    own = per_trial["the worker's own work (its loop, the wait and start-up taken out)"]
    assert own == pytest.approx(2 + 3 + 19 + 5 + 1 + 7 + 13 + 11 + 17)
    assert per_trial["Optuna's RDBStorage.create_new_trial, 1.0 calls"] == pytest.approx(19)
    assert shown["trials the profiled worker ran"] == 4
