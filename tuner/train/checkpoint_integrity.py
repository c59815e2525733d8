"""Checksums of the checkpoints, and the resume that trusts only a checkpoint that verifies.

A truncated or scribbled-on ``latest.pt`` must never stop a run for good nor load silently (random
bytes inside a tensor load as garbage weights: the run "diverges" at the next step). Each
checkpoint's sha256 is recorded in ``checksums.json`` beside it when it is written; on resume
``latest.pt`` is tried first, then the ``best-step…pt`` files, newest first, and each one that
does not verify, does not load, or is refused (a pickle that would run code) is skipped with one
line naming it and why.

Crash safety of the manifest: before ``latest.pt`` is replaced, the manifest lists both the old
and the new digest, and only after the rename the old one alone is dropped. A kill at any moment
leaves a ``latest.pt`` whose digest is listed. ``index.json`` keeps a copy of the digests, which
a truncated or deleted ``checksums.json`` falls back to; a checkpoint of a run that recorded
checksums but whose digest neither file holds is never loaded unverified. Only a run folder of
an older tuner (neither file records any) is: ``weights_only`` still refuses code there.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tuner.errors import UsageError
from tuner.output import shown_path
from tuner.train.checksums import file_sha256, recorded_digests


class CheckpointsDamaged(UsageError):
    """Checkpoints are on disk but none loads: the run cannot continue (exit 2, start --fresh)."""


@dataclass(frozen=True)
class Skipped:
    """A checkpoint passed over on resume, and why (one line for the user)."""

    name: str
    reason: str


@dataclass
class Resumable:
    """The checkpoint a run resumes from (``state`` None: there is none yet), and what was skipped."""

    path: Path | None
    state: dict[str, Any] | None
    skipped: list[Skipped] = field(default_factory=list)

    def notes(self) -> list[str]:
        """One line per skipped file, naming the one used instead."""
        if self.path is None or self.state is None:
            return []
        instead = f"resuming from {self.path.name} (step {self.state['step']})"
        folder = self.path.parent
        return [f"skipped {shown_path(folder / s.name)}: {s.reason}; {instead}" for s in self.skipped]


def _why_not_loaded(error: Exception) -> str:
    """torch's own words would advise ``weights_only=False``: never show that advice."""
    if isinstance(error, pickle.UnpicklingError):
        return "refused: it holds objects that would run code when loaded (not a tuner checkpoint)"
    if isinstance(error, EOFError):
        return "damaged: the file ends early (truncated)"
    first = (str(error).strip().splitlines() or [type(error).__name__])[0]
    first = first.split(". This is an internal miniz error")[0].split("Weights only load failed")[0]
    return f"damaged: it does not load ({first.strip() or type(error).__name__})"


def load_verified(path: Path, expected: list[str] | None) -> dict[str, Any]:
    """Load one checkpoint (``weights_only``) if its digest is among ``expected`` (None: unknown).

    Raises ``ValueError`` with the reason a user reads when it must be skipped."""
    if expected is not None and file_sha256(path) not in expected:
        raise ValueError("damaged: its sha256 differs from the one recorded when it was written")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # any failure to load is this file's damage, never a bug of ours
        raise ValueError(_why_not_loaded(error)) from None
    if not isinstance(state, dict) or "step" not in state:
        raise ValueError("damaged: it is not a training checkpoint (no step in it)")
    return state


def newest_intact(folder: Path, latest: str, best_files: list[Path]) -> Resumable:
    """``latest`` if it verifies, else the newest of ``best_files`` that does (see module doc).

    Raises ``CheckpointsDamaged`` when there are checkpoints and none of them loads.
    """
    folder = Path(folder)
    candidates = [folder / latest] if (folder / latest).exists() else []
    candidates += best_files
    if not candidates:
        return Resumable(None, None)
    skipped = []
    for path in candidates:
        expected, recorded = recorded_digests(folder, path.name)
        if expected is None and recorded:
            # checksums were recorded for this run, and none is left for this file: never load it
            # unverified (random bytes in a tensor load as weights that "diverge" at the next step)
            why = "unverified: checksums.json (or its copy in index.json) records no checksum for it"
            skipped.append(Skipped(path.name, why))
            continue
        try:
            state = load_verified(path, expected)
        except (ValueError, OSError) as why:
            skipped.append(Skipped(path.name, str(why)))
            continue
        return Resumable(path, state, skipped)
    reasons = "; ".join(f"{s.name}: {s.reason}" for s in skipped)
    raise CheckpointsDamaged(
        f"no checkpoint in {shown_path(folder)} can be resumed ({reasons}); start the run over with --fresh"
    )
