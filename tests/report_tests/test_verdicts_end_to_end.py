"""The transfer and health verdicts on rounds the real worker ran (the toy workload, seconds each):
what the worker records (trial attributes, ``status.json``'s ``eval_examples``) is what the report
reads, through ``tuner report --json``."""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest
import yaml
from scipy.stats import binomtest

from tests.orchestrate_tests.conftest import run_tuner, toy_study
from tests.spec_tests._support import invoke


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TUNER_STORAGE", raising=False)
    monkeypatch.delenv("TUNER_OUTPUT_DIR", raising=False)


def _run(path: Path, output: Path, round_: int) -> None:
    ran = run_tuner(
        "run-round", str(path), "--round", str(round_), "--output-dir", str(output), "--no-progress"
    )
    assert ran.returncode in (0, 1), ran.stdout + ran.stderr  # 1: trials failed, a verdict to read


def _report(path: Path, output: Path) -> dict[str, Any]:
    shown = invoke("report", str(path), "--output-dir", str(output), "--json")
    assert shown.exit_code == 0, shown.output
    return json.loads(shown.stdout)


def _apart(a: list[float], b: list[float]) -> bool:
    return a[1] < b[0] or b[1] < a[0]


def test_transfer_of_real_rounds_measures_the_noise_of_the_eval_set(tmp_path: Path) -> None:
    path = toy_study(tmp_path, round1={"trials": 4, "steps": 20}, max_train_steps=40)
    document = yaml.safe_load(path.read_text())
    document["rounds"]["round2"] = {"top_k": 3}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    output = tmp_path / "runs"
    _run(path, output, 1)
    _run(path, output, 2)

    report = _report(path, output)
    round2 = report["phases"][0]
    assert round2["phase"] == "round-2" and round2["counts"]["complete"] == 3
    run_dir = Path(round2["best_trial"]["run_dir"])
    examples = json.loads((run_dir / "status.json").read_text())["eval_examples"]["val"]
    assert examples == 32  # the toy workload validates on 32 examples
    transfer = round2["transfer"]
    assert transfer["source_phase"] == "round-1" and len(transfer["points"]) == 3
    for point in transfer["points"]:  # each value's band is the Wilson interval of its error count
        for value, band in ((point["value"], point["noise"]), (point["source_value"], point["source_noise"])):
            wilson = binomtest(round(value * examples), examples).proportion_ci(0.95, method="wilson")
            assert band == pytest.approx([wilson.low, wilson.high])
    (verdict,) = [v for v in transfer["verdicts"] if v["kind"] == "rank_correlation"]
    changed = sum(
        1
        for a, b in combinations(transfer["points"], 2)
        if _apart(a["source_noise"], b["source_noise"])
        and _apart(a["noise"], b["noise"])
        and (a["source_value"] - b["source_value"]) * (a["value"] - b["value"]) < 0
    )
    assert verdict["changed_beyond_noise"] == changed
    if verdict["spearman"] is None:
        expected = "too_few"
    elif verdict["spearman"] >= 0.5:
        expected = "good"
    elif changed == 0:
        expected = "within_noise"
    else:
        expected = "weak" if verdict["spearman"] >= 0 else "reversed"
    assert verdict["quality"] == expected, verdict
    assert "32 eval examples" in verdict["rule"] + (verdict.get("noise") or "")


def test_health_of_a_real_round_where_every_trial_failed(tmp_path: Path) -> None:
    path = toy_study(
        tmp_path,
        options={"fail": "raise_at_step", "fail_at_step": 2},  # after a step: not a broken workload
        round1={"trials": 2, "steps": 20, "max_retries": 0, "max_failed": 2},
    )
    output = tmp_path / "runs"
    _run(path, output, 1)

    (phase,) = _report(path, output)["phases"]
    assert phase["counts"]["failed"] == 2
    (rate,) = [v for v in phase["health"]["verdicts"] if v["kind"] == "failure_rate"]
    reason, count = max(phase["health"]["failure_reasons"].items(), key=lambda item: item[1])
    assert rate["level"] == "warning" and (rate["failed"], rate["finished"]) == (2, 2)
    assert f"all 2 trials failed (top reason: {reason}, {count} of 2" in rate["text"]
    assert phase["next_steps"][0].startswith("read the failed trials' error.log")


def test_health_of_a_real_single_trial_round_is_too_few_to_judge(tmp_path: Path) -> None:
    learns = {"optimizer.lr": {"type": "float", "low": 0.3, "high": 0.5}}  # so "nothing learned" stays out
    path = toy_study(tmp_path, search_space=learns, round1={"trials": 1, "steps": 40})
    output = tmp_path / "runs"
    _run(path, output, 1)

    (phase,) = _report(path, output)["phases"]
    assert phase["counts"]["complete"] == 1
    assert phase["next_steps"] == [
        "only 1 completed trial: too few to judge this phase (its verdicts need at least 3); nothing here "
        "says the phase is fine"
    ]
