"""Round 2's ``lr_multipliers`` against noise: a multiplier beats x1 only when its noise band (the
Wilson interval of its error count, widened to its seeds' range) is apart from x1's; otherwise the
multipliers are within noise and x1 stays."""

from __future__ import annotations

from pathlib import Path

from tests.report_tests.builders import Built, add_trial, run_folder, study
from tests.report_tests.test_verdicts import LR, only, report_of
from tuner.playbook.plan import load_plan

EXAMPLES = 360


def _multiplied(
    tmp_path: Path, values: dict[float, list[list[float]]], *, examples: int | None = EXAMPLES
) -> Built:
    """Round 2 over round 1's 3 best points at ``values``' multipliers: ``values[m][point]`` is the
    point's values at multiplier ``m``, one per seed; ``examples``: the eval set size recorded."""
    seeds = len(next(iter(values.values()))[0])
    built = study(tmp_path, round2={"top_k": 3, "seeds": seeds, "lr_multipliers": sorted(values)})
    first = built.start("round-1")
    for slot, value in enumerate([0.10, 0.12, 0.14, 0.5, 0.6]):
        add_trial(first, slot, value, {LR: 0.05 * (slot + 1)}, best_step=20)
    second = built.start("round-2")
    plan = load_plan(second.user_attrs)
    assert plan is not None
    sources = sorted({s.attrs["source_trial"] for s in plan.slots})
    for slot, planned in enumerate(plan.slots):
        point = sources.index(planned.attrs["source_trial"])
        multiplier = float(planned.attrs["lr_multiplier"])
        value = values[multiplier][point][int(planned.attrs.get("seed_index", 0)) % seeds]
        where = {}
        if examples is not None:
            status = {"eval_examples": {"val": examples}}
            folder = tmp_path / "runs-by-hand" / f"r2-{slot}"
            metrics = {"val/error_rate": value}
            where = {"run_dir": run_folder(folder, best_step=20, metrics=metrics, status=status)}
        add_trial(second, slot, value, planned.values, best_step=20, **planned.attrs, **where)
    return built


def _verdict(built: Built) -> tuple[object, list[str]]:
    report = report_of(built)
    transfer = report.phases[0].transfer
    assert transfer is not None
    return only(transfer.findings, "lr_multiplier"), report.phases[0].next_steps


def _errors(*counts: int) -> list[list[float]]:
    return [[count / EXAMPLES] for count in counts]


def test_a_multiplier_one_error_better_in_360_is_within_noise_and_x1_stays(tmp_path: Path) -> None:
    verdict, steps = _verdict(_multiplied(tmp_path, {1.0: _errors(20, 22, 25), 2.0: _errors(19, 21, 24)}))
    assert verdict.level == "info" and verdict.advice is None
    assert verdict.wins == {"1": 3} and verdict.within_noise == 3
    assert "within noise" in verdict.text and "keep x1" in verdict.text
    assert "Wilson" in verdict.rule
    assert not any("retune" in step for step in steps)


def test_a_multiplier_far_beyond_the_binomial_noise_moves_the_lr(tmp_path: Path) -> None:
    verdict, _ = _verdict(_multiplied(tmp_path, {1.0: _errors(60, 62, 65), 2.0: _errors(10, 12, 15)}))
    assert verdict.level == "warning" and "retune the LR" in verdict.advice
    assert verdict.wins == {"2": 3} and verdict.within_noise == 0
    assert "x2 better than x1 beyond the noise for 3 of 3 points" in verdict.text


def test_the_seeds_spread_is_the_noise_when_no_eval_set_size_is_recorded(tmp_path: Path) -> None:
    apart = {1.0: [[0.30, 0.31]] * 3, 2.0: [[0.10, 0.11]] * 3}
    verdict, _ = _verdict(_multiplied(tmp_path / "apart", apart, examples=None))
    assert verdict.level == "warning" and verdict.wins == {"2": 3}
    overlapping = {1.0: [[0.30, 0.20]] * 3, 2.0: [[0.19, 0.29]] * 3}
    verdict, _ = _verdict(_multiplied(tmp_path / "overlap", overlapping, examples=None))
    assert verdict.level == "info" and verdict.wins == {"1": 3} and verdict.within_noise == 3


def test_with_no_measure_of_noise_x1_stays_and_the_verdict_asks_for_seeds(tmp_path: Path) -> None:
    verdict, _ = _verdict(_multiplied(tmp_path, {1.0: [[0.3]] * 3, 2.0: [[0.1]] * 3}, examples=None))
    assert verdict.level == "info" and verdict.wins == {"1": 3} and verdict.unmeasured == 3
    assert "noise not measured" in verdict.text and "seeds" in verdict.text
