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

# The PostgreSQL tests run wherever a server answers: $TUNER_TEST_POSTGRES_URL, else this
# machine's default one if it answers (as CI's does), so `make test` runs them with no setup;
# TUNER_TEST_POSTGRES=0 skips them. The run ends saying which (``pytest_terminal_summary``).
LOCAL_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def _local_postgres_answers() -> bool:
    try:
        import psycopg

        with psycopg.connect("postgresql://postgres@127.0.0.1:5432/test", connect_timeout=2):
            return True
    except Exception:  # not installed, nothing listening, refused: the tests skip, and say so
        return False


if not os.environ.get("TUNER_TEST_POSTGRES_URL") and os.environ.get("TUNER_TEST_POSTGRES") != "0":
    if _local_postgres_answers():  # set once, by the first process: the test workers inherit it
        os.environ["TUNER_TEST_POSTGRES_URL"] = LOCAL_POSTGRES
    else:
        os.environ["TUNER_TEST_POSTGRES"] = "0"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say whether the PostgreSQL tests ran, and on which server (no password: trust auth here)."""
    url = os.environ.get("TUNER_TEST_POSTGRES_URL")
    if url:
        from tuner.orchestrate import redact_url

        terminalreporter.write_line(f"PostgreSQL tests ran against {redact_url(url)}")
    else:
        terminalreporter.write_line(
            "PostgreSQL tests skipped: no server answers at 127.0.0.1:5432 (database test) and "
            "TUNER_TEST_POSTGRES_URL is not set"
        )


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


# The files that take longest, slowest first (the sum of their tests' seconds in one suite run
# on 2026-11-29, `--durations=0`, 4 xdist workers on this 2-core VM). pytest-xdist hands whole
# files to its workers in collection order: started first, they overlap the many short files
# instead of running alone at the end (xdist's own reorder puts files with few tests, usually
# these, last). A file not listed keeps its place after them. Re-measure when a file grows. The
# cli_tests/test_tune*.py files were split from two measured ones (176 s): each has its share of
# those seconds, as measured when split.
SLOWEST_FILES = (
    "orchestrate_tests/test_grpc_chaos.py",  # 105 s
    "orchestrate_tests/test_chaos_postgres.py",  # 79 s
    "orchestrate_tests/test_round1.py",  # 76 s
    "orchestrate_tests/test_grpc_claims.py",  # 73 s
    "cli_tests/test_tune.py",  # 72 s
    "benchmarks_tests/test_outcome.py",  # 75 s
    "orchestrate_tests/test_preemption.py",  # 57 s
    "train_tests/test_nodes.py",  # 46 s
    "orchestrate_tests/test_storage_outage.py",  # 43 s
    "orchestrate_tests/test_chaos.py",  # 43 s
    "train_tests/test_input_pipeline.py",  # 43 s
    "cli_tests/test_tune_next_study.py",  # 36 s
    "orchestrate_tests/test_round1_pruner.py",  # 40 s (2026-12-07, alone)
    "orchestrate_tests/test_view_faults.py",  # 33 s
    "cli_tests/test_tune_extra_round.py",  # 32 s
    "cli_tests/test_tune_own_settings.py",  # 32 s
    "orchestrate_tests/test_reproduce.py",  # 32 s
    "orchestrate_tests/test_protocol.py",  # 28 s
    "report_tests/test_end_to_end.py",  # 28 s
    "orchestrate_tests/test_scale.py",  # 27 s
    "orchestrate_tests/test_fleet_under_faults.py",  # 25 s (2026-12-07, alone)
    "orchestrate_tests/test_disk_full.py",  # 27 s
    "orchestrate_tests/test_stop_signals.py",  # 26 s
    "playbook_tests/test_rounds.py",  # 25 s
    "test_slurm_example.py",  # 25 s
    "orchestrate_tests/test_journal_claims.py",  # 23 s
    "cli_tests/test_tune_sweep.py",  # 22 s
    "orchestrate_tests/test_gp_round.py",  # 20 s
    "orchestrate_tests/test_failure_reasons.py",  # 19 s
    "train_tests/test_cli_resume.py",  # 18 s
    "orchestrate_tests/test_stall_watchdog.py",  # 17 s
    "orchestrate_tests/test_grpc_stalls.py",  # 17 s (2026-12-07, alone)
    "orchestrate_tests/test_secrets.py",  # 16 s
    "train_tests/test_train_command.py",  # 15 s
    "cli_tests/test_storage_proxy.py",  # 15 s
    "train_tests/test_workload_errors.py",  # 14 s
    "train_tests/test_distributed.py",  # 13 s
    "report_tests/test_delivered.py",  # 13 s
    "playbook_tests/test_sweep_lr_command.py",  # 12 s
    "cli_tests/test_tune_duration.py",  # 12 s
    "report_tests/test_verdicts.py",  # 11 s
    "playbook_tests/test_later_rounds_train_what_they_record.py",  # 11 s
    "report_tests/test_verdicts_end_to_end.py",  # 10 s
    "report_tests/test_html.py",  # 10 s
    "playbook_tests/test_sweep_lr_stops.py",  # 10 s
    "orchestrate_tests/test_warm_start.py",  # 9 s
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slowest files first (``SLOWEST_FILES``); the order of tests inside a file is kept."""
    here = os.path.dirname(__file__)

    def place(item: pytest.Item) -> int:
        name = os.path.relpath(str(item.path), here)
        return SLOWEST_FILES.index(name) if name in SLOWEST_FILES else len(SLOWEST_FILES)

    items.sort(key=place)
