"""Workers forked from one warm process (``tuner.orchestrate.warm_start``) are the processes
``python -m ...`` would have started: own session, environment, folder, log, command line and
exit code; imports paid once; they stop when the command or the zygote goes."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path

from tuner.orchestrate.pool import LocalPool, LocalWorker

# what each forked worker reports about itself, then the exit code its environment asks for
REPORT = """
import gc, json, os, sys, time
from pathlib import Path
import preloaded
Path(os.environ["OUT"], sys.argv[1] + ".json").write_text(json.dumps({
    "argv": sys.argv[1:], "pid": os.getpid(), "ppid": os.getppid(), "sid": os.getsid(0),
    "cwd": os.getcwd(), "only_mine": os.environ.get("ONLY_MINE"),
    "die_with": os.environ.get("TUNER_DIE_WITH_PARENT"), "frozen": gc.get_freeze_count(),
    "cmdline": Path("/proc/self/cmdline").read_bytes().replace(b"\\0", b" ").decode().strip(),
}))
print("said by", sys.argv[1])
raise SystemExit(int(os.environ["CODE"]))
"""
CPU = {"CUDA_VISIBLE_DEVICES": ""}  # what run-round gives a CPU worker
PRELOADED = (
    "import os\nwith open(os.environ['OUT'] + '/imports.log', 'a') as f:\n    f.write(f'{os.getpid()}\\n')\n"
)


def _pool(tmp_path: Path, target: str, workers: list[LocalWorker]) -> LocalPool:
    (tmp_path / "warm_target.py").write_text(target)
    (tmp_path / "preloaded.py").write_text(PRELOADED)
    return LocalPool(
        lambda worker: [sys.executable, "-m", "warm_target", worker.label],
        workers,
        env={"PYTHONPATH": str(tmp_path), "OUT": str(tmp_path)},
        log_dir=tmp_path / "logs",
        preload=("preloaded",),
    )


def test_forked_workers_are_what_python_dash_m_would_have_started(tmp_path: Path) -> None:
    workers = [
        LocalWorker("w0", env={**CPU, "CODE": "3", "ONLY_MINE": "yes"}),
        LocalWorker("w1", env={**CPU, "CODE": "0"}),
    ]
    pool = _pool(tmp_path, REPORT, workers)
    pool.start()
    assert pool.wait(tick=lambda: None, tick_s=0.1) == {"w0": 3, "w1": 0}
    seen = {label: json.loads((tmp_path / f"{label}.json").read_text()) for label in ("w0", "w1")}
    zygote = seen["w0"]["ppid"]
    assert seen["w1"]["ppid"] == zygote != os.getpid()  # both forked by one zygote, not by us
    assert {s["die_with"] for s in seen.values()} == {str(zygote)}  # and each dies with it
    for label, worker in seen.items():
        assert worker["argv"] == [label] and worker["cwd"] == os.getcwd()
        assert worker["sid"] == worker["pid"]  # its own session: a terminal's Ctrl-C is not its
        assert worker["cmdline"] == f"{sys.executable} -m warm_target {label}"  # what ps shows
        assert f"said by {label}" in (tmp_path / "logs" / f"{label}.log").read_text()
    assert seen["w0"]["only_mine"] == "yes" and seen["w1"]["only_mine"] is None
    assert (tmp_path / "imports.log").read_text().split() == [str(zygote)]  # imported once, for both
    # what the zygote imported is frozen: a worker's collections (the one at a command's exit)
    # walk the worker's own objects only
    assert all(worker["frozen"] > 1000 for worker in seen.values()), seen


def test_a_gpu_worker_starts_afresh(tmp_path: Path) -> None:
    """CUDA reads CUDA_VISIBLE_DEVICES once per process: a worker given a GPU is not forked from
    a zygote that may have asked CUDA about devices while importing torch."""
    workers = [
        LocalWorker("w0", env={"CUDA_VISIBLE_DEVICES": "0", "CODE": "0"}),
        LocalWorker("w1", env={**CPU, "CODE": "0"}),
    ]
    pool = _pool(tmp_path, REPORT, workers)
    pool.start()
    assert pool.wait(tick=lambda: None, tick_s=0.1) == {"w0": 0, "w1": 0}
    assert {json.loads((tmp_path / f"{w}.json").read_text())["ppid"] for w in ("w0", "w1")} == {os.getpid()}
    assert not list((tmp_path / "logs").glob("warm-start@*"))


def test_a_stop_reaches_a_forked_worker_and_counts_as_asked_for(tmp_path: Path) -> None:
    """As with ``subprocess``: a worker killed by the SIGTERM the pool forwarded was stopped."""
    pool = _pool(tmp_path, "import time\ntime.sleep(60)\n", [LocalWorker("w0", env=CPU)])
    pool.start()
    time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGINT)  # the user's Ctrl-C, counted by the pool
    assert pool.wait(tick=lambda: None, tick_s=0.1) == {"w0": 130}  # its 60 s sleep would end in 0


def test_workers_stop_cleanly_when_their_zygote_dies(tmp_path: Path) -> None:
    """Killed (out of memory, say), the zygote takes its workers with it: each gets the SIGTERM
    that lets it checkpoint, and the command learns that they are gone rather than waiting."""
    target = (
        "import os, signal, sys, time\nfrom pathlib import Path\n"
        "def stop(*_):\n    Path(os.environ['OUT'], 'stopped').write_text('yes')\n    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\nPath(os.environ['OUT'], 'running').write_text('yes')\n"
        "time.sleep(60)\n"
    )
    pool = _pool(tmp_path, target, [LocalWorker("w0", env=CPU)])
    pool.start()
    deadline = time.monotonic() + 120
    while not (tmp_path / "running").exists():
        assert time.monotonic() < deadline, (tmp_path / "logs").glob("*")
        time.sleep(0.05)
    assert pool.starter is not None
    os.kill(pool.starter.server.pid, signal.SIGKILL)
    assert pool.wait(tick=lambda: None, tick_s=0.1) == {"w0": -signal.SIGKILL}
    while not (tmp_path / "stopped").exists():
        assert time.monotonic() < deadline, "the worker was not told to stop"
        time.sleep(0.05)


def test_run_round_imports_torch_once_for_all_its_workers(tmp_path: Path, output_dir: Path) -> None:
    """Python's own import log (PYTHONPROFILEIMPORTTIME, on each process's stderr): torch, Optuna
    and SQLAlchemy are imported by the zygote and by neither worker (one of them at least trained)."""
    from tests.orchestrate_tests.conftest import run_tuner, toy_study, tuner_env

    study = toy_study(tmp_path, round1={"trials": 4, "steps": 10})
    done = run_tuner(
        "run-round", str(study), "--round", "1", "--workers", "2", "--output-dir", str(output_dir),
        env=tuner_env(PYTHONPROFILEIMPORTTIME="1"), cold=True,  # its zygote imports afresh, no spare
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    # the command closed its database before it exited (it freezes what is left alive instead of
    # collecting it): SQLite folded its write-ahead log back into study.db, so that file alone holds
    # every trial
    assert (output_dir / "toy" / "study.db").exists()
    assert not (output_dir / "toy" / "study.db-wal").exists()
    logs = {
        path.name: path.read_text() for path in (output_dir / "toy" / "round-1" / ".workers").glob("*.log")
    }
    imports = {
        name: re.findall(r"^import time:.*\|\s*(\S+)$", text, flags=re.MULTILINE)
        for name, text in logs.items()
    }
    zygote = [name for name in logs if name.startswith("warm-start@")]
    workers = [name for name in logs if name.startswith("cpu")]
    assert len(zygote) == 1 and len(workers) == 2, sorted(logs)
    # (a module named to importlib.import_module is not itself listed; what it imports is)
    assert {"torch", "optuna", "sqlalchemy"} <= {m.split(".")[0] for m in imports[zygote[0]]}
    assert any(re.search(r"worker: [1-9]\d* trials? run", logs[name]) for name in workers), logs  # trained
    for name in workers:
        assert not [m for m in imports[name] if m.split(".")[0] in ("torch", "optuna", "sqlalchemy")], (
            imports[name]
        )


# a command forked from a zygote as the test suite forks ``tuner run-round``: it starts a pool of
# its own ("pool"), or nothing ("idle"), and says what it saw
COMMAND = """
import json, os, sys, time
from pathlib import Path
from tuner.orchestrate.pool import LocalPool, LocalWorker
out = Path(os.environ["OUT"])
said = {"spare": os.environ.get("TUNER_WARM_SPARE")}
if sys.argv[1] == "pool":
    workers = [LocalWorker(w, env={"CUDA_VISIBLE_DEVICES": "", "CODE": "0"}) for w in ("w0", "w1")]
    pool = LocalPool(lambda w: [sys.executable, "-m", "warm_target", w.label], workers, env={},
                     log_dir=out / "command-logs", preload=("preloaded",))
    pool.start()
    server = pool.starter.server
    said["zygote"] = server.pid
    said["zygote_parent"] = int(Path(f"/proc/{server.pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    # the spare retitles itself right after its fork: a busy machine may show the command's title
    # for a moment first, so wait (5 s at most) for the zygote's
    for _ in range(100):
        cmdline = Path(f"/proc/{server.pid}/cmdline").read_bytes()
        said["zygote_cmdline"] = cmdline.replace(b"\\0", b" ").decode()
        if "tuner.orchestrate.zygote" in said["zygote_cmdline"]:
            break
        time.sleep(0.05)
    said["codes"] = pool.wait(tick=lambda: None, tick_s=0.1)
    said["zygote_after"] = os.path.exists(f"/proc/{server.pid}")
(out / f"{sys.argv[1]}.json").write_text(json.dumps(said))
"""


def _spare_pid(named: str | None) -> int:
    assert named is not None
    return int(named.split(":")[1])


def test_a_command_forked_from_a_zygote_forks_its_workers_from_a_spare_copy_of_it(tmp_path: Path) -> None:
    """Nobody imports again (the preloaded module logs each import), the workers' parent is the
    spare the command was given (its child, titled as a zygote, not as the command), and the
    spare is gone with the pool: reaped by the command, or killed with a command that never used it."""
    from tests._processes import alive, wait_for
    from tuner.orchestrate.warm_start import WarmStarter

    (tmp_path / "warm_target.py").write_text(REPORT)
    (tmp_path / "preloaded.py").write_text(PRELOADED)
    (tmp_path / "spare_command.py").write_text(COMMAND)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path]), "OUT": str(tmp_path)}
    starter = WarmStarter(("preloaded",), log_path=tmp_path / "zygote.log", env=env)
    try:
        for kind in ("pool", "idle"):
            argv = [sys.executable, "-m", "spare_command", kind]
            command = starter.start(kind, argv, env=env, log_path=tmp_path / f"{kind}.log", spare=True)
            assert command.wait() == 0, (tmp_path / f"{kind}.log").read_text()
        seen = json.loads((tmp_path / "pool.json").read_text())
        workers = [json.loads((tmp_path / f"{w}.json").read_text()) for w in ("w0", "w1")]
        assert seen["codes"] == {"w0": 0, "w1": 0}
        assert seen["zygote"] == _spare_pid(seen["spare"]) == workers[0]["ppid"] == workers[1]["ppid"]
        assert seen["zygote_parent"] == starter.processes["pool"].pid  # the command's own child
        assert seen["zygote_cmdline"].split()[1:3] == ["-m", "tuner.orchestrate.zygote"]
        assert not seen["zygote_after"]  # reaped when the pool ended
        assert len((tmp_path / "imports.log").read_text().split()) == 1  # only the first zygote's
        assert [p.name for p in (tmp_path / "command-logs").glob("warm-start@*.log")]  # its log
        idle = _spare_pid(json.loads((tmp_path / "idle.json").read_text())["spare"])
        wait_for(lambda: not alive(idle), 60, "an unused spare to end with its command")
    finally:
        starter.close()
