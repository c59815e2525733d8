"""The study whose phases deliver the model ``tuner tune`` made from this one.

``tune`` applies round 1's suggestions to a next study file (``digits-mlp`` ->
``digits-mlp-2``, in ``<output>/<study>/tune/``), which has phases and a storage of its own: the
model comes from there, not from the user's own study. ``tuner report`` and ``tuner list`` on the
user's file follow tune's decision log (stored with the first study) to that study, so that the
model a user is shown is the one ``tune`` delivered, with where it lives.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.errors import TunerError

if TYPE_CHECKING:
    from tuner.playbook.decision_log import TuneState
    from tuner.report.delivered import DeliveredModel


@dataclass(frozen=True)
class TunedInto:
    """The last study ``tune`` searched from this one, its file, and the model it delivers."""

    study: str
    study_file: str
    delivered: DeliveredModel | None

    def to_json(self) -> dict[str, Any]:
        return {"study": self.study, "study_file": self.study_file}

    def line(self) -> str:
        return (
            f"{self.study} ({self.study_file}): tune applied round 1's suggestions there, and its "
            "rounds deliver the model below"
        )


def tuned_into(
    study: str, state: TuneState | None, output_dir: Path, storage: str | None
) -> TunedInto | None:
    """The study ``tune`` went on to from ``study`` (its decision log ``state``), or None: tune
    never searched a next study, or that study cannot be read any more (its file was moved)."""
    if state is None or not state.stages or state.stages[-1].study == study:
        return None
    last = state.stages[-1]
    from tuner.orchestrate import resolve_storage_url
    from tuner.orchestrate.stored import open_reader
    from tuner.report import read_study
    from tuner.report.delivered import delivered_model
    from tuner.spec import load_study

    try:
        spec = load_study(Path(last.study_file), last.sets).spec
        url = storage or resolve_storage_url(spec.storage, output_dir, spec.name)
        with open_reader(url) as reader:
            data = read_study(reader, last.study)
            return TunedInto(last.study, last.study_file, delivered_model(data.every_phase()))
    except (TunerError, OSError):
        return None
