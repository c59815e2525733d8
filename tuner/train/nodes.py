"""The owner's side of a trial spread over several machines (``training.nodes`` > 1).

The process that runs the trial (a worker's trial process, or ``tuner train``) owns it: it
holds the run folder's lock, and it alone talks to the storage. It starts one gang of ranks
through a launcher (``node_launchers``), never trains itself, and follows the gang through the
attempt's folder (``node_files``):

- rank 0's messages (evaluations, checkpoints on disk, progress) reach the owner's callbacks
  that ask for them (``CrossNodeCallback``): the worker sees a multi-node trial as any other;
- a stop signal to the owner becomes the ``stop`` file: rank 0 sees it between steps, every
  rank stops at the same step with a checkpoint (``interrupted``), as a Ctrl-C of one machine;
  a second signal stops the agents at once;
- the end: rank 0's ``result.pkl``, else the failures the ranks wrote, named as the one-machine
  launcher names them (``launch.cause_of``); an agent killed by a signal is the node lost
  (``NodeLost``: like a rank killed, the trial is killed and its retry resumes from the last
  checkpoint). When one agent has failed, the others get ``launch.FAILURE_GRACE_S`` to end
  before they are killed (their ranks may wait in a collective on a dead peer).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import pickle
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

from tuner._lifetime import die_with_parent
from tuner.errors import UsageError
from tuner.train.launch import FAILURE_GRACE_S, RankError, RankKilled, cause_of
from tuner.train.node_files import EventReader, NodeAttempt, NodeJob, StopFileCheck
from tuner.train.node_launchers import AgentCommand, agent_commands

POLL_S = 0.2


@runtime_checkable
class CrossNodeCallback(Protocol):
    """A callback that holds something of the owner's process (a pipe, shared memory).

    ``for_rank_zero`` gives the copy that travels to rank 0 (it talks through ``attempt``'s
    files instead); ``on_owner_poll`` runs in the owner at every poll with rank 0's new messages.
    """

    def for_rank_zero(self, attempt: NodeAttempt) -> Any: ...

    def on_owner_poll(self, attempt: NodeAttempt, messages: list[Any]) -> None: ...


class NodeLost(RankKilled):
    """A node's agent died of a signal: its ranks died with it (``node_rank``)."""

    def __init__(self, node: int, signum: int) -> None:
        super().__init__(node, signum)
        self.args = (f"the agent of node {node} was killed by {signal.Signals(signum).name}",)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.rank, self.signum))


def run_on_nodes(job: Any, rank_target: Callable[[Any, Any], Any], stop_signals: Sequence[int]) -> Any:
    """Run ``job`` (``run._RunJob``) as one gang over ``training.nodes`` nodes, each rank calling
    ``rank_target(job, ranks)`` (``run.run_rank``); rank 0's result."""
    attempt = NodeAttempt.create(job.run_dir)
    own = list(job.extra_callbacks)
    bridged = [c for c in own if isinstance(c, CrossNodeCallback)]
    travelling = [c.for_rank_zero(attempt) if isinstance(c, CrossNodeCallback) else c for c in own]
    remote = dataclasses.replace(
        job, console=None, progress=False, extra_callbacks=[*travelling, StopFileCheck(attempt)]
    )
    agents: list[subprocess.Popen[bytes]] = []
    try:
        try:
            node_job = NodeJob(functools.partial(rank_target, remote), job.spec.training.device)
            attempt.write(attempt.job, node_job)
        except (pickle.PicklingError, TypeError, AttributeError) as error:
            raise UsageError(f"training.nodes > 1: this run cannot travel to other nodes ({error})") from None
        commands = agent_commands(job.spec.training, attempt)
        reader = EventReader(attempt.events)

        def poll() -> None:
            messages = reader.read_new()
            for callback in bridged:
                callback.on_owner_poll(attempt, messages)

        with _stop_file_on_signals(attempt, agents, stop_signals) as stops:
            for command in commands:
                agents.append(_start(command))
            codes, killed = _wait(agents, poll)
        poll()  # the last messages (the final checkpoint) before the result
        if attempt.result.exists():
            result, states = attempt.read(attempt.result)
            for callback in own:
                if callback.state_key in states:
                    callback.load_state_dict(states[callback.state_key])
            return result
        raise _failure(attempt, codes, killed, commands, interrupted=bool(stops))
    finally:
        for agent in agents:
            if agent.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(agent.pid, signal.SIGKILL)
                agent.wait()
        attempt.remove()


def _start(command: AgentCommand) -> subprocess.Popen[bytes]:
    """An agent in its own process group (a stop reaches it through the stop file or from us,
    never from the terminal), which dies with the owner."""
    env = {**os.environ, **command.env}
    parent = os.getpid()
    return subprocess.Popen(
        command.argv if command.shell is None else ["/bin/sh", "-c", command.shell],
        env=env,
        start_new_session=True,
        preexec_fn=lambda: die_with_parent(signal.SIGKILL, parent),
    )


def _wait(agents: list[subprocess.Popen[bytes]], poll: Any) -> tuple[list[int], set[int]]:
    """Every agent's exit code, and the agents this killed: once one has failed, the rest get a
    grace, then are killed."""
    failed_at: float | None = None
    killed: set[int] = set()
    while True:
        codes = [agent.poll() for agent in agents]
        if all(code is not None for code in codes):
            return [int(code) for code in codes if code is not None], killed
        if failed_at is None and any(code not in (None, 0) for code in codes):
            failed_at = time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > FAILURE_GRACE_S:
            for node, agent in enumerate(agents):
                if agent.poll() is None:
                    killed.add(node)
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(agent.pid, signal.SIGKILL)
        poll()
        time.sleep(POLL_S)


def _failure(
    attempt: NodeAttempt, codes: list[int], killed: set[int], commands: list[AgentCommand], interrupted: bool
) -> BaseException:
    """What ended the gang without a result (see the module docstring)."""
    failures: dict[int, Any] = attempt.failures()
    # an agent dead of a signal this process did not send (killed after the grace, or a stop)
    lost = [
        (node, -code)
        for node, code in enumerate(codes)
        if code < 0 and node not in killed and not interrupted
    ]
    # a node lost explains the failed collectives of the others, not a rank's own error
    if lost and all(isinstance(f, RankKilled) or f.secondary for f in failures.values()):
        node, signum = lost[0]
        error: BaseException = NodeLost(node, signum)
        error.rank_tracebacks = f"{error}\n" + "".join(  # type: ignore[attr-defined]
            f"--- rank {r} ---\n{getattr(f, 'traceback', '')}" for r, f in sorted(failures.items())
        )
        return error
    if failures:
        return cause_of(failures)
    if interrupted:
        return KeyboardInterrupt()
    shown = "; ".join(f"{c.shown()} exited with {code}" for c, code in zip(commands, codes, strict=False))
    return RankError(f"the nodes' launcher ended before any rank reported: {shown[:400]}")


@contextlib.contextmanager
def _stop_file_on_signals(
    attempt: NodeAttempt, agents: list[subprocess.Popen[bytes]], signals: Sequence[int]
) -> Iterator[list[int]]:
    """The first stop signal writes the stop file (a clean stop at an agreed step); a second one,
    or the first before the ranks train (agents waiting in the rendezvous for a node that may
    never come, ranks importing), sends SIGTERM to every agent: torchrun passes it to its ranks,
    which stop at once (an interrupt before training)."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def handler(signum: int, frame: Any) -> None:
        received.append(signum)
        attempt.request_stop()
        if len(received) > 1 or not attempt.training.exists():
            for agent in agents:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(agent.pid, signal.SIGTERM)

    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield received
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
