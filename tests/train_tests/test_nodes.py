"""A trial across several machines (``training.nodes``), through the real launcher agents.

Two ``torchrun`` agents on 127.0.0.1 stand for two machines: each starts its node's ranks, they
meet through a c10d rendezvous, and the ranks train with gloo. Everything else is the real path:
the owner (``tuner train``, or a worker's trial process) never trains, rank 0 alone writes the
run folder, and they talk through the attempt's files (``tuner.train.node_files``).
"""

from __future__ import annotations

import contextlib
import shlex
import signal
import sys
from pathlib import Path

import pytest

from tests._processes import descendants, finish, wait_for
from tests.orchestrate_tests.conftest import run_tuner, start_tuner, tuner_env
from tests.train_tests.test_distributed import _losses, ddp_study, killed_at_step_14_then_resumed
from tuner.errors import UsageError
from tuner.spec import load_study
from tuner.train.node_files import NodeAttempt
from tuner.train.node_launchers import agent_commands

RUN = Path("runs") / "ddp" / "train" / "run-001"


def _agents(pid: int) -> list[int]:
    """The torchrun agents below ``pid``."""
    found = []
    for child in descendants(pid):
        try:
            words = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"tuner.train.node_agent" in words:
            found.append(child)
    return found


def _environment(pid: int) -> dict[str, str]:
    entries = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(entry.decode().split("=", 1) for entry in entries if b"=" in entry)


