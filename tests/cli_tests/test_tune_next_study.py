"""``tuner tune`` between rounds: round 1's report applied to a next study file that its own round 1
searches (a range moved off an edge, a shorter length), each kind held back by its own flag, and
the loop that would come back to a study it searched."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tests.cli_tests._tune_support import store_tune_state, tune_after, tune_args
from tests.orchestrate_tests.conftest import PATIENCE_S, run_tuner
from tests.spec_tests._support import invoke


def test_a_range_at_an_edge_after_round_1_is_moved_and_searched_again(tmp_path: Path) -> None:
    """Round 1 (built, not trained: 12 trials whose error falls as the LR rises to the top of
    [0.01, 1]) done in an earlier run; tune applies the report's range move to a next study,
    searches it with a round 1 of its own, and delivers round 2 of that study."""
    from tests.report_tests.builders import add_trial, study
    from tuner.playbook.decision_log import Stage

    built = study(tmp_path, round1={"steps": 10, "trials": 12}, round2={"top_k": 1})
    phase = built.start("round-1")
    positions = [0.04, 0.12, 0.20, 0.29, 0.37, 0.45, 0.53, 0.62, 0.70, 0.78, 0.86, 0.95]
    for slot, u in enumerate(positions):
        add_trial(phase, slot, 0.1 * (12 - slot), {"optimizer.lr": 0.01 * 100**u}, best_step=10)
    first = Stage("toy", "round-1", str(built.path), [], 12, 120, done=True, steps_per_trial=10)
    done = tune_after(built, first, 240)
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    applied = next(d for d in payload["decisions"] if d["kind"] == "suggestions_applied")
    assert applied["stage"] == "toy/round-1"
    assert any(
        change.startswith("search_space.optimizer.lr.high") for change in applied["numbers"]["changes"]
    )
    assert "search_space.optimizer.lr.high 1.0 -> " in applied["text"]
    following = yaml.safe_load(Path(applied["numbers"]["file"]).read_text())
    assert following["name"] == "toy-2" and following["search_space"]["optimizer.lr"]["high"] > 1.0
    assert [s["study"] + "/" + s["phase"] for s in payload["stages"]] == [
        "toy/round-1",
        "toy-2/round-1",
        "toy-2/round-2",
    ]
    assert payload["stages"][1]["trials"] == 4  # (240 - 120 - round 2's 2 seeds x 40) / 10 steps
    assert payload["delivered_model"]["seeds"]["seeds"] == 2  # half the budget holds 2 seeds
    # tune's rounds.round2.seeds=2 changes nothing `tuner train` trains: not in the command
    assert "rounds." not in payload["delivered_model"]["reproduce"]
    assert payload["delivered_model"]["phase"] == "round-2"
    assert "/toy-2/round-2/" in payload["delivered_model"]["checkpoint"]
    assert payload["plan"]["steps_ran"] <= 240
    assert "round 1's report suggests" in done.stderr  # the decision log on the terminal too
    decided = [line for line in done.stderr.splitlines() if line.startswith("tune ")]
    assert decided and all(len(line) <= 110 for line in decided if "spent" not in line), decided
    assert all(len(d["short"]) < len(d["text"]) for d in payload["decisions"] if d["short"])  # reasons kept
    # the report of the study that delivers the model (the next one, its own storage) has the log
    report = invoke("report", applied["numbers"]["file"], "--json", "--output-dir", str(built.output_dir))
    assert report.exit_code == 0, report.output
    logged = json.loads(report.stdout)["tune"]["decisions"]
    assert [d["kind"] for d in logged] == [d["kind"] for d in payload["decisions"]]
    # the user's own file: its report follows tune's log to the model the next study delivers
    own = invoke("report", str(built.path), "--json", "--output-dir", str(built.output_dir))
    assert own.exit_code == 0, own.output
    followed = json.loads(own.stdout)
    assert followed["tuned_into"] == {"study": "toy-2", "study_file": applied["numbers"]["file"]}
    assert followed["delivered_model"]["checkpoint"] == payload["delivered_model"]["checkpoint"]
    said = invoke("report", str(built.path), "--output-dir", str(built.output_dir))
    said_words = " ".join(said.stdout.split())  # as wrapped to the terminal's width
    assert "tuned into toy-2 (" in said_words and "tune applied round 1's suggestions there" in said_words
    listed = invoke("list", "--json", "--output-dir", str(built.output_dir))
    rows = {row["study"]: row for row in json.loads(listed.stdout)}
    assert rows["toy"]["tune_studies"] == rows["toy-2"]["tune_studies"] == ["toy", "toy-2"]
    # and the model in plain PyTorch, in one call
    from tuner.train import load_model

    model = load_model(payload["delivered_model"]["checkpoint"], trust_code=True)  # our own run
    assert type(model).__name__ == "_Toy" and not model.training


def _round1_at_the_top_edge(built: Any, *sets: str) -> Any:
    """Round 1 of ``built`` (under ``sets``, built, not trained): 8 trials whose error falls as
    the LR rises to the top of [0.01, 1], so that its report moves the range up."""
    from tests.report_tests.builders import add_trial
    from tuner.playbook import start_round
    from tuner.spec import load_study

    phase = start_round(load_study(built.path, list(sets)), "round-1", built.output_dir).study
    positions = [0.04, 0.16, 0.29, 0.41, 0.53, 0.66, 0.78, 0.92]
    for slot, (u, rank) in enumerate(zip(positions, [8, 7, 6, 5, 4, 3, 2, 1], strict=True)):
        add_trial(phase, slot, 0.1 * rank, {"optimizer.lr": 0.01 * 100**u}, best_step=10)
    return phase


def test_a_search_seeds_range_move_searches_a_next_study_of_its_own_name(tmp_path: Path) -> None:
    """``--search-seed 7`` names the study ``toy-search7`` by a ``--set``; the next study tune
    writes on its round 1's report is ``toy-search7-2``, searched with a round 1 of its own,
    not read back as ``toy-search7`` (whose phases are done: tune went round them for ever)."""
    from dataclasses import replace

    from tests.report_tests.builders import study
    from tuner.playbook.decision_log import Stage

    built = study(tmp_path, round1={"steps": 10, "trials": 8}, round2={"top_k": 1})
    sets = ["search_seed=7", "name=toy-search7"]
    _round1_at_the_top_edge(built, *sets)
    searched = replace(built, name="toy-search7")
    first = Stage("toy-search7", "round-1", str(built.path), sets, 8, 80, done=True, steps_per_trial=10)
    store_tune_state(searched, first, "200", 200)
    done = run_tuner(*tune_args(built, 200, "--search-seed", "7", "--no-extra-round"), timeout=PATIENCE_S)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("done in an earlier run") == 1
    payload = json.loads(done.stdout)
    applied = next(d for d in payload["decisions"] if d["kind"] == "suggestions_applied")
    assert "(toy-search7 -> toy-search7-2)" in applied["text"]
    following = yaml.safe_load(Path(applied["numbers"]["file"]).read_text())
    assert following["name"] == "toy-search7-2"
    assert [s["study"] + "/" + s["phase"] for s in payload["stages"]] == [
        "toy-search7/round-1",
        "toy-search7-2/round-1",
        "toy-search7-2/round-2",
    ]
    assert all("name=toy-search7" not in s["sets"] for s in payload["stages"][1:])
    assert all("search_seed=7" in s["sets"] for s in payload["stages"])  # every search is seed 7's
    assert "/toy-search7-2/round-2/" in payload["delivered_model"]["checkpoint"]


def test_a_round_1_another_command_grew_is_taken_as_it_is(tmp_path: Path) -> None:
    """tune decided round 1 at 4 trials; ``run-round`` (the file's 8) ran 8 since: the same tune
    command goes on with the 8 (counted against its budget of 160: round 2 gets the 80 steps
    left, 2 seeds), instead of refusing them."""
    from tests.report_tests.builders import study
    from tuner.playbook.decision_log import Stage

    built = study(tmp_path, round1={"steps": 10, "trials": 8}, round2={"top_k": 1})
    _round1_at_the_top_edge(built)
    first = Stage("toy", "round-1", str(built.path), [], 4, 40, steps_per_trial=10)  # not done
    done = tune_after(built, first, 160, "--no-apply-suggestions", "--no-extra-round")
    assert done.returncode == 0, done.stderr
    assert "cannot take them back" not in done.stderr
    payload = json.loads(done.stdout)
    assert [s["study"] + "/" + s["phase"] for s in payload["stages"]] == ["toy/round-1", "toy/round-2"]
    assert payload["delivered_model"]["phase"] == "round-2"


def test_a_loop_that_comes_back_to_a_study_it_searched_is_one_internal_error_line(tmp_path: Path) -> None:
    """A decision log whose next study is the study itself (nothing ran, nothing new decided)
    would go round for ever: tune stops with one internal-error line, exit 70."""
    from tests.report_tests.builders import study
    from tuner.orchestrate import open_storage
    from tuner.playbook.decision_log import Decision, load_state, save_state

    built = study(tmp_path, round1={"steps": 10, "trials": 8}, round2={"top_k": 1})
    _round1_at_the_top_edge(built)
    from tuner.playbook.decision_log import Stage

    first = Stage("toy", "round-1", str(built.path), [], 8, 80, done=True, steps_per_trial=10)
    store_tune_state(built, first, "200", 200)
    storage = open_storage(built.storage_url)
    stored = load_state(storage, "toy")
    assert stored is not None
    stored.decisions.append(
        Decision("suggestions_applied", "toy/round-1", "a next study", {"file": str(built.path)})
    )
    save_state(storage, "toy", stored)
    done = run_tuner(*tune_args(built, 200), timeout=PATIENCE_S)
    assert done.returncode == 70, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in done.stderr
    assert "tune came back to toy after toy" in errors[0] and "go round for ever" in errors[0]


def test_early_best_steps_after_round_1_give_the_next_search_a_shorter_length(tmp_path: Path) -> None:
    """Round 1 (built, not trained: 8 trials of 100 steps, every best step at 10, no trend in the
    LR) done in an earlier run: the report suggests max_train_steps 200 -> 40; tune applies it to
    a next study whose round 1 (rescaled with it) and round 2 train the shorter length (``--budget
    960`` leaves 160 steps: round 2's 2 seeds x 40, and round 1's minimum of 4 trials x 20)."""
    from tests.report_tests.builders import add_trial, study
    from tuner.playbook.decision_log import Stage

    built = study(tmp_path, round1={"steps": 100, "trials": 8}, round2={"top_k": 1}, max_train_steps=200)
    phase = built.start("round-1")
    values = [0.30, 0.10, 0.25, 0.15, 0.20, 0.12, 0.28, 0.18]  # no trend along the LR
    for slot, value in enumerate(values):
        add_trial(phase, slot, value, {"optimizer.lr": 0.01 * 100 ** (slot / 7)}, best_step=10)
    first = Stage("toy", "round-1", str(built.path), [], 8, 800, done=True, steps_per_trial=100)
    done = tune_after(built, first, 960)
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    applied = next(d for d in payload["decisions"] if d["kind"] == "suggestions_applied")
    assert "training.max_train_steps 200 -> 40" in applied["text"]
    following = yaml.safe_load(Path(applied["numbers"]["file"]).read_text())
    assert following["training"]["max_train_steps"] == 40
    assert following["rounds"]["round1"]["steps"] == 20  # rescaled with it: 100 x 40 / 200
    stages = {s["study"] + "/" + s["phase"]: s for s in payload["stages"]}
    assert stages["toy-2/round-1"]["steps_per_trial"] == 20
    delivered = payload["delivered_model"]
    assert delivered["phase"] == "round-2" and "/toy-2/" in delivered["checkpoint"]
    status = json.loads((Path(delivered["checkpoint"]).parents[1] / "status.json").read_text())
    assert status["step"] == 40  # round 2 trained the shorter length
    assert payload["plan"]["steps_ran"] <= 960


def test_no_apply_length_applies_the_search_spaces_suggestions_and_keeps_the_length(
    tmp_path: Path,
) -> None:
    """Round 1 (built: 12 trials of 100 steps, best steps all at 10, the best values at the top of
    the LR range) suggests both a longer LR range and a shorter length; ``--no-apply-length``
    applies the range alone: the next study keeps max_train_steps 200 and round 1's 100 steps,
    and the log says what was not applied and why (``--budget 2000`` leaves 800 steps: round 2's
    2 seeds x 200, and round 1's minimum of 4 trials x 100)."""
    from tests.report_tests.builders import add_trial, study
    from tuner.playbook.decision_log import Stage

    built = study(tmp_path, round1={"steps": 100, "trials": 12}, round2={"top_k": 1}, max_train_steps=200)
    phase = built.start("round-1")
    for slot in range(12):  # better and better towards the top of the range: lr 1.0 is its edge
        lr = 0.01 * 100 ** (slot / 11)
        add_trial(phase, slot, 0.40 - 0.03 * slot, {"optimizer.lr": lr}, best_step=10)
    first = Stage("toy", "round-1", str(built.path), [], 12, 1200, done=True, steps_per_trial=100)
    done = tune_after(built, first, 2000, "--no-apply-length")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    applied = next(d for d in payload["decisions"] if d["kind"] == "suggestions_applied")
    assert "search_space.optimizer.lr.high 1.0 ->" in applied["text"]
    also = "it also suggests training.max_train_steps 200 -> 40; rounds.round1.steps 100 -> 20: "
    assert applied["text"].endswith(also + "not applied (--no-apply-length)")  # said, not applied
    held = applied["numbers"]["not_applied"]
    assert {"key": "training.max_train_steps", "why": "--no-apply-length"} in held
    following = yaml.safe_load(Path(applied["numbers"]["file"]).read_text())
    assert following["search_space"]["optimizer.lr"]["high"] > 1.0
    assert following["training"]["max_train_steps"] == 200 and following["rounds"]["round1"]["steps"] == 100
    run_dir = Path(payload["delivered_model"]["checkpoint"]).parents[1]
    status = json.loads((run_dir / "status.json").read_text())
    assert status["step"] == 200  # round 2 trained the file's length
    assert payload["plan"]["steps_ran"] <= 2000
