"""``tuner report STUDY --write-next PATH``: the next study file, the report's suggestions applied.

Studies with known answers (builders.py) on a hand-written, commented study file: the written
file must carry each change with its reason, keep every comment and the layout of the rest, get
a new name, and pass ``tuner validate``; the user's file is never overwritten.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from tests.orchestrate_tests.conftest import toy_study
from tests.report_tests.builders import Built, add_trial
from tuner.cli.app import app

# Flow and block mappings, end-of-line and full-line comments, a blank line here and there.
STUDY_TEXT = """\
# A toy study, written by hand: every comment here must survive --write-next.
name: {name}   # the study's name: its storage and output folder
seed: 0

workload:
  name: toy_workload.py:build   # a file next to this one
  options: {{}}

objective:
  metric: val/error_rate
  direction: minimize   # lower is better

# how each trial trains
training:
  batch_size: 16
  eval_batch_size: 32
{max_train_steps}  eval_every: 10
  log_every: 10
  keep_best_checkpoints: 1
  prediction_samples: 2
  tensorboard: false
  device: cpu
  optimizer:
    name: sgd     # plain SGD
    lr: 0.1
  schedule:
    - {{shape: constant}}   # no decay

# what round 1 searches
search_space:
  # the learning rate, in log space
  optimizer.lr: {{type: float, low: 1.0e-2, high: 1.0, log: true}}   # the one that matters
  optimizer.name:
    type: categorical
    choices: [sgd, momentum, adam]   # three optimizers

sweep_lr:
  max_steps: 800   # the cap on each grid trial

rounds:
  round1:
    trials: 12     # quasi-random
    {length}
# end of the study
"""

# (lr, optimizer, value): the best three at the top of the LR range, adam never among them
AT_TOP = [
    (0.9, "sgd", 0.10),
    (0.8, "momentum", 0.12),
    (0.6, "sgd", 0.15),
    (0.2, "sgd", 0.30),
    (0.1, "momentum", 0.40),
    (0.05, "adam", 0.50),
    (0.03, "adam", 0.60),
    (0.02, "adam", 0.70),
]
# the best three in the middle of the range, one of each optimizer: nothing to move or drop
INSIDE = [
    (0.1, "sgd", 0.10),
    (0.12, "momentum", 0.12),
    (0.08, "adam", 0.15),
    (0.5, "sgd", 0.30),
    (0.02, "momentum", 0.40),
    (0.9, "adam", 0.50),
]


def commented_study(
    folder: Path, *, name: str = "toy", max_train_steps: int | None = 40, length: str = "steps: 40"
) -> Built:
    toy_study(folder, name=name)  # the toy workload's file, next to the study
    steps = f"  max_train_steps: {max_train_steps}   # the production length\n" if max_train_steps else ""
    path = folder / "study.yaml"
    path.write_text(STUDY_TEXT.format(name=name, max_train_steps=steps, length=length))
    return Built(path, folder / "runs", name)


def fill_round1(built: Built, points: list[tuple[float, str, float]], best_step: int) -> None:
    phase = built.start("round-1")
    for slot, (lr, optimizer, value) in enumerate(points):
        add_trial(phase, slot, value, {"optimizer.lr": lr, "optimizer.name": optimizer}, best_step=best_step)


def write_next(built: Built, destination: Path) -> Any:
    args = [
        "report",
        str(built.path),
        "--output-dir",
        str(built.output_dir),
        "--write-next",
        str(destination),
    ]
    return CliRunner().invoke(app, args)


def comments(text: str) -> set[str]:
    return {match.strip() for match in re.findall(r"#(.*)", text)}


def reason_above(text: str, line: str) -> str:
    """The ``# tuner report:`` comment right above ``line`` (its wrapped lines joined)."""
    lines = [ln.strip() for ln in text.splitlines()]
    index = lines.index(line.strip()) - 1
    parts = []
    while lines[index].startswith("#   "):
        parts.insert(0, lines[index][4:])
        index -= 1
    assert lines[index].startswith("# tuner report: "), lines[index]
    return " ".join([lines[index][len("# tuner report: ") :], *parts])


