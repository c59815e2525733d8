"""Imbalanced data: rates of rare classes are made of few examples; a sampled train eval may skew.

Where the workload reports per-class counts (``per_class``: ``class_<k>_correct`` and
``_recall``), a minority class's recall is shown beside its correct count: a recall of 0.6 on a
class of 10 validation examples moves by 0.1 with one example, which is noise, not progress.
The class counts come from the best trial's ``status.json`` (``class_counts``: the engine
counts each evaluated split's targets), its per-class metrics from ``metrics.csv`` at its best
step.

Rules (stated): a class is a minority when its share is under half of an even share
(``1 / (2 x classes)``); a minority class with fewer than ``FEW`` validation examples is a warning;
a sampled train-split evaluation (``training.train_eval_examples``) is skewed when a class's
share in the sample differs from its share in the whole split by more than ``SKEW`` of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from tuner.report.findings import Finding, Level, fmt, pct
from tuner.report.run_folders import Unreadable, metrics_at, read_status
from tuner.report.study_data import PhaseData

FEW = 30
PER_CLASS = re.compile(r"(val|train)/class_(\d+)_(correct|recall)")
SKEW = 0.25
MINORITY_RULE = "a class whose share is under half of an even share (1 / (2 x classes))"


@dataclass(frozen=True)
class ClassRow:
    split: str
    label: int
    examples: int | None
    share: float | None
    correct: int | None
    recall: float | None
    minority: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "split": self.split,
            "class": self.label,
            "examples": self.examples,
            "share": self.share,
            "correct": self.correct,
            "recall": self.recall,
            "minority": self.minority,
        }


@dataclass(frozen=True)
class FewExamples(Finding):
    kind: ClassVar[str] = "minority_few_examples"
    split: str
    classes: list[int]
    examples: list[int]


@dataclass(frozen=True)
class MinorityCounts(Finding):
    kind: ClassVar[str] = "minority_counts"
    split: str
    classes: list[int]


@dataclass(frozen=True)
class SampleSkew(Finding):
    kind: ClassVar[str] = "train_sample_skew"
    sample_size: int
    full_size: int
    classes: list[int]
    sample_shares: list[float]
    full_shares: list[float]


@dataclass
class ImbalanceResult:
    trial: int
    step: int
    rows: list[ClassRow]
    findings: list[Finding] = field(default_factory=list)
    unreadable: list[Unreadable] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "trial": self.trial,
            "step": self.step,
            "minority_rule": MINORITY_RULE,
            "classes": [r.to_json() for r in self.rows],
            "verdicts": [f.to_json() for f in self.findings],
        }


def diagnose_imbalance(phase: PhaseData) -> ImbalanceResult | None:
    """For the phase's best trial, when its workload reports per-class counts; else None."""
    best = phase.best
    if best is None or best.run_dir is None or best.best_step is None:
        return None
    status = read_status(best.run_dir)
    if isinstance(status, Unreadable):
        return ImbalanceResult(best.slot, best.best_step, [], unreadable=[status])
    last_eval = status.get("last_eval") or {}
    if not isinstance(last_eval, dict) or not any(PER_CLASS.fullmatch(str(key)) for key in last_eval):
        return None
    metrics = metrics_at(best.run_dir, best.best_step)
    result = ImbalanceResult(best.slot, best.best_step, [])
    if isinstance(metrics, Unreadable):
        result.unreadable.append(metrics)
        metrics = {}
    metrics = {key: value for key, value in metrics.items() if PER_CLASS.fullmatch(key)}
    counts = _class_counts(status.get("class_counts"))
    if counts is None:
        where = str(Path(best.run_dir) / "status.json")
        result.unreadable.append(Unreadable(where, "class_counts is not a mapping of split -> counts"))
        counts = {}
    for split, counted in (
        ("val", counts.get("val")),
        ("train", counts.get("train_eval_sample") or counts.get("train")),
    ):
        rows = _rows(split, metrics, counted)
        result.rows += rows
        _minority_findings(split, rows, result)
    _skew(counts, result)
    return result


