"""Studies on the toy workload, and real ``tuner`` processes to run them."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests._processes import PATIENCE_S, run, spawn_tuner, tuner_args
from tests._warm_processes import run_warm_tuner, spawn_warm_tuner

HERE = Path(__file__).parent
# beats every 1 s (grace 12 s; the tests that kill workers set TUNER_HEARTBEAT_GRACE_S lower)
FAST_HEARTBEAT = {"TUNER_HEARTBEAT_S": "1"}


def toy_study(
    folder: Path,
    *,
    name: str = "toy",
    options: dict[str, Any] | None = None,
    search_space: dict[str, Any] | None = None,
    round1: dict[str, Any] | None = None,
    storage: str | None = None,
    **training: Any,
) -> Path:
    """Write ``folder/study.yaml`` on the toy workload (copied next to it) and return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "toy_workload.py", folder / "toy_workload.py")
    study: dict[str, Any] = {
        "name": name,
        "seed": 0,
        "workload": {"name": "toy_workload.py:build", "options": options or {}},
        "objective": {"metric": "val/error_rate", "direction": "minimize"},
        "training": {
            "batch_size": 16,
            "eval_batch_size": 32,
            "max_train_steps": 40,
            "eval_every": 10,
            "log_every": 10,
            "keep_best_checkpoints": 1,
            "prediction_samples": 2,
            "tensorboard": False,
            "device": "cpu",
            "optimizer": {"name": "sgd", "lr": 0.1},
            "schedule": [{"shape": "constant"}],
            **training,
        },
        "search_space": search_space
        or {"optimizer.lr": {"type": "float", "low": 0.01, "high": 1.0, "log": True}},
        "rounds": {"round1": {"trials": 4, "steps": 40, **(round1 or {})}},
    }
    if storage:
        study["storage"] = storage
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


def tuner_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, **FAST_HEARTBEAT}
    env.pop("TUNER_STORAGE", None)
    env.pop("TUNER_OUTPUT_DIR", None)
    return {**env, **extra}


def run_tuner(
    *args: str, env: dict[str, str] | None = None, timeout: float = 2 * PATIENCE_S, cold: bool = False
) -> subprocess.CompletedProcess[str]:
    """``tuner ARGS`` as a real process (workers and trials are real processes too), forked from
    the test process's zygote (``tests._warm_processes``: the command's code after its imports,
    a third of the CPU of a cold start); ``cold``: from a fresh interpreter, for a test about
    the start itself. A timeout kills all of them."""
    if not cold:
        return run_warm_tuner(*args, env=env or tuner_env(), timeout=timeout)
    return run([sys.executable, "-m", "tuner", *tuner_args(args)], env=env or tuner_env(), timeout=timeout)


def start_tuner(*args: str, env: dict[str, str] | None = None, cold: bool = False, **popen: Any) -> Any:
    """``tuner ARGS`` started, killed with the test: forked from the test process's zygote as
    ``run_tuner`` does (a ``WarmTuner``, in a session of its own, its output merged), or ``cold``
    from a fresh interpreter (a ``subprocess.Popen`` in a process group of its own, with ``popen``)."""
    if not cold:
        assert set(popen) <= {"start_new_session"}, f"{sorted(popen)}: a cold command's options"
        return spawn_warm_tuner(*args, env=env or tuner_env())
    return spawn_tuner(*args, env=env or tuner_env(), **popen)


_SERVER_STORAGES: dict[str, Any] = {}  # one per server URL for the whole test process


def load_phase(storage_url: str, study: str, phase: str = "round-1") -> Any:
    """The phase as any reader opens it: through ``open_storage``, whose lock keeps a test that
    polls a phase from racing the command creating its schema (a bare ``optuna.load_study`` on
    a half-created SQLite file can fail with "UNIQUE constraint failed: alembic_version").

    A server's storage is opened once: an engine per poll keeps its connections open until the
    garbage collector finds it (60 polls held 19), and a test polling for minutes on a busy
    machine took the server to ``max_connections``, refusing the workers under test."""
    import optuna

    from tuner.orchestrate import open_storage

    storage = open_storage(storage_url) if storage_url.startswith("sqlite") else server_storage(storage_url)
    return optuna.load_study(study_name=f"{study}/{phase}", storage=storage)


def server_storage(storage_url: str) -> Any:
    """The one storage this test process keeps open on a server (see ``load_phase``)."""
    from tuner.orchestrate import open_storage

    if storage_url not in _SERVER_STORAGES:
        _SERVER_STORAGES[storage_url] = open_storage(storage_url)
    return _SERVER_STORAGES[storage_url]


def delete_phases(storage_url: str, study: str, *phases: str) -> None:
    """Delete these phases of a study from a server's storage (those that exist), through the
    storage ``load_phase`` keeps open: ``optuna.delete_study`` given a URL opens an engine of its
    own and leaves its connection for the garbage collector (a ResourceWarning in a later test)."""
    import optuna

    storage = server_storage(storage_url)
    for phase in phases or ("round-1",):
        with contextlib.suppress(KeyError):
            optuna.delete_study(study_name=f"{study}/{phase}", storage=storage)


def sqlite_url(output_dir: Path, study: str = "toy") -> str:
    return f"sqlite:///{(output_dir / study / 'study.db').resolve()}"


@pytest.fixture
def output_dir(tmp_path: Path) -> Path:
    return tmp_path / "runs"


@contextlib.contextmanager
def serving_proxy(storage_url: str, workers: int = 8, *, for_the_module: bool = False) -> Iterator[str]:
    """``grpc://`` of a ``tuner storage-proxy`` in front of ``storage_url``, stopped after.
    ``for_the_module``: it outlives the test that started it (the autouse fixture that kills
    what a test started leaves it alone), and this stops it."""
    from tests._processes import forget, kill_group
    from tests.cli_tests.test_storage_proxy import _free_port, _start_proxy

    port = _free_port()
    proxy, _ = _start_proxy(storage_url, port, "--workers", str(workers))
    if for_the_module:
        forget(proxy)
    try:
        yield f"grpc://127.0.0.1:{port}"
    finally:
        proxy.send_signal(signal.SIGINT)
        try:
            proxy.communicate(timeout=60)
        finally:
            kill_group(proxy)


@pytest.fixture(scope="module")
def proxy_url() -> Iterator[str]:
    """``grpc://`` of a ``tuner storage-proxy`` in front of the test PostgreSQL, one for the tests
    of a module (a proxy's start costs about 2 CPU s; 20 tests use one). They share it as the
    machines of a fleet do: each test's study has a name of its own (``unique_name``). A test
    that kills or restarts a proxy starts its own (``serving_proxy``, ``_start_proxy``)."""
    url = os.environ.get("TUNER_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("TUNER_TEST_POSTGRES_URL is not set")
    with serving_proxy(url, for_the_module=True) as proxied:
        yield proxied
