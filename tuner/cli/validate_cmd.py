"""``tuner validate PATH``: precise errors, or a short summary of what would run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from tuner.cli._console import out
from tuner.cli._errors import guarded
from tuner.errors import TunerError

if TYPE_CHECKING:
    from tuner.spec import StudySpec


def describe_schedule(spec: StudySpec) -> str:
    parts = []
    for segment in spec.training.schedule:
        length = (
            f"{segment.steps} steps"
            if segment.steps
            else f"{segment.fraction:.0%}"
            if segment.fraction
            else "the rest"
        )
        end = segment.start if segment.end is None and segment.shape == "constant" else (segment.end or 0.0)
        parts.append(f"{segment.shape} {segment.start:g}->{end:g} x lr for {length}")
    return ", then ".join(parts)


def summary_lines(spec: StudySpec) -> list[str]:
    from tuner.spec import CategoricalParam
    from tuner.workloads import BUILTINS

    training = spec.training
    builtin = BUILTINS.get(spec.workload.name)
    workload = f"{spec.workload.name} (built-in: {builtin.summary})" if builtin else spec.workload.name
    max_steps = training.max_train_steps or "not set"
    lines = [
        f"study        {spec.name}" + (f" - {spec.description}" if spec.description else ""),
        f"workload     {workload}",
        f"objective    {spec.objective.direction} {spec.objective.metric}",
        f"training     batch {training.batch_size}, eval batch {training.resolved_eval_batch_size}, "
        f"max_train_steps {max_steps}, eval every {training.eval_every} steps, "
        f"keep {training.keep_best_checkpoints} best checkpoints",
        f"optimizer    {training.optimizer.name}, lr {training.optimizer.lr:g}, "
        f"weight_decay {training.optimizer.weight_decay:g}",
        f"schedule     {describe_schedule(spec)}",
    ]
    if spec.search_space:
        lines.append(f"search space {len(spec.search_space)} parameter(s):")
        for key, param in spec.search_space.items():
            if isinstance(param, CategoricalParam):
                what = f"one of {param.choices}"
            else:
                what = f"{param.type} in [{param.low:g}, {param.high:g}]" + (" (log)" if param.log else "")
            lines.append(f"  {key}: {what}, {param.role}")
    else:
        lines.append("search space (empty)")
    r1, r2 = spec.rounds.round1, spec.rounds.round2
    from tuner.orchestrate.phase import PhaseSettings
    from tuner.playbook.phases import round_steps

    try:
        length = f"of {round_steps(spec, r1, 1)} steps "
    except TunerError:
        length = "(length unknown until max_train_steps is set) "
    budget = PhaseSettings.build(r1.trial_budget, max_failed=r1.max_failed)
    lines.append(
        f"rounds       round 1: {r1.trial_budget} trials {length}({r1.sampler}), "
        f"failure budget {budget.max_failed}, max {r1.max_retries} retries; "
        f"round 2: top {r2.top_k} x {r2.seeds} seeds"
    )
    return lines


@guarded
def validate(
    path: Path = typer.Argument(..., metavar="STUDY", help="The study file."),
    set_: list[str] = typer.Option(
        [], "--set", metavar="KEY=VALUE", help="Override a field, e.g. --set optimizer.lr=0.01."
    ),
) -> None:
    """Check a study file: one precise error (exit 2), or a summary of what would run."""
    from tuner.playbook.phases import check_schedule_fits
    from tuner.spec import load_study
    from tuner.workloads import check_study

    loaded = load_study(path, set_)
    check_study(loaded)
    check_schedule_fits(loaded)
    out.print(f"{path}: valid")
    for line in summary_lines(loaded.spec):
        out.print(f"  {line}")
    for line in notes(loaded.spec):
        out.print(f"note: {line}")


def notes(spec: StudySpec) -> list[str]:
    """What is valid but will stop a command, or is unwise: said now, not at the first trial."""
    from tuner.spec import redact_storage_url

    lines = []
    if spec.training.max_train_steps is None:
        needs = "tuner train needs it" + (
            ""
            if spec.rounds.round1.steps is not None
            else ", and so does run-round (or set rounds.round1.steps)"
        )
        lines.append(f"training.max_train_steps is not set: {needs}; --set max_train_steps=N works too")
    if spec.storage is not None and redact_storage_url(spec.storage) != spec.storage:
        lines.append(
            "storage holds a password: tuner keeps it out of run folders and output, but the study file "
            "now holds a secret; prefer $TUNER_STORAGE or ~/.pgpass (see the README, Secrets)"
        )
    return lines
