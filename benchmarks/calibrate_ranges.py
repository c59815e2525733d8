"""How often does the report's range verdict move a range it should not, and miss one it should?

Every case is a round 1 whose truth is known: trials at round 1's own quasi-random points (the
scrambled Halton sequence ``run-round`` samples) of a study searching three ranges, the learning
rate over four decades (1e-6 .. 1e-2: a move up stays below AdamW's ceiling of 1), a weight
decay (1e-6 .. 1e-1) and a dropout (0 .. 0.5). Each trial's objective is an error that is
quadratic in the log-LR's distance from the optimum (0.04 per decade squared, above a floor of
0.05, capped at chance 0.9), plus a weak weight-decay bowl whose optimum lies inside its range,
plus Gaussian noise of the size a real round adds (seed to seed, and a validation split of 500
to 2,000 examples). The case sets where the LR optimum lies: inside the range, near an edge,
beyond it, or nowhere (a flat objective: the LR does not matter). Each case is repeated with
fresh points and noise, and the real verdict code
(``tuner.report.boundaries.diagnose_boundaries``, on phases read the way ``tuner report`` reads
them) judges each repetition.

Counted, per case and round size:

- **false alarms**: a range moved when its optimum lies well inside it (or nowhere): the LR in
  the "inside" and "flat" cases, and the weight decay (its optimum is always inside) in every
  case;
- **misses**: the LR range not moved toward the edge its optimum lies beyond;
- for the moves made: how far the new range reaches beyond the old edge (decades), whether it
  holds the optimum, and where the best trial sits in it (0 its low end, 1 its high end).

``python -m benchmarks.calibrate_ranges [--repetitions N] [--quick]``; ``make bench`` runs it
with the other benchmarks and checks the targets: at most 5% false alarms where ``tune`` applies
the verdict by itself, a new range no more than one decade beyond its edge, and the best trial
outside the outer fifth of the new range.
"""

from __future__ import annotations

import math
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchmarks._common import Result, calibration_arguments, report

NAME = "calibrate_ranges"
LR_LOW, LR_HIGH = 1e-6, 1e-2
DECADES = math.log10(LR_HIGH / LR_LOW)
FLOOR, CHANCE = 0.05, 0.9
CURVATURE = 0.04  # error added per squared decade from the optimum LR
WD_OPTIMUM, WD_BOWL = 0.3, 0.02  # the weight decay's optimum (position in its range) and its depth
FALSE_ALARM_TARGET = 0.05
REACH_TARGET = 1.0  # decades beyond the edge, at most
#: A case's LR optimum as a position along the log range (0 the low end, 1 the high end).
CASES: dict[str, float | None] = {
    "flat": None,
    "inside 0.50": 0.50,
    "inside 0.72": 0.72,
    "near 0.90": 0.90,
    "beyond 1.25": 1.25,
    "beyond 1.50": 1.50,
    "below -0.25": -0.25,
}
TRIALS = (8, 20, 40)
NOISES = (0.01, 0.03)


def _study_file(folder: Path) -> Path:
    document = {
        "name": "calibration",
        "workload": {"name": "digits-mlp", "options": {"hidden_sizes": [16], "dropout": 0.0}},
        "objective": {"metric": "val/error_rate", "direction": "minimize"},
        "training": {
            "batch_size": 32,
            "max_train_steps": 500,
            "eval_every": 50,
            "optimizer": {"name": "adamw", "lr": 1e-3, "weight_decay": 0.0},
        },
        "search_space": {
            "optimizer.lr": {"type": "float", "low": LR_LOW, "high": LR_HIGH, "log": True},
            "optimizer.weight_decay": {"type": "float", "low": 1e-6, "high": 1e-1, "log": True},
            "workload.dropout": {"type": "float", "low": 0.0, "high": 0.5},
        },
        "rounds": {"round1": {"trials": 40, "length_fraction": 0.2}},
    }
    path = folder / "calibration.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def round1_attrs() -> dict[str, Any]:
    """A real round 1's stored attributes (its plan), created as ``run-round`` creates it."""
    from tuner.playbook import start_round
    from tuner.spec import load_study

    with tempfile.TemporaryDirectory() as folder:
        started = start_round(load_study(_study_file(Path(folder))), "round-1", Path(folder) / "runs")
        return dict(started.study.user_attrs)


