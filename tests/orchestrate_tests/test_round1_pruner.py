"""``rounds.round1.pruner``: round 1's trials stopped early from their eval curves (Optuna's
pruners, asked by the worker at each eval), and ``tune`` spending the steps they freed on more
points of the same round.

The toy workload is told which learning rates fit the data and from which step
(``fit_at_steps``): a trial at 0.1 has error 0 from step 10, one at 0.5 stays at the share of the
other class. So once 4 trials have completed, half of them at each, the median rule must stop
every later 0.5 trial (worse than the median at step 10) and no 0.1 trial."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from tests.cli_tests._tune_support import state
from tests.orchestrate_tests.conftest import load_phase, run_tuner, sqlite_url, toy_study

GOOD, BAD = 0.1, 0.5
SPACE = {"optimizer.lr": {"type": "categorical", "choices": [GOOD, BAD]}}


def _study(folder: Path, trials: int, pruner: str = "median") -> Path:
    """Trials of 30 steps, an eval every 5; each step sleeps 40 ms, so the worker's verdict on
    an eval reaches the trial well before the next one (0.2 s later)."""
    path = toy_study(
        folder,
        options={"fit_at_steps": [[GOOD, 5]], "step_sleep_s": 0.04},
        search_space=SPACE,
        round1={"trials": trials, "steps": 30, "pruner": pruner, "sampler": "random"},
        max_train_steps=30,
        eval_every=5,
        log_every=5,
    )
    document = yaml.safe_load(path.read_text())
    document["rounds"]["round2"] = {"top_k": 1}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def test_the_median_rule_stops_the_trials_behind_and_none_ahead(tmp_path: Path, output_dir: Path) -> None:
    study = _study(tmp_path, trials=10)
    done = run_tuner(
        "run-round", str(study), "--round", "1", "--output-dir", str(output_dir), "--workers", "1"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    trials = sorted(load_phase(sqlite_url(output_dir), "toy").trials, key=lambda t: t.number)
    assert len(trials) == 10
    # the median rule, by hand: a BAD trial is stopped once 4 trials have completed and at least
    # as many of them are GOOD (error 0) as BAD (the median at step 10 is then below its error)
    good = bad = 0
    expected_pruned = []
    for trial in trials:
        lr = trial.params["optimizer.lr"]
        if lr == BAD and good + bad >= 4 and good >= bad:
            expected_pruned.append(trial.number)
        else:
            good, bad = good + (lr == GOOD), bad + (lr == BAD)
    assert expected_pruned  # the seed's draw has both kinds after the first 4
    for trial in trials:
        if trial.number in expected_pruned:
            # judged at its first eval past a third of the length (10), stopped at the next one:
            # the worker learns the verdict after the eval it judged
            assert trial.state.name == "PRUNED" and trial.user_attrs["pruned_at"] == 10, trial.user_attrs
            assert 15 <= trial.user_attrs["final_step"] < 30  # 15 unless the machine stalls
        else:
            assert trial.state.name == "COMPLETE" and trial.user_attrs["final_step"] == 30
    assert re.search(r"stopped at step (15|20|25): pruned \(behind the others at step 10\)", done.stderr)


def test_a_later_round_cannot_prune(tmp_path: Path) -> None:
    study = _study(tmp_path, trials=4)
    document = yaml.safe_load(study.read_text())
    document["rounds"]["round2"] = {"pruner": "median"}
    study.write_text(yaml.safe_dump(document))
    done = run_tuner("validate", str(study), "--no-build")
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .endswith("rounds: round2.pruner: only round 1 stops trials early (round1.pruner)")
    )


def test_tune_spends_the_freed_steps_on_more_round1_points(tmp_path: Path, output_dir: Path) -> None:
    study = _study(tmp_path, trials=4)
    done = run_tuner(
        "tune", str(study), "--budget", "360", "--no-extra-round", "--output-dir", str(output_dir),
        "--workers", "1", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    stored = state(output_dir)
    round1 = next(s for s in stored["stages"] if s["phase"] == "round-1")
    decided = next(d for d in stored["decisions"] if d["kind"] == "round1_trials")
    more = [d for d in stored["decisions"] if d["kind"] == "round1_freed_steps"]
    trials = load_phase(sqlite_url(output_dir), "toy").trials
    trained = sum(int(t.user_attrs.get("final_step") or 0) for t in trials)
    assert any(t.state.name == "PRUNED" for t in trials)
    assert more and round1["trials"] == decided["numbers"]["trials"] + sum(d["numbers"]["more"] for d in more)
    assert len(trials) == round1["trials"] > decided["numbers"]["trials"]
    # the round's share never grows: what is left of it holds less than one more trial
    assert round1["planned_steps"] == decided["numbers"]["steps"]
    assert 0 <= round1["planned_steps"] - trained < 30
    assert json.loads(done.stdout)["delivered_model"]["phase"] == "round-2"
