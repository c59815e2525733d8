"""Round 1 with a pruner (``rounds.round1.pruner``): the steps its stopped trials freed go to more
points, in the same round.

Round 1 is decided as ``trials`` x its length. A pruned trial trains only part of that length, so
once the round has run, its share holds more whole trials than it trained: they are added to the
round (new slots, the sampler's next points) and the round runs again, until what is left of its
share is less than one trial. The round's share never grows; what the later rounds get is decided
after it, as without a pruner.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tuner.playbook.decision_log import Decision, Stage
from tuner.playbook.tune.context import TuneContext


def spend_freed_steps(context: TuneContext, stage: Stage, run: Callable[[Stage], None]) -> None:
    """More round-1 trials while its pruned trials left room for at least one whole trial
    (``run`` runs the stage again). Nothing for a round without a pruner."""
    from tuner.spec import load_study

    loaded = load_study(Path(stage.study_file), stage.sets)
    length = stage.steps_per_trial
    if loaded.spec.rounds.round1.pruner == "none" or not length or stage.trials is None:
        return
    before = -1
    while True:
        trained = context.steps_of(stage)
        more = (stage.planned_steps - trained) // length
        if more < 1 or trained == before:  # full, or the last run trained nothing (it stopped)
            return
        before = trained
        stage.trials += more
        stage.done = False
        context.decide(
            Decision(
                "round1_freed_steps",
                stage.key,
                f"round 1: its pruner stopped trials early ({trained:,} of {stage.planned_steps:,} "
                f"steps trained): {more} more {'point' if more == 1 else 'points'} of {length} steps "
                f"within its share, {stage.trials} in all",
                {"more": more, "trials": stage.trials, "trained": trained},
                short=f"round 1: {more} more points in the steps its pruner freed",
            )
        )
        run(stage)
