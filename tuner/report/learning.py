"""Did any trial learn? The sanity check every other verdict stands on.

Why: a phase whose every trial sits at chance level (0.88-0.94 error with 10 classes) still has a
"best" trial and a "trend", and the report once suggested moving the LR range up on that noise.
Ranges, lengths and trends mean something only once the model learns; before that the question is
the data, the labels, the loss or an LR that learns at all.

Rule: chance is what a model that learned nothing scores: always guessing the most common class
(from the validation class counts the run recorded; with only the class count, 1 in C), or for
the loss, predicting the class shares; for a regression, always predicting the training targets'
mean (its scores on each split, which the run recorded). The best trial must close at least
``MARGIN`` (10%) of the way from chance to a perfect score. The class count or the regression's
chance scores come from ``status.json`` of a completed trial's run folder (``num_classes``,
``class_counts``, ``chance``); without one (a run folder on another machine, a metric without a
known chance level, a regression whose data is not a ``TensorDataset``) there is no verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tuner.report.findings import Finding, Level, fmt, pct
from tuner.report.run_folders import read_status
from tuner.report.study_data import PhaseData

MARGIN = 0.10  # of the way from chance to perfect
READ_AT_MOST = 5  # run folders tried for the class count
RULE = (
    f"the best trial closes at least {MARGIN:.0%} of the way from chance (what learning nothing "
    "scores: always the most common class, or a regression's training mean) to a perfect score"
)
#: A regression metric's perfect score (``loss`` is the default squared error).
_REGRESSION_PERFECT = {"loss": 0.0, "mse": 0.0, "mae": 0.0, "r2": 1.0}


@dataclass(frozen=True)
class Chance:
    """What learning nothing scores on ``metric``, and what a perfect model scores."""

    chance: float
    perfect: float
    how: str  # "1 in 10 classes", "the most common class, 90% of validation examples"...


@dataclass(frozen=True)
class NothingLearned(Finding):
    kind: ClassVar[str] = "nothing_learned"
    metric: str
    best_value: float
    chance: float
    perfect: float
    classes: int | None  # None: a regression
    progress: float  # share of the way from chance to perfect the best trial went


@dataclass(frozen=True)
class Learned(Finding):
    kind: ClassVar[str] = "learned"
    metric: str
    best_value: float
    chance: float
    classes: int | None
    progress: float


@dataclass(frozen=True)
class NotJudged(Finding):
    """A verdict withheld: the trials it would read learned nothing, so their order is noise."""

    kind: ClassVar[str] = "not_judged_nothing_learned"


NOT_JUDGED = NotJudged(
    level=Level.INFO,
    rule=RULE,
    text="not judged: no trial learned more than chance, so where the best ones fall is noise",
)


@dataclass
class LearningResult:
    learned: bool
    findings: list[Finding] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"rule": RULE, "learned": self.learned, "verdicts": [f.to_json() for f in self.findings]}


def chance_level(metric: str, classes: int, shares: list[float] | None) -> Chance | None:
    """Chance and perfect scores of a known metric (``val/error_rate``...), or None."""
    if classes < 2:
        return None
    shares = shares if shares and math.isclose(sum(shares), 1.0) else [1 / classes] * classes
    top = max(shares)
    how = (
        f"1 in {classes} classes"
        if math.isclose(top, 1 / classes)
        else f"always the most common class, {pct(top)} of validation examples"
    )
    name = metric.rsplit("/", 1)[-1]
    entropy = -sum(p * math.log(p) for p in shares if p > 0)
    known = {
        "error_rate": Chance(1 - top, 0.0, how),
        "accuracy": Chance(top, 1.0, how),
        "top5_accuracy": Chance(min(5, classes) / classes, 1.0, f"5 guesses of {classes} classes"),
        "loss": Chance(entropy, 0.0, f"predicting the class shares of {classes} classes"),
        "perplexity": Chance(math.exp(entropy), 1.0, f"predicting the class shares of {classes} classes"),
        "mcc": Chance(0.0, 1.0, "no correlation with the labels"),
    }
    return known.get(name)


def regression_chance(metric: str, scores: dict[str, Any]) -> Chance | None:
    """Chance (predicting the training mean) and perfect scores of ``val/mse``..., or None."""
    split, _, name = metric.rpartition("/")
    value = scores.get(split, {}).get(name) if isinstance(scores.get(split), dict) else None
    if name not in _REGRESSION_PERFECT or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return Chance(float(value), _REGRESSION_PERFECT[name], "always predicting the training mean")


def diagnose_learning(phase: PhaseData) -> LearningResult | None:
    """Whether the phase's best trial learned more than chance; None when chance is unknown."""
    best = phase.best
    if best is None or best.value is None:
        return None
    scores = _regression_scores(phase)
    classes, shares = (None, None) if scores is not None else _class_count(phase)
    if scores is not None:
        level = regression_chance(phase.metric, scores)
    elif classes is not None:
        level = chance_level(phase.metric, classes, shares)
    else:
        return None
    if level is None or level.chance == level.perfect:
        return None
    progress = (level.chance - best.value) / (level.chance - level.perfect)
    numbers = (
        f"best {phase.metric} {fmt(best.value)}; chance {fmt(level.chance)} ({level.how}); "
        f"{pct(max(progress, 0.0))} of the way from chance to {fmt(level.perfect)}"
    )
    if progress >= MARGIN:
        found: Finding = Learned(
            metric=phase.metric,
            best_value=best.value,
            chance=level.chance,
            classes=classes,
            progress=progress,
            level=Level.OK,
            rule=RULE,
            text=f"the trials learned: {numbers}",
        )
        return LearningResult(True, [found])
    nothing = NothingLearned(
        metric=phase.metric,
        best_value=best.value,
        chance=level.chance,
        perfect=level.perfect,
        classes=classes,
        progress=progress,
        level=Level.WARNING,
        rule=RULE,
        text=f"nothing learned: every trial is at chance level ({numbers}), so no range, length or "
        "trend can be read from these trials",
        advice="make the model learn first: check the data and its labels, the loss and the metric, "
        + (
            "and widen the sweep's LR grid (sweep_lr.grid): none of its LRs learned"
            if phase.kind == "sweep-lr"
            else "and find an LR that learns (tuner sweep-lr); only then judge ranges and lengths"
        ),
    )
    return LearningResult(False, [nothing])


