"""What ``tuner tune`` sets itself before round 1 when the length is its own (sweep-lr's, because
the study file leaves ``max_train_steps`` out): the trial length, the schedule and ``eval_every``.

A user who gives ``max_train_steps`` gets it, with the file's schedule and ``eval_every``: they
were written for that length. One who leaves it out lets sweep-lr choose it, and the file's
schedule and ``eval_every`` were written before that answer; on a small dataset the answer can
be 20 steps (the training set fit at the first eval), where a 50-step warmup does not fit, one
eval a trial places no best step, and each trial's fixed cost is a hundred times its training.
So, once, before round 1 is decided, three rules, each a decision in the log (said, stored, and
applied through the ``--set`` values of every phase after it, so a re-run says and runs the same):

1. **Trials worth their fixed cost** (``length_raised``). When a round-1 trial at sweep-lr's
   length would train for less time than its fixed cost (``trial_cost.py``, measured on the
   sweep's trials), ``max_train_steps`` grows, on the ``eval_every`` grid, to the shortest length
   at which it trains at least as long as that, and never past the sweep's cap (the longest it
   tried: beyond it nothing is measured), nor to where the budget would no longer hold round 1
   at full length. Steps are then nearly free in time, and every run keeps its best checkpoint,
   so a length past the fit costs steps of the budget, not the model; it gives the low LRs of the
   search room to train. A trial at least as long as its fixed cost (every workload of the
   outcome benchmark: hundreds of steps at its cap) is planned as before.
2. **A schedule the length can hold** (``schedule_scaled``): ``schedule_fit.py``.
3. **Evals enough to place a best step** (``eval_every_lowered``). When round 1's trials would
   have fewer than the report needs (``eval_grid.py``: 4 evals a run, 2 in its last 25%),
   ``eval_every`` becomes the largest readable interval that gives them, as the report would
   suggest after the round.

The values carry to a next study ``tune`` searches (``--short-round1``), except those its
applied suggestions changed: a suggestion made on round 1's runs wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tuner.playbook.decision_log import Decision
from tuner.playbook.phase_names import SWEEP_PHASE, round_phase
from tuner.spec import LoadedStudy

if TYPE_CHECKING:
    from tuner.playbook.trial_cost import TrialCost
    from tuner.playbook.tune.context import TuneContext
    from tuner.playbook.tune.full_length import Round1Choice


def settle_own_settings(context: TuneContext, loaded: LoadedStudy, length: int) -> tuple[LoadedStudy, int]:
    """Take the module's decisions (once: a re-run finds them in the log) and return the study
    and its length as round 1 will run them."""
    from tuner.playbook.tune.studies import sets_for
    from tuner.spec import load_study

    decisions, length = own_decisions(context, loaded, length)
    for decision in decisions:
        context.decide(decision)
    if decisions:
        loaded = load_study(loaded.path, sets_for(context, loaded))
    return loaded, length


def own_decisions(context: TuneContext, loaded: LoadedStudy, length: int) -> tuple[list[Decision], int]:
    """The module's decisions not yet taken, and the production length after them; none when
    round 1 of ``loaded`` is decided, ``loaded`` is a next study, or the length is the user's.
    Takes nothing (a projection asks it too)."""
    from tuner.playbook.tune.full_length import choose_round1

    name = loaded.spec.name
    round1 = round_phase(1)
    if (
        name != context.home.spec.name
        or context.home.spec.training.max_train_steps is not None
        or context.state.stage(name, round1) is not None
    ):
        return [], length
    taken = {d.kind for d in context.state.decisions if d.stage == f"{name}/{round1}"}
    left = context.left()
    choice = choose_round1(context, loaded, length, 1, left)
    decisions = []
    if "length_raised" not in taken:
        raised = _raised_length(context, loaded, length, choice, left)
        if raised is not None:
            decisions.append(raised.decision)
            length, choice = raised.length, raised.choice
    steps = choice.stage.steps_per_trial or length
    spec = loaded.spec
    if "schedule_scaled" not in taken:
        decisions += _scaled_schedule(spec.training.schedule, steps, f"{name}/{round1}")
    if "eval_every_lowered" not in taken:
        decisions += _finer_evals(spec.training.eval_every, steps, f"{name}/{round1}")
    return decisions, length


@dataclass(frozen=True)
class _Raised:
    length: int
    choice: Round1Choice
    decision: Decision


def _raised_length(
    context: TuneContext, loaded: LoadedStudy, length: int, choice: Round1Choice, left: int
) -> _Raised | None:
    """Rule 1 (module docstring): the length at which a round-1 trial trains at least as long as
    its fixed cost, within the sweep's cap and the budget; None when it already does (or the
    cost cannot be measured, or nothing longer fits)."""
    from tuner.errors import UsageError
    from tuner.playbook.tune.full_length import choose_round1

    measured = _sweep_cost(context, loaded)
    if measured is None:
        return None
    cost, cap = measured
    steps = choice.stage.steps_per_trial or length
    if not cost.outweighs(steps):
        return None
    every = loaded.spec.training.eval_every
    on_grid = range((length // every + 1) * every, cap + 1, every)
    candidates = sorted(c for c in {*on_grid, cap} if c > length)
    best = None
    for candidate in candidates:
        try:
            longer = choose_round1(context, loaded, candidate, 1, left)
        except UsageError:
            break
        if longer.full_length != choice.full_length:
            break  # the budget would no longer hold round 1 as it was: stop before that
        best = (candidate, longer)
        if not cost.outweighs(longer.stage.steps_per_trial or candidate):
            break
    if best is None:
        return None
    raised, longer = best
    return _Raised(raised, longer, _length_decision(loaded, length, raised, steps, longer, cost, cap))


def _sweep_cost(context: TuneContext, loaded: LoadedStudy) -> tuple[TrialCost, int] | None:
    """The sweep's measured trial cost and its cap (the longest it tried), if both are known."""
    from tuner.playbook.estimate import load_stored_phase
    from tuner.playbook.trial_cost import measured_trial_cost

    stored = load_stored_phase(context.storage_of(loaded, create=False), loaded.spec.name, SWEEP_PHASE)
    if stored is None or stored.trial_steps is None:
        return None
    cost = measured_trial_cost(stored.trials)
    return None if cost is None else (cost, stored.trial_steps)


