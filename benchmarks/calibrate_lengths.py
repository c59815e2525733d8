"""How often does the report's length verdict (where the best checkpoints fall) act when it should
not, and miss when it should?

The verdict (``tuner.report.best_step.diagnose_best_step``, README's *best step*) reads each
trial's best step: consistently in the first 10%, or clearly worse after an early best, says
``max_train_steps`` is too high (``early``); consistently in the last 25% says the runs were
still improving: train longer (``late``), which ``tune`` acts on by itself (its extra round
trains the chosen point longer, and a next study gets ``max_train_steps`` x 1.5).

Every case is a full-length round of trials whose validation curve is known: 20 evals (every 50
steps of 1,000), an error curve of a known shape around its best position, a per-trial offset
(other points score differently: sd 0.02) and Gaussian noise on every eval (0.003 or 0.01: the
spread of a validation split of a few thousand, or a few hundred, examples). The shapes:

- ``early 0.05`` / ``early 0.15``: 0.1 better until 5% or 15% of training, then 0.08 worse by
  the end (noisy labels being memorised): the truth is *too long*;
- ``middle 0.5``: better until the middle, then 0.01 worse by the end: the length is right;
- ``plateau 0.4``: better until 40%, flat after: the length is right (more steps change nothing);
- ``annealed``: flat from 30%, then 0.01 better over the last 20% as a decaying LR settles: a
  longer run would end no better, so *train longer* here is a false alarm (the playbook's
  warning: a schedule that decays to 0 pulls the best step to the end); the position alone cannot
  tell it from the truth below, the flat middle of its curves can;
- ``plateau 0.5``: better until the middle, flat after within the noise (a regression whose
  runs peaked at half their length and then stayed put): the length is right;
- ``improving 1.5``: still getting better at the end (0.1 better by 150%, so 0.011 over the last
  25%): the truth is *too short*.

Counted per case and round size: how often the verdict says ``early``, ``late``, ``fine`` or
cannot tell; and how often the rule of ``tune``'s other trigger for training longer holds
(``BestStepResult.falling_late``: the error still falling between 50% and 75% of training beyond
the curves' noise, wherever the best steps fell, and no *too long* verdict), which it acts on when
the length is sweep-lr's, measured with the searched regularisation off
(``tuner/playbook/tune/extra.py``, ``unregularised_length``): alone (*falling late*), and with the
verdict (*trains longer*: either one, what the extra round does when that premise holds). Every
case but ``improving`` makes it a false alarm. ``python -m benchmarks.calibrate_lengths
[--repetitions N] [--quick]``; the tables are on the verdicts page of the docs.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchmarks._common import Result, calibration_arguments, calibration_study, report

NAME = "calibrate_lengths"
STEPS, EVAL_EVERY = 1000, 50
FLOOR, DEPTH = 0.10, 0.10
OFFSET_SD = 0.02
FALSE_ALARM_TARGET = 0.05


def _bowl(best: float, end_rise: float) -> Callable[[float], float]:
    """Down by ``DEPTH`` to the best position, then up by ``end_rise`` at the end (a best beyond
    the end: still going down there)."""

    def error(u: float) -> float:
        if u <= best:
            return FLOOR + DEPTH * ((best - u) / best) ** 2
        return FLOOR + end_rise * ((u - best) / (1 - best)) ** 2

    return error


def _plateau(u: float) -> float:
    return FLOOR + DEPTH * max(0.0, (0.4 - u) / 0.4) ** 2


def _plateau_half(u: float) -> float:
    return FLOOR + DEPTH * max(0.0, (0.5 - u) / 0.5) ** 2


def _annealed(u: float) -> float:
    return FLOOR + DEPTH * max(0.0, (0.3 - u) / 0.3) ** 2 + 0.01 * min(1.0, max(0.0, (1.0 - u) / 0.2))


#: case -> (the error curve over the position in training, the right verdict)
CASES: dict[str, tuple[Callable[[float], float], str]] = {
    "early 0.05": (_bowl(0.05, 0.08), "early"),
    "early 0.15": (_bowl(0.15, 0.08), "early"),
    "middle 0.5": (_bowl(0.5, 0.01), "fine"),
    "plateau 0.4": (_plateau, "fine"),
    "annealed": (_annealed, "fine"),
    "plateau 0.5": (_plateau_half, "fine"),
    "improving 1.5": (_bowl(1.5, 0.0), "late"),
}
TRIALS = (8, 20)
NOISES = (0.003, 0.01)
VERDICTS = {"best_step_early": "early", "best_step_worsens": "early", "best_step_late": "late"}
VERDICTS |= {"best_step_ok": "fine"}


def round_attrs() -> dict[str, Any]:
    """A real full-length round's stored plan (round 1 at ``max_train_steps``: its verdict acts)."""
    import tempfile
    from pathlib import Path

    from tuner.playbook import start_round
    from tuner.spec import load_study

    with tempfile.TemporaryDirectory() as folder:
        path = calibration_study(Path(folder), STEPS, EVAL_EVERY, {"round1": {"trials": 40, "steps": STEPS}})
        started = start_round(load_study(path), "round-1", Path(folder) / "runs")
        return dict(started.study.user_attrs)


