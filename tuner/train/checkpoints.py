"""The N best checkpoints by the objective, plus the latest one for resuming.

"Best" is the tracker's rule (``objective.eval_order``): ties on the objective go to the lower
loss, then to the earlier step, so the best file is the tracker's best step and ``index.json``
lists the kept files in that order.

Every file is written atomically; a best checkpoint is a hard link to the ``latest.pt`` it was
(no second serialisation). Order on disk: write the new file, *then* delete the evicted one,
so a kill at any moment leaves at least the previous state. NaN is never among the best.

The state is serialised on the training thread (a consistent snapshot: training goes on
changing the weights) and written by a background thread while training continues, as
Lightning's ``AsyncCheckpointIO`` does: at most one write is in flight, ``saved_step`` says
what is on disk, and the run waits for the last write before it ends.

Every checkpoint's sha256 goes into ``checksums.json`` (``checkpoint_integrity``), and a resume
starts from the newest checkpoint that verifies (``resume_point``).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import torch

from tuner._atomic import atomic_write, atomic_write_json
from tuner.train.checkpoint_integrity import Resumable, newest_intact
from tuner.train.checksums import Manifest, sha256_of
from tuner.train.events import Callback
from tuner.train.objective import ObjectiveTracker, ScoredEval, better_eval, eval_order

LATEST = "latest.pt"


def best_name(step: int) -> str:
    return f"best-step{step:08d}.pt"


def step_of(name: str) -> int:
    """``best-step00000400.pt`` -> 400 (any number of digits)."""
    return int(name[len("best-step") : -len(".pt")])


def load_checkpoint(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load with ``weights_only=True``: a checkpoint file can never run code on load."""
    return torch.load(path, map_location=map_location, weights_only=True)


def resume_point(folder: Path) -> Resumable:
    """The newest checkpoint in ``folder`` that verifies: ``latest.pt``, else the best ones by
    step, newest first; what was skipped and why. Raises ``CheckpointsDamaged`` if none loads."""
    best = sorted(Path(folder).glob("best-step*.pt"), key=lambda p: step_of(p.name), reverse=True)
    return newest_intact(folder, LATEST, best)


