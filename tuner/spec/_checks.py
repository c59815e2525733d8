"""Cross-field rules of the study file that the per-field models cannot see."""

from __future__ import annotations

from typing import Any

from tuner.errors import SpecError
from tuner.spec._models import CategoricalParam, FloatParam, IntParam
from tuner.spec._paths import did_you_mean, format_path, has_path, key_to_path


def candidate_values(param: FloatParam | IntParam | CategoricalParam) -> list[Any]:
    """The values a check must try: every choice, or both ends of a range."""
    if isinstance(param, CategoricalParam):
        return list(param.choices)
    return [param.low, param.high]


def check_search_space(loaded: Any) -> None:
    """Every search-space key names a real config field, and its values fit that field.

    Keys into ``workload.options`` are checked by the workload layer, which knows the options.
    """
    effective = loaded.spec.model_dump()
    for key, param in loaded.spec.search_space.items():
        target = key_to_path(key)
        here = ("search_space", key)
        if target == ("training", "max_train_steps"):
            raise loaded.error(
                here,
                "max_train_steps is not a hyperparameter to search: a longer trial nearly always scores "
                "better, so the search would just pick the largest; the playbook fixes it per round "
                "(tuner sweep-lr finds it, rounds.<round>.steps / length_fraction set each round's)",
                at_key=True,
            )
        if target in (("seed",), ("search_seed",), ("training", "seed_index")):
            raise loaded.error(
                here,
                f"{format_path(target)} is not a hyperparameter to search: a seed that scores better is "
                "luck, not a better configuration; rounds.<round>.seeds trains each point on several seeds",
                at_key=True,
            )
        if target[0] == "workload":
            continue
        if not has_path(effective, target) or target[0] in ("search_space", "name", "workload"):
            hint = did_you_mean(key, effective)
            raise loaded.error(
                here, f"matches no config field (looked for {format_path(target)}){hint}", at_key=True
            )
        for value in candidate_values(param):
            try:
                loaded.with_values({key: value})
            except SpecError as error:
                raise loaded.error(
                    here,
                    f"value {value!r} does not fit {format_path(target)}: {error.detail}",
                    at_key=True,
                ) from None


def check_schedule(loaded: Any) -> None:
    """Fractions of the schedule that add up to more than 1 can never fit any run.

    Whether steps fit ``max_train_steps`` (and a round's shorter trials) is checked where the
    lengths are resolved (``tuner.train.schedules``), because that is where rounding happens.
    """
    total = 0.0
    for index, segment in enumerate(loaded.spec.training.schedule):
        if segment.fraction is None:
            continue
        total += segment.fraction
        if total > 1 + 1e-9:
            raise loaded.error(
                ("training", "schedule", index, "fraction"),
                f"the segments' fractions add up to {total:g} here, more than 1 (all of max_train_steps)",
            )


def check_rounds(loaded: Any) -> None:
    """Fields that only mean something for some rounds, refused where they would be ignored."""
    rounds = loaded.spec.rounds
    for number in rounds.numbers:
        spec = rounds.get(number)
        here = ("rounds", f"round{number}")
        planned = spec.top_k * spec.seeds * len(spec.lr_multipliers)
        if number >= 2 and spec.trials is not None and spec.trials != planned:
            # a trials that repeats what top_k, seeds and lr_multipliers give is harmless
            raise loaded.error(
                (*here, "trials"),
                f"round {number} trains round {number - 1}'s best points, so its trial count is "
                f"top_k x seeds x len(lr_multipliers); set those instead of trials (here {spec.top_k} x "
                f"{spec.seeds} x {len(spec.lr_multipliers)} = {planned}, not {spec.trials})",
                at_key=True,
            )
        if number >= 2:
            _check_top_k(loaded, rounds, number)
        if number >= 2 and spec.proxy_fraction:
            raise loaded.error(
                (*here, "proxy_fraction"),
                "only round 1 validates on a proxy split; later rounds train on all training data "
                "and validate on the real validation set",
                at_key=True,
            )
        if number == 1 and spec.lr_multipliers != [1.0]:
            raise loaded.error(
                (*here, "lr_multipliers"),
                "round 1 searches the learning rate itself; lr_multipliers re-try round 1's best "
                "points at a few multiples of their LR in round 2 and later",
                at_key=True,
            )


def _check_top_k(loaded: Any, rounds: Any, number: int) -> None:
    """Round ``number`` takes its ``top_k`` from the points of the round before: round 1's trials,
    or a later round's own top_k. Asking for more can never be filled (run-round would refuse it
    only after round 1 ran). Only a top_k the file sets: the default (3) must not refuse a small
    round 1 that is all the user runs."""
    before, spec = rounds.get(number - 1), rounds.get(number)
    # a later round trains each of its top_k points at every LR multiplier: each is a point of its own
    multipliers = len(before.lr_multipliers)
    available = before.trial_budget if number == 2 else before.top_k * multipliers
    top_k = spec.top_k
    if top_k <= available or "top_k" not in spec.model_fields_set:
        return
    if number == 2:
        has = f"{available} trials"
    elif multipliers > 1:
        has = f"{available} points (its top_k x its {multipliers} lr_multipliers)"
    else:
        has = f"{available} points (its top_k)"
    raise loaded.error(
        ("rounds", f"round{number}", "top_k"),
        f"round {number} takes the best {top_k} points of round {number - 1}, which has only {has}; "
        f"lower top_k to at most {available} or raise rounds.round{number - 1}."
        f"{'trials' if number == 2 else 'top_k'}",
    )
