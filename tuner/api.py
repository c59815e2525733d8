"""tuner from Python, in a script or a notebook: ``tune``, ``get_report`` and ``load_model``
(``tuner.report`` is the report's own package, hence ``get_report``).

``tune`` runs the procedure ``tuner tune`` runs (the same playbook, workers, storage and run
folders; what it decides is printed as the command prints it, unless ``quiet``) and returns the
delivered model. tuner's errors come back as exceptions (``tuner.errors``), never as an exit: bad
input is a ``UsageError``, a workload's own bug a ``WorkloadCodeError``, a phase that failed a
``TrainingError``; Ctrl-C is a ``KeyboardInterrupt``. Calling ``tune`` again with the same study
continues where it stopped, as the command does.

A study may be a study file's path, a dict of the file's fields, or a ``StudySpec``; a dict or a
spec is written to ``<output_dir>/<name>/study.yaml`` (workers read a file), so ``tuner report``
and ``tuner list`` see it as any other. The workload may be a Python function: one importable
from a module file is named by it; one defined in a notebook or a script's ``__main__`` is
written by value (``cloudpickle``) beside that study file, for the worker processes to load.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner.errors import TrainingError, TunerError, UsageError
from tuner.report.delivered import SeedSpread

__all__ = ["SeedSpread", "TunedModel", "get_report", "load_model", "tune"]


@dataclass(frozen=True)
class TunedModel:
    """What ``tune`` delivers: the checkpoint, its objective value and step, the searched
    hyperparameters' values, and the spread over seeds (the report's ``SeedSpread``: ``mean``,
    ``low``, ``high``, ``seeds``, and the seed runs' ``trials``)."""

    study: str
    checkpoint: Path
    metric: str
    direction: str
    value: float
    step: int
    params: dict[str, Any]
    seeds: SeedSpread
    phase: str
    trial: int
    reproduce: str
    workload: Callable[..., Any] | None = field(default=None, repr=False)

    def load_model(self, device: str = "cpu") -> Any:
        """The delivered model in plain PyTorch (``tuner.train.load_model``), built by the workload
        function ``tune`` was given, or by the study's (the caller's own run: trusted)."""
        from tuner.train import load_model as load

        if self.workload is not None:
            return load(self.checkpoint, device=device, workload=self.workload)
        return load(self.checkpoint, device=device, trust_code=True)


def tune(
    study: str | Path | Mapping[str, Any] | Any,
    *,
    budget: int | str,
    output_dir: str | Path = "runs",
    workload: Callable[..., Any] | None = None,
    sets: Sequence[str] = (),
    workers: int | None = None,
    devices: str | None = None,
    storage: str | None = None,
    short_round1: bool = False,
    quiet: bool = False,
    progress: bool = False,
) -> TunedModel:
    """Tune ``study`` within ``budget`` training steps (or a duration, ``"2h"``) and return the
    delivered model. ``workload`` (a build function) replaces the study's ``workload.name``;
    ``sets`` are ``--set`` overrides (``"optimizer.lr=0.01"``); ``quiet`` prints only errors and
    warnings, ``progress`` draws each phase's live view. Raises a ``TunerError`` for what stops it
    (see the module's docstring)."""
    from tuner.cli._tune_view import TuneView
    from tuner.cli.tune_cmd import CommandLinePhases
    from tuner.orchestrate.warm_start import SharedWarmStart
    from tuner.playbook.budget import parse_budget
    from tuner.playbook.tune import TuneRequest
    from tuner.playbook.tune import tune as run_tune
    from tuner.playbook.tune.messages import Finished
    from tuner.playbook.tune_plan import Switches
    from tuner.report.tune_advice import ReportAdvisor

    output = Path(output_dir)
    path = study_file(study, output, workload)
    request = TuneRequest(
        path=path,
        budget=parse_budget(str(budget)),
        sets=list(sets),
        output_dir=output,
        storage=storage,
        workers=workers,
        devices=devices,
        switches=Switches(full_length_round1=not short_round1),
    )
    view = TuneView(as_json=False)
    finished: list[Finished] = []

    def emit(message: Any) -> None:
        if isinstance(message, Finished):
            finished.append(message)
        if not quiet:
            view.show(message)

    with _as_exceptions(), _quiet(quiet), SharedWarmStart() as warm_start:
        run_tune(request, advisor=ReportAdvisor(), runner=CommandLinePhases(warm_start, progress), emit=emit)
    model = finished[-1].model if finished else None
    if model is None or not model.delivered:
        why = "no round has a completed trial" if model is None else model.why_not
        raise TrainingError(f"tune delivered no model: {why}")
    return _tuned_model(model, path, workload)


