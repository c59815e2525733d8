"""``tuner list``: the playbook's experiment-tracking table, one row per study of a storage.

Each row says what a study is (name, study file, notes: its ``description``), how far it got
(phases with their trials by state, retries merged into the trial they resumed), what it found
(the best validation value, which trial and step gave it, and that checkpoint's file), what it
cost (training time over every attempt) and how to get it back (the best trial's reproduce
command, the code versions the trials ran).

Rows come from the storage alone, read with the fast reader (``tuner.orchestrate.stored``: plain
SELECTs, no Optuna trial objects, no intermediate values), one study at a time: a shared storage
with many studies holds one study's trials in memory at once, and only the rows stay. Run
folders are only looked at to say whether the best checkpoint is on this machine.

Which value is "best": the best completed trial over the phases that validate on the real
validation set, in the objective's direction. A phase whose plan validates on a proxy split
(``proxy_fraction > 0``: round 1 holding out part of the TRAINING data) scores on other examples,
so its values are not comparable with the others and are left out; sweep-lr's trials count (they
validate on the real validation set). Only when no other phase has a completed trial is the best
of a proxy phase shown, marked ``"split": "proxy"``. Phases whose objective (metric or direction)
differs from the latest phase's are left out too. On equal values the later phase wins.

JSON (``tuner list --json``): a list, one object per study; keys are only ever added::

    [
      {
        "study": str,
        "storage": str,                        # the storage URL, password masked
        "study_file": str | null,              # the latest phase's study file (where it ran)
        "notes": str,                          # the study's description ("" when it has none)
        "phases": [                            # in the order they were created
          {"phase": str, "kind": "sweep-lr" | "round" | "other", "study_file": str | null,
           "proxy_fraction": float,            # > 0: validates on that share of the training split
           "trials": int, "attempts": int,     # slots; Optuna trials (retries included)
           "counts": {"complete", "stopped", "diverged", "failed", "running", "waiting": int},
           "best_value": float | null, "train_s": float}
        ],
        "trials": int, "attempts": int, "counts": {...},   # over every phase
        "best": null | {"value": float, "metric": str, "direction": "minimize" | "maximize",
                        "split": "validation" | "proxy", "phase": str, "trial": int,
                        "best_step": int | null, "max_train_steps": int | null, "params": {...},
                        "run_dir": str | null,
                        "checkpoint": str | null,           # <run_dir>/checkpoints/best-stepXXXXXXXX.pt
                        "checkpoint_on_this_machine": bool,
                        "checkpoint_problem": str | null,   # why it is not here (no run folder, no file)
                        "reproduce": str | null},
        "train_s": float,                      # training time of every attempt of every phase
        "reproduce": str | null,               # the best trial's command (= best.reproduce)
        "code_versions": [{"git_commit": str | null, "git_dirty": bool | null, "trials": int}]
      }                                        # most trials first; null commit: not a git checkout
    ]

CSV (``--csv PATH``): one row per study, the columns of ``CSV_COLUMNS``; ``phases`` is the
terminal's text (``round-1: 4 complete, 1 failed (1 retry merged); round-2: 3 complete``),
``code_versions`` too with full commits; ``checkpoint_on_this_machine`` is ``true``/``false``.
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tuner._atomic import write_output_file
from tuner.orchestrate.stored import StorageReader
from tuner.playbook.verdicts import jsonable
from tuner.report.best_trial import BestTrial, best_trial
from tuner.report.study_data import PhaseData, SlotState, StudyData, TrialSlot, study_data

Split = Literal["validation", "proxy"]


@dataclass(frozen=True)
class PhaseRow:
    phase: str
    kind: str
    study_file: str | None
    proxy_fraction: float
    trials: int
    attempts: int
    counts: dict[str, int]
    best_value: float | None
    train_s: float

    @property
    def tally(self) -> str:
        """``4 complete, 1 failed (1 retry merged)``."""
        shown = ", ".join(f"{n} {state}" for state, n in self.counts.items() if n) or "none started"
        retries = self.attempts - self.trials
        if retries:
            shown += f" ({retries} {'retry' if retries == 1 else 'retries'} merged)"
        return shown

    def to_json(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "kind": self.kind,
            "study_file": self.study_file,
            "proxy_fraction": self.proxy_fraction,
            "trials": self.trials,
            "attempts": self.attempts,
            "counts": dict(self.counts),
            "best_value": self.best_value,
            "train_s": round(self.train_s, 3),
        }


@dataclass
class BestRow(BestTrial):
    """The study's best trial (``best_trial.BestTrial``) and the split it was scored on."""

    split: Split = "validation"

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "split": self.split}


