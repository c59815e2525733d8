"""What the report reads from run folders, each read allowed to fail.

A study run on other machines has run folders this machine cannot see, and a folder can be
damaged (a disk filled up, a hand edit). Every read here returns the data or an ``Unreadable``
saying which file and why; the report shows what it could not read and goes on.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_STATUS_BYTES = 16 * 2**20  # a status.json is a few kilobytes


@dataclass(frozen=True)
class Unreadable:
    """A file the report needed and could not read, and why (shown, and in ``--json``)."""

    path: str
    problem: str

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "problem": self.problem}


def _missing(run_dir: str) -> Unreadable:
    return Unreadable(run_dir, "no such folder here (a run folder of another machine?)")


def read_status(run_dir: str) -> dict[str, Any] | Unreadable:
    """``status.json`` of a run folder."""
    folder = Path(run_dir)
    if not folder.is_dir():
        return _missing(run_dir)
    path = folder / "status.json"
    if not path.exists():
        return Unreadable(str(path), "missing")
    if not path.is_file():  # a FIFO or a device would block or never end
        return Unreadable(str(path), "not a regular file")
    try:
        if path.stat().st_size > MAX_STATUS_BYTES:
            return Unreadable(str(path), f"larger than {MAX_STATUS_BYTES // 2**20} MiB (damaged?)")
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as error:
        return Unreadable(str(path), f"cannot read: {error}")
    except (ValueError, RecursionError):
        return Unreadable(str(path), "not valid JSON (damaged?)")
    if not isinstance(data, dict):
        return Unreadable(str(path), "not a JSON object (damaged?)")
    return data


def metrics_at(run_dir: str, step: int) -> dict[str, float] | Unreadable:
    """The eval metrics logged at ``step`` in ``metrics.csv`` (the row of that step)."""
    folder = Path(run_dir)
    if not folder.is_dir():
        return _missing(run_dir)
    path = folder / "metrics.csv"
    if path.exists() and not path.is_file():
        return Unreadable(str(path), "not a regular file")
    try:
        with path.open(newline="") as handle:
            for row in csv.DictReader(handle):
                if row.get("step") != str(step):
                    continue
                values = {}
                for key, text in row.items():
                    if key in (None, "step") or text in (None, ""):
                        continue
                    try:
                        values[str(key)] = float(text)
                    except (TypeError, ValueError):
                        return Unreadable(str(path), f"step {step}: {key} is {text!r}, not a number")
                return values
    except FileNotFoundError:
        return Unreadable(str(path), "missing")
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        return Unreadable(str(path), f"cannot read: {error}")
    return Unreadable(str(path), f"no row for step {step}")


def best_checkpoint(run_dir: str, step: int) -> Path | Unreadable:
    """The checkpoint file of ``step`` (``best-stepXXXXXXXX.pt``), if it is on this machine."""
    folder = Path(run_dir)
    if not folder.is_dir():
        return _missing(run_dir)
    path = folder / "checkpoints" / f"best-step{step:08d}.pt"
    if not path.is_file():
        return Unreadable(str(path), "not on disk (deleted, or not among the kept best checkpoints)")
    return path


def finite(value: Any) -> float | None:
    """A finite float from a JSON/CSV value, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None
