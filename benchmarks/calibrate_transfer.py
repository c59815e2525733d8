"""How often does the transfer verdict warn when round 1's ranking held, and miss when it did not?

The verdict (``tuner.report.transfer.diagnose_transfer``, README's *transfer*) compares round 1's
values of the points round 2 trained with round 2's: Spearman's rho *good* from 0.5; below it,
*within noise* when no pair of points changed order beyond both rounds' noise bands (the 95%
Wilson interval of the error count, widened to a point's seed range), else *weak* (rho >= 0) or
*reversed*: both are warnings whose advice is to lengthen round 1 and trust the long runs.

Every case is a round 1 of 20 trials and a round 2 of its best ``top_k`` points, each point a
true quality z (standard normal). Round 1's true error rate is 0.10 + 0.02 z; round 2's is
0.08 + 0.02 (c z + sqrt(1 - c^2) w), w a fresh normal: ``c`` is how far the short runs' ranking
is the long runs' (1: it is; 0: unrelated; -1: reversed). Every value is a binomial count on a
validation split of 500 or 2,000 examples (the noise a real split adds), and the report reads the
split's size from a run folder as it does after a real round. Counted per case: how often the
verdict says *good*, *within noise*, *weak*, *reversed*.

A false alarm is a warning (*weak* or *reversed*) where c = 1; a miss is no warning where c <= 0.
``python -m benchmarks.calibrate_transfer [--repetitions N] [--quick]``; the table is on the
verdicts page of the docs.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks._common import Result, calibration_arguments, calibration_study, report

NAME = "calibrate_transfer"
ROUND1_TRIALS = 20
SPREAD = 0.02
FALSE_ALARM_TARGET = 0.05
CORRELATIONS = (1.0, 0.0, -1.0)
TOP_KS = (3, 6)
SEEDS = (1, 2)
EXAMPLES = (500, 2000)
QUALITIES = ("good", "within_noise", "weak", "reversed", "too_few")


class Template:
    """A real round 1 and the round 2 the playbook plans from it (points: round 1's slots 0 ..
    top_k - 1, its best): the stored attributes every simulated repetition reuses."""

    def __init__(self, folder: Path, top_k: int, seeds: int, examples: int) -> None:
        import optuna
        from optuna.trial import TrialState, create_trial

        from tuner.orchestrate import distributions
        from tuner.playbook import start_round
        from tuner.playbook.plan import load_plan
        from tuner.spec import load_study

        rounds = {
            "round1": {"trials": ROUND1_TRIALS, "steps": 1000},
            "round2": {"top_k": top_k, "seeds": seeds},
        }
        path = calibration_study(folder, 1000, 100, rounds)
        self.run_dir = folder / "run"
        self.run_dir.mkdir()
        (self.run_dir / "status.json").write_text(json.dumps({"eval_examples": {"val": examples}}))
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        spec = load_study(path)
        first = start_round(spec, "round-1", folder / "runs").study
        plan = load_plan(first.user_attrs)
        assert plan is not None
        dists = distributions(plan.search_space())
        for slot in range(ROUND1_TRIALS):  # slot s the s-th best: round 2 takes slots 0 .. top_k - 1
            attrs = {"slot": slot, "attempt": 0, "max_train_steps": 1000, "best_step": 1000}
            first.add_trial(
                create_trial(
                    state=TrialState.COMPLETE,
                    value=0.1 + 0.001 * slot,
                    params={"optimizer.lr": 1e-4 * 1.4**slot},
                    distributions=dists,
                    user_attrs=attrs,
                )
            )
        second = start_round(load_study(path), "round-2", folder / "runs").study
        plan2 = load_plan(second.user_attrs)
        assert plan2 is not None
        self.round1_attrs = dict(first.user_attrs)
        self.round1_params = [t.params for t in first.trials]
        self.round2_attrs = dict(second.user_attrs)
        self.round2_slots = [(planned.values, dict(planned.attrs)) for planned in plan2.slots]
        self.top_k, self.examples = top_k, examples


def simulated(template: Template, correlation: float, seed: int) -> tuple[Any, Any]:
    """Round 1 and round 2 of one repetition, as the report reads them."""
    import numpy as np

    from tuner.orchestrate.stored import StoredPhase, StoredTrial
    from tuner.report.study_data import phase_data

    rng = np.random.default_rng(seed)
    n = template.examples

    def measured(rate: float) -> float:
        return float(rng.binomial(n, min(max(rate, 0.0), 1.0)) / n)

    quality = rng.normal(size=ROUND1_TRIALS)
    short = [measured(0.10 + SPREAD * z) for z in quality]
    order = sorted(range(ROUND1_TRIALS), key=lambda i: (short[i], i))  # slot s holds the s-th best
    fresh = rng.normal(size=ROUND1_TRIALS)
    unrelated = math.sqrt(1 - correlation**2)
    pairs = zip(quality, fresh, strict=True)
    long_rate = [0.08 + SPREAD * (correlation * z + unrelated * w) for z, w in pairs]
    run_dir = str(template.run_dir)
    common = {"attempt": 0, "max_train_steps": 1000, "best_step": 1000, "run_dir": run_dir}
    first = [
        StoredTrial(slot, "COMPLETE", short[i], template.round1_params[slot], {"slot": slot, **common})
        for slot, i in enumerate(order)
    ]
    second = []
    for number, (params, attrs) in enumerate(template.round2_slots):
        source = int(attrs["source_trial"])
        value = measured(long_rate[order[source]])
        stored = {**attrs, "slot": number, "attempt": 0, "max_train_steps": 1000, "best_step": 1000}
        stored |= {"source_value": short[order[source]], "run_dir": run_dir}
        second.append(StoredTrial(number, "COMPLETE", value, params, stored))
    round1 = phase_data(StoredPhase("calibration", "round-1", "minimize", template.round1_attrs, first))
    round2 = phase_data(StoredPhase("calibration", "round-2", "minimize", template.round2_attrs, second))
    return round1, round2


def verdict_of(round1: Any, round2: Any) -> str:
    from tuner.report.transfer import diagnose_transfer

    result = diagnose_transfer(round2, round1)
    assert result is not None
    found = next(f for f in result.findings if f.kind == "rank_correlation")
    return str(found.quality)


def calibrate(
    repetitions: int,
    top_ks: tuple[int, ...] = TOP_KS,
    seeds: tuple[int, ...] = SEEDS,
    examples: tuple[int, ...] = EXAMPLES,
) -> dict[tuple[float, int, int, int], Counter[str]]:
    tallies: dict[tuple[float, int, int, int], Counter[str]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for k in top_ks:
            for s in seeds:
                for n in examples:
                    where = Path(folder) / f"{k}-{s}-{n}"
                    where.mkdir()
                    template = Template(where, k, s, n)
                    for c in CORRELATIONS:
                        tally = tallies.setdefault((c, k, s, n), Counter())
                        for rep in range(repetitions):
                            tally[verdict_of(*simulated(template, c, seed=100_000 * k + 1000 * s + rep))] += 1
    return tallies


def table(tallies: dict[tuple[float, int, int, int], Counter[str]]) -> str:
    lines = [
        "| short ~ long (c) | points | seeds | split | good | within noise | weak | reversed | too few |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (c, k, s, n), tally in tallies.items():
        total = sum(tally.values())
        cells = " | ".join(f"{tally[q] / total:.1%}" for q in QUALITIES)
        lines.append(f"| {c:+g} | {k} | {s} | {n:,} | {cells} |")
    return "\n".join(lines)


def results(tallies: dict[tuple[float, int, int, int], Counter[str]]) -> list[Result]:
    """Warnings where round 1's ranking held (false alarms), *good* where it did not (a false
    reassurance), and how often a reversal is called one (its power), worst or best case."""

    def share(tally: Counter[str], *qualities: str) -> float:
        return sum(tally[q] for q in qualities) / max(1, sum(tally.values()))

    def shown(key: tuple[float, int, int, int]) -> str:
        return f"c {key[0]:+g}, {key[1]} points, {key[2]} seed(s), split {key[3]:,}"

    held = {key: share(t, "weak", "reversed") for key, t in tallies.items() if key[0] == 1.0}
    alarm = max(held, key=lambda key: held[key])
    unheld = {key: share(t, "good") for key, t in tallies.items() if key[0] <= 0.0}
    reassured = max(unheld, key=lambda key: unheld[key])
    reversed_ = {key: share(t, "weak", "reversed") for key, t in tallies.items() if key[0] == -1.0}
    found = max(reversed_, key=lambda key: reversed_[key])
    return [
        Result(NAME, f"warnings where round 1's ranking held, worst ({shown(alarm)})", held[alarm], "{:.1%}",
               f"<= {FALSE_ALARM_TARGET:.0%}", held[alarm] <= FALSE_ALARM_TARGET),
        Result(NAME, f"'good' where it did not hold, worst ({shown(reassured)})", unheld[reassured],
               "{:.1%}"),
        Result(NAME, f"warnings where the long runs reversed it, best ({shown(found)})", reversed_[found],
               "{:.1%}"),
    ]  # fmt: skip


def run() -> list[Result]:
    """``make bench``: 200 repetitions of every case."""
    return results(calibrate(200))


def main() -> None:
    repetitions, quick = calibration_arguments(
        NAME, __doc__, "10 repetitions, 3 points, 1 seed: a smoke test"
    )
    if quick:
        tallies = calibrate(repetitions, top_ks=(3,), seeds=(1,), examples=(500,))
    else:
        tallies = calibrate(repetitions)
    print(table(tallies))
    report(NAME, results(tallies))


if __name__ == "__main__":
    main()