def test_two_nodes_stopped_with_ctrl_c_resume_to_the_losses_of_one_machine(tmp_path: Path) -> None:
    """A 2-node x 1-rank run is the same computation as a 2-process run on one machine: a Ctrl-C
    (the owner's stop file: every rank stops at one step, with a checkpoint), then the same
    command again, gives those losses to the bit. The agents are started by the ``command``
    launcher (a user's template, here the agent itself in an empty environment, as `kubectl exec`
    into a pod or `ssh` starts it: the ranks need nothing of the owner's)."""
    local = ddp_study(tmp_path / "local")
    done = run_tuner("train", str(local), "--output-dir", str(tmp_path / "local" / "runs"), "--no-progress")
    assert done.returncode == 0, done.stdout + done.stderr
    expected = _losses(tmp_path / "local" / RUN)

    study = ddp_study(
        tmp_path / "nodes",
        {"step_sleep_s": 0.25},
        nodes=2,
        processes_per_trial=1,
        launcher="command",
        # as `kubectl exec` into a pod or `ssh` gives it: none of the owner's environment (only
        # what a node's image sets, here PATH and one thread a rank, as the local run had)
        launch_command='exec env -i PATH="$PATH" OMP_NUM_THREADS=1 {torchrun}',
        rendezvous_host="127.0.0.1",
    )
    args = ("train", str(study), "--output-dir", str(tmp_path / "nodes" / "runs"), "--no-progress")
    command = start_tuner(*args)
    run_dir = tmp_path / "nodes" / RUN
    metrics = run_dir / "metrics.csv"
    wait_for(lambda: metrics.exists() and "\n9," in metrics.read_text(), what="row 9", process=command)
    agents = _agents(command.pid)
    assert len(agents) == 2
    # each rank has what torchrun gives it, and nothing of the owner's environment
    ranks = [_environment(rank) for agent in agents for rank in descendants(agent)]
    assert sorted(env["RANK"] for env in ranks) == ["0", "1"], ranks
    for env in ranks:
        assert env["WORLD_SIZE"] == "2" and env["MASTER_ADDR"] and env["MASTER_PORT"]
        assert not [key for key in env if key.startswith(("TUNER_", "PYTEST"))], sorted(env)
    command.send_signal(signal.SIGINT)  # Ctrl-C
    output, _ = finish(command, lambda: metrics.stat().st_size, what="the interrupted run")
    assert command.returncode == 130, output
    stopped_at = _losses(run_dir)[-1][0]
    assert 8 < stopped_at < 24
    again = run_tuner(*args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"resumed from step {stopped_at}" in again.stdout
    assert _losses(run_dir) == expected
    # one writer (rank 0): one row per step; rank 1's words reach the user, marked
    assert [step for step, _ in _losses(run_dir)] == list(range(1, 25))
    assert "[rank 1] built the model" in again.stdout + again.stderr
    assert not (run_dir / ".nodes").exists()  # each attempt's folder goes with it


def test_a_node_lost_mid_trial_fails_the_attempt_and_the_retry_resumes_from_its_checkpoint(
    tmp_path: Path,
) -> None:
    """kill -9 of node 1's agent at step 14 (its rank does it): the rank dies with its agent, the
    other fails in its next collective, and the trial is recorded killed; the retry (a new
    rendezvous) resumes from the step-8 checkpoint."""
    killed_at_step_14_then_resumed(
        tmp_path, "kill_agent", nodes=2, processes_per_trial=1, launcher="torchrun"
    )
    error_log = tmp_path / "runs" / "ddp" / "round-1" / "trial-0000" / "error.log"
    assert "the agent of node 1 was killed by SIGKILL" in error_log.read_text()
    assert not list((tmp_path / "runs").rglob(".nodes"))  # every attempt's folder went with it


def test_ranks_whose_agent_outlives_its_command_end_with_the_attempt(tmp_path: Path) -> None:
    """An agent the owner cannot kill (``kubectl exec`` or ``ssh`` killed leave the remote command
    running): here the command returns at 6 s, leaving its agent behind. The attempt fails in one
    line, its folder goes, and the orphaned rank sees that and ends; its agent follows."""
    study = ddp_study(
        tmp_path,
        {"step_sleep_s": 1.0},
        processes_per_trial=1,
        launcher="command",
        launch_command="{torchrun} & sleep 6",
    )
    done = run_tuner("train", str(study), "--output-dir", str(tmp_path / "runs"), "--no-progress")
    assert done.returncode == 1
    assert "the nodes' launcher ended before any rank reported" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr

    def leftovers() -> list[str]:
        found = []
        for entry in Path("/proc").iterdir():
            with contextlib.suppress(OSError):
                if entry.name.isdigit() and str(tmp_path).encode() in (entry / "cmdline").read_bytes():
                    found.append(entry.name)
        return found

    wait_for(lambda: not leftovers(), what="the orphaned agent and rank to end")


def test_ctrl_c_while_the_agents_wait_for_a_node_that_never_comes_ends_at_once(tmp_path: Path) -> None:
    """Node 1 never starts its agent (its command only sleeps): node 0's agent waits in the
    rendezvous (torchrun's join timeout is 10 minutes). A Ctrl-C then stops the agents directly,
    as no rank trains yet to see the stop file: exit 130, the run `interrupted`, re-runnable."""
    study = ddp_study(
        tmp_path,
        None,
        nodes=2,
        processes_per_trial=1,
        launcher="command",
        launch_command="if [ {node} = 0 ]; then exec {torchrun}; else exec sleep 600; fi",
        rendezvous_host="127.0.0.1",
    )
    command = start_tuner("train", str(study), "--output-dir", str(tmp_path / "runs"), "--no-progress")
    wait_for(lambda: len(_agents(command.pid)) == 1, what="node 0's agent", process=command)
    command.send_signal(signal.SIGINT)
    status = tmp_path / RUN / "status.json"
    output, _ = finish(command, lambda: status.exists(), what="the stopped run")
    assert command.returncode == 130, output
    assert '"status": "interrupted"' in status.read_text()
    assert "Traceback" not in output


# -- the commands each launcher runs, and what the study file may say -----------------------------


def _training(tmp_path: Path, **training: object):
    return load_study(ddp_study(tmp_path, None, **training)).spec.training


def test_the_command_launcher_runs_the_template_once_per_node_with_the_agent_quoted(tmp_path: Path) -> None:
    training = _training(
        tmp_path,
        nodes=2,
        processes_per_trial=4,
        batch_size=16,
        launcher="command",
        launch_command="ssh gpu-{node} {torchrun}",
        rendezvous_host="gpu-0",
    )
    attempt = NodeAttempt.create(tmp_path / "run dir")
    commands = agent_commands(training, attempt)
    assert [c.shell.split()[:2] for c in commands] == [["ssh", "gpu-0"], ["ssh", "gpu-1"]]
    agent = shlex.split(commands[0].shell)[2:]
    assert agent[:3] == [sys.executable, "-m", "tuner.train.node_agent"]
    assert "--nnodes=2" in agent and "--nproc-per-node=4" in agent and "--max-restarts=0" in agent
    assert f"--rdzv-id={attempt.attempt_id}" in agent and "--rdzv-backend=c10d" in agent
    endpoint = next(a for a in agent if a.startswith("--rdzv-endpoint="))
    assert endpoint.startswith("--rdzv-endpoint=gpu-0:")
    assert agent[-3:] == ["-m", "tuner.train.node_rank", str(attempt.folder)]  # a space survives the shell
    assert NodeAttempt.create(tmp_path / "run dir").attempt_id != attempt.attempt_id  # a new id per attempt


def test_the_slurm_launcher_runs_one_agent_per_node_of_the_allocation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    training = _training(tmp_path, nodes=2, processes_per_trial=2, batch_size=16, launcher="slurm")
    attempt = NodeAttempt.create(tmp_path)
    monkeypatch.delenv("SLURM_JOB_NODELIST", raising=False)
    with pytest.raises(UsageError, match="inside a Slurm allocation"):
        agent_commands(training, attempt)
    if not (Path("/usr/bin/scontrol").exists()):
        pytest.skip("scontrol (slurm-wlm) is not installed: the head node cannot be worked out")
    conf = tmp_path / "slurm.conf"  # scontrol expands a node list with no daemon, given a config
    conf.write_text(
        "ClusterName=t\nSlurmctldHost=localhost\nNodeName=localhost CPUs=1\nPartitionName=p Nodes=localhost\n"
    )
    monkeypatch.setenv("SLURM_CONF", str(conf))
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu-[3-4]")
    (command,) = agent_commands(training, attempt)
    assert command.argv[0].endswith("srun")
    assert command.argv[1:5] == ["--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    assert any(a.startswith("--rdzv-endpoint=gpu-3:") for a in command.argv)


@pytest.mark.parametrize(
    ("training", "message"),
    [
        ({"nodes": 2}, "nodes 2 needs a launcher that starts each node's ranks"),
        ({"launcher": "command"}, "launcher command needs launch_command"),
        ({"launcher": "command", "launch_command": "ssh {host} {torchrun}"}, "unknown placeholder 'host'"),
        ({"nodes": 3, "launcher": "torchrun", "processes_per_trial": 2}, "x nodes 3 = 6 ranks"),
    ],
)
def test_validate_refuses_a_multi_node_study_it_cannot_run(
    tmp_path: Path, training: dict, message: str
) -> None:
    study = ddp_study(tmp_path, None, **{"processes_per_trial": 1, **training})
    done = run_tuner("validate", str(study))
    assert done.returncode == 2
    assert message in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr


@pytest.mark.parametrize("command", ["worker", "run-round"])
def test_a_slurm_launcher_outside_an_allocation_is_refused_before_anything_starts(
    tmp_path: Path, command: str
) -> None:
    """Every trial would fail alike (each spending a retry): the worker, and run-round (which
    starts workers where it runs), refuse it in one line, and run-round creates nothing."""
    study = ddp_study(tmp_path, None, nodes=2, processes_per_trial=1, launcher="slurm")
    args = ["--phase", "round-1"] if command == "worker" else ["--round", "1"]
    env = {k: v for k, v in tuner_env().items() if not k.startswith("SLURM_")}
    done = run_tuner(command, str(study), *args, "--output-dir", str(tmp_path / "runs"), env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "training.launcher slurm: this is not inside a Slurm allocation" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert not (tmp_path / "runs").exists()
