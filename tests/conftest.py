"""Shared fixtures: the real PostgreSQL of CI, where there is one; no process outlives its test."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from tests._processes import kill_everything_started


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


@pytest.fixture(autouse=True)
def _kill_what_the_test_started() -> Iterator[None]:
    """Every process group ``tests._processes.spawn`` started (and its descendants) is killed when
    the test ends: a test that failed or timed out leaves nothing training behind."""
    yield
    kill_everything_started()
