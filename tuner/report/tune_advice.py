"""The report's side of ``tuner tune``: what the tune loop reads of a report, in the playbook's
own types (``tuner.playbook.tune.advisor``).

The loop is procedure, so it sits in the playbook, below the report, and cannot build one; ``tuner
tune`` passes ``ReportAdvisor()`` in. Each reading builds the study's report as ``tuner report``
does (read only), so that what tune decides on is what the user reads there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from tuner.playbook.decision_log import Decision
from tuner.playbook.tune.advisor import (
    Delivery,
    NextStudyFile,
    RoundReading,
    SuggestedChange,
    TransferVerdict,
)

if TYPE_CHECKING:
    from tuner.report.build import PhaseReport, StudyReport
    from tuner.report.delivered import DeliveredModel
    from tuner.report.findings import Suggestion
    from tuner.spec import LoadedStudy


def study_report(url: str, name: str) -> StudyReport:
    """The study's report as ``tuner report`` builds it (read only)."""
    from tuner.orchestrate.stored import open_reader
    from tuner.report import build_report, read_study

    with open_reader(url) as reader:
        return build_report(read_study(reader, name))


@dataclass(frozen=True)
class Round1Report:
    """Round 1's report, read once: its suggestions, and the next study file applying some."""

    loaded: LoadedStudy
    report: StudyReport

    @property
    def suggestions(self) -> Sequence[Suggestion]:
        return self.report.suggestions

    def write_next(self, folder: Path, kept: Sequence[SuggestedChange]) -> NextStudyFile:
        """``--write-next``'s file, under the next name (``toy`` -> ``toy-2``), in ``folder``."""
        from tuner.report.next_study import next_name, write_next_study, written_by_us

        path = self.loaded.path
        destination = folder / f"{next_name(self.loaded.spec.name, generated=written_by_us(path))}.yaml"
        chosen = cast("Sequence[Suggestion]", kept)  # some of ``suggestions``, handed back as they were
        written = write_next_study(path, self.report, destination, suggestions=chosen)
        return NextStudyFile(
            destination, written.written, written.name, written.old_name, written.changes, written.nothing
        )


class ReportAdvisor:
    """``tuner.playbook.tune.advisor.Advisor`` by the report's diagnostics."""

    def round1_advice(self, url: str, loaded: LoadedStudy) -> Round1Report:
        return Round1Report(loaded, study_report(url, loaded.spec.name))

    def read_round(self, url: str, loaded: LoadedStudy, phase: str) -> RoundReading:
        report = study_report(url, loaded.spec.name)
        found = next((p for p in report.phases if p.data.phase == phase), None)
        return RoundReading() if found is None else round_reading(found)

    def delivered(self, url: str, loaded: LoadedStudy) -> Delivery:
        from tuner.orchestrate.stored import open_reader
        from tuner.report import read_study
        from tuner.report.delivered import delivered_model

        with open_reader(url) as reader:
            model = delivered_model(read_study(reader, loaded.spec.name).every_phase())
        return Delivery(model, None if model is None else delivered_decision(model, loaded.spec.name))


def round_reading(report: PhaseReport) -> RoundReading:
    """What the round after ``report``'s round is decided on: its completed points (each LR
    multiplier of a point a point of its own, as ``later_rounds.top_points`` counts them), its
    transfer verdict, its best-step verdicts, and whether its curves were still falling late."""
    from tuner.playbook.ranked_points import points_of
    from tuner.report.best_step import still_improving

    late = still_improving(report.best_step)
    falling = report.best_step.falling_late if report.best_step is not None else None
    return RoundReading(
        completed_points=len(points_of([s.final for s in report.data.completed], report.data.plan)),
        transfer=_transfer(report),
        # the best-step verdict on full-length runs: the playbook's "train longer"
        still_improving=late.text if late is not None and not late.short_round else None,
        best_step_judged=report.best_step is not None,
        best_early=report.best_step is not None
        and any(f.kind == "best_step_early" for f in report.best_step.findings),
        falling_late=None if falling is None else falling.describe(),
    )


def _transfer(report: PhaseReport) -> TransferVerdict | None:
    if report.transfer is None:
        return None
    verdict = next((f for f in report.transfer.findings if f.kind == "rank_correlation"), None)
    if verdict is None:
        return None
    return TransferVerdict(str(getattr(verdict, "quality", "")), verdict.text)


def delivered_decision(model: DeliveredModel, study: str) -> Decision:
    """The decision log's line on the model: ``delivered``, or ``candidate`` before a full-length
    round delivered one."""
    run = model.run
    kind = "delivered" if model.delivered else "candidate"
    text = f"{kind}: {run.phase} trial {run.trial}, {run.metric} = {run.value:.6g}; {model.spread.describe()}"
    numbers: dict[str, Any] = {
        "checkpoint": run.checkpoint,
        "reproduce": run.reproduce,
        "value": run.value,
        "best_step": run.best_step,
        "seeds": model.spread.to_json(),
    }
    return Decision(kind, f"{study}/{run.phase}", text, numbers)
