"""The ``tuner tune`` loop: sweep-lr when ``max_train_steps`` is unknown (then the trial length, the
schedule and ``eval_every`` fitted to its answer: ``own_settings``), round 1, the report (its
suggestions applied to a next study file, whose round 1 then runs), the later rounds, the model.

Each phase is decided once (``tuner.playbook.tune_plan``: the budget rule), stored as a stage with
its decision in the study's storage, then run by the ``PhaseRunner`` the command passed in (``tuner
tune``'s runs it as ``sweep-lr`` / ``run-round`` do). Ctrl-C stops the phase as it stops
``run-round`` (exit 130); running the same command again reads the stages back, skips the
finished ones and continues the others as decided.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tuner.errors import UsageError
from tuner.playbook.decision_log import Decision, Stage
from tuner.playbook.phase_names import SWEEP_PHASE, round_phase
from tuner.playbook.tune.context import TuneContext
from tuner.playbook.tune.messages import StageSkipped
from tuner.playbook.tune.phase_runner import PhaseToRun
from tuner.playbook.tune.studies import current_study, production, sets_for
from tuner.spec import LoadedStudy

if TYPE_CHECKING:
    from tuner.playbook.sweep_result import NothingFits

NO_SWEEP_WITHOUT_LENGTH = (
    "training.max_train_steps is not set and --no-sweep skips tuner sweep-lr, which finds "
    "it: set it in the study file (or --set max_train_steps=N), or drop --no-sweep"
)


class NoProgress(RuntimeError):
    """The loop came back to a study it had searched in this run: it would go round for ever
    (every stage done, nothing new decided). A bug in tuner, said as one internal-error line."""


class TimeSpent(Exception):
    """A duration budget's time ran out: no phase starts any more; the model so far is delivered."""


def _time_limit(context: TuneContext, stage: Stage) -> float | None:
    """The phase's wall-time limit in hours (``timeout_h``: no trial starts after it) from what
    is left of a duration budget; None for a budget in steps. ``TimeSpent`` when nothing is left."""
    left = context.seconds_left()
    if left is None:
        return None
    if left <= 0:
        if not any(d.kind == "time_spent" for d in context.state.decisions):
            seconds = context.request.budget.seconds or 0.0
            context.decide(
                Decision(
                    "time_spent",
                    stage.key,
                    f"the {context.request.budget.text} budget's time is spent ({context.spent_s() / 60:.1f} "
                    f"of {seconds / 60:.1f} min run): {stage.key} and what follows do not start; the "
                    "model so far is delivered",
                    {"spent_s": round(context.spent_s(), 1), "seconds": seconds},
                )
            )
        raise TimeSpent(stage.key)
    return left / 3600


def run_stage(context: TuneContext, stage: Stage) -> None:
    """Run the stage's phase by the command's ``PhaseRunner`` (which raises to stop: Ctrl-C, a
    spent failure budget), then mark it done."""
    if stage.done:
        context.emit(StageSkipped(stage))
        return
    assert context.runner is not None, "a projection runs no phase"
    request = context.request
    if (standing := context.budget_standing()) is not None:
        context.emit(standing)
    limit = _time_limit(context, stage)
    trials = None
    if stage.phase == round_phase(1):  # what it decided, or the slots another command added since
        trials = max(stage.trials or 0, context.slots_of(stage)) or stage.trials
    context.runner.run(
        PhaseToRun(
            path=Path(stage.study_file),
            phase=stage.phase,
            sets=stage.sets,
            output_dir=request.output_dir,
            workers=request.workers,
            devices=request.devices,
            storage=request.storage,
            max_trials=trials,
            timeout_h=limit,
            max_failed=request.max_failed,
        )
    )
    stage.done = True
    context.save()


