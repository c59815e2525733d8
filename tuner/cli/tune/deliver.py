"""The end of ``tuner tune``: the model the study delivers, by the one rule of
``tuner.report.delivered`` (the same as ``tuner report`` and ``tuner list``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tuner.playbook.decision_log import Decision

if TYPE_CHECKING:
    from tuner.cli.tune.context import TuneContext
    from tuner.report.delivered import DeliveredModel
    from tuner.spec import LoadedStudy


def delivered_of(context: TuneContext, loaded: LoadedStudy) -> DeliveredModel | None:
    from tuner.orchestrate.stored import open_reader
    from tuner.report import read_study
    from tuner.report.delivered import delivered_model

    with open_reader(context.url_of(loaded)) as reader:
        data = read_study(reader, loaded.spec.name)
        return delivered_model(data.every_phase())


def deliver(context: TuneContext, loaded: LoadedStudy) -> DeliveredModel | None:
    """Print the delivered model (checkpoint, reproduce line, spread over seeds) and log it."""
    from tuner.report.terminal import delivered_lines

    model = delivered_of(context, loaded)
    console = context.console
    width = console.width if console.is_terminal else 100
    for line in delivered_lines(model, width, reproduce=True):
        console.print(line, soft_wrap=True)
    if model is not None and not any(d.kind == "delivered" for d in context.state.decisions):
        run = model.run
        context.state.decisions.append(
            Decision(
                "delivered" if model.delivered else "candidate",
                f"{loaded.spec.name}/{run.phase}",
                f"{'delivered' if model.delivered else 'candidate'}: {run.phase} trial {run.trial}, "
                f"{run.metric} = {run.value:.6g}; {model.spread.describe()}",
                _numbers(model),
            )
        )
        context.save()
    return model


def _numbers(model: DeliveredModel) -> dict[str, Any]:
    run = model.run
    return {
        "checkpoint": run.checkpoint,
        "reproduce": run.reproduce,
        "value": run.value,
        "best_step": run.best_step,
        "seeds": model.spread.to_json(),
    }
