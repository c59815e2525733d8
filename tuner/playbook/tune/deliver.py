"""The end of ``tune``: the model the study delivers, by the one rule of ``tuner.report.delivered``
(the same as ``tuner report`` and ``tuner list``), read by the ``Advisor`` and logged once."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tuner.playbook.tune.advisor import Delivery
    from tuner.playbook.tune.context import TuneContext
    from tuner.spec import LoadedStudy


def deliver(context: TuneContext, loaded: LoadedStudy) -> Delivery:
    """The model ``loaded`` delivers, its decision logged unless a delivered model is already."""
    assert context.advisor is not None, "a projection delivers no model"
    delivery = context.advisor.delivered(context.url_of(loaded), loaded)
    if delivery.decision is not None and not any(d.kind == "delivered" for d in context.state.decisions):
        context.state.decisions.append(delivery.decision)
        context.save()
    return delivery
