"""``examples/slurm/workers.sbatch`` under a real Slurm: a one-node cluster (Debian's slurm-wlm,
slurmctld + slurmd on this machine, authenticated by munge) started for the test, the script
submitted as a job array, and the phase served to its end by the array's workers.

It skips where slurm-wlm is not installed or the test is not root (the daemons run as root);
``.ci/run`` installs it, so CI runs it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._processes import run, wait_for
from tests.orchestrate_tests.conftest import load_phase, sqlite_url, toy_study, tuner_env
from tuner.playbook import start_round
from tuner.spec import load_study

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "slurm" / "workers.sbatch"
BIN = Path(sys.executable).parent
MUNGE_SOCKET = Path("/run/munge/munge.socket.2")  # where Debian's munged listens


def _config(folder: Path) -> str:
    host = socket.gethostname().split(".")[0]
    return f"""ClusterName=tuner-test
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName={host} CPUs={os.cpu_count() or 1} RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


@pytest.fixture
def slurm(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A one-node Slurm for this test; the environment its commands need (``SLURM_CONF``)."""
    if not (shutil.which("slurmctld") and shutil.which("slurmd") and shutil.which("munged")):
        pytest.skip("slurm-wlm is not installed (CI installs it: apt-get install slurm-wlm)")
    if os.geteuid() != 0:
        pytest.skip("a one-node Slurm's daemons run as root")
    folder = tmp_path / "slurm"
    (folder / "state").mkdir(parents=True)
    (folder / "spool").mkdir()
    (folder / "slurm.conf").write_text(_config(folder))
    env = {**os.environ, "SLURM_CONF": str(folder / "slurm.conf")}
    started_munge = None
    if subprocess.run(["munge", "-n"], capture_output=True, check=False).returncode != 0:
        MUNGE_SOCKET.parent.mkdir(parents=True, exist_ok=True)
        shutil.chown(MUNGE_SOCKET.parent, "munge", "munge")
        as_munge = ["su", "-s", "/bin/sh", "munge", "-c", "munged --force"]  # --force: past a stale socket
        started_munge = subprocess.run(as_munge, capture_output=True, text=True, check=False)
        assert started_munge.returncode == 0, started_munge.stderr
    for daemon in ("slurmctld", "slurmd"):
        done = subprocess.run([daemon], env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"{daemon}: {done.stderr}"
    try:

        def node_idle() -> bool:
            state = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True)
            return state.stdout.strip() == "idle"

        wait_for(node_idle, what="the Slurm node to come up idle")  # patience: a busy machine
        yield env
    finally:
        subprocess.run(["scontrol", "shutdown"], env=env, capture_output=True, check=False)
        for pid_file in ("slurmctld.pid", "slurmd.pid"):
            path = folder / pid_file
            deadline = time.monotonic() + 30
            while path.exists() and time.monotonic() < deadline:
                pid = int(path.read_text().strip() or 0)
                if not pid or not Path(f"/proc/{pid}").exists():
                    break
                time.sleep(0.2)
        if started_munge is not None:
            subprocess.run(["pkill", "-x", "munged"], check=False)


def test_a_slurm_job_array_submitted_before_its_phase_serves_it_to_its_end(
    tmp_path: Path, slurm: dict[str, str]
) -> None:
    study = toy_study(tmp_path, round1={"trials": 4, "steps": 10})
    output_dir = tmp_path / "runs"
    env = {
        **slurm,
        **tuner_env(TUNER_STORAGE=sqlite_url(output_dir)),
        "SLURM_CONF": slurm["SLURM_CONF"],
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",  # sbatch passes it on
    }
    # this machine has no GPU and fewer cores than the script asks for: the command line
    # overrides those #SBATCH lines, as a user's would on a CPU partition
    logs = tmp_path / "logs"
    logs.mkdir()
    submit = [
        "sbatch", "--parsable", "--array=0-1", "--gres=none", "--cpus-per-task=1",
        f"--output={logs}/worker-%A_%a.log", str(SCRIPT), str(study), "round-1", str(output_dir),
    ]  # fmt: skip
    done = run(submit, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    job = done.stdout.strip().split(";")[0]
    # the phase is started after the array was submitted, as a job beside it would
    # (the workers wait for it: --wait-for-phase)
    start_round(load_study(study), "round-1", output_dir)

    def finished() -> bool:  # polled here: `sbatch --wait` polls every 30 s once a job runs long
        queued = subprocess.run(["squeue", "-h", "-j", job], env=env, capture_output=True, text=True)
        return queued.returncode == 0 and not queued.stdout.strip()

    wait_for(finished, what=f"Slurm job {job} to end")
    worker_logs = "".join(path.read_text() for path in sorted(logs.glob("*.log")))
    assert worker_logs.count("worker: ") == 2 and worker_logs.count("; done") == 2, worker_logs
    trials = load_phase(sqlite_url(output_dir), "toy").trials
    assert sorted(t.state.name for t in trials) == ["COMPLETE"] * 4
    assert {t.user_attrs["worker"] for t in trials} <= {f"slurm-{job}-0", f"slurm-{job}-1"}


def test_a_trial_launched_through_srun_inside_the_workers_allocation(
    tmp_path: Path, slurm: dict[str, str]
) -> None:
    """``examples/slurm/multinode-trial.sbatch`` with ``training.launcher: slurm``: the worker in
    the batch step runs each trial as ``srun`` of one torchrun agent per node of its allocation.
    One node here (this machine), 2 ranks on it: the real srun, agent and rendezvous path."""
    from tests.train_tests.test_distributed import ddp_study

    study = ddp_study(
        tmp_path, {"show_env": "SLURM_STEP_ID"}, nodes=1, processes_per_trial=2, launcher="slurm"
    )
    output_dir = tmp_path / "runs"
    env = {
        **slurm,
        **tuner_env(TUNER_STORAGE=sqlite_url(output_dir, "ddp")),
        "SLURM_CONF": slurm["SLURM_CONF"],
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    start_round(load_study(study), "round-1", output_dir)
    submit = [
        "sbatch", "--parsable", "--nodes=1", "--gres=none", "--cpus-per-task=2",
        f"--output={tmp_path}/worker-%j.log", str(SCRIPT.with_name("multinode-trial.sbatch")),
        str(study), "round-1", str(output_dir),
    ]  # fmt: skip
    done = run(submit, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    job = done.stdout.strip().split(";")[0]

    def finished() -> bool:
        queued = subprocess.run(["squeue", "-h", "-j", job], env=env, capture_output=True, text=True)
        return queued.returncode == 0 and not queued.stdout.strip()

    wait_for(finished, what=f"Slurm job {job} to end")
    log = (tmp_path / f"worker-{job}.log").read_text()
    (trial,) = load_phase(sqlite_url(output_dir, "ddp"), "ddp").trials
    assert trial.state.name == "COMPLETE", log
    trial_log = (Path(trial.user_attrs["run_dir"]) / "trial.log").read_text()
    assert "[rank 1] built the model" in trial_log  # rank 1 ran, under the agent srun started
    # the ranks ran in a Slurm step of their own (srun's), not in the worker's batch step
    assert "env SLURM_STEP_ID=0" in trial_log and "[rank 1] env SLURM_STEP_ID=0" in trial_log
