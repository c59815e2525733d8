"""Shared fixtures: the real PostgreSQL of CI, where there is one; no process outlives its test."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

# One intra-op thread in the test processes and every process they start (set before torch is
# imported). Several test files run at once on two cores: a 2-thread OpenMP operation
# whose second thread is descheduled spin-waits for it (measured: a training test took 6 s alone
# and 56 s beside a multi-worker test). Speed with more threads is measured in benchmarks/.
os.environ.setdefault("OMP_NUM_THREADS", "1")

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


# The files that take longest (seconds on a quiet 2-core machine), slowest first. pytest-xdist
# hands whole files to its workers in collection order: started first, they overlap the many
# short files instead of running alone at the end (xdist's own reorder puts files with few
# tests, usually these, last). A file not listed keeps its place after them.
SLOWEST_FILES = (
    "benchmarks_tests/test_outcome.py",  # --quick: 73-95 s here, the longest test of the suite
    "orchestrate_tests/test_round1.py",
    "cli_tests/test_tune.py",
    "cli_tests/test_tune_decisions.py",
    "orchestrate_tests/test_scale.py",
    "orchestrate_tests/test_chaos.py",
    "train_tests/test_nodes.py",  # torchrun agents and their ranks: 5 torch processes an attempt
    "orchestrate_tests/test_preemption.py",
    "orchestrate_tests/test_failure_reasons.py",
    "orchestrate_tests/test_storage_outage.py",
    "orchestrate_tests/test_disk_full.py",
    "playbook_tests/test_sweep_lr_command.py",
    "playbook_tests/test_sweep_lr_stops.py",
    "orchestrate_tests/test_stop_signals.py",
    "orchestrate_tests/test_view_faults.py",
    "train_tests/test_cli_resume.py",
    "train_tests/test_input_pipeline.py",
    "orchestrate_tests/test_reproduce.py",
    "playbook_tests/test_later_rounds_train_what_they_record.py",
    "orchestrate_tests/test_chaos_postgres.py",
    "report_tests/test_verdicts_end_to_end.py",
    "orchestrate_tests/test_secrets.py",
    "playbook_tests/test_rounds.py",
    "playbook_tests/test_phase_creation.py",
    "train_tests/test_train_command.py",
    "train_tests/test_distributed_interrupts.py",
    "report_tests/test_end_to_end.py",
    "train_tests/test_distributed.py",
    "train_tests/test_damaged_checkpoints.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slowest files first (``SLOWEST_FILES``); the order of tests inside a file is kept."""
    here = os.path.dirname(__file__)

    def place(item: pytest.Item) -> int:
        name = os.path.relpath(str(item.path), here)
        return SLOWEST_FILES.index(name) if name in SLOWEST_FILES else len(SLOWEST_FILES)

    items.sort(key=place)
