"""How ``tuner tune`` shows what the playbook's ``tune`` says (``tuner.playbook.tune.messages``):
each message a line of its own, ``tune         `` first, between the lines the phases print; on
stderr with ``--json`` (stdout then holds the JSON alone, printed at the end)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import typer
from rich.markup import escape

from tuner._format import duration
from tuner.cli._console import err, out
from tuner.playbook.decision_log import SCHEMA
from tuner.playbook.tune.messages import (
    BudgetStanding,
    Decided,
    Finished,
    Note,
    Projected,
    Spent,
    StageSkipped,
    TuneMessage,
)

LABEL = "tune         "


@dataclass
class TuneView:
    as_json: bool

    @property
    def console(self) -> Any:
        return err if self.as_json else out

    def say(self, text: str) -> None:
        self.console.print(escape(f"{LABEL}{text}"), highlight=False)

    def show(self, message: TuneMessage) -> None:
        """Render one message (``tune``'s ``emit``)."""
        if isinstance(message, Note):
            self.say(message.text)
        elif isinstance(message, Decided):
            self.say(message.decision.line)
        elif isinstance(message, StageSkipped):
            self.say(f"{message.stage.key}: done in an earlier run, not run again")
        elif isinstance(message, BudgetStanding):
            self.say(_standing(message))
        elif isinstance(message, Projected):
            self._projected(message)
        elif isinstance(message, Spent):
            phases = ", ".join(f"{p.stage} {p.steps_ran:,}" for p in message.plan.phases)
            self.say(
                f"spent {message.plan.steps_ran:,} of {message.budget_steps:,} training steps ({phases})"
            )
        elif isinstance(message, Finished):
            self._finished(message)
        else:  # a message added to the playbook and not here: a bug in tuner, not a silent line
            raise TypeError(f"tuner tune cannot show {message!r}")

    def _projected(self, message: Projected) -> None:
        if self.as_json:
            typer.echo(json.dumps({"schema": SCHEMA, "plan": message.plan.to_json()}, indent=2))
            return
        self.say(f"plan for {message.study} within {message.budget_steps:,} training steps (nothing run)")
        for line in message.plan.lines():
            self.console.print(line, markup=False, highlight=False)

    def _finished(self, message: Finished) -> None:
        """The delivered model (checkpoint, reproduce line, spread over seeds); with ``--json``,
        the decision log, the plan and the model on stdout."""
        from tuner.report.terminal import delivered_lines

        model = message.model
        console = self.console
        width = console.width if console.is_terminal else 100
        for line in delivered_lines(model, width, reproduce=True):
            console.print(line, soft_wrap=True)
        if self.as_json:
            payload = {
                "schema": SCHEMA,
                **message.state.to_json(),
                "plan": message.plan.to_json(),
                "delivered_model": model.to_json() if model is not None else None,
            }
            typer.echo(json.dumps(payload, indent=2, allow_nan=False, default=str))


def _standing(message: BudgetStanding) -> str:
    """``budget: 2,760 of 8,000 steps spent (34%), at most about 1m 20s left at this pace``."""
    share = message.spent / max(1, message.budget_steps)
    return (
        f"budget: {message.spent:,} of {message.budget_steps:,} steps spent ({share:.0%}), "
        f"at most about {duration(message.seconds_left)} left at this pace"
    )
