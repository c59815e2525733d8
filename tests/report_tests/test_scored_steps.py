"""Every phase scores its trials on steps the others share, or the report says it cannot compare them.

Round 1 given ``steps: 35`` with ``eval_every`` 10 is last scored at step 35; round 2 at full
length evaluates 10, 20, ... 100 and never step 35. The transfer verdict then compares values
taken at different steps, and the report says so, on both sides of the rule.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.orchestrate_tests.conftest import run_tuner
from tests.report_tests.builders import Built, add_trial, study
from tests.report_tests.test_verdicts import LR, kinds, only, report_of
from tuner.playbook.plan import load_plan

ROUND1 = [0.10, 0.20, 0.30, 0.40]
ROUND2 = [0.11, 0.21, 0.31]  # the same order: the ranking held


def _rounds(
    tmp_path: Path,
    round1_steps: int,
    *,
    max_train_steps: int = 100,
) -> Built:
    """Round 1 of ``round1_steps`` (eval_every 10), then round 2 at ``max_train_steps`` over its top 3."""
    built = study(
        tmp_path,
        round1={"steps": round1_steps},
        round2={"top_k": 3, "seeds": 1},
        max_train_steps=max_train_steps,
    )
    first = built.start("round-1")
    for slot, value in enumerate(ROUND1):
        add_trial(first, slot, value, {LR: 0.05 * (slot + 1)}, best_step=round1_steps)
    second = built.start("round-2")
    plan = load_plan(second.user_attrs)
    assert plan is not None
    sources = sorted(s.attrs["source_trial"] for s in plan.slots)
    for slot, planned in enumerate(plan.slots):
        value = ROUND2[sources.index(planned.attrs["source_trial"])]
        add_trial(second, slot, value, planned.values, best_step=max_train_steps, **planned.attrs)
    return built


def _transfer_findings(built: Built) -> list[Any]:
    transfer = report_of(built).phases[0].transfer
    assert transfer is not None
    return transfer.findings


def test_round1_ending_off_round2s_eval_grid_cannot_be_compared_step_for_step(tmp_path: Path) -> None:
    findings = _transfer_findings(_rounds(tmp_path, 35))
    found = only(findings, "scored_at_other_steps")
    assert found.steps == (35,) and found.level == "warning"
    assert (found.source_trial_steps, found.eval_every, found.trial_steps) == (35, 10, 100)
    assert "step 35" in found.text and "cannot be compared" in found.text
    assert "rounds.round1.steps" in found.advice and "40 is on the grid" in found.advice
    assert kinds(findings)[0] == "scored_at_other_steps"  # read before the verdict it qualifies
    assert only(findings, "rank_correlation").quality == "good"  # still measured, with the caveat


def test_round1_on_the_eval_grid_is_compared_without_a_caveat(tmp_path: Path) -> None:
    assert "scored_at_other_steps" not in kinds(_transfer_findings(_rounds(tmp_path, 40)))


def test_an_off_grid_round1_that_round2_also_ends_at_is_compared(tmp_path: Path) -> None:
    # 95 is off the grid of 10, but round 2's runs of 95 steps end (and are evaluated) there too
    built = _rounds(tmp_path, 95, max_train_steps=95)
    assert "scored_at_other_steps" not in kinds(_transfer_findings(built))


def test_the_report_command_says_it_in_the_terminal_and_the_json(tmp_path: Path) -> None:
    built = _rounds(tmp_path, 35)
    done = run_tuner("report", str(built.path), "--output-dir", str(built.output_dir))
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stdout.split())  # the terminal wraps long lines
    assert "round-1 scored its trials at step 35, which round-2 never evaluates" in said
    done = run_tuner("report", str(built.path), "--output-dir", str(built.output_dir), "--json")
    assert done.returncode == 0, done.stderr
    phase = next(p for p in json.loads(done.stdout)["phases"] if p["phase"] == "round-2")
    verdict = next(v for v in phase["transfer"]["verdicts"] if v["kind"] == "scored_at_other_steps")
    assert verdict["steps"] == [35] and verdict["source_phase"] == "round-1"
