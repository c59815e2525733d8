"""A round that trained the round before's points longer: were the longer runs better?

``tuner tune``'s extra round trains round 2's chosen point longer when round 2's report said its
runs were still improving (``tuner.playbook.extra_round``); a study file's round with more
``steps`` than the full-length round before it does the same. The rank correlation says nothing
about one point, and the delivered-model rule already keeps the better length by mean; this is
the line that says, in the round's section, what the longer runs did. Rules (stated in the
verdict): per point, its mean over this round's seeds against its mean over the round before's
(``source_values``, recorded on each slot), told apart only when their noise bands
(``tuner.report.noise``: the eval set's Wilson interval, widened to the seeds' range) do not
overlap. Only after a full-length round: round 1's short trials are the transfer's business.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import ClassVar

from tuner.report.findings import Finding, Level, fmt
from tuner.report.noise import RULE as NOISE_RULE
from tuner.report.noise import Noise
from tuner.report.study_data import PhaseData

RULE = (
    "per point, the mean over this round's seeds against the mean over the round before's, better "
    f"or worse only when their noise bands are apart ({NOISE_RULE})"
)


@dataclass(frozen=True)
class LongerRuns(Finding):
    kind: ClassVar[str] = "longer_runs"
    source_steps: int
    steps: int
    points: int
    better: int  # beyond the noise
    worse: int  # beyond the noise
    within_noise: int  # includes the points whose noise is not measured


def longer_runs_finding(phase: PhaseData, source: PhaseData | None, noise: Noise) -> LongerRuns | None:
    """The verdict when ``phase`` trained ``source``'s points longer than ``source`` trained them
    at full length; None otherwise, or with no completed run yet."""
    if phase.plan is None or source is None or source.plan is None:
        return None
    steps, before = phase.plan.trial_steps, source.plan.trial_steps
    full = source.plan.max_train_steps is None or before >= source.plan.max_train_steps
    if steps <= before or not full:
        return None
    now: dict[int, list[float]] = {}
    earlier: dict[int, list[float]] = {}
    for slot in phase.completed:
        source_trial = slot.attrs.get("source_trial")
        multiplier = float(slot.attrs.get("lr_multiplier", 1.0))
        if source_trial is None or slot.value is None or multiplier != 1.0:
            continue
        now.setdefault(int(source_trial), []).append(float(slot.value))
        values = slot.attrs.get("source_values") or [slot.attrs.get("source_value")]
        earlier[int(source_trial)] = [float(v) for v in values if v is not None]
    if not now:
        return None
    sign = 1.0 if phase.minimize else -1.0
    better = worse = within = 0
    for point, values in now.items():
        mean, mean_before = statistics.fmean(values), statistics.fmean(earlier[point])
        band, band_before = noise.band(values), noise.band(earlier[point])
        if band is None or band_before is None or not band.apart(band_before):
            within += 1
        elif sign * (mean - mean_before) < 0:
            better += 1
        else:
            worse += 1
    if len(now) == 1:
        point, values = next(iter(now.items()))
        told = "within the noise"
        if better or worse:
            told = f"{'better' if better else 'worse'} beyond the noise"
        seeds = f"{len(values)} seed{'s' if len(values) != 1 else ''}"
        text = (
            f"{phase.phase} trained {source.phase}'s trial {point} longer, {before} -> {steps} steps: mean "
            f"{fmt(statistics.fmean(values))} over {seeds} against {fmt(statistics.fmean(earlier[point]))} "
            f"over {len(earlier[point])} at {before} steps: {told}"
        )
    else:
        text = (
            f"{phase.phase} trained {len(now)} of {source.phase}'s points longer, {before} -> {steps} steps: "
            f"{better} better beyond the noise, {worse} worse, {within} within it"
        )
    if better and not worse:
        level = Level.OK
        advice = (
            f"the longer length holds up: train at {steps} steps (max_train_steps {before} -> {steps}); the "
            "delivered model is the longer run when its mean is the study's best"
        )
    elif worse and not better:
        level = Level.WARNING
        advice = f"the longer runs did worse: keep max_train_steps at {before}"
    else:
        level = Level.INFO
        advice = "the lengths cannot be told apart on these runs: more seeds would tell"
    return LongerRuns(
        source_steps=before,
        steps=steps,
        points=len(now),
        better=better,
        worse=worse,
        within_noise=within,
        level=level,
        rule=RULE,
        text=text,
        advice=advice,
    )
