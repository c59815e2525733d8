"""The code a trial ran: git commit and whether the tree had uncommitted changes."""

from __future__ import annotations

import subprocess
from pathlib import Path


def code_version(folder: Path) -> dict[str, object]:
    """``{"git_commit": "ab12…", "git_dirty": False}``; ``None`` values outside a git checkout."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=10, check=True
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip()

    commit = git("rev-parse", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"git_commit": commit, "git_dirty": None if dirty is None else bool(dirty)}
