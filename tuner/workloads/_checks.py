"""Workload-side checks of a study: the entry point exists, the options fit it, the metrics exist.

Everything here is known without importing torch or the user's code, so ``tuner validate``
finds it instead of the first trial.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tuner.errors import WorkloadError
from tuner.spec import LoadedStudy, StudySpec, key_to_path
from tuner.spec._checks import candidate_values
from tuner.spec._paths import format_path, set_path
from tuner.workloads._builtins import BUILTINS
from tuner.workloads._entry_points import check_entry_point, parse_entry_point
from tuner.workloads._interface import KNOWN_METRICS

_OPTIONS = ("workload", "options")
_SPLITS = ("val", "train")  # the engine scores both
_PER_CLASS = re.compile(r"class_\d+_(correct|recall)")


def _metric_names(loaded: LoadedStudy) -> list[str] | None:
    """What the built-in computes, per split; None for a user workload (its list is in its code)."""
    builtin = BUILTINS.get(loaded.spec.workload.name)
    if builtin is None:
        return None
    names: list[str] = []
    for metric in builtin.metrics:
        if metric == "per_class":
            options = builtin.options.model_validate(loaded.spec.workload.options)
            classes = len(getattr(options, "class_weights", []))
            names += [f"class_{k}_{what}" for k in range(classes) for what in ("correct", "recall")]
        else:
            names.append(metric)
    return names


def _check_metric(loaded: LoadedStudy, path: tuple[str, ...], metric: str) -> None:
    """``objective.metric`` must be one the workload computes.

    A built-in's list is known here. A user workload's list lives in its code, which this check
    does not import: it is checked when ``validate`` builds it (``tuner.train.first_batch``) and
    when a run starts; a name tuner does not know needs the file's ``objective.direction``.
    """
    split, _, name = metric.partition("/")
    computed = _metric_names(loaded)
    if computed is not None:
        if name in computed:
            return
        choices = [f"{s}/{m}" for s in _SPLITS for m in computed]
        what = f"{loaded.spec.workload.name} computes"
    else:
        # a user workload may compute metrics of its own (``Workload.metrics``): its list is read
        # when it is built (``validate`` builds it; a trial too); only the file can give their
        # direction
        if (name in KNOWN_METRICS and name != "per_class") or _PER_CLASS.fullmatch(name):
            return
        if "direction" in loaded.spec.objective.model_fields_set:
            return
        choices = [f"{s}/{m}" for s in _SPLITS for m in KNOWN_METRICS if m != "per_class"]
        close = difflib.get_close_matches(metric, choices, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else "."
        raise loaded.error(
            path,
            f"{metric!r} is not a metric tuner computes{hint} If it is the workload's own metric, "
            "set objective.direction (minimize or maximize): tuner cannot know which way it is better",
        )
    close = difflib.get_close_matches(metric, choices, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    names = ", ".join(m for m in choices if m.startswith(f"{split}/")) or ", ".join(choices)
    raise loaded.error(path, f"{metric!r} is not a metric {what}; {hint}known: {names}")


def _check_text_file(loaded: LoadedStudy) -> None:
    """char-lm's ``text_file`` must exist (resolved as the workload resolves it)."""
    if loaded.spec.workload.name != "char-lm":
        return
    text_file = loaded.spec.workload.options.get("text_file")
    if not isinstance(text_file, str):
        return
    path = Path(text_file).expanduser()
    if not path.is_absolute():
        path = loaded.base_dir / path
    if not path.is_file():
        where = "" if Path(text_file).expanduser().is_absolute() else " (relative to the study file's folder)"
        raise loaded.error((*_OPTIONS, "text_file"), f"no such file: {path}{where}")


def _check_options(
    loaded: LoadedStudy, options: dict[str, Any], blame: tuple[tuple, Any] | None = None
) -> None:
    builtin = BUILTINS.get(loaded.spec.workload.name)
    if builtin is None:
        return
    try:
        builtin.options.model_validate(options)
    except ValidationError as error:
        located = loaded.validation_error(error, builtin.options, options, _OPTIONS)
        if blame is None:
            raise located from None
        here, value = blame
        message = f"value {value!r} does not fit {located.field}: {located.detail}"
        raise loaded.error(here, message, at_key=True) from None


def sweep_reads_fit_metric(spec: StudySpec) -> bool:
    """Whether ``sweep_lr.fit_metric`` is judged: the default (train/accuracy) is a classifier's,
    so only where a sweep will read it (the study names it, or has no length, so sweep-lr comes
    first), not for a regression trained at a length of its own."""
    return "fit_metric" in spec.sweep_lr.model_fields_set or spec.training.max_train_steps is None


def check_study(loaded: LoadedStudy) -> None:
    """Raise a located ``SpecError`` for a missing entry point, bad options or search keys."""
    spec = loaded.spec
    try:
        check_entry_point(parse_entry_point(spec.workload.name, loaded.base_dir))
    except WorkloadError as error:
        raise loaded.error(("workload", "name"), str(error)) from None
    _check_options(loaded, spec.workload.options)
    _check_text_file(loaded)
    _check_metric(loaded, ("objective", "metric"), spec.objective.metric)
    if sweep_reads_fit_metric(spec):
        _check_metric(loaded, ("sweep_lr", "fit_metric"), spec.sweep_lr.fit_metric)
    builtin = BUILTINS.get(spec.workload.name)
    for key, param in spec.search_space.items():
        target = key_to_path(key)
        if target[0] != "workload":
            continue
        here = ("search_space", key)
        option_path = target[2:]
        known = builtin.options.model_fields if builtin else spec.workload.options
        if target[:2] != _OPTIONS or len(option_path) != 1 or option_path[0] not in known:
            close = difflib.get_close_matches(
                str(option_path[-1]) if option_path else "", list(known), n=1, cutoff=0.7
            )
            hint = f" (did you mean 'workload.{close[0]}'?)" if close else ""
            raise loaded.error(
                here, f"matches no config field (looked for {format_path(target)}){hint}", at_key=True
            )
        for value in candidate_values(param):
            options = set_path({"o": spec.workload.options}, ("o", *option_path), value)["o"]
            _check_options(loaded, options, blame=(here, value))
