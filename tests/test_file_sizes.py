"""Every Python file of the project stays small enough to read in one sitting (under 400 lines):
a newcomer finds the room for a change by a module's name, and a module that grows past this
has become two subjects."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 400


def test_no_python_file_reaches_the_limit() -> None:
    files = [
        path for folder in ("tuner", "tests", "benchmarks", "docs") for path in (ROOT / folder).rglob("*.py")
    ]
    assert files
    long = {
        str(path.relative_to(ROOT)): count
        for path in files
        if (count := len(path.read_text(encoding="utf-8").splitlines())) >= LIMIT
    }
    assert long == {}, f"split these into modules of under {LIMIT} lines: {long}"
