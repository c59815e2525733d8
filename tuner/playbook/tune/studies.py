"""Which study ``tune`` is on and with which ``--set`` values: shared by the driver, the
suggestions step and the projection."""

from __future__ import annotations

from pathlib import Path

from tuner.playbook.decision_log import Stage
from tuner.playbook.tune.context import TuneContext
from tuner.spec import LoadedStudy


def base_sets(context: TuneContext, *, home: bool = True) -> list[str]:
    """The user's ``--set`` values, ``max_train_steps`` when the sweep found none (its cap), and
    the values ``tune`` set itself before round 1 (``own_settings``).

    A ``name=`` value (the user's, or ``--search-seed``'s) names the study ``tune`` started on
    only (``home``): a next study ``tune`` wrote carries its own name in its file, which the
    value would otherwise overwrite, so that its phases were the first study's, done already."""
    sets = [s for s in context.request.sets if home or not _sets_name(s)]
    fallback = next((d for d in context.state.decisions if d.kind == "max_train_steps_fallback"), None)
    if fallback is not None:
        sets.append(f"max_train_steps={fallback.numbers['max_train_steps']}")
    from tuner.playbook.tune.own_sets import own_sets

    return [*sets, *own_sets(context, home=home)]


def _sets_name(item: str) -> bool:
    return item.partition("=")[0].strip() == "name"


def sets_for(context: TuneContext, loaded: LoadedStudy) -> list[str]:
    """``base_sets`` for the study ``loaded`` (the one tune started on, or a next study)."""
    return base_sets(context, home=loaded.spec.name == context.home.spec.name)


def current_study(context: TuneContext) -> LoadedStudy:
    """The study being tuned now: the last one a stage ran (a next study tune wrote), else the user's."""
    if not context.state.stages:
        return context.home
    return study_of(context, context.state.stages[-1])


def study_of(context: TuneContext, stage: Stage) -> LoadedStudy:
    """The study ``stage`` ran (the user's file, or a next study tune wrote), with the ``--set``
    values tune gives every study."""
    from tuner.spec import load_study

    home = stage.study == context.home.spec.name
    return load_study(context.home.path if home else Path(stage.study_file), base_sets(context, home=home))


def production(context: TuneContext, loaded: LoadedStudy) -> int | None:
    from tuner.playbook.trial_lengths import production_length

    return production_length(loaded.spec, context.storage_of(loaded, create=False)).steps
