"""``tuner tune STUDY --budget N``: the whole procedure within one budget.

Real runs on the toy workload with budgets of a few hundred steps: round 1 of 10-step trials,
round 2 at the full 40 steps.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from tests.orchestrate_tests.conftest import (
    PATIENCE_S,
    load_phase,
    run_tuner,
    sqlite_url,
    start_tuner,
    toy_study,
)
from tests.spec_tests._support import invoke, single_error


def tune_study(folder: Path, **round2: int) -> Path:
    path = toy_study(folder, round1={"steps": 10, "trials": 4})
    if round2:
        document = yaml.safe_load(path.read_text())
        document["rounds"]["round2"] = round2
        path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def state(output_dir: Path, study: str = "toy") -> dict:
    """The tune state as the storage holds it (stages and decisions)."""
    from tuner.orchestrate import open_storage
    from tuner.playbook.decision_log import load_state

    loaded = load_state(open_storage(sqlite_url(output_dir, study)), study)
    assert loaded is not None
    return loaded.to_json()


def trained_steps(output_dir: Path) -> int:
    """Every run folder's trained steps (its status.json), all phases and studies."""
    return sum(
        int(json.loads(status.read_text()).get("step") or 0)
        for status in output_dir.glob("*/*/trial-*/status.json")
    )


def store_tune_state(built: Any, stage: Any, budget: str, steps: int, spent_s: float = 0.0) -> None:
    """The state an earlier ``tune --budget BUDGET`` (``steps`` training steps, ``spent_s`` wall
    seconds) left after deciding ``stage`` (or a list of stages; built, not trained)."""
    from tuner.orchestrate import open_storage
    from tuner.playbook.budget import parse_budget
    from tuner.playbook.decision_log import Decision, Stage, TuneState, save_state

    stages = stage if isinstance(stage, list) else [stage]
    assert all(isinstance(s, Stage) for s in stages)
    decided = [Decision("budget", built.name, f"budget {budget}", {})]
    state = TuneState(parse_budget(budget), steps, stages, decided, spent_s=spent_s)
    save_state(open_storage(built.storage_url), built.name, state)


def tune_after(built: Any, stage: Any, budget: int, *flags: str) -> Any:
    """``tune --budget BUDGET --json`` on a study whose ``stage`` (built, not trained) an earlier
    run of the same budget finished: its state is stored first, as that run left it."""
    store_tune_state(built, stage, str(budget), budget)
    return run_tuner(*tune_args(built, budget, *flags))


def tune_args(built: Any, budget: int | str, *flags: str) -> tuple[str, ...]:
    """The arguments of ``tune --budget BUDGET --json`` on one worker, in the built study's folder."""
    return (
        "tune", str(built.path), "--budget", str(budget), "--json", "--no-progress", "--workers", "1",
        "--output-dir", str(built.output_dir), *flags,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("budget", "expected"),
    [
        ("0", "--budget 0: must be more than 0 training steps"),
        ("abc", "--budget abc: expected training steps (e.g. 5000) or a duration (e.g. 2h, 30m, 90s)"),
        ("2x", "--budget 2x: expected training steps (e.g. 5000) or a duration (e.g. 2h, 30m, 90s)"),
    ],
)
def test_a_bad_budget_is_one_line_and_exit_2(tmp_path: Path, budget: str, expected: str) -> None:
    path = tune_study(tmp_path)
    result = invoke("tune", str(path), "--budget", budget, "--output-dir", str(tmp_path / "runs"))
    assert single_error(result) == expected
    assert not (tmp_path / "runs").exists()


def test_a_budget_too_small_for_round_2_says_what_it_needs(tmp_path: Path) -> None:
    path = tune_study(tmp_path)
    result = invoke("tune", str(path), "--budget", "30", "--dry-run", "--output-dir", str(tmp_path / "runs"))
    assert "round 2 needs at least 40 (one run of 40 steps); raise --budget" in single_error(result)


