"""What ``tune`` asks of a round's report, as a Protocol its caller implements.

The loop decides on reports: round 1's suggestions (a next study file, searched next), the last
round's verdicts (the round after it: longer runs, or more seeds), the model the study delivers.
Reports sit above the playbook (``tuner.report`` reads what the playbook's phases stored), so the
loop cannot build one; it names here the little it reads of them, in its own types, and ``tuner
tune`` passes the report's implementation in (``tuner.report.tune_advice.ReportAdvisor``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tuner.playbook.decision_log import Decision
from tuner.spec import LoadedStudy


class SuggestedChange(Protocol):
    """One change a report suggests to the study file (``tuner.report.findings.Suggestion``):
    ``path`` from ``old`` to ``new``, or ``drop`` one value of a list; ``key`` is ``path`` dotted."""

    @property
    def path(self) -> tuple[str | int, ...]: ...
    @property
    def old(self) -> Any: ...
    @property
    def new(self) -> Any: ...
    @property
    def drop(self) -> Any: ...
    @property
    def key(self) -> str: ...


@dataclass(frozen=True)
class NextStudyFile:
    """What writing a next study file did: ``path`` written (as ``name``, the study being
    ``old_name``) with one line of ``changes`` per suggestion applied, or not (``nothing``: why)."""

    path: Path
    written: bool
    name: str = ""
    old_name: str = ""
    changes: list[str] = field(default_factory=list)
    nothing: str = ""


class Round1Advice(Protocol):
    """Round 1's report: what it suggests, and the next study file that applies some of it
    (read once: the same report writes the file)."""

    @property
    def suggestions(self) -> Sequence[SuggestedChange]: ...

    def write_next(self, folder: Path, kept: Sequence[SuggestedChange]) -> NextStudyFile:
        """Write the next study, ``kept`` applied, into ``folder`` under the next name."""
        ...


@dataclass(frozen=True)
class TransferVerdict:
    """A later round's transfer verdict: ``quality`` (good, within_noise, weak, reversed,
    too_few) and the report's text with its numbers."""

    quality: str
    text: str


@dataclass(frozen=True)
class RoundReading:
    """What the round after a finished round is decided on, read in that round's report (the
    defaults: a round the report has nothing on)."""

    completed_points: int = 0  # the points its completed runs trained: what a next round can take
    transfer: TransferVerdict | None = None
    #: the best-step verdict's text when the round's full-length runs were still improving
    still_improving: str | None = None
    best_step_judged: bool = False  # the report judged its best steps at all
    best_early: bool = False  # ... and found them early (the length too long, as on noisy labels)
    #: ... and the trend's text when the round's validation error was still falling between 50% and
    #: 75% of training beyond its curves' noise, wherever the best steps fell (None too when the
    #: report says the length is too long: best steps early, or worse after an early best)
    falling_late: str | None = None


@dataclass(frozen=True)
class Delivery:
    """The model a study delivers, by the report's one rule (``tuner.report.delivered``):
    ``model`` is the report's own object, which the loop only hands on for the command to show
    (its lines, its JSON); ``decision`` is what the log says of it (None: no model yet)."""

    model: Any
    decision: Decision | None


class Advisor(Protocol):
    """Reads a study's report for ``tune`` (``url``: the study's storage)."""

    def round1_advice(self, url: str, loaded: LoadedStudy) -> Round1Advice: ...

    def read_round(self, url: str, loaded: LoadedStudy, phase: str) -> RoundReading: ...

    def delivered(self, url: str, loaded: LoadedStudy) -> Delivery: ...
