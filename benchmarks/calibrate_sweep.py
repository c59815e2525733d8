"""How often does sweep-lr say "validation was best long before the fit" (noisy labels) when it was
not, and miss it when it was?

The verdict (``tuner.playbook.sweep_lr``'s ``BestLongBeforeFit``, README's *sweep-lr*) reads the
fastest LR's runs: the objective's best step, median over its seeds, at or before half the step
the training set was fit at. ``tune`` acts on it by itself in one way: a length the sweep set is
not trained longer for regularisation's sake (the extra round's unregularised-length trigger),
since past that best the runs memorised; and it names the noisy-labels length (2x that best step).

Every case is the fastest LR's sweep runs: each fits the training set at step 1,000 and is
evaluated every 50 steps (20 evals), on a validation curve of known shape plus Gaussian noise
(0.003 or 0.01: a validation split of a few thousand, or a few hundred, examples):

- ``noisy 0.25``: 0.1 better until 25% of the fit, then 0.05 worse by the fit (memorising noisy
  labels): the truth is *best long before the fit*;
- ``plateau 0.4``: better until 40% of the fit, flat after: the truth is *not* (more steps
  change nothing; the best eval lands anywhere on the flat by noise);
- ``improving``: still better at the fit: the truth is *not*.

Counted per case and seeds (1, the default, or 3): how often the verdict is said.
``python -m benchmarks.calibrate_sweep [--repetitions N] [--quick]``; the table is on the verdicts
page of the docs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from benchmarks._common import Result, calibration_arguments, report

NAME = "calibrate_sweep"
FIT, EVAL_EVERY = 1000, 50
FALSE_ALARM_TARGET = 0.05


def _noisy(u: float) -> float:
    return 0.1 + (0.1 * ((0.25 - u) / 0.25) ** 2 if u <= 0.25 else 0.05 * ((u - 0.25) / 0.75) ** 2)


def _plateau(u: float) -> float:
    return 0.1 + 0.1 * max(0.0, (0.4 - u) / 0.4) ** 2


def _improving(u: float) -> float:
    return 0.1 + 0.1 * ((1.5 - u) / 1.5) ** 2


#: case -> (the validation error over the position in the fit, whether the verdict is the truth)
CASES: dict[str, tuple[Callable[[float], float], bool]] = {
    "noisy 0.25": (_noisy, True),
    "plateau 0.4": (_plateau, False),
    "improving": (_improving, False),
}
SEEDS = (1, 3)
NOISES = (0.003, 0.01)


def simulated_trials(curve: Callable[[float], float], seeds: int, noise: float, seed: int) -> list:
    """The fastest LR's sweep runs, one a seed, as the sweep's analysis reads them."""
    import numpy as np

    from tuner.playbook.sweep_lr import SweepOutcome, SweepTrial

    rng = np.random.default_rng(seed)
    trials = []
    for index in range(seeds):
        values = {
            s: curve(s / FIT) + float(rng.normal(0.0, noise)) for s in range(EVAL_EVERY, FIT + 1, EVAL_EVERY)
        }
        best_step = min(values, key=lambda s: (values[s], s))
        trials.append(
            SweepTrial(
                lr=1e-3, seed_index=index, outcome=SweepOutcome.FIT, fit_step=FIT, steps_trained=FIT,
                final_train_loss=0.01, best_fit_value=1.0, number=index, best_step=best_step,
                curve=tuple(sorted(values.items())),
            )
        )  # fmt: skip
    return trials


def says_early(trials: list, seeds: int) -> bool:
    from tuner.playbook.sweep_lr import analyze_sweep

    result = analyze_sweep(
        trials, grid=[1e-3], max_steps=2 * FIT, eval_every=EVAL_EVERY, fit_metric="train/accuracy",
        fit_threshold=1.0, seeds=seeds, direction="maximize", objective_direction="minimize",
    )  # fmt: skip
    return any(v.kind == "best_long_before_fit" for v in result.verdicts)


def calibrate(
    repetitions: int, seeds: tuple[int, ...] = SEEDS, noises: tuple[float, ...] = NOISES
) -> dict[tuple[str, int, float], Counter[bool]]:
    tallies: dict[tuple[str, int, float], Counter[bool]] = {}
    for case, (curve, _) in CASES.items():
        for count in seeds:
            for noise in noises:
                tally = tallies.setdefault((case, count, noise), Counter())
                for rep in range(repetitions):
                    trials = simulated_trials(curve, count, noise, seed=1000 * count + rep)
                    tally[says_early(trials, count)] += 1
    return tallies


def table(tallies: dict[tuple[str, int, float], Counter[bool]]) -> str:
    lines = [
        "| truth | case | seeds | noise | says best long before the fit |",
        "| --- | --- | --- | --- | --- |",
    ]
    for (case, count, noise), tally in tallies.items():
        truth = "early" if CASES[case][1] else "not early"
        share = tally[True] / max(1, sum(tally.values()))
        lines.append(f"| {truth} | {case} | {count} | {noise:g} | {share:.1%} |")
    return "\n".join(lines)


def results(tallies: dict[tuple[str, int, float], Counter[bool]]) -> list[Result]:
    def share(tally: Counter[bool]) -> float:
        return tally[True] / max(1, sum(tally.values()))

    alarms = {key: share(t) for key, t in tallies.items() if not CASES[key[0]][1]}
    worst = max(alarms, key=lambda key: alarms[key])
    misses = [1 - share(t) for key, t in tallies.items() if CASES[key[0]][1]]
    shown = f"{worst[0]}, {worst[1]} seed(s), noise {worst[2]:g}"
    return [
        Result(NAME, f"false alarms where validation was not best early, worst ({shown})", alarms[worst],
               "{:.1%}", f"<= {FALSE_ALARM_TARGET:.0%}", alarms[worst] <= FALSE_ALARM_TARGET),
        Result(NAME, "misses where it was, mean", sum(misses) / len(misses), "{:.1%}"),
    ]  # fmt: skip


def run() -> list[Result]:
    """``make bench``: 200 repetitions of every case."""
    return results(calibrate(200))


def main() -> None:
    repetitions, quick = calibration_arguments(NAME, __doc__, "10 repetitions, 1 seed: a smoke test")
    tallies = calibrate(repetitions, seeds=(1,)) if quick else calibrate(repetitions)
    print(table(tallies))
    report(NAME, results(tallies))


if __name__ == "__main__":
    main()