def _statuses(phase: PhaseData) -> list[dict[str, Any]]:
    """``status.json`` of the first few completed trials whose run folder is readable here."""
    found = []
    for slot in phase.completed[:READ_AT_MOST]:
        status = read_status(slot.run_dir) if slot.run_dir is not None else None
        if isinstance(status, dict):
            found.append(status)
    return found


def _regression_scores(phase: PhaseData) -> dict[str, Any] | None:
    """A regression run's recorded chance scores (``{split: {metric: value}}``); None for a
    classifier (or a run that recorded no task)."""
    for status in _statuses(phase):
        if status.get("task") == "regression":
            chance = status.get("chance")
            return chance if isinstance(chance, dict) else {}
    return None


def _class_count(phase: PhaseData) -> tuple[int | None, list[float] | None]:
    """``num_classes`` and the validation class shares a completed trial's run recorded."""
    for status in _statuses(phase):
        counts = status.get("class_counts")
        val = counts.get("val") if isinstance(counts, dict) else None
        valid = isinstance(val, list) and val and all(isinstance(c, int) and c >= 0 for c in val)
        shares = [c / sum(val) for c in val] if valid and sum(val) else None
        classes = status.get("num_classes")
        if isinstance(classes, int) and not isinstance(classes, bool) and classes > 0:
            return classes, shares
        if shares is not None:
            return len(shares), shares
    return None, None
