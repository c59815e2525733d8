"""``seed`` fixes the data split; ``search_seed`` (default: ``seed``) drives the search.

The study ``seed`` used to couple three things: the workload's data split, every trial's init and
data order, and round 1's quasi-random points. A user could not repeat a search with other points
without changing the split. Now the same file repeats its search exactly, and ``--set
search_seed=N`` is a fresh search (other points, other inits) scored on the same examples.
"""

from __future__ import annotations

import csv
from pathlib import Path

from tests.orchestrate_tests.conftest import toy_study
from tests.spec_tests._support import invoke
from tuner.playbook import start_round
from tuner.spec import load_study


def _points(path: Path, output: Path, *overrides: str) -> list[dict[str, float]]:
    plan = start_round(load_study(path, list(overrides)), "round-1", output).plan
    return [plan.params_for_slot(slot) for slot in range(3)]


def test_the_same_file_repeats_its_points_and_a_search_seed_gives_others(tmp_path: Path) -> None:
    path = toy_study(tmp_path, round1={"trials": 3, "steps": 20})
    first = _points(path, tmp_path / "a")
    assert _points(path, tmp_path / "b") == first  # repeatable: the default search_seed is seed
    assert _points(path, tmp_path / "c", "search_seed=0") == first  # the same thing, said
    fresh = _points(path, tmp_path / "d", "search_seed=7")
    assert all(point != old for point, old in zip(fresh, first, strict=True))


def _run(path: Path, output: Path, *overrides: str) -> tuple[list[str], list[tuple[str, str]]]:
    sets = [word for key in overrides for word in ("--set", key)]
    # in this process (a process start costs more CPU than these 40 steps): what is compared is
    # the run's numbers, which do not depend on the process that trains them
    done = invoke("train", str(path), *sets, "--output-dir", str(output), "--no-progress")
    assert done.exit_code == 0, done.output
    run_dir = next(output.glob("toy/train/run-*"))
    with (run_dir / "metrics.csv").open() as handle:
        losses = [row["train/step_loss"] for row in csv.DictReader(handle)]
    with (run_dir / "predictions.csv").open() as handle:
        examples = [
            (row["example"], row["target"]) for row in csv.DictReader(handle) if row["split"] == "val"
        ]
    return losses, examples


def test_a_fresh_search_trains_other_inits_on_the_same_validation_examples(tmp_path: Path) -> None:
    path = toy_study(tmp_path, round1={"trials": 1, "steps": 20})
    losses, examples = _run(path, tmp_path / "default")
    again, same_examples = _run(path, tmp_path / "again")
    assert (again, same_examples) == (losses, examples)  # the same file: the same run
    fresh, fresh_examples = _run(path, tmp_path / "fresh", "search_seed=7")
    assert fresh[0] != losses[0]  # another init and data order from step 1
    assert fresh_examples == examples  # the split is the study seed's: the same examples, same labels
    _, other_examples = _run(path, tmp_path / "split", "seed=7")
    assert other_examples != examples  # the study seed moves the split (the toy data itself)
