"""Round 2's ``lr_multipliers``: did another multiple of round 1's learning rate beat it?

A later round may re-train each point at a few multiples of its LR, because the best LR moves
with the training length. Telling the user to retune the LR is costly advice, so a multiplier wins
a point only when it is better by more than the noise (``tuner.report.noise``): its band (the
Wilson interval of its error count when the eval set size is known, widened to its seeds' range)
must be apart from x1's. Otherwise the multipliers are within noise and x1 (the LR round 1 found)
stays. With no measure of noise (one seed, no eval set size) nothing can beat x1 and the verdict
asks for seeds.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import ClassVar

from tuner.report.findings import Finding, Level, of
from tuner.report.noise import RULE as NOISE_RULE
from tuner.report.noise import Band, Noise
from tuner.report.study_data import PhaseData

RULE = (
    "per point, a multiplier beats x1 only when its value is better and its noise band is apart from "
    f"x1's ({NOISE_RULE}); otherwise x1 stays; a warning when multipliers beat x1 for more than half "
    "the points"
)


@dataclass(frozen=True)
class LrMultiplierWins(Finding):
    kind: ClassVar[str] = "lr_multiplier"
    wins: dict[str, int]  # multiplier -> points where it is kept: beat x1 beyond noise, or is x1
    within_noise: int = 0  # points where another multiplier was better, but only inside the noise
    unmeasured: int = 0  # points where another multiplier was better and no noise was measured


def multiplier_finding(phase: PhaseData, sources: list[int], noise: Noise) -> LrMultiplierWins | None:
    """The verdict over the points trained from round-1 trials ``sources``; None without
    several multipliers or without a completed trial at x1 and another multiplier."""
    multipliers = {_multiplier(s.attrs) for s in phase.slots}
    if len(multipliers) < 2:
        return None
    reference = min(multipliers, key=lambda m: (abs(math.log(m)), m))  # x1, or the closest to it
    sign = 1.0 if phase.minimize else -1.0
    wins: dict[str, int] = {}
    moved: dict[str, int] = {}  # in the order multipliers first win a point
    within = unmeasured = 0
    for source in sources:
        values: dict[float, list[float]] = {}
        for slot in phase.completed:
            if slot.attrs.get("source_trial") == source and slot.value is not None:
                values.setdefault(_multiplier(slot.attrs), []).append(float(slot.value))
        if reference not in values:
            continue
        best = min(values, key=lambda m: (sign * statistics.median(values[m]), m != reference))
        kept = best
        if best != reference:
            best_band, reference_band = _band(values[best], noise), _band(values[reference], noise)
            if best_band is None or reference_band is None:
                unmeasured, kept = unmeasured + 1, reference
            elif not best_band.apart(reference_band):
                within, kept = within + 1, reference
            else:
                moved[f"{best:g}"] = moved.get(f"{best:g}", 0) + 1
        wins[f"{kept:g}"] = wins.get(f"{kept:g}", 0) + 1
    points = sum(wins.values())
    if not points:
        return None
    beat = sum(moved.values())
    x1 = f"x{reference:g}"
    parts = [
        f"x{m} better than {x1} beyond the noise for {of(n, points, 'points')}" for m, n in moved.items()
    ]
    if within:
        measured = noise.describe() or "the seeds' spread"
        parts.append(f"within noise of {x1} for {of(within, points, 'points')} ({measured})")
    if unmeasured:
        parts.append(
            f"noise not measured for {of(unmeasured, points, 'points')} (one seed and no eval set size; "
            "train with seeds: 2 or more to tell)"
        )
    if not parts:
        parts.append(f"{x1} best for {of(points, points, 'points')}")
    elif not beat:
        parts[-1] += f": keep {x1}"
    warn = beat * 2 > points
    return LrMultiplierWins(
        wins=wins,
        within_noise=within,
        unmeasured=unmeasured,
        level=Level.WARNING if warn else Level.INFO,
        rule=RULE,
        text=f"learning-rate multipliers: {'; '.join(parts)}",
        advice="the best LR moved at full length: retune the LR (and its schedule) at the production length"
        if warn
        else None,
    )


def _multiplier(attrs: dict[str, object]) -> float:
    value = attrs.get("lr_multiplier", 1.0)
    return float(value) if isinstance(value, int | float) else 1.0


def _band(values: list[float], noise: Noise) -> Band | None:
    """A multiplier's values' band; one value with no eval set size: the seeds' spread measured
    at x1, if any."""
    band = noise.band(values)
    if band is None and noise.seed_half_width is not None:
        value = statistics.median(values)
        return Band(value - noise.seed_half_width, value + noise.seed_half_width)
    return band
