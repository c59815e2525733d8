"""The whole estimate of a study: per phase, what ran plus what is still planned.

What ran comes from the storage (``what_ran``); what is planned from the study file, and for a
phase that exists from its stored plan and budget (``forecast``). Seconds per step come, per
phase, from the phase's own finished trials when it has some (the most honest figure: the real
machine, the real points, evals and checkpoints included), else from a probe (``probe``).
Nothing here prints; the CLI does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from tuner.errors import UsageError
from tuner.playbook.estimate.figures import (
    Estimate,
    LengthSource,
    PhaseEstimate,
    PhaseLength,
    StepCost,
)
from tuner.playbook.estimate.forecast import plan_workers, planned_phases, with_max_train_steps
from tuner.playbook.estimate.probe import DEFAULT_PROBE_STEPS, MIN_PROBE_STEPS, probe_cost
from tuner.playbook.estimate.what_ran import (
    StoredPhase,
    load_stored_phase,
    measured_cost,
    recommended_max_train_steps,
    what_ran,
)
from tuner.playbook.phase_names import known_phases
from tuner.spec import LoadedStudy


def _with_stored_budget(length: PhaseLength, stored: StoredPhase | None) -> PhaseLength:
    """A created phase plans at least the budget it was last started with (``--trials 101``
    outlives the file's 20) and every slot it has started; a larger budget in the file wins,
    as a re-run of the command would take it."""
    if stored is None:
        return length
    slots = {int(t.user_attrs.get("slot", t.number)) for t in stored.trials}
    return replace(length, trials=max(length.trials, stored.budget or 0, len(slots)))


def estimate(
    loaded: LoadedStudy,
    *,
    storage_url: str,
    workers: int | None = None,
    devices: Sequence[str] | None = None,
    probe_steps: int = DEFAULT_PROBE_STEPS,
    announce: Callable[[str], None] | None = None,
) -> Estimate:
    """Per phase: trials and steps that ran, trials and steps still planned, seconds per step
    (measured, else probed), parallel trials, cost and days. Reads the storage only if it
    exists; probes only if a phase has planned work and no measured cost (``announce`` hears
    what the probe does before it starts: it may take a while)."""
    from tuner.orchestrate.pool import check_devices
    from tuner.playbook.study_results import open_existing_storage  # an estimate creates none

    if probe_steps < MIN_PROBE_STEPS:
        raise UsageError(f"--probe-steps must be at least {MIN_PROBE_STEPS}, got {probe_steps}")
    spec = loaded.spec
    per = spec.training.processes_per_trial
    # refuses bad --workers / --devices before anything is read or timed
    budget = max(p.trials for p in planned_phases(spec))
    plan_workers(workers=workers, devices=devices, max_parallel=None, budget=budget, processes_per_trial=per)
    if devices:
        check_devices(devices)
    storage = open_existing_storage(storage_url)
    stored = {phase: load_stored_phase(storage, spec.name, phase) for phase in known_phases(spec)}
    length_source: LengthSource | None = None
    if spec.training.max_train_steps is not None:
        length_source = LengthSource.STUDY_FILE
    elif (recommended := recommended_max_train_steps(storage, spec.name)) is not None:
        spec = with_max_train_steps(spec, recommended)
        length_source = LengthSource.SWEEP_LR
    stored_steps = {name: p.trial_steps for name, p in stored.items() if p is not None and p.trial_steps}
    lengths = [_with_stored_budget(p, stored.get(p.phase)) for p in planned_phases(spec, stored_steps)]
    # the widest phase decides the workers the probe is timed with (run-round starts them all)
    budget = max(p.trials for p in lengths)
    widest = plan_workers(
        workers=workers, devices=devices, max_parallel=None, budget=budget, processes_per_trial=per
    )
    ran = {p.phase: what_ran(stored.get(p.phase)) for p in lengths}
    measured = {p.phase: measured_cost(stored.get(p.phase)) for p in lengths}
    probe: StepCost | None = None
    planned_left = [p for p in lengths if p.steps is not None and max(0, p.trials - ran[p.phase].slots) > 0]
    if any(measured[p.phase] is None for p in planned_left):
        device = "cpu" if spec.training.device == "cpu" else widest.device
        if announce is not None:
            announce(
                f"timing {probe_steps} training steps and one eval here ({device}) for the phases not run yet"
            )
        probe = probe_cost(loaded, steps=probe_steps, threads=widest.threads, device=device)
    phases = []
    for length in lengths:
        chosen = plan_workers(
            workers=workers,
            devices=devices,
            max_parallel=length.parallel_cap,
            budget=length.trials,
            processes_per_trial=per,
        )
        # the round's `parallel` caps trials at once over all workers, whatever their number
        parallel = min(len(chosen.labels), length.parallel_cap or length.trials, length.trials)
        cost = measured[length.phase] or (probe if length.steps is not None else None)
        phases.append(PhaseEstimate(length, parallel, cost, spec.training.eval_every, ran[length.phase]))
    result = Estimate(spec.name, spec.training.max_train_steps, length_source, widest, phases)
    result.notes.extend(_assumptions(result, probe))
    return result


def _assumptions(result: Estimate, probe: StepCost | None) -> list[str]:
    """What the figures take for granted, in a few words each (printed on one line)."""
    workers = result.workers
    count = len(workers.labels)
    if workers.device == "cpu":
        threads = f"{workers.threads} thread{'s' if workers.threads != 1 else ''}"
        notes = [
            f"{count} CPU worker{'s' if count != 1 else ''} sharing {workers.cores} cores ({threads} each)"
        ]
    else:
        notes = [f"{count} GPU worker{'s' if count != 1 else ''} ({', '.join(workers.labels)})"]
    if probe is not None:
        notes.append(
            f"probe at the study's fixed hyperparameters, {probe.startup_s:.2g} s start-up per trial"
        )
    if any(p.length.upper_bound and p.trials_to_run for p in result.phases):
        notes.append("sweep-lr trials run to their cap (they stop once they fit, or cannot win)")
    notes.append("phases one after another")
    return notes