@pytest.fixture(scope="module")
def at_top(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """Round 1's best LRs at the top of the range, adam never in the top 3; best steps mid-run."""
    built = commented_study(tmp_path_factory.mktemp("at-top") / "study")
    fill_round1(built, AT_TOP, best_step=20)
    return built


def test_boundary_moves_the_lr_range_up_keeps_every_comment_and_validates(at_top: Built) -> None:
    original = at_top.path.read_text()
    destination = at_top.path.parent.parent / "next" / "toy-2.yaml"  # another folder

    result = write_next(at_top, destination)

    assert result.exit_code == 0, result.output
    assert f"wrote {destination} (3 changes from the report; name toy -> toy-2)" in result.output
    written = destination.read_text()
    document = yaml.safe_load(written)
    lr = document["search_space"]["optimizer.lr"]
    assert (lr["low"], lr["high"]) == (0.1, 10.0)  # moved up from 0.01 .. 1.0, one decade
    assert document["search_space"]["optimizer.name"]["choices"] == ["sgd", "momentum"]
    assert document["name"] == "toy-2"
    assert document["workload"]["name"] == "../study/toy_workload.py:build"  # the same file
    # every comment of the user's file is still there, and the file is untouched
    assert comments(original) <= comments(written)
    assert at_top.path.read_text() == original
    # flow style kept (and the end-of-line comment), the reason with its numbers right above
    lr_line = "  optimizer.lr: {type: float, low: 0.1, high: 10.0, log: true}   # the one that matters"
    assert lr_line in written.splitlines()
    assert reason_above(written, lr_line) == (
        "low 0.01 -> 0.1, high 1 -> 10: the best trials sit at the top of the range "
        "(best 0.9 at 98% of the range; in its top half Spearman -1.00 over 5 trials, p = 0.0083, one-sided; "
        "round-1)"
    )
    choices_line = "    choices: [sgd, momentum]   # three optimizers"
    assert reason_above(written, choices_line) == (
        "dropped 'adam' from choices: optimizer.name = 'adam': 3 completed trials, none in the top 3 "
        "(round-1)"
    )
    assert reason_above(written, "name: toy-2   # the study's name: its storage and output folder") == (
        "name toy -> toy-2: a changed file cannot continue the phases of toy (tuner refuses a changed "
        "study file); the new name gives it its own phases and output folder"
    )
    assert written.splitlines()[0] == "# written by tuner report --write-next from ../study/study.yaml"
    # only what changed is in the diff printed
    assert "+  optimizer.lr: {type: float, low: 0.1, high: 10.0, log: true}   # the one that matters" in (
        result.output
    )
    assert "-  optimizer.lr: {type: float, low: 1.0e-2, high: 1.0, log: true}   # the one that matters" in (
        result.output
    )
    assert "   eval_every: 10" not in result.output
    assert f"next: tuner run-round {destination} --round 1" in result.output

    validated = CliRunner().invoke(app, ["validate", str(destination)])
    assert validated.exit_code == 0, validated.output
    assert "optimizer.lr: float in [0.1, 10] (log)" in validated.output


def test_rerunning_rewrites_its_own_file(at_top: Built) -> None:
    destination = at_top.path.with_name("toy-next.yaml")  # next to the study: paths stay as they are

    first = write_next(at_top, destination)
    written = destination.read_text()
    again = write_next(at_top, destination)

    assert first.exit_code == 0 and again.exit_code == 0, first.output + again.output
    assert destination.read_text() == written
    assert yaml.safe_load(written)["workload"]["name"] == "toy_workload.py:build"
    assert written.count("written by tuner report --write-next") == 1


def test_refuses_to_overwrite_the_study_file_or_a_foreign_file(at_top: Built) -> None:
    original = at_top.path.read_text()
    foreign = at_top.path.with_name("mine.yaml")
    foreign.write_text("name: mine\n")

    for destination in (at_top.path, at_top.path.parent / "." / "study.yaml", foreign):
        result = write_next(at_top, destination)

        assert result.exit_code == 2, result.output
        assert len(result.output.strip().splitlines()) == 1, result.output  # refused before the report
        assert (
            "never overwrites" in result.output or "not written by tuner report --write-next" in result.output
        )
    assert at_top.path.read_text() == original
    assert foreign.read_text() == "name: mine\n"


def test_a_value_edited_since_the_phase_ran_is_left_alone(at_top: Built) -> None:
    """The report judged the stored range 0.01 .. 1; the file now says 0.02: that is the user's."""
    edited = at_top.path.with_name("edited.yaml")  # the same study (name, storage), edited since
    edited.write_text(at_top.path.read_text().replace("low: 1.0e-2", "low: 2.0e-2"))
    destination = at_top.path.with_name("edited-next.yaml")
    built = Built(edited, at_top.output_dir, at_top.name)

    result = write_next(built, destination)

    assert result.exit_code == 0, result.output
    assert "(2 changes from the report; name toy -> toy-2)" in result.output
    assert (
        "skipped search_space.optimizer.lr.low: the file has 0.02 where the report judged 0.01"
        in result.output
    )
    lr = yaml.safe_load(destination.read_text())["search_space"]["optimizer.lr"]
    assert (lr["low"], lr["high"]) == (0.02, 10.0)


def test_early_best_steps_shorten_training_and_round_1(tmp_path: Path) -> None:
    built = commented_study(tmp_path, max_train_steps=400, length="steps: 400   # as long as production")
    fill_round1(built, INSIDE, best_step=20)  # 5% of 400 steps in every trial
    destination = tmp_path / "toy-2.yaml"

    result = write_next(built, destination)

    assert result.exit_code == 0, result.output
    written = destination.read_text()
    document = yaml.safe_load(written)
    assert document["training"]["max_train_steps"] == 40  # 2 x the latest best step (20)
    assert document["rounds"]["round1"]["steps"] == 40
    assert "    steps: 40   # as long as production" in written.splitlines()
    reason = "best steps in the first 10% of training in 5 of the top 5, 6 of 6 completed trials (round-1)"
    assert reason_above(written, "  max_train_steps: 40   # the production length") == (
        f"max_train_steps 400 -> 40: {reason}"
    )
    assert reason_above(written, "    steps: 40   # as long as production") == f"steps 400 -> 40: {reason}"
    assert document["search_space"] == yaml.safe_load(built.path.read_text())["search_space"]
    assert CliRunner().invoke(app, ["validate", str(destination)]).exit_code == 0


def test_sweep_lr_max_train_steps_is_written_out(tmp_path: Path) -> None:
    """The file leaves max_train_steps to sweep-lr: the new name would not find it, so it is written."""
    from tuner.playbook.study_results import store_recommendation

    built = commented_study(tmp_path, max_train_steps=None, length="length_fraction: 0.1")
    store_recommendation(built.start("sweep-lr"), 400)
    fill_round1(built, AT_TOP, best_step=20)  # 20 of round 1's 40 steps: the length is fine
    destination = tmp_path / "toy-2.yaml"

    result = write_next(built, destination)

    assert result.exit_code == 0, result.output
    written = destination.read_text()
    assert yaml.safe_load(written)["training"]["max_train_steps"] == 400
    assert reason_above(written, "  max_train_steps: 400").startswith(
        "max_train_steps 400 written out: the phases of toy trained with sweep-lr's value"
    )
    lines = written.splitlines()  # right under eval_batch_size: the comments above eval_every stay there
    assert lines[lines.index("  eval_batch_size: 32") + 1].startswith("  # tuner report: max_train_steps 400")
    validated = CliRunner().invoke(
        app, ["validate", str(destination), "--output-dir", str(tmp_path / "none")]
    )
    assert "max_train_steps 400 (from the study file)" in validated.output


def test_nothing_to_change_writes_no_file(tmp_path: Path) -> None:
    built = commented_study(tmp_path)
    fill_round1(built, INSIDE, best_step=20)  # half-way: the length is fine
    destination = tmp_path / "toy-2.yaml"

    result = write_next(built, destination)

    assert result.exit_code == 0, result.output
    assert "nothing to change: the report suggests no change to" in result.output
    assert not destination.exists()


def _judged_by_round_2(tmp_path: Path, *, max_train_steps: int, round1_steps: int, best_step: int) -> Built:
    """Round 1 in steps, then round 2 at full length whose best steps all sit at ``best_step``."""
    from tuner.playbook.plan import load_plan

    built = commented_study(
        tmp_path, max_train_steps=max_train_steps, length=f"steps: {round1_steps}   # round 1's length"
    )
    fill_round1(built, INSIDE, best_step=round1_steps // 2)
    second = built.start("round-2")
    plan = load_plan(second.user_attrs)
    assert plan is not None and plan.trial_steps == max_train_steps
    for slot, planned in enumerate(plan.slots):
        add_trial(second, slot, 0.1 + slot / 100, planned.values, best_step=best_step, **planned.attrs)
    return built


@pytest.mark.parametrize(
    ("best_step", "new_max", "new_round1"),
    [(80, 120, 30), (5, 10, 10)],  # late: 1.5 x longer; early: 2 x the best step, round 1 with it
    ids=["longer", "shorter"],
)
def test_round_1_in_steps_keeps_its_share_when_max_train_steps_changes(
    tmp_path: Path, best_step: int, new_max: int, new_round1: int
) -> None:
    built = _judged_by_round_2(tmp_path, max_train_steps=80, round1_steps=20, best_step=best_step)
    destination = tmp_path / "toy-2.yaml"

    result = write_next(built, destination)

    assert result.exit_code == 0, result.output
    written = destination.read_text()
    document = yaml.safe_load(written)
    assert document["training"]["max_train_steps"] == new_max
    assert document["rounds"]["round1"]["steps"] == new_round1  # 20 of 80 steps before: a quarter
    assert reason_above(written, f"    steps: {new_round1}   # round 1's length").startswith(
        f"steps 20 -> {new_round1}: round 1 keeps its share of max_train_steps"
    )
    assert CliRunner().invoke(app, ["validate", str(destination)]).exit_code == 0
