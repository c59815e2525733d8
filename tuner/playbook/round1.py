"""Round 1's plan: many short trials over the search space (the playbook's exploration round)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tuner.errors import UsageError
from tuner.playbook.plan import StoredPlan, resolve_schedule

if TYPE_CHECKING:
    from tuner.playbook.trial_lengths import ProductionLength
    from tuner.spec import LoadedStudy


def round1_plan(loaded: LoadedStudy, production: ProductionLength) -> StoredPlan:
    """Points from the round's sampler (quasi-random by default), all of one length.

    With ``proxy_fraction``, every trial validates on the same held-out part of the training
    split (the real validation set is kept for later rounds: many trials cannot overfit it).
    """
    from tuner.playbook.trial_lengths import round_steps

    spec = loaded.spec
    round_spec = spec.rounds.round1
    steps = round_steps(spec, round_spec, 1, production.steps)
    try:
        schedule = resolve_schedule(spec, steps)
    except ValueError as error:
        if round_spec.steps is not None:
            source = "rounds.round1.steps"
        else:
            fraction = round_spec.length_fraction if round_spec.length_fraction is not None else 1.0
            source = f"rounds.round1.length_fraction {fraction:g} of max_train_steps {production.steps}"
            source += f", from {production.source}" if production.source else ""
        raise UsageError(
            f"training.schedule does not fit round-1's trials of {steps} steps ({source}): {error} "
            "(a segment's `fraction` of the run, instead of `steps`, scales with every length)"
        ) from None
    overrides = {"proxy_fraction": round_spec.proxy_fraction} if round_spec.proxy_fraction else {}
    notes = []
    if round_spec.proxy_fraction:
        notes.append(
            f"validating on a proxy split: {round_spec.proxy_fraction:.0%} of the training split, held out "
            "(the same examples for every trial); later rounds use the real validation set"
        )
    return StoredPlan(
        phase="round-1",
        kind="round",
        config=spec.model_dump_for_files(),
        trial_steps=steps,
        max_train_steps=production.steps,
        max_train_steps_source=production.source,
        schedule=schedule,
        overrides=overrides,
        sampler=round_spec.sampler,
        space=spec.model_dump(mode="json")["search_space"],
        seed=spec.points_seed,
        notes=notes,
    )