def test_dry_run_prints_the_plan_within_the_budget_and_runs_nothing(tmp_path: Path) -> None:
    path = tune_study(tmp_path)
    result = invoke(
        "tune", str(path), "--budget", "400", "--dry-run", "--json", "--output-dir", str(tmp_path / "runs")
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)["plan"]
    phases = {p["phase"]: p for p in plan["phases"]}
    # round 2 at the file's seeds, 3 x 40 (2 seeds would be more than half the budget); 20% (80)
    # kept for the round after it; round 1 the rest, at full length (40 steps, not the file's 10)
    assert phases["toy/round-1"]["trials"] == 5 and phases["toy/round-1"]["steps_per_trial"] == 40
    assert phases["toy/round-2"]["steps"] == 120
    # round 3 (decided on round 2's report) takes what is left
    assert phases["toy/round-3"] == {
        "phase": "toy/round-3", "trials": None, "steps_per_trial": None, "steps_ran": 0,
        "steps_to_run": 80, "steps": 80, "upper_bound": True, "done": False,
    }  # fmt: skip
    assert plan["steps"] == 200 + 120 + 80 == 400
    assert not (tmp_path / "runs").exists()


def test_a_duration_is_converted_to_steps_at_the_pace_of_a_probe_here(tmp_path: Path) -> None:
    """``--budget 2m``: the probe's seconds per step (start-up included) on one worker give the
    steps; the plan stays within them, and the conversion is said in one line of the log."""
    import re

    from tuner.playbook.budget import parse_budget, steps_for_duration

    assert parse_budget("1.5h").seconds == 5400 and parse_budget("90s").seconds == 90
    assert steps_for_duration(7200, 0.5, workers=2) == 28_800  # two trials side by side
    path = tune_study(tmp_path)
    args = ("--dry-run", "--json", "--workers", "1", "--output-dir", str(tmp_path / "runs"))
    result = invoke("tune", str(path), "--budget", "2m", *args)
    assert result.exit_code == 0, result.output
    said = re.search(r"budget 2m = ([\d,]+) training steps at ([\d.e+-]+) s a step", result.output)
    assert said, result.output
    steps, per_step = int(said.group(1).replace(",", "")), float(said.group(2))
    assert steps == pytest.approx(120 / per_step, rel=0.01)  # the pace is printed to 3 digits
    assert 0 < json.loads(result.stdout)["plan"]["steps"] <= steps
    assert not (tmp_path / "runs").exists()


