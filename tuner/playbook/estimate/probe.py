"""Seconds per step for a phase that has not run: a few training steps and one eval timed here,
with the threads one worker would get."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from tuner.errors import UsageError
from tuner.playbook.estimate.figures import CostSource, StepCost
from tuner.spec import LoadedStudy, ScheduleSegment

DEFAULT_PROBE_STEPS = 30
MIN_PROBE_STEPS = 3  # the first step is warm-up; the rest are timed


def _stopwatch_callbacks() -> tuple[Any, Any]:
    """Two training callbacks noting when the fit starts, steps end, and the eval (with its
    checkpoint) starts and ends: the first runs before every other callback of an event, the
    second after the loggers and the checkpoint writer.

    Their notes are their ``state_dict``: a run of several processes runs them in rank 0 and
    hands their state back (``time.perf_counter`` is the machine's monotonic clock, the same
    in every process).
    """
    from tuner.train import Callback

    class ProbeStart(Callback):
        order = -1000

        def __init__(self) -> None:
            self.notes: dict[str, Any] = {"fit_start": None, "eval_start": None}

        def on_fit_start(self, loop: Any) -> None:
            self.notes["fit_start"] = time.perf_counter()

        def on_eval_start(self, loop: Any) -> None:
            self.notes["eval_start"] = time.perf_counter()

        def state_dict(self) -> dict[str, Any]:
            return dict(self.notes)

        def load_state_dict(self, state: dict[str, Any]) -> None:
            self.notes = dict(state)

    class ProbeEnd(Callback):
        order = 1000

        def __init__(self) -> None:
            self.notes: dict[str, Any] = {"step_ends": [], "eval_end": None}

        def on_train_step_end(self, loop: Any) -> None:
            self.notes["step_ends"].append(time.perf_counter())

        def on_checkpoint(self, loop: Any) -> None:
            self.notes["eval_end"] = time.perf_counter()

        def state_dict(self) -> dict[str, Any]:
            return {"step_ends": list(self.notes["step_ends"]), "eval_end": self.notes["eval_end"]}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            self.notes = dict(state)

    return ProbeStart(), ProbeEnd()


def probe_cost(
    loaded: LoadedStudy, *, steps: int = DEFAULT_PROBE_STEPS, threads: int | None, device: str
) -> StepCost:
    """Train ``steps`` steps of the study at its fixed hyperparameters, here, and time them.

    Step time: the steps after the first (whose warm-up is start-up). Eval time: the one eval
    at the end, with its checkpoint. Start-up: building the workload and the engine, plus the
    first step's excess (and the workload's imports, which every trial's process repeats); what
    a worker imports once for all its trials (torch, the engine) is not in it. ``threads``: a
    CPU worker's share of the cores, so the figure is one worker's while the others run too.
    Side effects: a temporary run folder; the global RNGs reseeded.
    """
    import torch

    from tuner.orchestrate.trial_process import warm_up
    from tuner.train import run_training

    if steps < MIN_PROBE_STEPS:
        raise UsageError(f"--probe-steps must be at least {MIN_PROBE_STEPS}, got {steps}")
    spec = loaded.spec
    training = spec.training.model_copy(
        update={
            "max_train_steps": steps,
            "eval_every": steps,  # one eval, at the end
            "schedule": [ScheduleSegment(shape="constant")],  # fits any length; costs the same
            "device": device,
        }
    )
    probe_spec = spec.model_copy(update={"training": training})
    warm_up(spec, loaded.base_dir)  # what a worker imports once for all its trials: not start-up
    first, last = _stopwatch_callbacks()
    previous_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        with tempfile.TemporaryDirectory(prefix="tuner-estimate-") as folder:
            called = time.perf_counter()
            run_training(
                probe_spec,
                Path(folder) / "probe",
                base_dir=loaded.base_dir,
                extra_callbacks=[first, last],
                progress=False,
                stop_signals=(),
                start_method="fork",  # warm_up imports only: no torch operation has run here
            )
    finally:
        torch.set_num_threads(previous_threads)
    ends, fit_start = last.notes["step_ends"], first.notes["fit_start"]
    eval_start, eval_end = first.notes["eval_start"], last.notes["eval_end"]
    assert fit_start is not None and len(ends) == steps
    assert eval_start is not None and eval_end is not None
    step_s = (ends[-1] - ends[0]) / (steps - 1)
    first_step_s = ends[0] - fit_start
    startup_s = (fit_start - called) + max(0.0, first_step_s - step_s)
    where = f"{threads} thread{'s' if threads != 1 else ''}" if device == "cpu" else device
    return StepCost(
        step_s,
        CostSource.PROBE,
        f"probe of {steps} steps ({where})",
        eval_s=eval_end - eval_start,
        startup_s=startup_s,
    )
