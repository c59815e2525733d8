"""The N best checkpoints by the objective, plus the latest one for resuming.

Every file is written atomically; a best checkpoint is a hard link to the ``latest.pt`` it was
(no second serialisation). Order on disk: write the new file, *then* delete the evicted one,
so a kill at any moment leaves at least the previous state. NaN is never among the best.
"""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from tuner._atomic import atomic_write, atomic_write_json
from tuner.train.events import Callback
from tuner.train.objective import ObjectiveTracker, is_better

LATEST = "latest.pt"


def best_name(step: int) -> str:
    return f"best-step{step:08d}.pt"


def step_of(name: str) -> int:
    """``best-step00000400.pt`` -> 400 (any number of digits)."""
    return int(name[len("best-step") : -len(".pt")])


def save_checkpoint(path: Path, state: dict[str, Any], *, durable: bool = False) -> None:
    """Temp file + rename: a killed process (preemption, OOM, kill -9) never leaves half a file.

    ``durable`` adds an fsync, so even a power cut cannot; off by default, as in Lightning and
    nanoGPT: it costs about a millisecond per checkpoint, and preemption is a process death.
    """
    atomic_write(path, lambda handle: torch.save(state, handle), durable=durable)


def load_checkpoint(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load with ``weights_only=True``: a checkpoint file can never run code on load."""
    return torch.load(path, map_location=map_location, weights_only=True)


class CheckpointCallback(Callback):
    """On every ``checkpoint`` event: write ``latest.pt``; keep it if it is among the best N.

    Side effects: writes ``folder/latest.pt``, ``folder/best-stepXXXXXXXX.pt``, ``folder/index.json``.
    """

    order = 10

    def __init__(
        self, folder: Path, tracker: ObjectiveTracker, keep_best: int, *, durable: bool = False
    ) -> None:
        self.folder, self.tracker, self.keep_best, self.durable = Path(folder), tracker, keep_best, durable
        self.best: dict[str, float] = {}  # file name -> objective value
        self._latest_step: int | None = None

    def _worst(self) -> str:
        # The worst is the one every other beats: max for minimize, min for maximize.
        pick = max if self.tracker.direction == "minimize" else min
        return pick(self.best, key=lambda name: (self.best[name], name))

    def on_checkpoint(self, loop: Any) -> None:
        value = self.tracker.last_value if loop.last_eval_step == loop.step else None
        evicted: str | None = None
        name = best_name(loop.step)
        keep = (
            value is not None
            and math.isfinite(value)
            and self.keep_best > 0
            and name not in self.best
            and (
                len(self.best) < self.keep_best
                or is_better(value, self.best[self._worst()], self.tracker.direction)
            )
        )
        if keep:
            if len(self.best) >= self.keep_best:
                evicted = self._worst()
                del self.best[evicted]
            self.best[name] = float(value)  # type: ignore[arg-type]
        self._latest_step = loop.step  # saved inside latest.pt, see load_state_dict
        latest = self.folder / LATEST
        save_checkpoint(latest, loop.state_dict(), durable=self.durable)
        if keep:
            _link_or_copy(latest, self.folder / name)
        self._write_index(loop)
        if evicted:
            (self.folder / evicted).unlink(missing_ok=True)

    def _write_index(self, loop: Any) -> None:
        ranked = sorted(
            self.best.items(), key=lambda item: item[1], reverse=self.tracker.direction == "maximize"
        )
        atomic_write_json(  # not fsynced: resume reads the best set from latest.pt, not from here
            self.folder / "index.json",
            {
                "latest": {"file": LATEST, "step": loop.step},
                "best": [{"file": f, "value": v, "step": step_of(f)} for f, v in ranked],
                "metric": self.tracker.metric,
                "direction": self.tracker.direction,
            },
            durable=False,
        )

    def state_dict(self) -> dict[str, Any]:
        return {"best": dict(self.best), "latest_step": self._latest_step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the best set and repair what a kill mid-checkpoint can leave on disk."""
        self._latest_step = state.get("latest_step")
        self.best = {}
        for name, value in state["best"].items():
            path = self.folder / name
            if not path.exists() and step_of(name) == self._latest_step:
                _link_or_copy(self.folder / LATEST, path)  # killed between the save and the link
            if path.exists():
                self.best[name] = value
        for stray in self.folder.glob("best-step*.pt"):
            if stray.name not in self.best:  # killed before an evicted file was deleted
                stray.unlink()
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
