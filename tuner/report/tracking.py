"""``tuner list``: the playbook's experiment-tracking table, one row per study of a storage.

Each row says what a study is (name, study file, notes: its ``description``), how far it got
(phases with their trials by state, retries merged into the trial they resumed), what it found
(the best validation value, which trial and step gave it, and that checkpoint's file), what it
cost (training time over every attempt) and how to get it back (the best trial's reproduce
command, the code versions the trials ran).

Rows come from the storage alone, read with the fast reader (``tuner.orchestrate.stored``: plain
SELECTs, no Optuna trial objects, no intermediate values), one study at a time: a shared storage
with many studies holds one study's trials in memory at once, and only the rows stay. Run
folders are only looked at to say whether the best checkpoint is on this machine and to read the
delivered run's validation metrics at its best step (one row of its ``metrics.csv``).

Which model is the study's: the one rule of ``tuner.report.delivered`` (the latest full-length
round, 2 or later; its point with the best mean over seeds; that point's best seed at its best
step), the same as ``tuner report``'s. Before such a round has completed, the best point of the
latest round is shown as "not a delivered model yet", never as the study's best.

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
           "trials": int, "attempts": int,     # slots; Optuna trials (retries included, not duplicates)
           "counts": {"complete", "stopped", "diverged", "failed", "running", "waiting": int},
           "best_value": float | null, "train_s": float}
        ],
        "trials": int, "attempts": int, "counts": {...},   # over every phase
        "delivered_model": null | {...},       # tuner report --json's "delivered_model", the same
        "best": null | {"value": float, "metric": str, "direction": "minimize" | "maximize",
                        "split": "validation" | "proxy", "phase": str, "trial": int,
                        "best_step": int | null, "max_train_steps": int | null, "params": {...},
                        "run_dir": str | null,
                        "checkpoint": str | null,           # <run_dir>/checkpoints/best-stepXXXXXXXX.pt
                        "checkpoint_on_this_machine": bool,
                        "checkpoint_problem": str | null,   # why it is not here (no run folder, no file)
                        "reproduce": str | null},   # the delivered model's run (or candidate)
        "train_s": float,                      # training time of every attempt of every phase
        "reproduce": str | null,               # its command (= best.reproduce)
        "code_versions": [{"git_commit": str | null, "git_dirty": bool | null, "trials": int}],
        "tune_studies": [str]                  # the studies one ``tune`` searched, in order,
      }                                        # this one among them ([] if tune did not run it)
                                               # most trials first; null commit: not a git checkout
    ]

CSV (``--csv PATH``): one row per study, the columns of ``CSV_COLUMNS``; ``phases`` is the
terminal's text (``round-1: 4 complete, 1 failed (1 retry merged); round-2: 3 complete``),
``code_versions`` too with full commits; ``checkpoint_on_this_machine`` is ``true``/``false``.
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner._atomic import write_output_file
from tuner.orchestrate.stored import StorageReader
from tuner.playbook.verdicts import jsonable
from tuner.report.best_trial import BestTrial
from tuner.report.delivered import DeliveredModel, Split, delivered_model, proxy_fraction
from tuner.report.study_data import PhaseData, SlotState, StudyData, study_data


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
    delivered: DeliveredModel | None
    train_s: float
    code_versions: list[CodeVersion] = field(default_factory=list)
    tune_studies: list[str] = field(default_factory=list)  # one tune's studies, in order

    def tune_text(self) -> str:
        """``one tune searched digits-mlp -> digits-mlp-2; its model is digits-mlp-2's``."""
        if len(self.tune_studies) < 2:
            return ""
        last = self.tune_studies[-1]
        whose = "this study's" if last == self.study else f"{last}'s"
        return f"one tune searched {' -> '.join(self.tune_studies)}; its model is {whose}"

    @property
    def best(self) -> BestRow | None:
        """The delivered model's run (or the candidate, ``delivered.delivered`` False) and its split."""
        if self.delivered is None:
            return None
        return BestRow(**vars(self.delivered.run), split=self.delivered.split)

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
                "delivered_model": self.delivered.to_json() if self.delivered is not None else None,
                "best": self.best.to_json() if self.best is not None else None,
                "train_s": round(self.train_s, 3),
                "reproduce": self.reproduce,
                "code_versions": [v.to_json() for v in self.code_versions],
                "tune_studies": self.tune_studies,
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
            "delivered": "" if self.delivered is None else str(self.delivered.delivered).lower(),
            "best_value": "" if best is None else best.value,
            "metric": "" if best is None else best.metric,
            "direction": "" if best is None else best.direction,
            "best_split": "" if best is None else best.split,
            "best_phase": "" if best is None else best.phase,
            "best_trial": "" if best is None else best.trial,
            "best_step": "" if best is None or best.best_step is None else best.best_step,
            **_spread_columns(self.delivered),
            "checkpoint": "" if best is None else best.checkpoint or "",
            "checkpoint_on_this_machine": ""
            if best is None
            else str(best.checkpoint_on_this_machine).lower(),
            "train_s": round(self.train_s, 3),
            "code_versions": self.code_text(short=False),
            "reproduce": self.reproduce or "",
        }


def _spread_columns(delivered: DeliveredModel | None) -> dict[str, Any]:
    """The chosen point's mean, min, max over its seeds, and how many (empty: none)."""
    if delivered is None:
        return {"seed_mean": "", "seed_min": "", "seed_max": "", "seeds": ""}
    spread = delivered.spread
    return {"seed_mean": spread.mean, "seed_min": spread.low, "seed_max": spread.high, "seeds": spread.seeds}


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
    "delivered",
    "best_value",
    "metric",
    "direction",
    "best_split",
    "best_phase",
    "best_trial",
    "best_step",
    "seed_mean",
    "seed_min",
    "seed_max",
    "seeds",
    "checkpoint",
    "checkpoint_on_this_machine",
    "train_s",
    "code_versions",
    "reproduce",
)


# -- reading -------------------------------------------------------------------------------------
def read_studies(reader: StorageReader, only: Collection[str] | None = None) -> Iterator[StudyData]:
    """Every tuner study of the storage (or those named in ``only``), one at a time (phases
    latest first, as ``read_study``)."""
    for study, phases in reader.studies().items():
        if only is not None and study not in only:
            continue
        data = study_data(reader, study, phases)
        if data.phases:
            yield data


def tracking_rows(reader: StorageReader, only: Collection[str] | None = None) -> Iterator[TrackingRow]:
    """The tracking table of a storage (of the studies in ``only``), one study at a time."""
    for data in read_studies(reader, only):
        yield tracking_row(data)


# -- one study -----------------------------------------------------------------------------------
def tracking_row(data: StudyData) -> TrackingRow:
    """The row of one study (``data.phases`` latest first, as ``read_study`` returns them)."""
    phases = data.phases
    plan = next((p.plan for p in phases if p.plan is not None), None)  # the latest phase's
    notes = str(plan.config.get("description") or "") if plan is not None else ""
    study_file = next((p.study_file for p in phases if p.study_file), None)
    from tuner.playbook.decision_log import state_for

    reader = data.reader
    tuned = state_for(data.study, reader.optuna_study_names(), reader.study_attrs) if reader else None
    return TrackingRow(
        study=data.study,
        storage=data.storage,
        study_file=study_file,
        notes=notes.strip(),
        phases=[_phase_row(p) for p in reversed(phases)],
        delivered=delivered_model(phases),
        train_s=sum(slot.train_s for p in phases for slot in p.slots),
        code_versions=code_versions(phases),
        tune_studies=list(dict.fromkeys(s.study for s in tuned.stages)) if tuned else [],
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
