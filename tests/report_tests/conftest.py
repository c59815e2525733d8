"""Fixtures the report tests share; each module asks for what it needs (none is autouse)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No storage or output folder from the environment (they would override the test's), and the
    test's own folder as the working directory (relative paths land there)."""
    monkeypatch.delenv("TUNER_STORAGE", raising=False)
    monkeypatch.delenv("TUNER_OUTPUT_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