def sweep(context: TuneContext, loaded: LoadedStudy) -> int:
    """sweep-lr within its share; the production length it found (or its cap, said in the log)."""
    from tuner.playbook.tune_plan import sweep_decision

    spec = loaded.spec
    stage = context.state.stage(spec.name, SWEEP_PHASE)
    if stage is None:
        if not context.request.switches.sweep:
            raise UsageError(NO_SWEEP_WITHOUT_LENGTH)
        stage, decision = sweep_decision(loaded, context.budget_steps, sets_for(context, loaded))
        context.record(stage, decision)
    run_stage(context, stage)
    found = production(context, loaded)
    if found is not None:
        return found
    swept = int(next(d for d in context.state.decisions if d.stage == stage.key).numbers["cap"])
    cap = max(1, round(swept * context.request.switches.nothing_fits_scale))
    # The cap even when the sweep saw validation peak early (its nothing-fits verdict's
    # noisy_labels_steps): measured on the outcome benchmark's noisy labels, rounds at 2 x that
    # best step gave no better test error for 3x the CPU (hundreds of tiny round-1 trials), and
    # each run's retrospective best checkpoint keeps the early best anyway (docs/guide/tune.md).
    early = _nothing_fits_early(context, loaded)
    why = "compute-bound: longer keeps helping"
    numbers: dict[str, object] = {"max_train_steps": cap}
    if early is not None:  # not "longer keeps helping": the sweep saw the steps past it memorise
        why = (
            f"validation was best at step {early.best_step:g} of it, as with noisy labels: each run "
            f"keeps its best checkpoint, so an early best is what it delivers; to train "
            f"{early.noisy_labels_steps} steps instead (2 x that best step), run again with --set "
            f"max_train_steps={early.noisy_labels_steps} and another --output-dir"
        )
        numbers |= {"best_step": early.best_step, "noisy_labels_steps": early.noisy_labels_steps}
    context.decide(
        Decision(
            "max_train_steps_fallback",
            stage.key,
            f"sweep-lr: no LR fit the training set within {swept} steps: the rounds train "
            f"max_train_steps {cap}, "
            + ("the longest the sweep tried" if cap == swept else f"{cap / swept:g} x the longest it tried")
            + f" ({why})",
            numbers,
            short=f"sweep-lr: no LR fit within {swept} steps: the rounds train {cap} steps"
            + (f" (validation was best at step {early.best_step:g})" if early is not None else ""),
        )
    )
    return cap


def _nothing_fits_early(context: TuneContext, loaded: LoadedStudy) -> NothingFits | None:
    """sweep-lr's nothing-fits verdict when it saw validation best early in its cap (its
    ``noisy_labels_steps``), else None."""
    from tuner.playbook.sweep_phase import stored_sweep_result
    from tuner.playbook.sweep_result import NothingFits

    result = stored_sweep_result(context.storage_of(loaded), loaded.spec.name)
    early = result.validation_best_early if result is not None else None
    return early if isinstance(early, NothingFits) else None


def note_best_before_fit(context: TuneContext, loaded: LoadedStudy, length: int) -> None:
    """Log, once, the sweep's "validation best long before the fit" verdict beside the length the
    rounds train: the fit step, the playbook's rule (the same reasons as the fallback's above).
    Asked after every sweep-lr of this run, also one an earlier run finished (Ctrl-C after it)."""
    from tuner.playbook.sweep_phase import stored_sweep_result
    from tuner.playbook.sweep_result import BestLongBeforeFit

    stage = context.state.stage(loaded.spec.name, SWEEP_PHASE)
    if stage is None or not stage.done:
        return
    if any(d.kind == "sweep_best_before_fit" and d.stage == stage.key for d in context.state.decisions):
        return
    result = stored_sweep_result(context.storage_of(loaded), loaded.spec.name)
    early = result.validation_best_early if result is not None else None
    if not isinstance(early, BestLongBeforeFit):
        return
    context.decide(
        Decision(
            "sweep_best_before_fit",
            stage.key,
            f"sweep-lr: validation was best at step {early.best_step:g} (lr {early.lr:.3g}), long before the "
            f"training set was fit at step {early.fit_step}, as when labels are noisy: the rounds train "
            f"max_train_steps {length}, the fewest steps to fit (each run keeps its best "
            f"checkpoint, so an early best is what it delivers); to train {early.noisy_labels_steps} "
            f"steps instead (2 x that best step), run again with --set max_train_steps="
            f"{early.noisy_labels_steps} and another --output-dir",
            {
                "best_step": early.best_step,
                "fit_step": early.fit_step,
                "max_train_steps": length,
                "noisy_labels_steps": early.noisy_labels_steps,
                "lr": early.lr,
            },
            short=f"sweep-lr: validation was best at step {early.best_step:g}, long before the fit "
            f"(step {early.fit_step}): the rounds train {length} steps",
        )
    )


