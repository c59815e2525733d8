"""Local workers: one process per GPU (``CUDA_VISIBLE_DEVICES`` set for each), or N on CPU.

Each local worker is a ``tuner worker`` process, exactly what a user starts by hand on another
machine, so one code path serves both. They run in their own session (a Ctrl-C reaches them
once, forwarded by us, not twice) and die with us (no orphan keeps a GPU busy).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tuner._cores import usable_cores
from tuner._lifetime import DIE_WITH_PARENT_ENV
from tuner.errors import UsageError
from tuner.orchestrate._process import SignalFlag
from tuner.orchestrate.warm_start import SharedWarmStart, WarmProcess, WarmStarter

MAX_TICK_ERRORS = 10
# a worker killed by SIGKILL (the kernel's OOM killer, an operator) is started again, this many
# times at most: its trial goes stale and is retried as any lost trial is, and the round goes on
MAX_REPLACEMENTS = 3


@dataclass(frozen=True)
class LocalWorker:
    label: str
    env: dict[str, str] = field(default_factory=dict)
    threads: int | None = None


def _has_gpu_driver() -> bool:
    return Path("/proc/driver/nvidia/gpus").exists() or Path("/dev/kfd").exists()


def _visible_gpus() -> list[str]:
    """GPU ids this process may use, without initialising CUDA here (workers do that).

    Without a GPU driver on the machine, torch is not even imported (it costs a second).
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [device.strip() for device in visible.split(",") if device.strip() and device.strip() != "-1"]
    if not _has_gpu_driver():
        return []
    import torch

    return [str(index) for index in range(torch.cuda.device_count())]


def check_devices(devices: Sequence[str], option: str = "--devices") -> None:
    """Refuse GPU ids this machine cannot see, rather than quietly training on the CPU.

    Ids are those of ``CUDA_VISIBLE_DEVICES`` when it is set (ids or UUIDs: then each must be
    listed there), else ``0..torch.cuda.device_count()-1``.
    """
    visible = _visible_gpus()
    missing = [device for device in devices if device not in visible]
    if not missing:
        return
    given = f"{option} {','.join(devices)}"
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        shown = os.environ["CUDA_VISIBLE_DEVICES"] or "(empty)"
        why = f"GPU {', '.join(missing)} is not in CUDA_VISIBLE_DEVICES={shown}"
    elif not _has_gpu_driver():
        why = "no GPU is visible on this machine (no GPU driver found)"
    elif not visible:
        why = "no GPU is visible on this machine (torch sees none: a CPU build of torch, or no device)"
    else:
        why = f"GPU {', '.join(missing)} does not exist (this machine has GPU {', '.join(visible)})"
    raise UsageError(f"{given}: {why}; for CPU workers use --workers N")


def check_worker_settings() -> None:
    """Read here every environment setting a ``tuner worker`` reads ($TUNER_HEARTBEAT_S,
    $TUNER_HEARTBEAT_GRACE_S, $TUNER_STORAGE_OUTAGE_S, $TUNER_PHASE_LOCK_WAIT_S; the workers
    inherit this environment), so that a bad one is refused before anything is created or
    started: one line naming it, exit 2. Otherwise the phase was created and every worker
    started only to exit 2, and a setting read only on PostgreSQL or during an outage (the lock
    wait, the outage window) went unnoticed on SQLite until the day it mattered."""
    from tuner.orchestrate.heartbeat import heartbeat_settings
    from tuner.orchestrate.locks import lock_wait_s
    from tuner.orchestrate.outage import outage_window_s

    heartbeat_settings()
    outage_window_s()
    lock_wait_s()


