"""Between rounds: the report's suggestions on round 1, applied the way ``--write-next`` applies
them (a range moved off an edge, ``max_train_steps`` from the best steps, ``eval_every``, a
categorical value dropped), to a next study file that ``tune`` then searches with its own round 1.

A changed study cannot continue the old study's phases (workers refuse a changed file), so the
next study has its own name and phases (``digits-mlp`` -> ``digits-mlp-2``), its file written in
``<output>/<study>/tune/``. It is searched only when what is left of the budget holds a round 1
of at least ``MIN_SEARCH_TRIALS`` trials besides the later rounds; else the log says why not and
round 2 runs on the first study's round 1. Decided once: a re-run reads the decision back.

The report is read and the file written by the ``Advisor`` the command passed in (the report
sits above the playbook); which suggestions apply, and whether the next study fits, is decided
here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.errors import UsageError
from tuner.playbook.budget import MIN_SEARCH_TRIALS, shape_rounds
from tuner.playbook.decision_log import Decision
from tuner.playbook.phase_names import round_phase

if TYPE_CHECKING:
    from tuner.playbook.tune.advisor import SuggestedChange
    from tuner.playbook.tune.context import TuneContext
    from tuner.spec import LoadedStudy

KINDS = ("suggestions_applied", "suggestions_none", "suggestions_not_applied")


def next_study(context: TuneContext, loaded: LoadedStudy) -> LoadedStudy | None:
    """The next study to search (its file written), or None: round 2 follows on ``loaded``."""
    from tuner.output import phase_dir
    from tuner.playbook.tune.studies import base_sets
    from tuner.spec import load_study

    stage_key = f"{loaded.spec.name}/{round_phase(1)}"
    earlier = next((d for d in context.state.decisions if d.stage == stage_key and d.kind in KINDS), None)
    if earlier is not None:
        if earlier.kind != "suggestions_applied":
            return None
        return load_study(Path(earlier.numbers["file"]), base_sets(context, home=False))
    assert context.advisor is not None, "a projection reads no report"
    advice = context.advisor.round1_advice(context.url_of(loaded), loaded)
    suggestions = list(advice.suggestions)
    switches = context.request.switches
    searches = sum(1 for s in context.state.stages if s.phase == round_phase(1))
    listed = _listed(suggestions)
    judged = [(s, switches.applies(s.path)) for s in suggestions]  # why not, or None: applied
    held = [(s, why) for s, why in judged if why is not None]
    kept = [s for s, why in judged if why is None]
    if not suggestions:
        context.decide(
            Decision(
                "suggestions_none",
                stage_key,
                "round 1's report suggests no change to the study: the later rounds next",
            )
        )
        return None
    why_not = ""
    if not kept:
        why_not = ", ".join(dict.fromkeys(why for _, why in held))
    elif searches >= switches.max_searches:
        why_not = f"--max-searches {switches.max_searches} reached"
    compact = compact_changes(suggestions, loaded)
    if why_not:
        return _not_applied(context, stage_key, listed, compact, why_not)
    written = advice.write_next(phase_dir(context.request.output_dir, context.home.spec.name, "tune"), kept)
    if not written.written:
        return _not_applied(context, stage_key, listed, compact, written.nothing)
    destination = written.path
    following = load_study(destination, base_sets(context, home=False))
    try:
        _check_fits(context, following)
    except UsageError as error:
        destination.unlink(missing_ok=True)
        return _not_applied(context, stage_key, listed, compact, f"no room for another search: {error}")
    text = (
        f"round 1's report suggests {_listed(kept)}: applied in {destination} "
        f"({written.old_name} -> {written.name}), which round 1 searches next"
    )
    if held:
        left_out = ", ".join(dict.fromkeys(why for _, why in held))
        text += f"; it also suggests {_listed([s for s, _ in held])}: not applied ({left_out})"
    numbers = {
        "file": str(destination),
        "study": written.name,
        "changes": written.changes,
        "paths": [list(s.path) for s in kept],  # what tune's own --set values leave to the file
    }
    if held:
        numbers["not_applied"] = [{"key": s.key, "why": why} for s, why in held]
    short = f"round 1's report suggests new {_changed(kept)}: searching {written.name} next"
    context.decide(Decision("suggestions_applied", stage_key, text, numbers, short))
    return following


def _changed(suggestions: Sequence[SuggestedChange]) -> str:
    """``optimizer.lr's range, max_train_steps``: what the suggestions change, by name only."""
    names = []
    for suggestion in suggestions:
        path = suggestion.path
        if path[0] == "search_space" and len(path) > 1:
            names.append(f"{path[1]}'s {'values' if suggestion.drop is not None else 'range'}")
        else:
            names.append(suggestion.key.removeprefix("training."))
    return ", ".join(dict.fromkeys(names))


