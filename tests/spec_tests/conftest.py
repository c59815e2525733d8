"""Every spec test runs in its own ``tmp_path``: messages start with the relative ``study.yaml``,
and a test that writes ``study.yaml`` never writes it into the checkout (where a test file run
beside it would read it)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
