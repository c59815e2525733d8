"""After the study file's last round: its transfer in the decision log, then the extra round
decided on its report (``tuner.playbook.extra_round``: longer runs of the chosen point when the
report says they were still improving, else more seeds), which takes every step left.

Decided once and stored as a stage whose ``--set`` values add ``rounds.roundN+1`` to the study
(the user's file is never rewritten); a re-run reads it back and continues it. The report is
read by the ``Advisor`` the command passed in (``RoundReading``: what of it the decision uses).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from tuner._format import plural
from tuner.playbook.decision_log import Decision, Stage
from tuner.playbook.phase_names import round_phase
from tuner.playbook.tune.advisor import RoundReading

if TYPE_CHECKING:
    from tuner.playbook.tune.context import TuneContext
    from tuner.spec import LoadedStudy

NONE_KIND = "extra_round_none"
# what each transfer verdict means, for its one-line decision (the report's text has the numbers)
TRANSFER_MEANING = {
    "good": "round 1's ranking held at full length",
    "within_noise": "the points differ only inside the noise: whether the ranking held cannot be told",
    "weak": "round 1's ranking held only weakly",
    "reversed": "round 1's ranking did not hold",
    "too_few": "too few points to tell",
}


def _read_round(context: TuneContext, loaded: LoadedStudy, phase: str) -> RoundReading:
    assert context.advisor is not None, "a projection reads no report"
    return context.advisor.read_round(context.url_of(loaded), loaded, phase)


def unregularised_length(context: TuneContext, loaded: LoadedStudy, reading: RoundReading) -> str | None:
    """Why the round's length may be too short though the best-step verdict did not say so, else
    None: ``tune`` set ``max_train_steps`` by sweep-lr, which trains with the searched
    regularisation off, no report's suggestion changed it since (a length from best steps
    measured with the regularisation on is not what the sweep measured), the sweep itself did not
    see validation best long before the fit (``SweepResult.validation_best_early``), the round's
    best steps were not early (``RoundReading.best_early``: the length too long), **and** the
    round's runs were still getting better late: the validation error falling between 50% and 75%
    of training beyond the curves' noise, wherever the best steps fell (``RoundReading.falling_late``;
    None when the report says the length is too long). When no LR fit, the length is the sweep's
    cap, and the text says so: not measured, only not enough; the curves are not asked then, since
    a cap is a lower bound: on the outcome benchmark's workloads where no LR fits, asking them gave
    the points more seeds instead and cost 0.043 test MCC [0.027, 0.059] on ``imbalanced`` (10
    seeds paired) and 0.0125 test mse [-0.0003, 0.0253] on ``regression``.

    The premise is the playbook's (seeds/002, "Deciding how long to train"): augmentation and
    regularisation such as dropout slow training and change the ideal length, which sweep-lr
    measured without them. The curves are the evidence that it happened in this round: the
    premise alone fired whenever dropout was searched, and trained points longer whose runs had
    peaked at half their length and stayed flat. The trend asks nothing of where the best steps
    fell, since a decaying schedule moves them (the outcome benchmark's augmented CNN: round 2 at
    sweep-lr's 125-175 steps had its best steps at 64-86%, and its chosen points trained 600 steps
    had a third to half the test error). On synthetic full-length rounds (docs/verdicts.md,
    ``benchmarks/calibrate_lengths.py``, 200 each) the curve rule holds in at most 2% of rounds
    whose length is right or too long (plateaus from 40% and from half, a bowl in the middle, an
    annealed plateau, early bests), and in 100% of rounds still improving but those of 8 runs on a
    split of a few hundred examples (79.5%); the premise alone trained longer in 98-100% of the
    rounds whose length is right."""
    from tuner.playbook.phase_names import SWEEP_PHASE
    from tuner.playbook.sweep_phase import stored_sweep_result, sweep_overrides
    from tuner.playbook.sweep_result import NothingFits
    from tuner.playbook.tune.studies import production, study_of

    if not reading.best_step_judged or reading.best_early:
        return None
    sweep = next((stage for stage in context.state.stages if stage.phase == SWEEP_PHASE), None)
    if sweep is None:
        return None  # the length is the user's (or a sweep's run before tune)
    swept = study_of(context, sweep)
    if production(context, loaded) != production(context, swept):
        return None  # a report's suggestion set the length since: it is no longer sweep-lr's
    result = stored_sweep_result(context.storage_of(swept, create=False), swept.spec.name)
    if result is not None and result.validation_best_early is not None:
        # the steps past that best memorised (noisy labels): the premise of training longer (the
        # sweep's length too short once regularisation is on) does not hold; on the outcome
        # benchmark's noisy labels the chosen points trained 3.5x longer were delivered on none
        # of 5 seeds (the share went to runs the delivered-model rule set aside)
        return None
    spec = loaded.spec
    off = sorted(key for key in sweep_overrides(spec) if key in spec.search_space)
    if not off:
        return None
    names = ", ".join(off)
    if result is not None and result.verdict(NothingFits):
        # a lower bound, not a measurement: no LR fit within it even with the regularisation off
        return (
            f"length is sweep-lr's cap, at which no LR fit the training set even with {names} off, "
            "which the rounds search (regularisation slows training: the playbook)"
        )
    if reading.falling_late is None:
        return None  # no sign in the curves that the round was cut short
    return (
        f"length is sweep-lr's, measured with {names} off, which the rounds search (regularisation "
        f"slows training: the playbook), and {reading.falling_late}"
    )


def after_last_round(context: TuneContext, loaded: LoadedStudy) -> Stage | None:
    """The file's last round's transfer in the log, then the extra round's stage (None: none
    runs; the driver runs it). The last round's report is built once, and only if one of them
    is still to decide (a re-run reads both back)."""
    last = loaded.spec.rounds.numbers[-1]
    reading = cache(lambda: _read_round(context, loaded, round_phase(last)))
    _log_transfer(context, loaded, reading)
    return _extra_round(context, loaded, reading) if context.request.switches.extra_round else None


def _log_transfer(context: TuneContext, loaded: LoadedStudy, reading: Callable[[], RoundReading]) -> None:
    """The file's last round's transfer verdict, in the decision log (once)."""
    number = loaded.spec.rounds.numbers[-1]
    stage_key = f"{loaded.spec.name}/{round_phase(number)}"
    if number < 2 or any(d.stage == stage_key and d.kind == "transfer" for d in context.state.decisions):
        return
    found = reading().transfer
    if found is None:
        return
    quality, text = found.quality, found.text
    text = f"{round_phase(number)}'s transfer: {quality}: {text}"
    if quality in ("weak", "reversed") and not context.request.switches.extra_round:
        text += f"; {max(context.left(), 0):,} steps left: no further round (--no-extra-round)"
    meaning = TRANSFER_MEANING.get(quality)
    short = f"{round_phase(number)}'s transfer: {quality}" + (f" ({meaning})" if meaning else "")
    context.decide(Decision("transfer", stage_key, text, {"quality": quality}, short))


def _extra_round(
    context: TuneContext, loaded: LoadedStudy, reading: Callable[[], RoundReading]
) -> Stage | None:
    """The extra round's stage, decided on the last round's report once (a re-run reads it back);
    None when none runs."""
    spec = loaded.spec
    last = spec.rounds.numbers[-1]
    stage = context.state.stage(spec.name, round_phase(last + 1))
    if stage is not None:
        return stage
    key = f"{spec.name}/{round_phase(last)}"
    if any(d.kind == NONE_KIND and d.stage == key for d in context.state.decisions):
        return None
    return _decide(context, loaded, last, reading())


def _decide(context: TuneContext, loaded: LoadedStudy, last: int, reading: RoundReading) -> Stage | None:
    from tuner.playbook.budget import LaterRound
    from tuner.playbook.extra_round import ExtraKind, shape_extra_round
    from tuner.spec import load_study

    spec = loaded.spec
    key = f"{spec.name}/{round_phase(last)}"
    before = context.state.stage(spec.name, round_phase(last))
    if before is None or before.steps_per_trial is None:
        return None
    ran = load_study(Path(before.study_file), before.sets).spec.rounds.get(last)
    assert ran is not None
    # the points round N+1 can take: round N's completed ones (a failed point has none), each LR
    # multiplier of a point a point of its own, as later_rounds.top_points counts them
    points = reading.completed_points
    as_ran = LaterRound(last, points, ran.seeds, 1, before.steps_per_trial)
    late = reading.still_improving
    unregularised = None if late is not None else unregularised_length(context, loaded, reading)
    if late is not None:
        why_longer: str | None = f"round {last}'s report says {late}"
    else:
        why_longer = None if unregularised is None else f"round {last}'s {unregularised}"
    left = max(context.left(), 0)
    switches = context.request.switches
    shape = shape_extra_round(
        left,
        as_ran,
        spec.training.eval_every,
        still_improving=why_longer is not None,
        seeds_allowed=switches.extra_seeds,
    )
    if shape is None:
        why = "--no-extra-seeds" if not switches.extra_seeds else f"not one run of {as_ran.steps} steps fits"
        if not points:
            why = f"round {last} has no completed point"
        context.decide(
            Decision(
                NONE_KIND,
                key,
                f"no round after round {last}: {left:,} steps left ({why})",
                {"left": left},
            )
        )
        return None
    stage = Stage(
        spec.name,
        round_phase(shape.number),
        str(loaded.path.resolve()),
        [*before.sets, *shape.sets()],
        None,
        shape.cost,
    )
    stage.steps_per_trial = shape.steps
    if shape.kind is ExtraKind.LONGER:
        short = (
            f"round {shape.number}: the chosen point trains longer, {as_ran.steps} -> {shape.steps} "
            f"steps, on {plural(shape.seeds, 'new seed')}"
        )
        text = (
            f"round {shape.number}: {why_longer}: its chosen point trains longer, "
            f"{as_ran.steps} -> {shape.steps} steps ({shape.steps / as_ran.steps:.3g}x: the longest, up to "
            f"4x, that the {left:,} steps left hold on {shape.seeds} new seeds), the schedule extended; the "
            "delivered model is the better of the two lengths by mean over seeds"
        )
    else:
        why = "no longer run fits the steps left" if why_longer else "its runs were not still improving"
        found = reading.transfer
        if found is not None and found.quality != "good":
            why += f"; its transfer is {found.quality}: more runs per point tell the points apart"
        points = plural(shape.top_k, "point")
        short = (
            f"round {shape.number}: round {last}'s {points} again on {plural(shape.seeds, 'new seed')} "
            f"each, at {shape.steps} steps"
        )
        text = (
            f"round {shape.number}: round {last}'s {points} again on {shape.seeds} new seed"
            f"{'s' if shape.seeds != 1 else ''} each at {shape.steps} steps ({why}); the delivered model "
            f"pools each point's runs over rounds {last} and {shape.number}"
        )
    numbers = {
        **shape.to_json(),
        "left": left,
        "still_improving": late is not None,
        "unregularised_length": unregularised is not None,
        "falling_late": reading.falling_late is not None,
    }
    return context.record(
        stage, Decision(f"round{shape.number}_{shape.kind.value}", stage.key, text, numbers, short)
    )


def next_extra_round(context: TuneContext, loaded: LoadedStudy) -> Stage | None:
    """After a raised ``--budget``: the next round after the latest one of ``loaded`` (decided
    on its report, as the extra round is: longer runs if they were still improving, else its
    points on more seeds), or that round itself while it is unfinished; None once not one run
    fits what is left (decided once after each raise)."""
    from tuner.playbook.phase_names import round_number

    if not context.request.switches.extra_round:
        return None
    spec = loaded.spec
    rounds = [s for s in context.state.stages if s.study == spec.name and (round_number(s.phase) or 0) >= 2]
    if not rounds:
        return None
    latest = max(rounds, key=lambda s: round_number(s.phase) or 0)
    if not latest.done:
        return latest
    number = round_number(latest.phase) or 0
    raised = max(i for i, d in enumerate(context.state.decisions) if d.kind == "budget_raised")
    key = f"{spec.name}/{latest.phase}"
    if any(d.kind == NONE_KIND and d.stage == key for d in context.state.decisions[raised:]):
        return None
    return _decide(context, loaded, number, _read_round(context, loaded, latest.phase))