def get_report(
    study: str | Path, *, output_dir: str | Path = "runs", storage: str | None = None
) -> dict[str, Any]:
    """The study's report as ``tuner report --json`` prints it (``study``: its file or its name)."""
    from tuner.cli.report_cmd import locate
    from tuner.orchestrate.stored import open_reader
    from tuner.report import build_report, read_study, report_json
    from tuner.report.tuned_into import tuned_into

    output = Path(output_dir)
    with _as_exceptions():
        name, url, _ = locate(str(study), output, storage)
        with open_reader(url) as reader:
            result = build_report(read_study(reader, name, None))
            result.tuned_into = tuned_into(name, result.tune, output, storage)
            return report_json(result)


def load_model(checkpoint: str | Path, **options: Any) -> Any:
    """``tuner.train.load_model``: a checkpoint's model in plain PyTorch (see there)."""
    from tuner.train import load_model as load

    return load(checkpoint, **options)


def study_file(study: Any, output_dir: Path, workload: Callable[..., Any] | None = None) -> Path:
    """The study as a file the workers can read: a path as it is (with ``workload`` it is read and
    written again, the function in its place); a dict or a ``StudySpec`` written to
    ``<output_dir>/<name>/study.yaml`` (atomically; the same study gives the same file, so a call
    that continues finds what the first one started)."""
    from tuner._atomic import atomic_write_text
    from tuner.output import phase_dir
    from tuner.spec import StudySpec, load_study

    if isinstance(study, (str, Path)) and workload is None:
        return Path(study)
    if isinstance(study, (str, Path)):
        document = load_study(Path(study)).spec.model_dump(mode="json", exclude_defaults=True)
        base_dir = Path(study).resolve().parent
    elif isinstance(study, StudySpec):
        document, base_dir = study.model_dump(mode="json", exclude_defaults=True), Path.cwd()
    elif isinstance(study, Mapping):
        document, base_dir = _plain(study), Path.cwd()
    else:
        raise UsageError(f"a study is a file's path, a dict or a StudySpec, not {type(study).__name__}")
    name = document.get("name")
    if not isinstance(name, str):
        raise UsageError("the study has no name: give it one (name: my-study)")
    folder = phase_dir(output_dir, name, "study").parent  # a name cannot escape the output folder
    folder.mkdir(parents=True, exist_ok=True)
    given = workload if workload is not None else document.get("workload", {}).get("name")
    document["workload"] = {**document.get("workload", {}), "name": _entry_point(given, base_dir, folder)}
    import yaml

    path = folder / "study.yaml"
    atomic_write_text(path, yaml.safe_dump(document, sort_keys=False))
    load_study(path)  # one line now for a field that is wrong, not in every worker
    return path