@dataclass(frozen=True)
class CodeVersion:
    """A (git commit, dirty) the trials ran, and how many trials (attempts) ran it."""

    git_commit: str | None
    git_dirty: bool | None
    trials: int

    def label(self, *, short: bool = True) -> str:
        """``0123abc``, ``0123abc dirty``, ``no git checkout``."""
        if not self.git_commit:
            return "no git checkout"
        return (self.git_commit[:7] if short else self.git_commit) + (" dirty" if self.git_dirty else "")

    def to_json(self) -> dict[str, Any]:
        return {"git_commit": self.git_commit, "git_dirty": self.git_dirty, "trials": self.trials}


@dataclass(frozen=True)
class TrackingRow:
    """One study in the tracking table (see the module docstring for every field)."""

    study: str
    storage: str
    study_file: str | None
    notes: str
    phases: list[PhaseRow]
    best: BestRow | None
    train_s: float
    code_versions: list[CodeVersion] = field(default_factory=list)

    @property
    def trials(self) -> int:
        return sum(p.trials for p in self.phases)

    @property
    def attempts(self) -> int:
        return sum(p.attempts for p in self.phases)

    @property
    def counts(self) -> dict[str, int]:
        return {str(s): sum(p.counts[str(s)] for p in self.phases) for s in SlotState}

    @property
    def reproduce(self) -> str | None:
        return self.best.reproduce if self.best is not None else None

    def code_text(self, *, short: bool = True) -> str:
        """``0123abc (12 trials), 89abcde dirty (3 trials)``; one version alone has no count."""
        if len(self.code_versions) == 1:
            return self.code_versions[0].label(short=short)
        return ", ".join(
            f"{v.label(short=short)} ({v.trials} {'trial' if v.trials == 1 else 'trials'})"
            for v in self.code_versions
        )

    def to_json(self) -> dict[str, Any]:
        return jsonable(
            {
                "study": self.study,
                "storage": self.storage,
                "study_file": self.study_file,
                "notes": self.notes,
                "phases": [p.to_json() for p in self.phases],
                "trials": self.trials,
                "attempts": self.attempts,
                "counts": self.counts,
                "best": self.best.to_json() if self.best is not None else None,
                "train_s": round(self.train_s, 3),
                "reproduce": self.reproduce,
                "code_versions": [v.to_json() for v in self.code_versions],
            }
        )

    def to_csv(self) -> dict[str, Any]:
        best = self.best
        counts = self.counts
        return {
            "study": self.study,
            "storage": self.storage,
            "study_file": self.study_file or "",
            "notes": self.notes,
            "phases": "; ".join(f"{p.phase}: {p.tally}" for p in self.phases),
            "trials": self.trials,
            "attempts": self.attempts,
            **{state: counts[state] for state in COUNT_COLUMNS},
            "best_value": "" if best is None else best.value,
            "metric": "" if best is None else best.metric,
            "direction": "" if best is None else best.direction,
            "best_split": "" if best is None else best.split,
            "best_phase": "" if best is None else best.phase,
            "best_trial": "" if best is None else best.trial,
            "best_step": "" if best is None or best.best_step is None else best.best_step,
            "checkpoint": "" if best is None else best.checkpoint or "",
            "checkpoint_on_this_machine": ""
            if best is None
            else str(best.checkpoint_on_this_machine).lower(),
            "train_s": round(self.train_s, 3),
            "code_versions": self.code_text(short=False),
            "reproduce": self.reproduce or "",
        }


def _flag(best: BestRow | None) -> str:
    return "" if best is None else str(best.checkpoint_on_this_machine).lower()


COUNT_COLUMNS = tuple(str(s) for s in SlotState)
CSV_COLUMNS = (
    "study",
    "storage",
    "study_file",
    "notes",
    "phases",
    "trials",
    "attempts",
    *COUNT_COLUMNS,
    "best_value",
    "metric",
    "direction",
    "best_split",
    "best_phase",
    "best_trial",
    "best_step",
    "checkpoint",
    "checkpoint_on_this_machine",
    "train_s",
    "code_versions",
    "reproduce",
)


# -- reading -------------------------------------------------------------------------------------
def read_studies(reader: StorageReader) -> Iterator[StudyData]:
    """Every tuner study of the storage, one at a time (phases latest first, as ``read_study``)."""
    for study, phases in reader.studies().items():
        data = study_data(reader, study, phases)
        if data.phases:
            yield data