def simulated_round(
    attrs: dict[str, Any], curve: Callable[[float], float], trials: int, noise: float, seed: int
):
    """``trials`` runs of the curve, each with its own offset and noise: the phase and its curves."""
    import numpy as np

    from tuner.orchestrate.stored import StoredPhase, StoredTrial
    from tuner.report.study_data import phase_data

    rng = np.random.default_rng(seed)
    steps = range(EVAL_EVERY, STEPS + 1, EVAL_EVERY)
    stored, curves = [], {}
    for index in range(trials):
        offset = float(rng.normal(0.0, OFFSET_SD))
        values = {s: curve(s / STEPS) + offset + float(rng.normal(0.0, noise)) for s in steps}
        best_step = min(values, key=lambda s: (values[s], s))
        attrs_of = {"slot": index, "attempt": 0, "max_train_steps": STEPS, "best_step": best_step}
        stored.append(StoredTrial(index, "COMPLETE", values[best_step], {"optimizer.lr": 1e-3}, attrs_of))
        curves[index] = values
    return phase_data(StoredPhase("calibration", "round-1", "minimize", attrs, stored)), curves


@dataclass
class Tally:
    """One case and round size over its repetitions: the verdict's answers, and how often the
    other trigger's rule held (``falling``) and either made the extra round train longer."""

    verdicts: Counter[str] = field(default_factory=Counter)
    falling: int = 0
    longer: int = 0

    @property
    def total(self) -> int:
        return sum(self.verdicts.values())

    def share(self, *verdicts: str) -> float:
        return sum(self.verdicts[v] for v in verdicts) / max(1, self.total)


def readings_of(phase: Any, curves: dict[int, dict[int, float]]) -> tuple[str, bool]:
    """The length verdict, and whether the round's curves were still falling late (the extra
    round's other trigger, given its premise), as the report reads them."""
    from tuner.report.best_step import diagnose_best_step

    result = diagnose_best_step(phase, curves=curves)
    kinds = [VERDICTS[f.kind] for f in result.findings if f.kind in VERDICTS]
    return (kinds[0] if kinds else "cannot tell"), result.falling_late is not None


def verdict_of(phase: Any, curves: dict[int, dict[int, float]]) -> str:
    return readings_of(phase, curves)[0]


def calibrate(
    repetitions: int, trials: tuple[int, ...] = TRIALS, noises: tuple[float, ...] = NOISES
) -> dict[tuple[str, int, float], Tally]:
    attrs = round_attrs()
    tallies: dict[tuple[str, int, float], Tally] = {}
    for case, (curve, _) in CASES.items():
        for count in trials:
            for noise in noises:
                tally = tallies.setdefault((case, count, noise), Tally())
                for rep in range(repetitions):
                    phase, curves = simulated_round(attrs, curve, count, noise, seed=1000 * count + rep)
                    verdict, falling = readings_of(phase, curves)
                    tally.verdicts[verdict] += 1
                    tally.falling += falling
                    tally.longer += falling or verdict == "late"
    return tallies


def table(tallies: dict[tuple[str, int, float], Tally]) -> str:
    lines = [
        "| truth | case | trials | noise | says early | says late | says fine | cannot tell | falling late "
        "| trains longer |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (case, count, noise), tally in tallies.items():
        cells = [f"{tally.share(v):.1%}" for v in ("early", "late", "fine", "cannot tell")]
        cells += [f"{tally.falling / max(1, tally.total):.1%}", f"{tally.longer / max(1, tally.total):.1%}"]
        lines.append(f"| {CASES[case][1]} | {case} | {count} | {noise:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def results(tallies: dict[tuple[str, int, float], Tally]) -> list[Result]:
    """False alarms (acting where the length is right) and misses, worst case over the cases; the
    same for the other trigger's rule (falling late: a false alarm wherever the truth is not *too
    short*), and its hits where it is."""
    right = {k: t for k, t in tallies.items() if CASES[k[0]][1] == "fine"}
    alarms = {k: t.share("early", "late") for k, t in right.items()}
    worst = max(alarms, key=lambda k: alarms[k])
    misses = [1 - t.share(CASES[k[0]][1]) for k, t in tallies.items() if CASES[k[0]][1] != "fine"]
    not_short = {k: t.falling / max(1, t.total) for k, t in tallies.items() if CASES[k[0]][1] != "late"}
    falls = max(not_short, key=lambda k: not_short[k])
    short = {k: t.falling / max(1, t.total) for k, t in tallies.items() if CASES[k[0]][1] == "late"}
    return [
        Result(NAME, f"false alarms where the length is right, worst ({worst[0]}, {worst[1]} trials)",
               alarms[worst], "{:.1%}", f"<= {FALSE_ALARM_TARGET:.0%}", alarms[worst] <= FALSE_ALARM_TARGET),
        Result(NAME, "misses where it is not, mean", sum(misses) / len(misses) if misses else math.nan,
               "{:.1%}"),
        Result(NAME, f"falling late where the length is not too short, worst ({falls[0]}, {falls[1]} trials, "
               f"noise {falls[2]:g})", not_short[falls], "{:.1%}", f"<= {FALSE_ALARM_TARGET:.0%}",
               not_short[falls] <= FALSE_ALARM_TARGET),
        Result(NAME, "falling late where it is too short, worst", min(short.values(), default=math.nan),
               "{:.1%}"),
    ]  # fmt: skip


def run() -> list[Result]:
    """``make bench``: 200 repetitions of every case."""
    return results(calibrate(200))


def main() -> None:
    repetitions, quick = calibration_arguments(NAME, __doc__, "10 repetitions, 8 trials: a smoke test")
    tallies = calibrate(repetitions, trials=(8,)) if quick else calibrate(repetitions)
    print(table(tallies))
    report(NAME, results(tallies))


if __name__ == "__main__":
    main()