def local_workers(
    *,
    workers: int | None,
    devices: Sequence[str] | None,
    max_parallel: int | None,
    budget: int,
    processes_per_trial: int = 1,
) -> list[LocalWorker]:
    """The workers to start here; each trains one trial at a time, as ``processes_per_trial``
    processes (the phase's parallelism counts trials, not processes).

    ``--devices 0,1`` -> one per listed GPU (with N processes per trial: one per N GPUs,
    ``--devices 0,1,2,3`` and N=2 give workers on GPUs 0,1 and 2,3); ``--workers N`` -> N CPU
    workers sharing the cores (each trial's processes share its worker's); neither -> one per
    visible GPU (or N of them), else one per core (or N cores), capped by ``max_parallel`` and
    the budget.
    """
    if workers is not None and devices:
        raise UsageError("give --workers (CPU) or --devices (GPUs), not both")
    if workers is not None and workers < 1:
        raise UsageError(f"--workers must be at least 1, got {workers}")
    per = processes_per_trial
    given = bool(devices)
    gpus = list(devices) if devices else ([] if workers is not None else _visible_gpus())
    if gpus:
        if given and len(gpus) % per:
            raise UsageError(
                f"--devices {','.join(gpus)}: {len(gpus)} GPUs do not split into trials of "
                f"processes_per_trial={per} GPUs each; list a multiple of {per}"
            )
        groups = [gpus[start : start + per] for start in range(0, len(gpus) - per + 1, per)]
        if not groups:
            raise UsageError(f"processes_per_trial={per} needs {per} GPUs; this machine shows {len(gpus)}")
        return [
            LocalWorker(_label("cuda" + "-".join(group)), {"CUDA_VISIBLE_DEVICES": ",".join(group)})
            for group in groups
        ]
    cores = usable_cores()
    slots = max(1, cores // per)
    count = workers if workers is not None else min(slots, max_parallel or slots, budget)
    threads = max(1, cores // count)
    return [
        LocalWorker(
            _label(f"cpu{index}"), {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": str(threads)}, threads
        )
        for index in range(count)
    ]


def _label(device: str) -> str:
    """``cpu0@host:4711``: the device first (it is what a reader tells workers apart by, and
    what survives a narrow column), then this command's machine and pid as ``tuner worker``
    labels itself. Two commands on one study (or one host) then never share a label, a
    ``.workers/<label>.*`` file, or the worker recorded on a trial."""
    return f"{device}@{socket.gethostname()}:{os.getpid()}"


WORKER_INTERRUPTED = 130  # what ``tuner worker`` exits with when a signal stopped it cleanly


def _exit_code(code: int, asked_to_stop: bool) -> int:
    """A worker killed by the SIGTERM this pool forwarded was stopped, not crashed: it died of the
    signal's default action, so it was still starting up (Python and tuner's imports, a second or
    more on a busy machine), before ``tuner worker`` counts signals, and had touched nothing yet.
    Ctrl-C in that moment gave "worker died of SIGTERM", exit 70 (CI, and 4 of 20 under load)."""
    return WORKER_INTERRUPTED if asked_to_stop and code == -signal.SIGTERM else code


class LocalPool:
    """Local ``tuner worker`` processes: ``start()`` them, then ``wait()`` for them.

    Started before the phase exists on purpose: a worker spends a second or two on its own
    imports while the command creates the phase, and waits for it (see ``tuner worker``); it
    imports torch once the phase has a trial for it (``WorkerOptions.warm_up``).
    A first SIGINT/SIGTERM is forwarded once (each worker stops its trial with a checkpoint);
    a second one is forwarded again (workers then kill their trials at once). A worker killed by
    SIGKILL that nobody asked to stop is replaced (``MAX_REPLACEMENTS``, ``replaced``).
    Side effects: ``log_dir/<label>.log`` holds each worker's output.
    """

    def __init__(
        self,
        command_for: Callable[[LocalWorker], list[str]],
        workers: Sequence[LocalWorker],
        *,
        env: dict[str, str],
        log_dir: Path,
        preload: Sequence[str] = (),
        shared: SharedWarmStart | None = None,
    ) -> None:
        """``preload``: modules to import once, in a zygote the workers are forked from
        (``warm_start``), instead of in each worker (commands of the form ``python -m ...``);
        ``shared``: that zygote is the command's, kept for its next phase (else this pool's own).
        CPU workers only (``CUDA_VISIBLE_DEVICES`` empty): CUDA reads that variable once per
        process, so a device query during the zygote's imports would give every forked worker
        every GPU; GPU workers start afresh."""
        self.command_for, self.workers, self.env, self.log_dir = command_for, workers, env, log_dir
        self.preload = preload
        self.processes: dict[str, subprocess.Popen[bytes] | WarmProcess] = {}
        self.signals = SignalFlag()
        self.tick_errors: list[Exception] = []  # what ``tick`` raised: reported, never fatal
        self.starter: WarmStarter | None = None
        self.shared = shared
        self.replaced: dict[str, int] = {}  # label -> times its worker was killed and started again

    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.signals.__enter__()
        parent = {DIE_WITH_PARENT_ENV: str(os.getpid())}
        cpu_only = all(worker.env.get("CUDA_VISIBLE_DEVICES") == "" for worker in self.workers)
        if self.preload and cpu_only and self.starter is None:
            env = {**os.environ, **self.env, **parent, "CUDA_VISIBLE_DEVICES": ""}
            if self.shared is not None:
                self.starter = self.shared.get(self.preload, log_path=self._zygote_log, env=env)
            else:
                self.starter = WarmStarter(self.preload, log_path=self._zygote_log, env=env)
        for worker in self.workers:
            self._launch(worker)

    def _launch(self, worker: LocalWorker) -> None:
        command = self.command_for(worker)
        env = {**os.environ, **self.env, **worker.env, DIE_WITH_PARENT_ENV: str(os.getpid())}
        log_path = self.log_dir / f"{worker.label}.log"
        if self.starter is not None and command[:2] == [sys.executable, "-m"]:
            self.processes[worker.label] = self.starter.start(
                worker.label, command, env=env, log_path=log_path
            )
            return
        with log_path.open("ab") as log:
            self.processes[worker.label] = subprocess.Popen(
                command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip

    def _replace_killed(self) -> None:
        """Start again each worker that died of SIGKILL while nobody asked the pool to stop."""
        if self.signals.count:
            return
        for worker in self.workers:
            process = self.processes[worker.label]
            if process.poll() != -signal.SIGKILL or self.replaced.get(worker.label, 0) >= MAX_REPLACEMENTS:
                continue
            self.replaced[worker.label] = self.replaced.get(worker.label, 0) + 1
            with (self.log_dir / f"{worker.label}.log").open("a") as log:
                log.write(f"tuner: worker {worker.label} was killed by SIGKILL; started again\n")
            self._launch(worker)

    def wait(self, tick: Callable[[], None], tick_s: float = 1.0) -> dict[str, int]:
        """Call ``tick`` every ``tick_s`` until every worker has exited; their exit codes.

        ``tick`` (the progress view) may fail, e.g. on a storage error: the error is kept in
        ``tick_errors`` and the workers go on. Only an error of the pool itself kills them.
        """
        forwarded = 0
        asked: set[str] = set()  # the workers this pool sent a SIGTERM
        next_tick = 0.0
        try:
            while True:
                self._replace_killed()
                if all(process.poll() is not None for process in self.processes.values()):
                    break
                if time.monotonic() >= next_tick:
                    self._tick(tick)
                    next_tick = time.monotonic() + tick_s
                while forwarded < min(self.signals.count, 2):
                    forwarded += 1
                    for label, process in self.processes.items():
                        if process.poll() is None:
                            process.send_signal(signal.SIGTERM)
                            asked.add(label)
                time.sleep(0.05)  # notice the last worker's exit at once, not a tick later
        finally:
            self.stop()
        self._tick(tick)
        return {
            label: _exit_code(process.returncode, label in asked) for label, process in self.processes.items()
        }

    def _tick(self, tick: Callable[[], None]) -> None:
        try:
            tick()
        except Exception as error:  # a display must never take the work down
            if len(self.tick_errors) < MAX_TICK_ERRORS:  # one a second for hours: keep the first
                self.tick_errors.append(error)

    def remove_logs(self) -> None:
        """Delete this pool's own log files (its workers' and its zygote's), nothing else."""
        for path in [self.log_dir / f"{worker.label}.log" for worker in self.workers] + [self._zygote_log]:
            path.unlink(missing_ok=True)

    @property
    def _zygote_log(self) -> Path:
        """One zygote per command, labelled like its workers: two commands never share a log."""
        return self.log_dir / f"{_label('warm-start')}.log"

    def stop(self) -> None:
        """Kill whatever still runs (only when we ourselves are dying of an error)."""
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                # the zygote waits for its own in close(); a shared one outlives this pool
                if not isinstance(process, WarmProcess) or self.shared is not None:
                    process.wait()
        if self.starter is not None and self.shared is None:
            self.starter.close()
        self.starter = None
        self.signals.__exit__(None, None, None)
