"""The delivered model's other validation metrics: every ``val/*`` its run logged at its best eval
(an objective of ``val/mse`` says nothing of ``val/r2``), in ``tuner report`` (terminal, JSON,
HTML) and ``tuner list``, from the run folder's ``metrics.csv``; on constructed studies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.report_tests.builders import Built, add_trial, run_folder, study
from tests.spec_tests._support import invoke, plain
from tuner.playbook.plan import load_plan

pytestmark = pytest.mark.usefixtures("clean_env")

# what a classifier's eval logs: the objective, its other figures, per-class figures, train/*
OTHERS = {"val/loss": 0.41, "val/accuracy": 0.88}
PER_CLASS = {"val/class_0_recall": 0.9, "val/class_1_recall": 0.86}


def _delivered_study(tmp_path: Path) -> tuple[Built, Path]:
    """Round 1, then round 2 (2 points at full length) whose trial 1 (0.12) is delivered; each run
    folder's metrics.csv holds its best eval's row. Returns the study and trial 1's folder."""
    built = study(tmp_path / "s", round2={"top_k": 2})
    round1 = built.start("round-1")
    for slot, (value, lr) in enumerate([(0.30, 0.05), (0.10, 0.1), (0.25, 0.2), (0.40, 0.5)]):
        add_trial(round1, slot, value, {"optimizer.lr": lr}, best_step=30)
    round2 = built.start("round-2")
    plan = load_plan(round2.user_attrs)
    assert plan is not None
    folders = []
    for slot, (planned, value) in enumerate(zip(plan.slots, [0.15, 0.12], strict=True)):
        metrics = {"val/error_rate": value, **OTHERS, **PER_CLASS, "train/loss": 0.2}
        folder = run_folder(
            built.output_dir / "toy" / "round-2" / f"trial-{slot}", best_step=40, metrics=metrics
        )
        add_trial(round2, slot, value, planned.values, best_step=40, run_dir=folder, **planned.attrs)
        folders.append(folder)
    return built, folders[1]


def _report(built: Built, *args: str) -> str:
    result = invoke("report", "toy", "--output-dir", str(built.output_dir), *args)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_the_delivered_runs_other_validation_metrics_are_shown_beside_its_objective(tmp_path: Path) -> None:
    pytest.importorskip("plotly")
    built, _ = _delivered_study(tmp_path)
    lines = plain(_report(built)).splitlines()
    delivered = next(i for i, line in enumerate(lines) if line.startswith("delivered "))
    assert "val/error_rate = 0.12 (minimize), round-2 trial 1 at step 40 of 40" in lines[delivered]
    # the others, in the order logged; the objective is on the line above; per class: --json
    assert lines[delivered + 1] == "val metrics  val/loss = 0.41, val/accuracy = 0.88, per class in --json"
    model = json.loads(_report(built, "--json"))["delivered_model"]
    assert model["val_metrics"] == {
        "values": {"val/error_rate": 0.12, **OTHERS, **PER_CLASS},  # every val/*, no train/*
        "unreadable": None,
    }
    [row] = json.loads(invoke("list", "--json", "--output-dir", str(built.output_dir)).stdout)
    assert row["delivered_model"]["val_metrics"] == model["val_metrics"]
    listed = plain(invoke("list", "--output-dir", str(built.output_dir)).stdout)
    assert "val metrics  val/loss = 0.41, val/accuracy = 0.88, per class in --json" in listed
    page = tmp_path / "report.html"
    _report(built, "--html", str(page))
    html = page.read_text()
    section = html[html.index("<h2>delivered model</h2>") : html.index("<section class='phase'")]
    assert "<tr><th>val/error_rate</th><td>0.12</td></tr>" in section
    assert "<tr><th>val/loss</th><td>0.41</td></tr><tr><th>val/accuracy</th><td>0.88</td></tr>" in section
    assert "<tr><th>per class</th><td>in tuner report --json (val_metrics)</td></tr>" in section


def test_metrics_that_cannot_be_read_say_which_file_and_why(tmp_path: Path) -> None:
    """The delivered run's metrics.csv is gone (a run folder cleaned up, or another machine's)."""
    built, folder = _delivered_study(tmp_path)
    (folder / "metrics.csv").unlink()
    text = " ".join(plain(_report(built)).split())
    said = text[text.index("val metrics ") :].split(" seeds ")[0]  # the path as the report shows paths
    assert said.startswith("val metrics not read: ") and said.endswith(
        "toy/round-2/trial-1/metrics.csv: missing"
    )
    model = json.loads(_report(built, "--json"))["delivered_model"]
    missing = {"path": str(folder / "metrics.csv"), "problem": "missing"}
    assert model["val_metrics"] == {"values": {}, "unreadable": missing}