def tracking_rows(reader: StorageReader) -> Iterator[TrackingRow]:
    """The tracking table of a storage, one study at a time."""
    for data in read_studies(reader):
        yield tracking_row(data)


# -- one study -----------------------------------------------------------------------------------
def proxy_fraction(phase: PhaseData) -> float:
    """The share of the training split the phase validates on instead of the validation set (0: none)."""
    if phase.plan is None:
        return 0.0
    value = phase.plan.overrides.get("proxy_fraction")
    if value is None:
        value = phase.plan.config.get("training", {}).get("proxy_fraction")
    return float(value) if isinstance(value, int | float) and value > 0 else 0.0


def tracking_row(data: StudyData) -> TrackingRow:
    """The row of one study (``data.phases`` latest first, as ``read_study`` returns them)."""
    phases = data.phases
    plan = next((p.plan for p in phases if p.plan is not None), None)  # the latest phase's
    notes = str(plan.config.get("description") or "") if plan is not None else ""
    study_file = next((p.study_file for p in phases if p.study_file), None)
    return TrackingRow(
        study=data.study,
        storage=data.storage,
        study_file=study_file,
        notes=notes.strip(),
        phases=[_phase_row(p) for p in reversed(phases)],
        best=best_row(phases),
        train_s=sum(slot.train_s for p in phases for slot in p.slots),
        code_versions=code_versions(phases),
    )


def _phase_row(phase: PhaseData) -> PhaseRow:
    counts = Counter(str(slot.state) for slot in phase.slots)
    best = phase.best
    return PhaseRow(
        phase=phase.phase,
        kind=phase.kind,
        study_file=phase.study_file,
        proxy_fraction=proxy_fraction(phase),
        trials=len(phase.slots),
        attempts=phase.attempts,
        counts={state: counts.get(state, 0) for state in COUNT_COLUMNS},
        best_value=best.value if best is not None else None,
        train_s=sum(slot.train_s for slot in phase.slots),
    )


def best_row(phases: list[PhaseData]) -> BestRow | None:
    """The study's best trial (see the module docstring: real validation set first; the later
    phase on equal values). ``phases`` latest first."""
    real = [p for p in phases if proxy_fraction(p) == 0.0]
    proxy = [p for p in phases if proxy_fraction(p) > 0.0]
    splits: tuple[tuple[Split, list[PhaseData]], ...] = (("validation", real), ("proxy", proxy))
    for split, candidates in splits:
        ranked = _rank(candidates)
        if ranked is not None:
            return _best(*ranked, split)
    return None


def _rank(phases: list[PhaseData]) -> tuple[PhaseData, TrialSlot] | None:
    bests = [(p, best) for p in phases if (best := p.best) is not None and best.value is not None]
    if not bests:
        return None
    objective = (bests[0][0].metric, bests[0][0].direction)  # the latest phase's objective
    same = [(p, s) for p, s in bests if (p.metric, p.direction) == objective]
    sign = 1.0 if same[0][0].minimize else -1.0
    # min() keeps the first of equal keys: ``phases`` are latest first, so the later phase wins
    return min(same, key=lambda pair: sign * (pair[1].value or 0.0))


def _best(phase: PhaseData, slot: TrialSlot, split: Split) -> BestRow:
    found = best_trial(phase, slot)
    assert found is not None
    return BestRow(**vars(found), split=split)


def code_versions(phases: list[PhaseData]) -> list[CodeVersion]:
    """The distinct (commit, dirty) over every attempt that started, most trials first."""
    counts: Counter[tuple[str | None, bool | None]] = Counter()
    for phase in phases:
        for slot in phase.slots:
            for attempt in slot.attempts:
                if attempt.state == "WAITING":
                    continue  # never ran: no code version
                commit = attempt.user_attrs.get("git_commit")
                dirty = attempt.user_attrs.get("git_dirty")
                counts[(str(commit) if commit else None, dirty if isinstance(dirty, bool) else None)] += 1
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0][0] or "~", bool(item[0][1])))
    return [CodeVersion(commit, dirty, n) for (commit, dirty), n in ordered]


# -- output --------------------------------------------------------------------------------------
def write_tracking_csv(rows: list[TrackingRow], path: Path) -> None:
    """One row per study, the columns of ``CSV_COLUMNS``; written atomically."""
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=list(CSV_COLUMNS), restval="")
    writer.writeheader()
    writer.writerows(row.to_csv() for row in rows)
    write_output_file(path, buffer.getvalue())