def _plain(study: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a study dict, its workload function left as it is for ``_entry_point``."""
    document = {key: value for key, value in study.items()}
    if isinstance(document.get("workload"), Mapping):
        document["workload"] = dict(document["workload"])
    return document


def _entry_point(given: Any, base_dir: Path, folder: Path) -> str:
    """``workload.name`` for a file: an entry point as it is (a relative file made absolute), a
    function importable from its module by that module, any other by value beside the study."""
    if isinstance(given, str):
        target, sep, function = given.rpartition(":")
        if sep and (target.endswith(".py") or "/" in target) and not Path(target).is_absolute():
            return f"{(base_dir / target).resolve()}:{function}"
        return given
    if not callable(given):
        raise UsageError("workload: give a built-in's name, an entry point 'module:function' or a function")
    module, qualname = getattr(given, "__module__", None), getattr(given, "__qualname__", "")
    if module and module != "__main__" and "<" not in qualname:
        spec = importlib.util.find_spec(module) if not module.startswith("tuner_user_workload_") else None
        source = getattr(sys.modules.get(module), "__file__", None)
        if spec is not None and spec.origin and source and Path(spec.origin) == Path(source):
            return f"{module}:{qualname}"
        if source:
            return f"{Path(source).resolve()}:{qualname}"
    return _by_value(given, folder)


_LOADER = '''\
"""Written by tuner.tune(): the workload function {name}, defined in a notebook or a script's
__main__, kept by value in {pickle} (cloudpickle) for tuner's worker processes to load.
sha256 of the pickle: {digest}"""

import pathlib

import cloudpickle

build = cloudpickle.loads(pathlib.Path(__file__).with_name("{pickle}").read_bytes())
'''


def _by_value(function: Callable[..., Any], folder: Path) -> str:
    """A function no worker could import, written by value: ``workload.pkl`` and the module that
    loads it, ``workload.py`` (its text changes with the function, as tuner's code digest reads)."""
    import hashlib

    import cloudpickle

    from tuner._atomic import atomic_write, atomic_write_text

    try:
        data = cloudpickle.dumps(function)
    except Exception as error:  # a closure over a lock, an open file...
        raise UsageError(f"workload: the function cannot be sent to tuner's workers ({error})") from None
    atomic_write(folder / "workload.pkl", lambda handle: handle.write(data))
    digest = hashlib.sha256(data).hexdigest()
    loader = _LOADER.format(name=getattr(function, "__name__", "build"), pickle="workload.pkl", digest=digest)
    atomic_write_text(folder / "workload.py", loader)
    return f"{(folder / 'workload.py').resolve()}:build"


def _tuned_model(delivered: Any, path: Path, workload: Callable[..., Any] | None) -> TunedModel:
    """The report's ``DeliveredModel`` as ``tune`` returns it."""
    run = delivered.run
    if not run.checkpoint:
        raise TrainingError(f"tune delivered {run.phase} trial {run.trial}, whose checkpoint is not here")
    return TunedModel(
        study=path.stem if path.name != "study.yaml" else path.parent.name,
        checkpoint=Path(run.checkpoint),
        metric=run.metric,
        direction=run.direction,
        value=float(run.value) if run.value is not None else math.nan,
        step=int(run.best_step),
        params=dict(run.params or {}),
        seeds=delivered.spread,
        phase=run.phase,
        trial=int(run.trial),
        reproduce=run.reproduce or "",
        workload=workload,
    )


@contextlib.contextmanager
def _quiet(quiet: bool) -> Iterator[None]:
    """With ``quiet``, nothing but error and warning lines: no decision, header or summary."""
    from tuner.cli._console import err, out

    was = out.quiet, err.quiet
    out.quiet, err.quiet = was[0] or quiet, was[1] or quiet
    try:
        yield
    finally:
        out.quiet, err.quiet = was


@contextlib.contextmanager
def _as_exceptions() -> Iterator[None]:
    """The command line's exits, as exceptions: what ``run_phase`` ends a phase with
    (``typer.Exit``) becomes the ``TunerError`` its exit code means; 130 is Ctrl-C."""
    from click.exceptions import Exit

    try:
        yield
    except Exit as error:
        code = error.exit_code
        if code == 130:
            raise KeyboardInterrupt from None
        if code == 2:
            raise UsageError("tune stopped on bad input: the lines above say why") from None
        if code == 1:
            raise TrainingError(
                "a phase failed (its failure budget is spent): the lines above say why"
            ) from None
        raise TunerError(f"tune stopped with exit code {code}: the lines above say why") from None