def test_end_to_end_within_a_tiny_budget_delivers_the_model_and_logs_its_decisions(tmp_path: Path) -> None:
    path = tune_study(tmp_path, top_k=1)
    output_dir = tmp_path / "runs"
    done = run_tuner(
        "tune", str(path), "--budget", "160", "--no-apply-suggestions", "--json",
        "--no-progress", "--output-dir", str(output_dir),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["plan"]["steps_ran"] <= 160
    assert trained_steps(output_dir) <= 160
    kinds = [d["kind"] for d in payload["decisions"]]
    assert kinds[:2] == ["budget", "round1_trials"]
    # round 2 at 2 seeds (80 steps); 32 kept: round 1 has 1 trial at full length (40 steps), and
    # round 3 the 40 left
    assert "round2_shape" in kinds and kinds[-1] == "delivered"
    extra = next(d for d in payload["decisions"] if d["kind"].startswith("round3_"))
    assert extra["numbers"]["left"] == 40
    model = payload["delivered_model"]
    if extra["kind"] == "round3_seeds":  # round 2's point on one new seed: pooled with its 2
        assert extra["numbers"]["seeds"] == 1 and extra["numbers"]["steps_per_trial"] == 40
        assert model["seeds"]["seeds"] == 3
        assert {r["phase"] for r in model["seeds"]["runs"]} == {"round-2", "round-3"}
    else:  # still improving: 2 seeds of 20 steps cannot be longer: so it is seeds (asserted above)
        raise AssertionError(extra)
    assert model["delivered"] and model["phase"] in ("round-2", "round-3")
    assert Path(model["checkpoint"]).is_file()
    assert model["reproduce"].startswith("tuner train ")
    assert "delivered    val/error_rate" in done.stderr and "checkpoint" in done.stderr
    assert "Warning" not in done.stderr, done.stderr  # no library warning (scipy's, Optuna's) leaks
    # every phase's workers were forked from one zygote, started by the first phase
    phases = {log.parent.parent.name for log in output_dir.glob("*/*/.workers/cpu0@*.log")}
    zygotes = list(output_dir.glob("*/*/.workers/warm-start@*.log"))
    assert phases == {"round-1", "round-2", "round-3"}
    assert [log.parent.parent.name for log in zygotes] == ["round-1"]
    # the decision log in tuner report: --json's "tune", and the HTML page's first section
    report = invoke("report", str(path), "--json", "--output-dir", str(output_dir))
    assert report.exit_code == 0, report.output
    tune = json.loads(report.stdout)["tune"]
    assert tune["budget"]["text"] == "160" and tune["budget_steps"] == 160
    assert [d["kind"] for d in tune["decisions"]][:2] == ["budget", "round1_trials"]
    html = tmp_path / "report.html"
    assert invoke("report", str(path), "--html", str(html), "--output-dir", str(output_dir)).exit_code == 0
    page = html.read_text()
    log, delivered = page.index("tuner tune: decision log"), page.index("<h2>delivered model")
    assert log < delivered  # the page's first section
    assert "round 1: 1 trial of 40 steps" in page
    estimate = invoke("estimate", str(path), "--json", "--output-dir", str(output_dir))
    assert estimate.exit_code == 0, estimate.output
    plan = json.loads(estimate.stdout)["tune"]
    assert plan["steps_ran"] == trained_steps(output_dir) <= 160 and plan["steps_to_run"] == 0


def test_ctrl_c_then_the_same_command_continues_without_redoing_phases(tmp_path: Path) -> None:
    path = tune_study(tmp_path, top_k=1)
    output_dir = tmp_path / "runs"
    args = ("tune", str(path), "--budget", "80", "--no-apply-suggestions", "--no-progress",
            "--workers", "1", "--output-dir", str(output_dir))  # fmt: skip
    first = start_tuner(*args)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # until round 1 is done: the state says so
        if (output_dir / "toy" / "study.db").exists():
            try:
                stages = state(output_dir)["stages"]
            except Exception:  # the storage is being created
                stages = []
            if any(s["phase"] == "round-1" and s["done"] for s in stages):
                break
        time.sleep(0.2)
    first.send_signal(signal.SIGINT)
    output, _ = first.communicate(timeout=120)
    assert first.returncode in (130, 0), output  # 0: it had finished round 2 before the signal came
    round1 = next(s for s in state(output_dir)["stages"] if s["phase"] == "round-1")
    again = run_tuner(*args)
    assert again.returncode == 0, again.stderr
    assert "toy/round-1: done in an earlier run, not run again" in again.stdout
    assert "delivered    val/error_rate" in again.stdout
    from tests.orchestrate_tests.conftest import load_phase

    trials = load_phase(sqlite_url(output_dir), "toy", "round-1").get_trials(deepcopy=False)
    assert len(trials) == round1["trials"]  # not one trial more: round 1 ran once
    decisions = [d["kind"] for d in state(output_dir)["decisions"]]
    assert decisions.count("round1_trials") == 1  # decided once, not again on the re-run
    assert trained_steps(output_dir) <= 80


@pytest.mark.parametrize("stop", ["ctrl-c", "kill-9"])
def test_a_tune_stopped_in_the_middle_of_round_1_finishes_within_its_budget(
    tmp_path: Path, stop: str
) -> None:
    """Stopped while round 1 runs (some trials done, others to start): by Ctrl-C (exit 130, the
    running trial checkpoints where it is) or by kill -9 of every process (the kernel's way). The
    same command then finishes the round and delivers the model within the budget; after Ctrl-C
    no step is trained twice (the interrupted trial resumes at the step it reached)."""
    path = toy_study(tmp_path, round1={"steps": 20, "trials": 4}, options={"step_sleep_s": 0.05})
    output_dir = tmp_path / "runs"
    args = ("tune", str(path), "--budget", "240", "--no-apply-suggestions", "--no-extra-round",
            "--no-progress", "--workers", "1", "--output-dir", str(output_dir))  # fmt: skip
    first = start_tuner(*args)

    def round1_trials() -> list[Any]:
        from tests.orchestrate_tests.conftest import load_phase

        try:
            return load_phase(sqlite_url(output_dir), "toy", "round-1").get_trials(deepcopy=False)
        except Exception:  # the storage or the phase is being created
            return []

    deadline = time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline:  # two trials done and the next one training: mid-round
        trials = round1_trials()
        done = [t for t in trials if t.state.name == "COMPLETE"]
        if len(done) >= 2 and any(t.state.name == "RUNNING" and t.user_attrs.get("healthy") for t in trials):
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"round 1 did not get under way: {first.output()}")
    if stop == "ctrl-c":
        first.send_signal(signal.SIGINT)
        output, _ = first.communicate(timeout=PATIENCE_S)
        assert first.returncode == 130, output  # stopped, not finished
    else:
        import os

        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=PATIENCE_S)
    planned = next(s for s in state(output_dir)["stages"] if s["phase"] == "round-1")
    assert not planned["done"]
    again = run_tuner(*args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "delivered    val/error_rate" in again.stdout
    trials = round1_trials()
    finals = {t.user_attrs["slot"]: t for t in trials if t.state.name == "COMPLETE"}
    assert sorted(finals) == list(range(planned["trials"]))  # every slot once, none more
    assert trained_steps(output_dir) <= 240
    if stop == "ctrl-c":
        (stopped,) = [t for t in trials if t.user_attrs.get("failure_reason") == "interrupted"]
        (resumed,) = [t for t in trials if t.user_attrs.get("retry_of") == stopped.number]
        reached = stopped.user_attrs["last_checkpoint_step"]
        assert reached > 0 and resumed.user_attrs["resumed_from_step"] == reached  # no step twice


def test_a_finished_tune_given_a_larger_budget_goes_on_from_what_ran(tmp_path: Path) -> None:
    """``--budget 200`` to the end, then ``--budget 400``: nothing that ran is run again, the
    steps spent count, and the rest goes to more rounds of the best points (decided on the last
    round's report), within the new budget; a smaller budget, or one of another kind, is refused."""
    path = tune_study(tmp_path, top_k=1)
    output_dir = tmp_path / "runs"
    built = SimpleNamespace(path=path, output_dir=output_dir)
    first = run_tuner(*tune_args(built, 200, "--no-apply-suggestions"))
    assert first.returncode == 0, first.stderr
    spent = json.loads(first.stdout)["plan"]["steps_ran"]
    phases = [s["phase"] for s in json.loads(first.stdout)["stages"]]
    more = run_tuner(*tune_args(built, 400, "--no-apply-suggestions"))
    assert more.returncode == 0, more.stderr
    payload = json.loads(more.stdout)
    raised = [d for d in payload["decisions"] if d["kind"] == "budget_raised"]
    assert (
        len(raised) == 1
        and raised[0]["numbers"]["from_steps"] == 200
        and raised[0]["numbers"]["steps"] == 400
    )
    assert "budget raised 200 -> 400 training steps" in more.stderr
    assert "budget: 200 of 400 steps spent (50%), at most about " in more.stderr  # where it stands
    stages = [s["phase"] for s in payload["stages"]]
    assert stages[: len(phases)] == phases and len(stages) > len(phases)  # more rounds, none redone
    assert all(s["done"] for s in payload["stages"])
    assert spent < payload["plan"]["steps_ran"] == trained_steps(output_dir) <= 400
    assert payload["delivered_model"]["checkpoint"]
    for budget, said in (("300", "run the same command to continue it"), ("5m", "of the same kind")):
        refused = invoke("tune", str(path), "--budget", budget, "--output-dir", str(output_dir))
        assert "is being tuned with --budget 400" in single_error(refused) and said in single_error(refused)


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

    model = load_model(payload["delivered_model"]["checkpoint"])
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
    command goes on with the 8 (counted against its budget), instead of refusing them."""
    from tests.report_tests.builders import study
    from tuner.playbook.decision_log import Stage

    built = study(tmp_path, round1={"steps": 10, "trials": 8}, round2={"top_k": 1})
    _round1_at_the_top_edge(built)
    first = Stage("toy", "round-1", str(built.path), [], 4, 40, steps_per_trial=10)  # not done
    done = tune_after(built, first, 200, "--no-apply-suggestions", "--no-extra-round")
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


def _with_a_bug(folder: Path, line: str, bug: str) -> tuple[Path, Path, str]:
    """The tune study with ``bug`` (lines of code) added to its toy workload after ``line``:
    the study file, the workload file and the workload's fixed text."""
    path = tune_study(folder)
    workload = folder / "toy_workload.py"
    fixed = workload.read_text()
    assert line in fixed
    workload.write_text(fixed.replace(line, line + bug))
    return path, workload, fixed


def test_after_a_bug_in_the_workload_is_fixed_the_same_tune_command_goes_on(tmp_path: Path) -> None:
    """A bug in the user's workload code that fails before the first training step stops round
    1 at once: one line naming the user's line, exit 2, no trial retried (every one would fail
    so). Once the file is fixed, the same command goes on in the same folder: the slot that
    failed in the old code runs again (its failure no longer holds the phase) and the model is
    delivered."""
    path, workload, fixed = _with_a_bug(
        tmp_path,
        "    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:\n",
        '        raise RuntimeError("a bug in the loss")\n',
    )
    output_dir = tmp_path / "runs"
    args = tune_args(SimpleNamespace(path=path, output_dir=output_dir), 200, "--no-extra-round")
    failed = run_tuner(*args)
    assert failed.returncode == 2, failed.stderr
    errors = [line for line in failed.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in failed.stderr
    assert errors[0].startswith("error: the workload raised RuntimeError: a bug in the loss at ")
    assert "toy_workload.py:" in errors[0] and " in loss_fn (traceback: " in errors[0]
    assert "error.log); it failed before the first training step, as every trial would" in errors[0]
    assert errors[0].endswith("fix it, then run the same command again")
    trials = load_phase(sqlite_url(output_dir), "toy").trials
    assert len(trials) == 1 and trials[0].state.name == "FAIL" and not trials[0].user_attrs["retried"]
    again = run_tuner(*args)  # not fixed yet: tried once more (it might have been passing), refused
    assert again.returncode == 2 and len(load_phase(sqlite_url(output_dir), "toy").trials) == 2

    workload.write_text(fixed)
    done = run_tuner(*args)
    assert done.returncode == 0, done.stderr
    rerun = [t for t in load_phase(sqlite_url(output_dir), "toy").trials if t.user_attrs.get("code_changed")]
    assert [t.user_attrs["slot"] for t in rerun] == [0]  # the slot the bug failed ran again, fixed
    assert rerun[0].state.name == "COMPLETE" and rerun[0].user_attrs["retry_of"] == 1
    assert json.loads(done.stdout)["delivered_model"]["phase"] == "round-2"


def test_a_bug_that_fails_after_the_first_step_spends_the_failure_budget_then_the_fix_goes_on(
    tmp_path: Path,
) -> None:
    """A bug at the third step (the trials proved they train): the failure budget is spent, the
    hint names what works (the fix, or --max-failed); after the fix the same command re-runs
    every slot the old code failed."""
    path, workload, fixed = _with_a_bug(
        tmp_path,
        '        calls["n"] += 1\n',
        '        if calls["n"] >= 3:\n            raise RuntimeError("a bug at step 3")\n',
    )
    output_dir = tmp_path / "runs"
    args = tune_args(SimpleNamespace(path=path, output_dir=output_dir), 200, "--no-extra-round")
    failed = run_tuner(*args)
    assert failed.returncode == 1, failed.stderr
    assert "the failure budget is spent" in failed.stderr
    assert (
        "fix the workload and run the same command again" in failed.stderr and "--max-failed" in failed.stderr
    )
    trials = load_phase(sqlite_url(output_dir), "toy").trials
    crashed = {t.user_attrs["slot"] for t in trials if t.state.name == "FAIL"}
    assert crashed and all(t.state.name == "FAIL" for t in trials)

    workload.write_text(fixed)
    done = run_tuner(*args)
    assert done.returncode == 0, done.stderr
    rerun = [t for t in load_phase(sqlite_url(output_dir), "toy").trials if t.user_attrs.get("code_changed")]
    assert {t.user_attrs["slot"] for t in rerun} == crashed
    assert all(t.state.name == "COMPLETE" for t in rerun)


def test_tune_takes_a_failure_budget_for_each_phase_and_says_so(tmp_path: Path) -> None:
    path = tune_study(tmp_path)
    output_dir = tmp_path / "runs"
    args = ("tune", str(path), "--budget", "200", "--no-progress", "--output-dir", str(output_dir))
    done = run_tuner(*args, "--no-extra-round", "--workers", "1", "--max-failed", "7")
    assert done.returncode == 0, done.stderr
    said = done.stdout + done.stderr
    assert "failure budget: 7 failed trials in each phase it runs (--max-failed)" in said
    assert said.count("0 failed (limit 7)") >= 2 and "limit 1)" not in said  # round 1 and round 2 both
    refused = invoke("tune", str(path), "--budget", "200", "--max-failed", "0", "--dry-run")
    assert single_error(refused) == "--max-failed 0: must be 1 or more"


def test_estimate_gives_the_dry_run_totals_of_a_study_being_tuned(tmp_path: Path) -> None:
    """Round 1 done (built) in an earlier run: ``tune --dry-run`` and ``tuner estimate`` plan the
    rest alike, from what ran plus what is planned."""
    from tests.report_tests.builders import add_trial, study
    from tuner.playbook.decision_log import Stage

    built = study(tmp_path, round1={"steps": 10, "trials": 8})
    phase = built.start("round-1")
    for slot in range(6):  # 6 of the 8 trials ran
        add_trial(phase, slot, 0.1 * (slot + 1), {"optimizer.lr": 0.02 * (slot + 1)}, best_step=10)
    first = Stage("toy", "round-1", str(built.path), [], 8, 80, steps_per_trial=10)
    store_tune_state(built, first, "400", 400)
    common = ("--output-dir", str(built.output_dir), "--json")
    dry = invoke("tune", str(built.path), "--budget", "400", "--dry-run", *common)
    assert dry.exit_code == 0, dry.output
    planned = json.loads(dry.stdout)["plan"]
    estimate = invoke("estimate", str(built.path), *common)
    assert estimate.exit_code == 0, estimate.output
    assert json.loads(estimate.stdout)["tune"] == planned
    phases = {p["phase"]: p for p in planned["phases"]}
    assert phases["toy/round-1"]["steps_ran"] == 60 and phases["toy/round-1"]["steps_to_run"] == 20
    # round 2 at the file's 1 seed (2 seeds, 240 steps, would be more than half the budget): 120;
    # the round decided on its report takes the rest, 400 - 80 - 120
    assert phases["toy/round-2"]["steps"] == 120
    assert phases["toy/round-3"]["steps"] == 200 and phases["toy/round-3"]["upper_bound"]
    assert planned["steps"] == 400


def _sweep_study(folder: Path) -> Path:
    """The toy study leaving max_train_steps to sweep-lr: 3 LRs capped at 100 steps each."""
    path = tune_study(folder)
    document = yaml.safe_load(path.read_text())
    del document["training"]["max_train_steps"]
    document["sweep_lr"] = {"grid": [0.01, 0.1, 1.0], "max_steps": 100}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def test_the_sweep_is_capped_to_its_share_and_the_rounds_sized_after_it(tmp_path: Path) -> None:
    path = _sweep_study(tmp_path)
    result = invoke(
        "tune", str(path), "--budget", "500", "--dry-run", "--json", "--output-dir", str(tmp_path / "runs")
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)["plan"]
    sweep, *rounds = plan["phases"]
    # 3 x 100 steps would exceed 20% of 500: each LR capped at 100 // 3 on the eval grid (10)
    assert (sweep["phase"], sweep["trials"], sweep["steps_per_trial"]) == ("toy/sweep-lr", 3, 30)
    assert sweep["upper_bound"] and sweep["steps"] == 90
    assert [r["steps"] for r in rounds] == [None, None] and not plan["complete"]


def test_no_sweep_without_a_known_length_is_one_line(tmp_path: Path) -> None:
    path = _sweep_study(tmp_path)
    result = invoke(
        "tune", str(path), "--budget", "500", "--no-sweep", "--output-dir", str(tmp_path / "runs")
    )
    assert "--no-sweep skips tuner sweep-lr" in single_error(result)


def test_an_unknown_length_runs_the_sweep_first_and_the_rounds_at_its_answer(tmp_path: Path) -> None:
    path = _sweep_study(tmp_path)
    document = yaml.safe_load(path.read_text())
    document["sweep_lr"]["max_steps"] = 10
    document["rounds"]["round2"] = {"top_k": 1}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    output_dir = tmp_path / "runs"
    done = run_tuner(
        "tune", str(path), "--budget", "150", "--no-apply-suggestions", "--no-extra-round", "--json",
        "--no-progress", "--output-dir", str(output_dir),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert [s["phase"] for s in payload["stages"]] == ["sweep-lr", "round-1", "round-2"]
    sweep = payload["decisions"][1]
    assert sweep["kind"] == "sweep_planned" and sweep["numbers"]["steps"] == 30  # 3 LRs x 10 <= 20%
    fallback = [d for d in payload["decisions"] if d["kind"] == "max_train_steps_fallback"]
    length = fallback[0]["numbers"]["max_train_steps"] if fallback else None
    from tuner.orchestrate import open_storage
    from tuner.playbook.study_results import stored_recommendation

    length = length or stored_recommendation(open_storage(sqlite_url(output_dir)), "toy")
    assert payload["delivered_model"]["max_train_steps"] == length  # round 2 at the sweep's answer
    assert payload["plan"]["steps_ran"] == trained_steps(output_dir) <= 150


def test_a_search_seed_is_a_fresh_search_beside_the_first_that_the_same_command_continues(
    tmp_path: Path,
) -> None:
    """``--search-seed 7``: round 1 searches other points (search_seed 7's) on the same data
    split, as the study ``toy-search7`` with phases of its own, so the file's own search can
    still be run in the same output folder; the same command again continues it."""
    import optuna

    from tuner.orchestrate import open_storage
    from tuner.playbook import start_round
    from tuner.spec import load_study

    path = tune_study(tmp_path, top_k=1)
    output_dir = tmp_path / "runs"
    args = (
        "tune", str(path), "--budget", "80", "--no-apply-suggestions", "--no-extra-round", "--search-seed",
        "7", "--json", "--no-progress", "--workers", "1", "--output-dir", str(output_dir),
    )  # fmt: skip
    done = run_tuner(*args)
    assert done.returncode == 0, done.stderr
    assert "a fresh search: search_seed 7" in done.stderr and "studied as toy-search7" in done.stderr
    model = json.loads(done.stdout)["delivered_model"]
    assert "search_seed=7" in model["reproduce"] and "name=toy-search7" in model["reproduce"]
    assert Path(model["checkpoint"]).is_relative_to(output_dir / "toy-search7")
    assert not (output_dir / "toy").exists()  # the file's own search is untouched

    def points(study_path: Path, *overrides: str) -> list[dict[str, Any]]:
        plan = start_round(load_study(study_path, list(overrides)), "round-1", tmp_path / "plans").plan
        return [plan.params_for_slot(slot) for slot in range(4)]

    round1 = optuna.load_study(
        study_name="toy-search7/round-1", storage=open_storage(sqlite_url(output_dir, "toy-search7"))
    )
    stored = [t.params for t in sorted(round1.get_trials(), key=lambda t: t.user_attrs["slot"])]
    ran = len(stored)  # one trial at full length within 80 steps
    assert (
        ran >= 1 and stored == points(path, "search_seed=7", "name=toy-search7")[:ran] != points(path)[:ran]
    )

    again = run_tuner(*args)  # continues: nothing trained again, the same model
    assert again.returncode == 0, again.stderr
    assert "toy-search7/round-1: done in an earlier run" in again.stderr
    assert json.loads(again.stdout)["delivered_model"]["checkpoint"] == model["checkpoint"]
    first = invoke("tune", str(path), "--budget", "80", "--dry-run", "--output-dir", str(output_dir))
    assert first.exit_code == 0 and "plan for toy within 80" in first.output
    refused = invoke("tune", str(path), "--budget", "80", "--search-seed", "-1", "--dry-run")
    assert single_error(refused) == "--search-seed -1: must be 0 or more"
    both = invoke("tune", str(path), "--budget", "80", "--search-seed", "7", "--set=search_seed=3")
    assert single_error(both) == "--search-seed 7 and --set search_seed=...: give one of them"