def _class_counts(value: Any) -> dict[str, list[int]] | None:
    """``status.json``'s ``class_counts``, checked: ``{split: [examples per class]}``; None if it
    is anything else (a damaged or hand-edited file)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        return None
    checked = {}
    for split, counts in value.items():
        if not isinstance(counts, list) or not all(type(c) is int and c >= 0 for c in counts):
            return None
        checked[str(split)] = counts
    return checked


def _rows(split: str, metrics: dict[str, float], counted: list[int] | None) -> list[ClassRow]:
    labels = sorted(
        {
            int(match.group(2))
            for key in metrics
            if (match := PER_CLASS.fullmatch(key)) and match.group(1) == split
        }
    )
    counts = counted
    if counts is not None:
        labels = sorted(set(labels) | set(range(len(counts))))
    if not labels:
        return []
    total = sum(counts) if counts else None
    even = 1 / (2 * len(labels))
    rows = []
    for label in labels:
        correct = metrics.get(f"{split}/class_{label}_correct")
        recall = metrics.get(f"{split}/class_{label}_recall")
        examples = counts[label] if counts is not None and label < len(counts) else None
        share = examples / total if examples is not None and total else None
        rows.append(
            ClassRow(
                split=split,
                label=label,
                examples=examples,
                share=share,
                correct=int(correct) if correct is not None else None,
                recall=recall,
                minority=share is not None and share < even,
            )
        )
    return rows


def _minority_findings(split: str, rows: list[ClassRow], result: ImbalanceResult) -> None:
    minority = [r for r in rows if r.minority]
    if not minority:
        return
    where = "validation" if split == "val" else "train-split eval"
    parts = []
    for row in minority:
        recall = fmt(row.recall) if row.recall is not None else "?"
        correct = row.correct if row.correct is not None else "?"
        step = f"; one example is {fmt(1 / row.examples)}" if row.examples else ""
        parts.append(
            f"class {row.label}: recall {recall} = {correct} of {row.examples} ({pct(row.share or 0)}{step})"
        )
    few = [r for r in minority if r.examples is not None and r.examples < FEW]
    text = f"minority classes on the {where} split at trial {result.trial}'s best step: " + "; ".join(parts)
    if few:
        result.findings.append(
            FewExamples(
                split=split,
                classes=[r.label for r in few],
                examples=[int(r.examples or 0) for r in few],
                level=Level.WARNING,
                rule=f"minority: {MINORITY_RULE}; few: under {FEW} examples",
                text=text,
                advice="compare trials on these classes' correct counts, not their rates: a rise in recall "
                "may be one more example; a larger validation split makes them steadier",
            )
        )
    else:
        result.findings.append(
            MinorityCounts(
                split=split,
                classes=[r.label for r in minority],
                level=Level.INFO,
                rule=f"minority: {MINORITY_RULE}",
                text=text,
            )
        )


def _skew(counts: dict[str, list[int]], result: ImbalanceResult) -> None:
    sample, full = counts.get("train_eval_sample"), counts.get("train")
    if not sample or not full or not sum(sample) or not sum(full):
        return
    sample_shares = [c / sum(sample) for c in sample]
    full_shares = [c / sum(full) for c in full]
    skewed = [
        k
        for k, (s, f) in enumerate(zip(sample_shares, full_shares, strict=False))
        if f and abs(s - f) > SKEW * f
    ]
    if not skewed:
        return
    detail = ", ".join(f"class {k} {pct(sample_shares[k])} vs {pct(full_shares[k])}" for k in skewed)
    result.findings.append(
        SampleSkew(
            sample_size=sum(sample),
            full_size=sum(full),
            classes=skewed,
            sample_shares=[sample_shares[k] for k in skewed],
            full_shares=[full_shares[k] for k in skewed],
            level=Level.WARNING,
            rule=f"a class's share in the sample differs from the whole split's by more than {SKEW:.0%} "
            "of it",
            text=f"the train split is evaluated on a sample of {sum(sample)} of {sum(full)} examples whose "
            f"class mix is skewed ({detail}): train/ metrics over- or under-weight those classes",
            advice="raise training.train_eval_examples (or remove it to evaluate the whole train split)",
        )
    )
