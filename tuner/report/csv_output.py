"""``tuner report --csv PATH``: one row per trial (a slot: its retries merged), every phase.

Columns: ``phase``, ``trial``, ``state``, ``reason`` (a failure's), ``value``, ``best_step``,
``max_train_steps``, ``best_step_position``, ``attempts``, ``train_s``, then one column per
hyperparameter (its dotted key), then ``run_dir``, ``reproduce``, ``error``. Written atomically.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from tuner._atomic import write_output_file
from tuner.report.build import StudyReport

FIRST = ("phase", "trial", "state", "reason", "value", "best_step", "max_train_steps", "best_step_position")
AFTER_COUNTS = ("attempts", "train_s")
LAST = ("run_dir", "reproduce", "error")


def report_rows(report: StudyReport) -> tuple[list[str], list[dict[str, object]]]:
    params: list[str] = []
    rows: list[dict[str, object]] = []
    for phase in report.phases:
        for slot in phase.data.slots:
            for key in slot.params:
                if key not in params:
                    params.append(key)
            rows.append(
                {
                    "phase": phase.phase,
                    "trial": slot.slot,
                    "state": str(slot.state),
                    "reason": slot.failure_reason or "",
                    "value": "" if slot.value is None else slot.value,
                    "best_step": "" if slot.best_step is None else slot.best_step,
                    "max_train_steps": "" if slot.max_train_steps is None else slot.max_train_steps,
                    "best_step_position": "" if slot.position is None else round(slot.position, 6),
                    "attempts": len(slot.attempts),
                    "train_s": round(slot.train_s, 3),
                    **slot.params,
                    "run_dir": slot.run_dir or "",
                    "reproduce": slot.reproduce or "",
                    "error": slot.error or "",
                }
            )
    return [*FIRST, *AFTER_COUNTS, *params, *LAST], rows


def write_csv(report: StudyReport, path: Path) -> int:
    """Write the CSV; returns the number of rows."""
    columns, rows = report_rows(report)
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=columns, restval="")
    writer.writeheader()
    writer.writerows(rows)
    write_output_file(path, buffer.getvalue())
    return len(rows)