def error_at(lr_unit: float, wd_unit: float, optimum: float | None) -> float:
    """The true error of a point (positions along the log ranges)."""
    lr_term = 0.0 if optimum is None else CURVATURE * ((lr_unit - optimum) * DECADES) ** 2
    return min(CHANCE, FLOOR + lr_term + WD_BOWL * ((wd_unit - WD_OPTIMUM) / 0.7) ** 2)


def simulated_round(
    attrs: dict[str, Any], optimum: float | None, trials: int, noise: float, seed: int
) -> Any:
    """Round 1 of ``trials`` quasi-random points (Halton seed ``seed``), each scored with noise."""
    import numpy as np

    from tuner.orchestrate.search_space import quasi_random_point
    from tuner.orchestrate.stored import StoredPhase, StoredTrial
    from tuner.playbook.plan import load_plan
    from tuner.report.range_moves import unit
    from tuner.report.study_data import phase_data

    plan = load_plan(attrs)
    assert plan is not None
    space = plan.search_space()
    rng = np.random.default_rng(seed)
    stored = []
    for index in range(trials):
        params = quasi_random_point(space, index, seed)
        lr_u = unit(params["optimizer.lr"], LR_LOW, LR_HIGH, True)
        wd_u = unit(params["optimizer.weight_decay"], 1e-6, 1e-1, True)
        value = error_at(lr_u, wd_u, optimum) + float(rng.normal(0.0, noise))
        attrs_of = {"slot": index, "attempt": 0, "max_train_steps": plan.trial_steps, "best_step": 100}
        stored.append(StoredTrial(index, "COMPLETE", value, params, attrs_of))
    return phase_data(StoredPhase("calibration", "round-1", "minimize", attrs, stored))


@dataclass
class Tally:
    """What the verdict did over one case's repetitions."""

    repetitions: int = 0
    lr_up: int = 0
    lr_down: int = 0
    lr_unsure: int = 0
    wd_moved: int = 0
    reach: list[float] = field(default_factory=list)  # decades beyond the old edge, of each move
    holds_optimum: int = 0
    best_position: list[float] = field(default_factory=list)  # of the best trial in the new range

    def rate(self, count: int) -> float:
        return count / self.repetitions if self.repetitions else math.nan


def judge(phase: Any, optimum: float | None, tally: Tally) -> None:
    """One repetition's verdicts, counted."""
    from tuner.report.boundaries import diagnose_boundaries
    from tuner.report.field_values import field_checker
    from tuner.report.range_moves import unit

    assert phase.plan is not None
    result = diagnose_boundaries(phase, field_checker(phase.plan.config))
    tally.repetitions += 1
    for finding in result.findings:
        param = getattr(finding, "param", None)
        if finding.kind == "range_edge" and param == "optimizer.weight_decay":
            tally.wd_moved += 1
        if param != "optimizer.lr":
            continue
        if finding.kind == "range_edge_unsure":
            tally.lr_unsure += 1
        if finding.kind != "range_edge":
            continue
        if finding.edge == "high":
            tally.lr_up += 1
        else:
            tally.lr_down += 1
        low, high = finding.suggested_low, finding.suggested_high
        edge_reach = math.log10(high / LR_HIGH) if finding.edge == "high" else math.log10(LR_LOW / low)
        tally.reach.append(edge_reach)
        if optimum is not None:
            where = LR_LOW * (LR_HIGH / LR_LOW) ** optimum
            tally.holds_optimum += int(low <= where <= high)
        tally.best_position.append(unit(finding.best_value, low, high, True))


def calibrate(
    repetitions: int, trials: tuple[int, ...] = TRIALS, noises: tuple[float, ...] = NOISES
) -> dict[tuple[str, int, float], Tally]:
    attrs = round1_attrs()
    tallies: dict[tuple[str, int, float], Tally] = {}
    for case, optimum in CASES.items():
        for count in trials:
            for noise in noises:
                tally = tallies.setdefault((case, count, noise), Tally())
                for rep in range(repetitions):
                    judge(
                        simulated_round(attrs, optimum, count, noise, seed=1000 * count + rep), optimum, tally
                    )
    return tallies


