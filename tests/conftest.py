"""Shared fixtures: the real PostgreSQL of CI, where there is one."""

from __future__ import annotations

import os
import uuid

import pytest


@pytest.fixture
def postgres_url() -> str:
    """``TUNER_TEST_POSTGRES_URL``; tests using it skip where it is unset (a laptop), run in CI."""
    url = os.environ.get("TUNER_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("TUNER_TEST_POSTGRES_URL is not set")
    return url


@pytest.fixture
def unique_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"
