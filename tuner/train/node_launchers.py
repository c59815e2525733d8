"""The commands that start a multi-node trial's ranks: one ``torchrun`` agent per node.

Every launcher runs the same agent, ``torchrun`` with a c10d rendezvous and no restarts
(a failed gang is a failed attempt; tuner's own retry resumes it from its checkpoint). They
differ only in how an agent reaches its node:

- ``torchrun``: the owner starts every node's agent on its own machine (a host with many
  devices, or a test of the real multi-node path on one machine);
- ``slurm``: one ``srun`` inside the worker's allocation starts an agent on each of its nodes;
  the rendezvous is on the allocation's first node (``scontrol show hostnames``);
- ``command``: the user's template, run once per node through the shell, starts the agent
  however the cluster does it (``ssh {host}``, ``kubectl exec``...): ``{torchrun}`` is that
  node's whole agent command line, shell-quoted.

Each attempt has its own rendezvous id (``NodeAttempt.attempt_id``): agents of an earlier attempt
that are still going away can never join the next one.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass, field

from tuner._cores import usable_cores
from tuner.errors import UsageError
from tuner.spec import TrainingSpec
from tuner.train.node_files import THREADS_ENV, NodeAttempt

RANK_MODULE = "tuner.train.node_rank"
AGENT_MODULE = "tuner.train.node_agent"  # torchrun, ending in one line (node_agent.py)
DEFAULT_PORT_RANGE = (29500, 30500)  # torchrun's default port and above


@dataclass(frozen=True)
class AgentCommand:
    """One way to start agents: ``argv`` run directly, or ``shell`` text run by ``/bin/sh``."""

    argv: list[str] = field(default_factory=list)
    shell: str | None = None
    env: dict[str, str] = field(default_factory=dict)  # set on top of the owner's environment

    def shown(self) -> str:
        return self.shell if self.shell is not None else shlex.join(self.argv)


def torchrun_argv(training: TrainingSpec, attempt: NodeAttempt, endpoint: str) -> list[str]:
    """One node's agent: ``torchrun`` (``python -m tuner.train.node_agent``) of the same Python."""
    return [
        sys.executable, "-m", AGENT_MODULE,
        f"--nnodes={training.nodes}",
        f"--nproc-per-node={training.processes_per_trial}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id={attempt.attempt_id}",
        "--max-restarts=0",
        "--monitor-interval=0.5",  # the agent notices a dead rank within half a second
        "-m", RANK_MODULE, str(attempt.folder),
    ]  # fmt: skip


def agent_commands(training: TrainingSpec, attempt: NodeAttempt) -> list[AgentCommand]:
    """What the owner runs for this attempt (every command at once; it waits for all of them)."""
    kind = training.launcher
    if kind == "torchrun":
        endpoint = f"127.0.0.1:{free_port()}"
        threads = max(1, usable_cores() // (training.nodes * training.processes_per_trial))
        env = {THREADS_ENV: str(threads), "OMP_NUM_THREADS": str(threads)}
        return [
            AgentCommand(argv=torchrun_argv(training, attempt, endpoint), env=env)
            for _ in range(training.nodes)
        ]
    if kind == "slurm":
        check_launcher_here(training)
        endpoint = _endpoint(slurm_head_node(), attempt)
        srun = shutil.which("srun") or "srun"
        argv = [
            srun, f"--nodes={training.nodes}", f"--ntasks={training.nodes}", "--ntasks-per-node=1",
            "--kill-on-bad-exit=1", f"--job-name={attempt.attempt_id}",
            *torchrun_argv(training, attempt, endpoint),
        ]  # fmt: skip
        return [AgentCommand(argv=argv)]
    if kind == "command":
        assert training.launch_command is not None  # the spec refuses a command launcher without one
        endpoint = _endpoint(training.rendezvous_host or socket.getfqdn(), attempt)
        agent = shlex.join(torchrun_argv(training, attempt, endpoint))
        return [
            AgentCommand(
                shell=training.launch_command.format(
                    torchrun=agent,
                    node=node,
                    nodes=training.nodes,
                    rdzv_endpoint=endpoint,
                    rdzv_id=attempt.attempt_id,
                    attempt_dir=shlex.quote(str(attempt.folder)),
                )
            )
            for node in range(training.nodes)
        ]
    raise UsageError(f"training.launcher {kind!r} does not start nodes (use torchrun, slurm or command)")


def check_launcher_here(training: TrainingSpec) -> None:
    """Refuse, before anything starts, a launcher that cannot start a gang from this process:
    ``slurm`` outside an allocation, or in one with fewer nodes than ``training.nodes`` (every
    trial would fail the same way, each spending a retry)."""
    if training.launcher != "slurm":
        return
    if not os.environ.get("SLURM_JOB_NODELIST"):
        raise UsageError(
            "training.launcher slurm: this is not inside a Slurm allocation (SLURM_JOB_NODELIST is "
            f"not set); run the worker in one: sbatch --nodes={training.nodes} ... "
            "(examples/slurm/multinode-trial.sbatch)"
        )
    allocated = os.environ.get("SLURM_JOB_NUM_NODES", "")
    if allocated.isdigit() and int(allocated) < training.nodes:
        raise UsageError(
            f"training.nodes is {training.nodes}, but this Slurm allocation has {allocated} "
            f"node{'s' if allocated != '1' else ''}: sbatch --nodes={training.nodes}"
        )


def free_port() -> int:
    """A TCP port free on this machine now (the agent that hosts the rendezvous binds it)."""
    with socket.socket() as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


def hashed_port(attempt_id: str) -> int:
    """A port for a rendezvous hosted on another machine, where this one cannot look: spread
    over ``DEFAULT_PORT_RANGE`` by the attempt's id, so two trials of one head rarely meet."""
    low, high = DEFAULT_PORT_RANGE
    return low + int(hashlib.sha256(attempt_id.encode()).hexdigest(), 16) % (high - low)


def _endpoint(host: str, attempt: NodeAttempt) -> str:
    """``host:port`` of the rendezvous: a port free now where this machine hosts it, else one
    spread by the attempt's id (``hashed_port``)."""
    return f"{host}:{free_port() if _is_this_machine(host) else hashed_port(attempt.attempt_id)}"


def slurm_head_node() -> str:
    """The first node of the worker's Slurm allocation (``check_launcher_here`` has made sure
    there is one): where the rendezvous runs."""
    nodelist = os.environ["SLURM_JOB_NODELIST"]
    try:
        shown = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.split()
    except subprocess.CalledProcessError as error:  # scontrol says why on stderr
        said = (error.stderr.strip().splitlines() or [f"exit {error.returncode}"])[-1]
        raise UsageError(
            f"training.launcher slurm: scontrol show hostnames {nodelist} failed: {said}"
        ) from None
    except (OSError, subprocess.SubprocessError) as error:
        raise UsageError(
            f"training.launcher slurm: scontrol show hostnames {nodelist} failed: {error}"
        ) from None
    if not shown:
        raise UsageError(f"training.launcher slurm: scontrol found no host in {nodelist!r}")
    return shown[0]


def _is_this_machine(host: str) -> bool:
    names = {"localhost", "127.0.0.1", "::1", socket.gethostname(), socket.getfqdn()}
    return host in names or host.split(".")[0] == socket.gethostname().split(".")[0]