def _length_decision(
    loaded: LoadedStudy, length: int, raised: int, steps: int, longer: Round1Choice, cost: TrialCost, cap: int
) -> Decision:
    name = loaded.spec.name
    new_steps = longer.stage.steps_per_trial or raised
    trial_s = cost.fixed_s + cost.training_s(steps)
    trains = f"{cost.training_s(new_steps):.2g} s"
    where = (
        f"the sweep's cap, the longest it tried (a trial there still trains {trains})"
        if cost.outweighs(new_steps)
        else f"the shortest length on the eval grid at which a trial trains at least as long ({trains})"
    )
    rounds = (
        "" if steps == length and new_steps == raised else f" (round 1's trials {steps} -> {new_steps} steps)"
    )
    text = (
        f"max_train_steps {length} -> {raised}{rounds}: a round-1 trial of {steps} steps would train "
        f"{cost.training_s(steps):.2g} s of its {trial_s:.2g} s, the rest its fixed cost (start-up, "
        f"the workload built, its checkpoint and records: {cost.fixed_s:.2g} s, and "
        f"{cost.step_s * 1000:.2g} ms a step, measured on sweep-lr's {cost.trials} trials); {raised} "
        f"steps is {where}. Longer trials spend the budget's steps for little more time, and each run "
        "keeps its best checkpoint, so a length past the fit costs steps, not the model"
    )
    short = (
        f"round trials of {raised} steps, not {length}: a trial's fixed cost ({cost.fixed_s:.2g} s) is "
        f"{cost.fixed_s / max(cost.training_s(steps), 1e-9):.0f}x its training at {steps} steps"
    )
    numbers: dict[str, Any] = {
        "value": raised,
        "from": length,
        "round1_steps": new_steps,
        "cap": cap,
        "fixed_s": round(cost.fixed_s, 4),
        "step_s": round(cost.step_s, 6),
        "measured_trials": cost.trials,
    }
    return Decision("length_raised", f"{name}/{round_phase(1)}", text, numbers, short)


def _scaled_schedule(schedule: Any, steps: int, stage: str) -> list[Decision]:
    """Rule 2: the schedule scaled to round 1's ``steps`` when it does not fit them."""
    from tuner.playbook.schedule_fit import scaled_to_fit

    scaled = scaled_to_fit(schedule, steps)
    if scaled is None:
        return []
    text = (
        f"training.schedule does not fit round 1's trials of {steps} steps (its fixed-step segments "
        f"take {sum(scaled.fixed_steps)}; the length is tune's, from sweep-lr): they become fractions of "
        f"each run, {scaled.changes()} here, half of the run beside the segment that takes the rest "
        "(else all of it), so the schedule holds at every round's length; the study file keeps its "
        f"own ({scaled.as_set()})"
    )
    short = f"training.schedule scaled to round 1's {steps} steps: {scaled.changes()}"
    numbers = {
        "value": scaled.documents(),
        "steps": steps,
        "fixed_steps": scaled.fixed_steps,
        "scaled_steps": scaled.scaled_steps,
    }
    return [Decision("schedule_scaled", stage, text, numbers, short)]


def _finer_evals(eval_every: int, steps: int, stage: str) -> list[Decision]:
    """Rule 3: ``eval_every`` lowered when round 1's trials of ``steps`` would have too few evals."""
    from tuner.playbook.eval_grid import MIN_EVALS, MIN_LATE_EVALS, eval_counts, suggested_eval_every

    evals, late = eval_counts(eval_every, steps)
    if evals >= MIN_EVALS and late >= MIN_LATE_EVALS:
        return []
    finer = suggested_eval_every(steps)
    if finer is None or finer >= eval_every:
        return []
    now, now_late = eval_counts(finer, steps)
    text = (
        f"eval_every {eval_every} -> {finer}: round 1's trials of {steps} steps would have {evals} evals, "
        f"{late} in their last 25%, and a best step is placed with at least {MIN_EVALS} evals a run and "
        f"{MIN_LATE_EVALS} in its last 25%; {finer} is the largest readable interval that gives them "
        f"({now} evals, {now_late} late), as the report would suggest after the round"
    )
    short = f"eval_every {eval_every} -> {finer}: {now} evals a round-1 trial of {steps} steps, not {evals}"
    numbers = {"value": finer, "from": eval_every, "steps": steps, "evals": now, "late_evals": now_late}
    return [Decision("eval_every_lowered", stage, text, numbers, short)]
