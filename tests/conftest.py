"""Shared fixtures: the real PostgreSQL of CI, where there is one; no process outlives its test."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

# One intra-op thread in the test processes and every process they start (set before torch is
# imported). Several test files run at once on two cores: a 2-thread OpenMP operation
# whose second thread is descheduled spin-waits for it (measured: a training test took 6 s alone
# and 56 s beside a multi-worker test). Speed with more threads is measured in benchmarks/.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# A suite started in the background of a script (``make test &``, ``(pytest ... &)``) inherits
# SIGINT ignored, and so would every command it starts (an ignored signal stays ignored across
# exec): the tests that stop a command with Ctrl-C then wait for a stop that never comes (seen:
# ``tuner profile`` ignoring its Ctrl-C until the test's 60 s timeout). Ignoring is the shell's
# choice for its background jobs, not the commands' under test: the default comes back here.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

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


# The files that take longest, slowest first: the sum of their tests' seconds in one suite run on
# 2026-12-07, `--durations=0`, 4 xdist workers on this 2-core VM with another CPU-bound process
# running beside it (the seconds are about 1.5 times a quiet machine's). pytest-xdist hands whole
# files to its workers in collection order: started first, they overlap the many short files
# instead of running alone at the end (xdist's own reorder puts files with few tests, usually
# these, last). A file not listed keeps its place after them. Re-measure when a file grows or is
# split. No order is chosen to keep a fault hidden: with an earlier slowest-first order, processes
# claiming through the gRPC proxy hung (Optuna's cached storage held its lock through a row-lock
# wait, tests/orchestrate_tests/test_grpc_stalls.py); that order passed again once it was fixed.
SLOWEST_FILES = (
    "benchmarks_tests/test_outcome.py",  # 332 s
    "cli_tests/test_tune_extra_round.py",  # 261 s
    "cli_tests/test_tune.py",  # 229 s
    "cli_tests/test_tune_next_study.py",  # 124 s
    "orchestrate_tests/test_grpc_chaos.py",  # 122 s
    "orchestrate_tests/test_chaos_postgres.py",  # 109 s
    "orchestrate_tests/test_grpc_claims.py",  # 108 s
    "train_tests/test_input_pipeline.py",  # 80 s
    "train_tests/test_cli_resume.py",  # 73 s
    "orchestrate_tests/test_storage_outage.py",  # 71 s
    "orchestrate_tests/test_preemption.py",  # 70 s
    "train_tests/test_nodes.py",  # 67 s
    "cli_tests/test_tune_sweep.py",  # 65 s
    "orchestrate_tests/test_round1.py",  # 63 s
    "cli_tests/test_regression_end_to_end.py",  # 60 s
    "orchestrate_tests/test_scale.py",  # 58 s
    "orchestrate_tests/test_round1_failures.py",  # 57 s
    "orchestrate_tests/test_round1_pruner.py",  # 56 s
    "test_slurm_example.py",  # 49 s
    "orchestrate_tests/test_reproduce.py",  # 48 s
    "orchestrate_tests/test_chaos.py",  # 47 s
    "orchestrate_tests/test_disk_full.py",  # 44 s
    "report_tests/test_end_to_end.py",  # 43 s
    "orchestrate_tests/test_gp_round.py",  # 42 s
    "orchestrate_tests/test_stop_signals.py",  # 37 s
    "orchestrate_tests/test_view_faults.py",  # 34 s
    "report_tests/test_delivered.py",  # 34 s
    "cli_tests/test_tune_duration.py",  # 33 s
    "orchestrate_tests/test_fleet_under_faults.py",  # 32 s
    "report_tests/test_html.py",  # 27 s
    "train_tests/test_workload_errors.py",  # 26 s
    "orchestrate_tests/test_failure_reasons.py",  # 25 s
    "playbook_tests/test_sweep_lr_command.py",  # 25 s
    "report_tests/test_verdicts.py",  # 25 s
    "report_tests/test_verdicts_end_to_end.py",  # 24 s
    "orchestrate_tests/test_protocol.py",  # 24 s
    "cli_tests/test_tune_own_settings.py",  # 23 s
    "orchestrate_tests/test_journal_claims.py",  # 23 s
    "playbook_tests/test_rounds.py",  # 23 s
    "report_tests/test_transfer_noise.py",  # 22 s
    "report_tests/test_best_step_bounds.py",  # 20 s
    "orchestrate_tests/test_storage.py",  # 19 s
    "orchestrate_tests/test_worker_imports.py",  # 19 s
    "orchestrate_tests/test_secrets.py",  # 19 s
    "playbook_tests/test_later_rounds_train_what_they_record.py",  # 18 s
    "playbook_tests/test_estimate_what_ran.py",  # 18 s
    "report_tests/test_range_trend.py",  # 18 s
    "cli_tests/test_profile_cli.py",  # 17 s
    "orchestrate_tests/test_grpc_stalls.py",  # 17 s
    "train_tests/test_distributed.py",  # 16 s
    "train_tests/test_own_metrics.py",  # 16 s
    "cli_tests/test_storage_proxy.py",  # 15 s
    "train_tests/test_train_command.py",  # 15 s
    "report_tests/test_best_step_resolution.py",  # 15 s
    "workloads_tests/test_builtins.py",  # 14 s
    "report_tests/test_edge_cases.py",  # 14 s
    "orchestrate_tests/test_stall_watchdog.py",  # 13 s
    "test_api.py",  # 12 s
    "report_tests/test_lr_multiplier_noise.py",  # 12 s
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slowest files first (``SLOWEST_FILES``); the order of tests inside a file is kept."""
    here = os.path.dirname(__file__)

    def place(item: pytest.Item) -> int:
        name = os.path.relpath(str(item.path), here)
        return SLOWEST_FILES.index(name) if name in SLOWEST_FILES else len(SLOWEST_FILES)

    items.sort(key=place)


# files one xdist worker runs in turn, never beside each other: each starts a gRPC proxy with
# eight claiming processes or workers. Side by side on two cores (with ``-n 4``), live trials of
# the fleet test (whose heartbeat grace is short: ``TUNER_HEARTBEAT_GRACE_S``, 60 s by default)
# had their beats held up past it and were failed as ``killed`` (2 or 3 of them)
IN_TURN = ("orchestrate_tests/test_grpc_claims.py", "orchestrate_tests/test_fleet_under_faults.py")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` (``make test``) with the files of ``IN_TURN`` as one unit of work."""
    if config.getoption("dist", None) != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class InTurn(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return IN_TURN[0] if scope.removeprefix("tests/") in IN_TURN else scope

    return InTurn(config, log)
