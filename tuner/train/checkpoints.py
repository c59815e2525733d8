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


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    atomic_write(path, lambda handle: torch.save(state, handle))


def load_checkpoint(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load with ``weights_only=True``: a checkpoint file can never run code on load."""
    return torch.load(path, map_location=map_location, weights_only=True)


class CheckpointCallback(Callback):
    """On every ``checkpoint`` event: write ``latest.pt``; keep it if it is among the best N.

    Side effects: writes ``folder/latest.pt``, ``folder/best-stepXXXXXXXX.pt``, ``folder/index.json``.
    """

    order = 10

    def __init__(self, folder: Path, tracker: ObjectiveTracker, keep_best: int) -> None:
        self.folder, self.tracker, self.keep_best = Path(folder), tracker, keep_best
        self.best: dict[str, float] = {}  # file name -> objective value

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
        latest = self.folder / LATEST
        save_checkpoint(latest, loop.state_dict())
        if keep:
            _link_or_copy(latest, self.folder / name)
        self._write_index(loop)
        if evicted:
            (self.folder / evicted).unlink(missing_ok=True)

    def _write_index(self, loop: Any) -> None:
        ranked = sorted(
            self.best.items(), key=lambda item: item[1], reverse=self.tracker.direction == "maximize"
        )
        atomic_write_json(
            self.folder / "index.json",
            {
                "latest": {"file": LATEST, "step": loop.step},
                "best": [{"file": f, "value": v, "step": int(f[9:17])} for f, v in ranked],
                "metric": self.tracker.metric,
                "direction": self.tracker.direction,
            },
        )

    def state_dict(self) -> dict[str, Any]:
        return {"best": dict(self.best)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # A kill between saving latest.pt and linking its best copy leaves a name without a file.
        self.best = {name: value for name, value in state["best"].items() if (self.folder / name).exists()}


def _link_or_copy(source: Path, target: Path) -> None:
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:  # file systems without hard links
        shutil.copyfile(source, tmp)
    os.replace(tmp, target)
