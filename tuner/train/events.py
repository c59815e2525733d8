"""The loop's events, the callback base class and the named ways to stop.

Events are one enumeration (a typo is an error, and this list documents the loop), in order:
``fit_start`` -> (``train_step_start`` -> ``train_step_end``)* with, every ``eval_every`` steps,
``eval_start`` -> ``eval_end`` -> ``checkpoint``; then ``fit_end``. ``exception`` fires when
the loop dies of an unexpected error (before ``fit_end``).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass


class Event(str, enum.Enum):
    FIT_START = "fit_start"
    TRAIN_STEP_START = "train_step_start"
    TRAIN_STEP_END = "train_step_end"
    EVAL_START = "eval_start"
    EVAL_END = "eval_end"
    CHECKPOINT = "checkpoint"
    EXCEPTION = "exception"
    FIT_END = "fit_end"


class StopReason(str, enum.Enum):
    COMPLETED = "completed"
    DIVERGED = "diverged"
    INTERRUPTED = "interrupted"
    STOPPED = "stopped"  # a callback asked to stop (e.g. a pruner)
    # a callback stopped the run because its goal was met (e.g. FitCriterion): a normal end, the
    # run keeps its best value and is never resumed
    TARGET_REACHED = "target_reached"


#: Ends after which a run is finished: resuming it trains no further step.
FINISHED = (StopReason.COMPLETED, StopReason.TARGET_REACHED)


class StopTraining(Exception):
    """Raised by a callback (or the loop) to stop now; the loop records ``reason``."""

    def __init__(self, reason: StopReason | str = StopReason.STOPPED, message: str = "") -> None:
        self.reason = StopReason(reason) if reason in StopReason._value2member_map_ else reason
        self.message = message
        super().__init__(message or str(reason))


class Callback:
    """Base for callbacks: define ``on_<event>(self, loop)`` for the events you care about.

    Callbacks read the loop's state (``loop.step``, ``loop.model``, ``loop.last_loss``,
    ``loop.last_eval``) and change it only explicitly (``loop.request_stop(reason)`` or raising
    ``StopTraining``). State that must survive a resume goes through ``state_dict``.
    """

    #: Lower runs first; loggers run after the callbacks whose results they log.
    order: int = 0

    @property
    def state_key(self) -> str:
        return type(self).__name__

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