def table(tallies: dict[tuple[str, int, float], Tally]) -> str:
    lines = [
        "| LR optimum at | trials | noise | LR moved up | LR moved down | cannot tell | weight decay moved "
        "| reach beyond the edge (decades, max) | new range holds the optimum | best trial in new range "
        "(min) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (case, count, noise), t in tallies.items():
        moves = len(t.reach)
        reach = f"{statistics.fmean(t.reach):.2f} ({max(t.reach):.2f})" if moves else "-"
        holds = f"{t.holds_optimum / moves:.0%}" if moves and CASES[case] is not None else "-"
        best = f"{min(t.best_position):.2f}" if moves else "-"
        lines.append(
            f"| {case} | {count} | {noise:g} | {t.rate(t.lr_up):.1%} | {t.rate(t.lr_down):.1%} | "
            f"{t.rate(t.lr_unsure):.1%} | {t.rate(t.wd_moved):.1%} | {reach} | {holds} | {best} |"
        )
    return "\n".join(lines)


def results(tallies: dict[tuple[str, int, float], Tally]) -> list[Result]:
    """The targets: false alarms (the LR where its optimum is inside or nowhere, the weight decay
    everywhere), the reach of a move, and the best trial well inside the new range."""
    inside = [t for (case, _, _), t in tallies.items() if CASES[case] is None or 0.25 <= CASES[case] <= 0.75]
    lr_alarms = max((t.rate(t.lr_up + t.lr_down) for t in inside), default=0.0)
    wd_alarms = max((t.rate(t.wd_moved) for t in tallies.values()), default=0.0)
    misses = [1 - t.rate(t.lr_up) for (case, _, _), t in tallies.items() if (CASES[case] or 0.0) > 1.0]
    misses += [1 - t.rate(t.lr_down) for (case, _, _), t in tallies.items() if (CASES[case] or 0.0) < 0.0]
    reach = max((r for t in tallies.values() for r in t.reach), default=0.0)
    best = min((b for t in tallies.values() for b in t.best_position), default=0.5)
    alarm_target = f"<= {FALSE_ALARM_TARGET:.0%}"
    miss_rate = statistics.fmean(misses) if misses else 0.0
    return [
        Result(NAME, "LR false alarms, worst case", lr_alarms, "{:.1%}", alarm_target,
               lr_alarms <= FALSE_ALARM_TARGET),
        Result(NAME, "weight-decay false alarms, worst case", wd_alarms, "{:.1%}", alarm_target,
               wd_alarms <= FALSE_ALARM_TARGET),
        Result(NAME, "LR misses (optimum beyond an edge), mean", miss_rate, "{:.1%}"),
        Result(NAME, "a move's reach beyond the edge, max", reach, "{:.2f} decades", f"<= {REACH_TARGET:g}",
               reach <= REACH_TARGET + 1e-9),
        Result(NAME, "best trial's position in the new range, min", best, "{:.2f}", ">= 0.2",
               best >= 0.2 - 1e-9),
    ]  # fmt: skip


#: "nothing learned" cases: every trial at chance; the final training loss over the LR's position
#: (2.3, a 10-class chance loss, falling by the slope toward the top; a bowl: lowest in the middle)
LOSS_CASES: dict[str, tuple[float, bool]] = {
    "flat": (0.0, False),
    "bowl inside": (0.3, False),
    "falls 0.05": (0.05, True),
    "falls 0.3": (0.3, True),
}
LOSS_NOISE = 0.02


def unlearned_round(attrs: dict[str, Any], case: str, trials: int, seed: int) -> Any:
    """Round 1 of ``trials`` quasi-random points, each at chance, with a final training loss."""
    import numpy as np

    from tuner.orchestrate.search_space import quasi_random_point
    from tuner.orchestrate.stored import StoredPhase, StoredTrial
    from tuner.playbook.plan import load_plan
    from tuner.report.range_moves import unit
    from tuner.report.study_data import phase_data

    plan = load_plan(attrs)
    assert plan is not None
    slope, should_move = LOSS_CASES[case]
    rng = np.random.default_rng(seed)
    stored = []
    for index in range(trials):
        params = quasi_random_point(plan.search_space(), index, seed)
        u = unit(params["optimizer.lr"], LR_LOW, LR_HIGH, True)
        trend = slope * (1 - u) if should_move else slope * (u - 0.5) ** 2
        attrs_of = {"slot": index, "attempt": 0, "max_train_steps": plan.trial_steps, "best_step": 100}
        attrs_of["final_train_loss"] = 2.3 + trend + float(rng.normal(0.0, LOSS_NOISE))
        value = CHANCE + float(rng.normal(0.0, 0.005))
        stored.append(StoredTrial(index, "COMPLETE", value, params, attrs_of))
    return phase_data(StoredPhase("calibration", "round-1", "minimize", attrs, stored))


def calibrate_unlearned(repetitions: int, trials: tuple[int, ...] = TRIALS) -> dict[tuple[str, int], Tally]:
    """Each "nothing learned" case judged as the report judges a round that learned nothing."""
    from tuner.report.boundaries import diagnose_boundaries
    from tuner.report.field_values import field_checker

    attrs = round1_attrs()
    tallies: dict[tuple[str, int], Tally] = {}
    for case in LOSS_CASES:
        for count in trials:
            tally = tallies.setdefault((case, count), Tally())
            for rep in range(repetitions):
                phase = unlearned_round(attrs, case, count, seed=1000 * count + rep)
                assert phase.plan is not None
                found = diagnose_boundaries(phase, field_checker(phase.plan.config), judge=False)
                tally.repetitions += 1
                for finding in found.findings:
                    if finding.kind == "range_edge_nothing_learned":
                        tally.lr_up += finding.edge == "high"
                        tally.lr_down += finding.edge == "low"
    return tallies


def unlearned_table(tallies: dict[tuple[str, int], Tally]) -> str:
    lines = [
        "| training loss over the LR range | should move | trials | moved up | moved down |",
        "| --- | --- | --- | --- | --- |",
    ]
    for (case, count), t in tallies.items():
        should = "up" if LOSS_CASES[case][1] else "no"
        lines.append(f"| {case} | {should} | {count} | {t.rate(t.lr_up):.1%} | {t.rate(t.lr_down):.1%} |")
    return "\n".join(lines)


def unlearned_results(tallies: dict[tuple[str, int], Tally]) -> list[Result]:
    alarms = max(
        (t.rate(t.lr_up + t.lr_down) for (c, _), t in tallies.items() if not LOSS_CASES[c][1]), default=0.0
    )
    misses = [1 - t.rate(t.lr_up) for (c, n), t in tallies.items() if LOSS_CASES[c][1] and n >= 20]
    miss_rate = statistics.fmean(misses) if misses else 0.0
    return [
        Result(NAME, "nothing learned: false moves, worst case", alarms, "{:.1%}",
               f"<= {FALSE_ALARM_TARGET:.0%}", alarms <= FALSE_ALARM_TARGET),
        Result(NAME, "nothing learned: misses at 20+ trials, mean", miss_rate, "{:.1%}"),
    ]  # fmt: skip


def run() -> list[Result]:
    """``make bench``: 200 repetitions of every case."""
    return results(calibrate(200)) + unlearned_results(calibrate_unlearned(200))


def main() -> None:
    repetitions, quick = calibration_arguments(NAME, __doc__, "10 repetitions, 8 and 20 trials: a smoke test")
    tallies = calibrate(repetitions, trials=(8, 20)) if quick else calibrate(repetitions)
    unlearned = calibrate_unlearned(repetitions, trials=(8, 20) if quick else TRIALS)
    print(table(tallies))
    print()
    print(unlearned_table(unlearned))
    report(NAME, results(tallies) + unlearned_results(unlearned))


if __name__ == "__main__":
    main()