def _listed(suggestions: Sequence[SuggestedChange]) -> str:
    return "; ".join(
        f"{s.key} {s.old} -> {s.new}" if s.drop is None else f"{s.key} drop {s.drop}" for s in suggestions
    )


def compact_changes(suggestions: Sequence[SuggestedChange], loaded: LoadedStudy) -> list[str]:
    """Each change in a few characters, a range's two ends as one: ``optimizer.lr range
    1e-4..0.03 -> 3e-4..0.1``, ``max_train_steps 200 -> 400``, ``activation drop 'tanh'``. An end
    the report leaves is the study file's."""
    changes: dict[str, str] = {}
    ends: dict[str, dict[Any, tuple[Any, Any]]] = {}
    for suggestion in suggestions:
        path = suggestion.path
        if path[0] == "search_space" and len(path) == 3 and path[2] in ("low", "high"):
            ends.setdefault(str(path[1]), {})[path[2]] = (suggestion.old, suggestion.new)
            changes[f"range {path[1]}"] = ""  # in the order of the suggestions; written below
        elif suggestion.drop is not None:
            changes[suggestion.key] = f"{path[1]} drop {suggestion.drop!r}"
        else:
            key = suggestion.key.removeprefix("training.")
            changes[suggestion.key] = f"{key} {_number(suggestion.old)} -> {_number(suggestion.new)}"
    for name, moved in ends.items():
        param = loaded.spec.search_space.get(name)
        old, new = [], []
        for end in ("low", "high"):
            kept = getattr(param, end, "?")
            old.append(_number(moved[end][0] if end in moved else kept))
            new.append(_number(moved[end][1] if end in moved else kept))
        changes[f"range {name}"] = f"{name} range {'..'.join(old)} -> {'..'.join(new)}"
    return list(changes.values())


def _number(value: Any) -> str:
    """``1e-4``, ``0.03``, ``200``: a value as short as it reads."""
    if isinstance(value, bool) or not isinstance(value, float):
        return str(value)
    if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e5):
        mantissa, exponent = f"{value:.2e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    return f"{value:.4g}"


def _not_applied(context: TuneContext, stage_key: str, listed: str, compact: list[str], why: str) -> None:
    context.decide(
        Decision(
            "suggestions_not_applied",
            stage_key,
            f"round 1's report suggests {listed}; not applied ({why}): the later rounds next",
            {"why": why, "suggested": compact},
            f"round 1's report suggests {'; '.join(compact)}: not applied ({why}); the later rounds next",
        )
    )
    return None


def _check_fits(context: TuneContext, following: LoadedStudy) -> None:
    """A round 1 of at least ``MIN_SEARCH_TRIALS`` trials and the later rounds fit what is left."""
    from tuner.playbook.tune.studies import production
    from tuner.playbook.tune_plan import extra_round_share, later_rounds_of, round1_length

    length = production(context, following)
    if length is None:
        raise UsageError("the next study's max_train_steps is unknown")
    first = round1_length(following, length)
    shape_rounds(
        context.left(),
        first,
        later_rounds_of(following, length, first),
        keep_reserve=False,
        min_trials=MIN_SEARCH_TRIALS,
        budget=context.budget_steps,
        extra_round=extra_round_share(context.budget_steps) if context.request.switches.extra_round else 0,
    )
