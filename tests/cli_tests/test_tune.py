"""``tuner tune STUDY --budget N``: the whole procedure within one budget, end to end, and the
same command continuing it after Ctrl-C, kill -9, a larger budget or a fixed bug in the workload.

Real runs on the toy workload with budgets of 80 to 240 steps: trials of the full 40 steps (round
1 at full length, tune's default), round 2 of one point (``top_k: 1``) wherever a test needs no more.
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

from tests.cli_tests._tune_support import state, trained_steps, tune_args, tune_study
from tests.orchestrate_tests.conftest import (
    PATIENCE_S,
    load_phase,
    run_tuner,
    sqlite_url,
    start_tuner,
    toy_study,
)
from tests.spec_tests._support import invoke, single_error


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
    # the delivered run's other validation metrics of the same eval, beside its objective
    assert {"val/error_rate", "val/loss", "val/accuracy"} <= set(model["val_metrics"]["values"])
    assert "\nval metrics  val/loss = " in done.stderr and ", val/accuracy = " in done.stderr
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
    no step is trained twice (the interrupted trial resumes at the step it reached). Budget 200:
    round 2 of one point on 2 seeds (80 steps), round 1 the 3 trials of 40 steps left (120)."""
    path = toy_study(tmp_path, round1={"steps": 20, "trials": 4}, options={"step_sleep_s": 0.05})
    document = yaml.safe_load(path.read_text())
    document["rounds"]["round2"] = {"top_k": 1}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    output_dir = tmp_path / "runs"
    args = ("tune", str(path), "--budget", "200", "--no-apply-suggestions", "--no-extra-round",
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
        time.sleep(0.2)  # the trial it waits for trains 40 steps of 0.05 s: 2 s at least
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
    assert not planned["done"] and planned["trials"] == 3  # 120 of the 200 steps
    again = run_tuner(*args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "delivered    val/error_rate" in again.stdout
    trials = round1_trials()
    finals = {t.user_attrs["slot"]: t for t in trials if t.state.name == "COMPLETE"}
    assert sorted(finals) == list(range(planned["trials"]))  # every slot once, none more
    assert trained_steps(output_dir) <= 200
    if stop == "ctrl-c":
        (stopped,) = [t for t in trials if t.user_attrs.get("failure_reason") == "interrupted"]
        (resumed,) = [t for t in trials if t.user_attrs.get("retry_of") == stopped.number]
        reached = stopped.user_attrs["last_checkpoint_step"]
        assert reached > 0 and resumed.user_attrs["resumed_from_step"] == reached  # no step twice


def test_a_finished_tune_given_a_larger_budget_goes_on_from_what_ran(tmp_path: Path) -> None:
    """``--budget 160`` to the end, then ``--budget 240``: nothing that ran is run again, the
    steps spent count, and the rest goes to more rounds of the best points (decided on the last
    round's report), within the new budget; a smaller budget (200: larger than the first, not
    than the last), or one of another kind, is refused."""
    path = tune_study(tmp_path, top_k=1)
    output_dir = tmp_path / "runs"
    built = SimpleNamespace(path=path, output_dir=output_dir)
    first = run_tuner(*tune_args(built, 160, "--no-apply-suggestions"))
    assert first.returncode == 0, first.stderr
    spent = json.loads(first.stdout)["plan"]["steps_ran"]
    phases = [s["phase"] for s in json.loads(first.stdout)["stages"]]
    more = run_tuner(*tune_args(built, 240, "--no-apply-suggestions"))
    assert more.returncode == 0, more.stderr
    payload = json.loads(more.stdout)
    raised = [d for d in payload["decisions"] if d["kind"] == "budget_raised"]
    assert (
        len(raised) == 1
        and raised[0]["numbers"]["from_steps"] == 160
        and raised[0]["numbers"]["steps"] == 240
    )
    assert "budget raised 160 -> 240 training steps" in more.stderr
    assert "budget: 160 of 240 steps spent (67%), at most about " in more.stderr  # where it stands
    stages = [s["phase"] for s in payload["stages"]]
    assert stages[: len(phases)] == phases and len(stages) > len(phases)  # more rounds, none redone
    assert all(s["done"] for s in payload["stages"])
    assert spent < payload["plan"]["steps_ran"] == trained_steps(output_dir) <= 240
    assert payload["delivered_model"]["checkpoint"]
    for budget, said in (("200", "run the same command to continue it"), ("5m", "of the same kind")):
        refused = invoke("tune", str(path), "--budget", budget, "--output-dir", str(output_dir))
        assert "is being tuned with --budget 240" in single_error(refused) and said in single_error(refused)


def _with_a_bug(folder: Path, line: str, bug: str) -> tuple[Path, Path, str]:
    """The tune study (round 2 of one point) with ``bug`` (lines of code) added to its toy
    workload after ``line``: the study file, the workload file and the workload's fixed text.
    At ``--budget 120 --no-extra-round`` round 1 has 2 trials of 40 steps, round 2 one."""
    path = tune_study(folder, top_k=1)
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
    args = tune_args(SimpleNamespace(path=path, output_dir=output_dir), 120, "--no-extra-round")
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
    args = tune_args(SimpleNamespace(path=path, output_dir=output_dir), 120, "--no-extra-round")
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
    path = tune_study(tmp_path, top_k=1)  # at 80 steps: round 1 and round 2 of one 40-step trial
    output_dir = tmp_path / "runs"
    args = ("tune", str(path), "--budget", "80", "--no-progress", "--output-dir", str(output_dir))
    done = run_tuner(*args, "--no-extra-round", "--workers", "1", "--max-failed", "7")
    assert done.returncode == 0, done.stderr
    said = done.stdout + done.stderr
    assert "failure budget: 7 failed trials in each phase it runs (--max-failed)" in said
    assert said.count("0 failed (limit 7)") >= 2 and "limit 1)" not in said  # round 1 and round 2 both
    refused = invoke("tune", str(path), "--budget", "200", "--max-failed", "0", "--dry-run")
    assert single_error(refused) == "--max-failed 0: must be 1 or more"
    refused = invoke("tune", str(path), "--budget", "200", "--nothing-fits-scale", "0", "--dry-run")
    assert single_error(refused) == "--nothing-fits-scale 0: between 0.1 and 10"


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
