"""Round 1 -> round 2 transfer against noise: an order change is a reversal only when it is larger
than the values' sampling noise (a binomial interval of the error count when the eval set size is
known, the spread across seeds when a point has several)."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from tests.report_tests.builders import Built, add_trial, run_folder, study
from tests.report_tests.test_verdicts import LR, only, report_of
from tuner.playbook.plan import load_plan

EXAMPLES = 360


def _rounds(
    tmp_path: Path,
    round1: list[float],
    round2: list[list[float]],
    *,
    examples: int | None = EXAMPLES,
    round1_best_step: int = 20,
) -> Built:
    """Round 1's values (the first three are round 2's points, in slot order) and, per point, its
    round-2 values (one per seed); ``examples``: the eval set size the run folders record."""
    seeds = len(round2[0])
    built = study(tmp_path, round2={"top_k": 3, "seeds": seeds})
    first = built.start("round-1")

    def folder(name: str, value: float) -> dict[str, Path]:
        if examples is None:
            return {}
        status = {"eval_examples": {"val": examples}}
        where = tmp_path / "runs-by-hand" / name
        return {"run_dir": run_folder(where, best_step=20, metrics={"val/error_rate": value}, status=status)}

    for slot, value in enumerate(round1):
        add_trial(
            first,
            slot,
            value,
            {LR: 0.05 * (slot + 1)},
            best_step=round1_best_step,
            **folder(f"r1-{slot}", value),
        )
    second = built.start("round-2")
    plan = load_plan(second.user_attrs)
    assert plan is not None
    for slot, planned in enumerate(plan.slots):
        point = sorted({s.attrs["source_trial"] for s in plan.slots}).index(planned.attrs["source_trial"])
        value = round2[point][int(planned.attrs.get("seed_index", 0)) % seeds]
        add_trial(
            second, slot, value, planned.values, best_step=20, **planned.attrs, **folder(f"r2-{slot}", value)
        )
    return built


def _errors(*counts: int) -> list[float]:
    return [count / EXAMPLES for count in counts]


def test_an_order_change_of_a_few_errors_in_360_is_noise_not_a_reversal(tmp_path: Path) -> None:
    # a within-the-noise case: round 2 scored 9, 7 and 6 errors of 360 against round 1's order (two tied)
    round1 = _errors(20, 22, 22, 40, 50)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no scipy warning leaks on tied values
        report = report_of(_rounds(tmp_path, round1, [[v] for v in _errors(9, 7, 6)]))
    transfer = report.phases[0].transfer
    assert transfer is not None
    correlation = only(transfer.findings, "rank_correlation")
    assert correlation.spearman == pytest.approx(-0.866, abs=1e-3)
    assert (correlation.quality, correlation.level) == ("within_noise", "info")
    assert "reversed" not in correlation.text and "noise" in correlation.text
    assert correlation.changed_beyond_noise == 0
    assert not any("lengthen" in step for step in report.phases[0].next_steps)
    point = transfer.points[0]
    assert point.noise is not None and point.noise.low < point.value < point.noise.high


def test_an_order_change_far_beyond_the_binomial_noise_is_a_reversal(tmp_path: Path) -> None:
    report = report_of(_rounds(tmp_path, _errors(10, 40, 80, 90, 100), [[v] for v in _errors(80, 40, 10)]))
    transfer = report.phases[0].transfer
    assert transfer is not None
    correlation = only(transfer.findings, "rank_correlation")
    assert (correlation.quality, correlation.level) == ("reversed", "warning")
    assert correlation.changed_beyond_noise == 3
    assert "beyond" in correlation.text and "Wilson" in correlation.rule


def test_the_spread_across_seeds_is_the_noise_when_points_have_several(tmp_path: Path) -> None:
    # no eval set size recorded: the seeds alone measure the noise
    wide = [[0.30, 0.10], [0.25, 0.15], [0.22, 0.12]]  # seeds disagree more than the points do
    report = report_of(_rounds(tmp_path / "wide", [0.10, 0.12, 0.14, 0.5, 0.6], wide, examples=None))
    assert report.phases[0].transfer is not None
    assert only(report.phases[0].transfer.findings, "rank_correlation").quality == "within_noise"
    tight = [[0.301, 0.299], [0.201, 0.199], [0.101, 0.099]]
    report = report_of(_rounds(tmp_path / "tight", [0.10, 0.20, 0.30, 0.5, 0.6], tight, examples=None))
    assert report.phases[0].transfer is not None
    correlation = only(report.phases[0].transfer.findings, "rank_correlation")
    assert (correlation.quality, correlation.changed_beyond_noise) == ("reversed", 3)


def test_with_no_measure_of_noise_a_reversal_says_so_and_asks_for_seeds(tmp_path: Path) -> None:
    report = report_of(_rounds(tmp_path, [0.10, 0.20, 0.30, 0.5, 0.6], [[0.3], [0.2], [0.1]], examples=None))
    assert report.phases[0].transfer is not None
    correlation = only(report.phases[0].transfer.findings, "rank_correlation")
    assert correlation.quality == "reversed" and correlation.changed_beyond_noise is None
    assert "noise not measured" in correlation.text and "seeds" in correlation.advice


def test_too_few_points_to_measure_does_not_advise_lengthening_round_1(tmp_path: Path) -> None:
    # round 1's best-step verdict: still improving at its end (best step 40 of 40, and eval_every 5
    # gives 2 evals in its last 25%); round 2: 2 of 3 points have a value
    report = report_of(_two_points(tmp_path / "few"))
    transfer = report.phases[0].transfer
    assert transfer is not None
    assert only(transfer.findings, "rank_correlation").quality == "too_few"
    short = only(transfer.findings, "source_too_short")
    assert short.level == "info" and short.advice is None
    assert not any("lengthen" in step for step in report.phases[0].next_steps)


def _two_points(tmp_path: Path) -> Built:
    built = study(tmp_path, eval_every=5, round2={"top_k": 3})
    first = built.start("round-1")
    for slot, value in enumerate([0.10, 0.20, 0.30, 0.40, 0.50]):
        add_trial(first, slot, value, {LR: 0.05 * (slot + 1)}, best_step=40)
    second = built.start("round-2")
    plan = load_plan(second.user_attrs)
    assert plan is not None
    for slot in range(2):
        add_trial(
            second, slot, 0.1 * (slot + 1), plan.slots[slot].values, best_step=20, **plan.slots[slot].attrs
        )
    add_trial(
        second, 2, None, plan.slots[2].values, state="FAIL", failure_reason="crashed", **plan.slots[2].attrs
    )
    return built


def test_round_2_values_all_equal_cannot_be_ranked_and_no_scipy_warning_leaks(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # scipy's ConstantInputWarning would be an error here
        report = report_of(_rounds(tmp_path, _errors(20, 22, 22, 40, 50), [[v] for v in _errors(7, 7, 7)]))
    assert report.phases[0].transfer is not None
    correlation = only(report.phases[0].transfer.findings, "rank_correlation")
    assert (correlation.quality, correlation.spearman, correlation.level) == ("too_few", None, "info")
    assert "round-2's 3 points all scored 0.01944 (7 of 360 eval examples)" in correlation.text


def _weak(tmp_path: Path, round1: int) -> Any:
    """Round 2 retrains 4 points, ranking them 3, 1, 2, 4 (Spearman 0.4: weak, noise unmeasured)."""
    built = study(tmp_path, round1={"trials": round1}, round2={"top_k": 4})
    first = built.start("round-1")
    for slot in range(round1):
        add_trial(first, slot, 0.1 * (slot + 1), {LR: 0.05 * (slot + 1)}, best_step=20)
    second = built.start("round-2")
    plan = load_plan(second.user_attrs)
    assert plan is not None
    for slot, value in enumerate([0.3, 0.1, 0.2, 0.4]):
        add_trial(second, slot, value, plan.slots[slot].values, best_step=20, **plan.slots[slot].attrs)
    assert report_of(built).phases[0].transfer is not None
    return only(report_of(built).phases[0].transfer.findings, "rank_correlation")


def test_weak_transfer_suggests_more_points_only_when_round_1_has_more(tmp_path: Path) -> None:
    every = _weak(tmp_path / "every", 4)  # round 2 took every point round 1 had
    assert (every.quality, every.spearman) == ("weak", pytest.approx(0.4))
    assert "top_k" not in every.advice and "lengthen round-1's trials" in every.advice
    more = _weak(tmp_path / "more", 6)
    assert more.quality == "weak" and "take more of its points (top_k)" in more.advice


def test_an_order_only_the_long_runs_can_see_is_said_as_found_not_as_a_tie(tmp_path: Path) -> None:
    """Round 1 at 14, 17 and 20 errors of 360 (inside each other's noise), round 2 at 108, 36 and
    4: no pair changed order beyond both rounds' noise, yet round 2 tells every pair apart. The
    report says what round 2 found, not that the points are as good as each other."""
    report = report_of(_rounds(tmp_path, _errors(14, 17, 20, 40, 50), [[v] for v in _errors(108, 36, 4)]))
    transfer = report.phases[0].transfer
    assert transfer is not None
    correlation = only(transfer.findings, "rank_correlation")
    assert correlation.quality == "within_noise" and correlation.changed_beyond_noise == 0
    assert "round-1 could not tell these points apart" in correlation.text
    assert "and round-2 does: 3 of 3 pairs apart beyond its noise" in correlation.text
    assert "its best is trial 2's point (0.01111): trust round-2's order" in correlation.text
    assert "as good as each other" not in correlation.text


def test_points_a_small_split_scores_alike_are_said_to_need_a_larger_split(tmp_path: Path) -> None:
    """Round 1's top 3 all at 3 errors of 114 validation examples: the split cannot separate
    them, and the report says so with what would (not "Spearman undefined")."""
    examples = 114
    round1 = [3 / examples] * 3 + [10 / examples, 20 / examples]
    built = _rounds(tmp_path, round1, [[2 / examples], [5 / examples], [9 / examples]], examples=examples)
    correlation = only(report_of(built).phases[0].transfer.findings, "rank_correlation")
    assert correlation.quality == "too_few"
    assert correlation.text == (
        "round-1's 3 points all scored 0.02632 (3 of 114 eval examples): a split of 114 examples "
        "moves the value in steps of 0.008772, too coarse to separate them, so the ranking cannot "
        "be compared"
    )
    assert "a larger validation split would separate them" in correlation.advice


def test_the_same_order_inside_the_noise_is_not_said_to_have_held(tmp_path: Path) -> None:
    """With 3 points rho >= 0.5 comes by chance half the time: an order that agrees only by values
    inside each other's noise says nothing about whether round 1's ranking held."""
    report = report_of(_rounds(tmp_path, _errors(20, 21, 22, 40, 50), [[v] for v in _errors(9, 10, 11)]))
    transfer = report.phases[0].transfer
    assert transfer is not None
    correlation = only(transfer.findings, "rank_correlation")
    assert correlation.spearman == pytest.approx(1.0)
    assert (correlation.quality, correlation.kept_beyond_noise) == ("within_noise", 0)
    assert "only inside the noise" in correlation.text and "held" not in correlation.text.split(":")[0]


def test_the_same_order_beyond_the_noise_held(tmp_path: Path) -> None:
    report = report_of(_rounds(tmp_path, _errors(10, 40, 80, 90, 100), [[v] for v in _errors(10, 40, 80)]))
    transfer = report.phases[0].transfer
    assert transfer is not None
    correlation = only(transfer.findings, "rank_correlation")
    assert (correlation.quality, correlation.level, correlation.kept_beyond_noise) == ("good", "ok", 3)
    assert "ranking held at full length" in correlation.text


def test_the_rank_correlation_is_computed_without_importing_scipy_stats(tmp_path: Path) -> None:
    """Importing ``scipy.stats`` costs half a CPU second, which every report with a round 2 paid
    for one Spearman's rho (``tune`` builds such a report after each round 2): a fresh process
    builds the report, the rho is scipy's (-0.866 on these tied values), and ``scipy.stats`` was
    never imported."""
    built = _rounds(tmp_path, _errors(20, 22, 22, 40, 50), [[v] for v in _errors(9, 7, 6)])
    script = (
        "import json, sys\n"
        "from tuner.report.build import build_report\n"
        "from tuner.report.study_data import read_study\n"
        "from tuner.orchestrate.stored import open_reader\n"
        f"with open_reader({built.storage_url!r}) as reader:\n"
        f"    report = build_report(read_study(reader, {built.name!r}, None))\n"
        "rho = [f.spearman for f in report.phases[0].transfer.findings if f.kind == 'rank_correlation']\n"
        "print(json.dumps([rho, 'scipy.stats' in sys.modules]))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    [rho], imported = json.loads(done.stdout)
    assert rho == pytest.approx(-0.866, abs=1e-3)
    assert imported is False
