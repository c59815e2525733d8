"""A categorical search-space parameter: values never tried, values that never win, one value
that always wins. Split from ``boundaries`` (numeric ranges): a choice has no edge to move.

Rules: a value no started trial used is named; a value tried by ``DROP_AFTER`` completed trials,
none in the top k, is suggested for dropping; all top trials sharing one value is noted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from tuner.report.findings import Finding, Level, Suggestion
from tuner.report.study_data import PhaseData, SlotState, TrialSlot

DROP_AFTER = 3
MIN_TOP = 3  # the top k of both rules (numeric ranges and choices): max(MIN_TOP, TOP_SHARE)
TOP_SHARE = 0.10
TOP_RULE = f"the top k = max({MIN_TOP}, {TOP_SHARE:.0%} of completed) trials"


@dataclass(frozen=True)
class NeverTried(Finding):
    kind: ClassVar[str] = "categorical_never_tried"
    param: str
    values: list[Any]
    trials: int


@dataclass(frozen=True)
class NeverWon(Finding):
    kind: ClassVar[str] = "categorical_never_won"
    param: str
    value: Any
    tried: int
    top_k: int


@dataclass(frozen=True)
class OneValueWins(Finding):
    kind: ClassVar[str] = "categorical_one_value"
    param: str
    value: Any
    top_k: int


def categorical(
    phase: PhaseData,
    key: str,
    param: Any,
    top: list[TrialSlot],
    findings: list[Finding],
    suggestions: list[Suggestion],
) -> None:
    """The verdicts on one categorical parameter, given the phase's top trials ``top``."""
    from tuner.orchestrate.search_space import to_config_values

    choices = list(param.choices)

    def chosen(slot: TrialSlot) -> str:  # Optuna keeps a list choice as JSON text: decode it
        return repr(to_config_values({key: param}, {key: slot.params[key]})[key])

    started = [s for s in phase.slots if key in s.params and s.state is not SlotState.WAITING]
    tried = {repr(c): 0 for c in choices}
    completed = {repr(c): 0 for c in choices}
    for slot in started:
        tried[chosen(slot)] = tried.get(chosen(slot), 0) + 1
        if slot.state is SlotState.COMPLETE:
            completed[chosen(slot)] = completed.get(chosen(slot), 0) + 1
    never = [c for c in choices if tried[repr(c)] == 0]
    if never:
        findings.append(
            NeverTried(
                param=key,
                values=never,
                trials=len(started),
                level=Level.WARNING,
                rule="a choice no started trial used",
                text=f"{key}: {', '.join(map(repr, never))} never tried in {len(started)} trials, so the "
                "search says nothing about it",
                advice="run more trials (or drop the value if you know it is not worth trying)",
            )
        )
    winners = [to_config_values({key: param}, {key: s.params[key]})[key] for s in top if key in s.params]
    if len(winners) >= MIN_TOP and len(choices) > 1 and len({repr(w) for w in winners}) == 1:
        findings.append(
            OneValueWins(
                param=key,
                value=winners[0],
                top_k=len(top),
                level=Level.INFO,
                rule=f"all of {TOP_RULE} share one value",
                text=f"{key}: all of the top {len(top)} trials use {winners[0]!r}",
                advice=f"consider fixing {key} to {winners[0]!r} and searching something else",
            )
        )
    won = {repr(w) for w in winners}
    for choice in choices:
        count = completed[repr(choice)]
        if repr(choice) in won or count < DROP_AFTER:
            continue
        reason = f"{key} = {choice!r}: {count} completed trials, none in the top {len(top)} ({phase.phase})"
        findings.append(
            NeverWon(
                param=key,
                value=choice,
                tried=count,
                top_k=len(top),
                level=Level.WARNING,
                rule=f"tried by at least {DROP_AFTER} completed trials, none in {TOP_RULE}",
                text=f"{key}: {choice!r} never made the top {len(top)} in {count} completed trials",
                advice=f"drop {choice!r} from {key}'s choices",
            )
        )
        suggestions.append(Suggestion(("search_space", key, "choices"), choices, None, reason, drop=choice))