class CheckpointCallback(Callback):
    """On every ``checkpoint`` event: write ``latest.pt``; keep it if it is among the best N.

    Side effects: writes ``folder/latest.pt``, ``folder/best-stepXXXXXXXX.pt``, ``folder/index.json``
    from a background thread; ``saved_step`` is the step of the last checkpoint fully on disk
    (what a supervisor may record as resumable), ``flush()`` waits for the write in flight.
    ``durable`` adds an fsync, so even a power cut cannot lose a checkpoint; off by default,
    as in Lightning and nanoGPT: the rename already survives any process death (preemption).
    """

    order = 10

    def __init__(
        self, folder: Path, tracker: ObjectiveTracker, keep_best: int, *, durable: bool = False
    ) -> None:
        self.folder, self.tracker, self.keep_best, self.durable = Path(folder), tracker, keep_best, durable
        self.best: dict[str, float] = {}  # file name -> objective value
        self.losses: dict[str, float | None] = {}  # file name -> its tie-breaking loss
        self._latest_step: int | None = None
        self.saved_step: int | None = None
        self._writer: threading.Thread | None = None
        self._error: BaseException | None = None
        self.manifest = Manifest(self.folder, durable=durable)

    def _scored(self, name: str) -> ScoredEval:
        return ScoredEval(step_of(name), self.best[name], self.losses.get(name))

    def _ranked(self) -> list[str]:
        """The kept files, best first, by the tracker's rule."""
        return sorted(self.best, key=lambda name: eval_order(self._scored(name), self.tracker.direction))

    def _keeps(self, scored: ScoredEval) -> bool:
        """Whether the eval ``scored`` joins the best N: a free place, or it beats the worst kept."""
        if self.keep_best <= 0 or best_name(scored.step) in self.best:
            return False
        worst = self._scored(self._ranked()[-1]) if len(self.best) >= self.keep_best else None
        return better_eval(scored, worst, self.tracker.direction)

    def on_checkpoint(self, loop: Any) -> None:
        value = self.tracker.last_value if loop.last_eval_step == loop.step else None
        evicted: str | None = None
        name = best_name(loop.step)
        keep = value is not None and self._keeps(ScoredEval(loop.step, value, self.tracker.last_loss))
        if keep:
            if len(self.best) >= self.keep_best:
                evicted = self._ranked()[-1]
                del self.best[evicted]
                self.losses.pop(evicted, None)
            self.best[name] = float(value)  # type: ignore[arg-type]
            self.losses[name] = self.tracker.last_loss
        self._latest_step = loop.step  # saved inside latest.pt, see load_state_dict
        snapshot = io.BytesIO()
        torch.save(loop.state_dict(), snapshot)
        self.flush()  # the previous write first: files land in order, one snapshot in memory at most
        self._writer = threading.Thread(
            target=self._write,
            args=(snapshot, loop.step, name if keep else None, evicted, self._index(loop.step)),
            name="tuner-checkpoint-writer",
            daemon=True,
        )
        self._writer.start()

    def _write(
        self, snapshot: io.BytesIO, step: int, best: str | None, evicted: str | None, index: dict[str, Any]
    ) -> None:
        try:
            latest = self.folder / LATEST
            digest = sha256_of(snapshot.getbuffer())
            # the old digest stays listed until the rename is done: a kill between them is no damage
            self.manifest.set(LATEST, digest, *self.manifest.digests.get(LATEST, [])[:1])
            if best:
                self.manifest.set(best, digest)
            self.folder.mkdir(parents=True, exist_ok=True)
            self.manifest.save()
            atomic_write(latest, lambda handle: handle.write(snapshot.getbuffer()), durable=self.durable)
            if best:
                _link_or_copy(latest, self.folder / best)
            # not fsynced: resume reads the best set from latest.pt, not from here; the digests'
            # second copy, which a damaged or missing checksums.json falls back to
            index = {**index, "digests": {k: list(v) for k, v in self.manifest.digests.items()}}
            atomic_write_json(self.folder / "index.json", index, durable=False)
            if evicted:
                (self.folder / evicted).unlink(missing_ok=True)
            self.manifest.set(LATEST, digest)
            self.manifest.drop([evicted] if evicted else [])
            self.manifest.save(durable=False)  # lost in a power cut: both digests stay listed, no harm
            self.saved_step = step
        except BaseException as error:  # re-raised on the training thread by flush()
            self._error = error

    def flush(self) -> None:
        """Wait for the checkpoint being written; raise its error (a full disk) here."""
        if self._writer is not None:
            self._writer.join()
            self._writer = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def on_fit_end(self, loop: Any) -> None:
        self.flush()

    def on_exception(self, loop: Any) -> None:
        """The run is dying of another error: let the last checkpoint land, keep that error."""
        with contextlib.suppress(Exception):
            self.flush()

    def _index(self, step: int) -> dict[str, Any]:
        return {
            "latest": {"file": LATEST, "step": step},
            "best": [
                {"file": f, "value": self.best[f], "loss": self.losses.get(f), "step": step_of(f)}
                for f in self._ranked()
            ],
            "metric": self.tracker.metric,
            "direction": self.tracker.direction,
        }

    def state_dict(self) -> dict[str, Any]:
        return {"best": dict(self.best), "losses": dict(self.losses), "latest_step": self._latest_step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the best set and repair what a kill mid-checkpoint can leave on disk. A state
        saved before ties were broken by the loss has no ``losses``: unknown, as the tracker's."""
        self._latest_step = self.saved_step = state.get("latest_step")
        self.best, self.losses = {}, {}
        losses = state.get("losses") or {}
        for name, value in state["best"].items():
            path = self.folder / name
            if not path.exists() and step_of(name) == self._latest_step:
                _link_or_copy(self.folder / LATEST, path)  # killed between the save and the link
            if path.exists():
                self.best[name], self.losses[name] = value, losses.get(name)
        for stray in self.folder.glob("best-step*.pt"):
            if stray.name not in self.best:  # killed before an evicted file was deleted
                stray.unlink()
                self.manifest.drop([stray.name])
        for tmp in self.folder.glob(".*.tmp"):
            tmp.unlink()


def _link_or_copy(source: Path, target: Path) -> None:
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:  # file systems without hard links
        shutil.copyfile(source, tmp)
    os.replace(tmp, target)