def round1(context: TuneContext, loaded: LoadedStudy, length: int) -> LoadedStudy:
    """Round 1 decided (at full length by default: ``full_length``) and run; the study as it ran."""
    from tuner.playbook.tune.freed_steps import spend_freed_steps
    from tuner.playbook.tune.full_length import decide_round1

    stage = context.state.stage(loaded.spec.name, round_phase(1))
    if stage is None:
        searches = 1 + sum(1 for s in context.state.stages if s.phase == round_phase(1))
        stage, decision, loaded, note = decide_round1(context, loaded, length, searches, context.left())
        if note is not None:
            context.decide(note)
        context.record(stage, decision)
    run_stage(context, stage)
    spend_freed_steps(context, stage, lambda again: run_stage(context, again))
    return current_study(context)


def later_rounds(context: TuneContext, loaded: LoadedStudy, length: int) -> None:
    from tuner.playbook.tune_plan import later_decisions

    spec = loaded.spec
    numbers = [n for n in spec.rounds.numbers if n >= 2]
    if numbers and context.state.stage(spec.name, round_phase(numbers[0])) is None:
        sets = sets_for(context, loaded)  # a next study carries its changes in its own file
        switches = context.request.switches
        decided = later_decisions(
            loaded,
            length,
            context.left(),
            sets,
            # the extra round takes what is left once the last round's report is known
            fill_seeds=switches.extra_seeds and not switches.extra_round,
            round1_trials=_completed(context, loaded, round_phase(1)),
            spread_within=context.budget_steps if switches.extra_round else None,
        )
        for stage, decision in decided:
            context.record(stage, decision)
    for number in numbers:
        stage = context.state.stage(spec.name, round_phase(number))
        assert stage is not None
        run_stage(context, stage)


def _completed(context: TuneContext, loaded: LoadedStudy, phase: str) -> int:
    """The phase's completed trials: round 2 can take at most that many points."""
    from optuna.trial import TrialState

    from tuner.playbook.estimate import load_stored_phase

    stored = load_stored_phase(context.storage_of(loaded), loaded.spec.name, phase)
    return sum(1 for t in stored.trials if t.state == TrialState.COMPLETE) if stored else 0


def drive(context: TuneContext) -> LoadedStudy:
    """Run every phase to the delivered model; returns the study that delivers it."""
    from tuner.playbook.tune.extra import after_last_round
    from tuner.playbook.tune.own_settings import settle_own_settings
    from tuner.playbook.tune.suggestions import next_study

    if not context.state.decisions:
        switches = context.request.switches
        round1_share = (
            "round 1 the rest, at full length"
            if switches.full_length_round1
            else "round 1 the rest (half while a next search may follow)"
        )
        split = (
            "sweep-lr <= 20%, the later rounds at the file's seeds (2 if half the budget holds them), 20% "
            "kept for a round decided on the last round's report (longer runs when they were still "
            f"improving, else more seeds), {round1_share}"
            if switches.extra_round
            else "sweep-lr <= 20%, the later rounds at the file's seeds (2 if half the budget holds them), "
            f"{round1_share}, round 2's seeds then fill what is left"
        )
        context.decide(
            Decision(
                "budget",
                context.home.spec.name,
                f"budget {context.budget_steps:,} training steps ({context.request.budget.text}); "
                f"split: {split}",
                {"steps": context.budget_steps, "text": context.request.budget.text},
                short=f"budget {context.budget_steps:,} training steps"
                + ("" if context.request.budget.seconds is None else f" ({context.request.budget.text})"),
            )
        )
    loaded = current_study(context)
    searched: list[str] = []  # the studies this loop searched, in order: none may come twice
    try:
        while True:
            if loaded.spec.name in searched:
                raise NoProgress(
                    f"tune came back to {loaded.spec.name} after {' -> '.join(searched)}: every stage "
                    "of it is done and nothing new was decided, so it would go round for ever"
                )
            searched.append(loaded.spec.name)
            length = production(context, loaded)
            if length is None:
                length = sweep(context, loaded)
                loaded = current_study(context)
            note_best_before_fit(context, loaded, length)
            loaded, length = settle_own_settings(context, loaded, length)
            loaded = round1(context, loaded, length)
            following = next_study(context, loaded)
            if following is None:
                break
            loaded = following
        later_rounds(context, loaded, length)
        extra = after_last_round(context, loaded)
        if extra is not None:
            run_stage(context, extra)
        if any(d.kind == "budget_raised" for d in context.state.decisions):
            from tuner.playbook.tune.extra import next_extra_round

            while (more := next_extra_round(context, loaded)) is not None:
                run_stage(context, more)
    except TimeSpent:
        return loaded
    return loaded
