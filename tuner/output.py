"""Where a study's files go: ``<output>/<study>/<phase>``, never outside ``<output>``.

Kept free of torch so commands can find their folders before (or without) importing it.
"""

from __future__ import annotations

import os
from pathlib import Path

from tuner.errors import UsageError


def phase_dir(output_dir: Path, study_name: str, phase: str) -> Path:
    """``output/<study>/<phase>``, refusing anything that would land outside ``output``."""
    root = Path(output_dir).resolve()
    folder = (root / study_name / phase).resolve()
    if root != folder and root not in folder.parents:
        raise UsageError(f"study name {study_name!r} would write outside the output folder {root}")
    return folder


def shown_path(path: str | Path) -> str:
    """A path as a user would type it here: relative to the current folder when inside it."""
    try:
        return os.path.relpath(path) if Path(path).resolve().is_relative_to(Path.cwd()) else str(path)
    except (OSError, ValueError):
        return str(path)
