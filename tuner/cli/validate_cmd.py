"""``tuner validate PATH``: precise errors, or a short summary of what would run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from tuner.cli._console import out, plural
from tuner.cli._errors import guarded
from tuner.cli._options import output_dir_option, set_option, storage_option, study_argument
from tuner.errors import TunerError

if TYPE_CHECKING:
    from tuner.playbook.phases import ProductionLength
    from tuner.spec import StudySpec
    from tuner.train.first_batch import FirstBatchReport


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


def summary_lines(spec: StudySpec, production: ProductionLength | None = None) -> list[str]:
    from tuner.spec import CategoricalParam
    from tuner.workloads import BUILTINS

    training = spec.training
    builtin = BUILTINS.get(spec.workload.name)
    workload = f"{spec.workload.name} (built-in: {builtin.summary})" if builtin else spec.workload.name
    if production is None:
        from tuner.playbook.phases import ProductionLength

        production = ProductionLength(
            training.max_train_steps, "the study file" if training.max_train_steps else ""
        )
    max_steps = production.describe()
    lines = [
        f"study        {spec.name}" + (f" - {spec.description}" if spec.description else ""),
        f"workload     {workload}",
        f"objective    {spec.objective.direction} {spec.objective.metric}",
        f"training     batch {training.batch_size}, eval batch {training.resolved_eval_batch_size}, "
        f"max_train_steps {max_steps}, eval every {training.eval_every} steps, "
        f"keep {training.keep_best_checkpoints} best checkpoints" + _compute_words(training),
        f"optimizer    {training.optimizer.name}, lr {training.optimizer.lr:g}, "
        f"weight_decay {training.optimizer.weight_decay:g}" + _optimizer_words(training.optimizer),
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
    lines += procedure_lines(spec, production)
    return lines


def _compute_words(training: Any) -> str:
    """How a step computes, where the file changes it: precision, micro-batches, compile."""
    words = []
    if training.precision != "32-true":
        words.append(f"precision {training.precision}")
    if training.micro_batch_size is not None:
        parts = (
            training.batch_size // training.processes_per_trial // training.nodes // training.micro_batch_size
        )
        words.append(f"micro-batches of {training.micro_batch_size} ({parts} a step)")
    if training.compile:
        words.append(
            "torch.compile" + (f" ({training.compile})" if isinstance(training.compile, str) else "")
        )
    return "".join(f", {word}" for word in words)


def _optimizer_words(optimizer: Any) -> str:
    """The class's own arguments and the decay exemptions, where the file gives them."""
    words = [f"{key} {value}" for key, value in optimizer.options.items()]
    if optimizer.no_weight_decay:
        words.append(f"no weight decay on {' and '.join(optimizer.no_weight_decay)}")
    return "".join(f", {word}" for word in words)


def procedure_lines(spec: StudySpec, production: ProductionLength) -> list[str]:
    """What sweep-lr and each round would run, with the lengths as they would be chosen."""
    from tuner.orchestrate.phase import PhaseSettings
    from tuner.playbook.sweep_lr import default_grid, format_lr
    from tuner.playbook.sweep_phase import sweep_overrides
    from tuner.train.objective import metric_direction

    sweep = spec.sweep_lr
    grid = sorted(sweep.grid) if sweep.grid else default_grid(spec.training.optimizer.lr)
    cap = sweep.max_steps or production.steps
    total_cap = None
    if sweep.max_total_steps is not None:  # a total too small for the grid is refused here
        from tuner.playbook.sweep_cap import sweep_cap

        total_cap = sweep_cap(spec, cap, len(grid) * sweep.seeds)
        cap = total_cap.steps_per_trial
    compare = ">=" if metric_direction(sweep.fit_metric) == "maximize" else "<="
    switched = ", ".join(f"{key}={value}" for key, value in sweep_overrides(spec).items())
    lines = [
        f"sweep-lr     {len(grid)} LRs ({format_lr(grid[0])} .. {format_lr(grid[-1])})"
        + (f" x {sweep.seeds} seeds" if sweep.seeds > 1 else "")
        + f", up to {cap if cap else '? (set sweep_lr.max_steps)'} steps each, constant LR, "
        f"fit = {sweep.fit_metric} {compare} {sweep.fit_threshold:g}; "
        f"off: {switched or 'nothing'}, augmentation"
    ]
    if total_cap is not None:
        lines.append(f"             {total_cap.line()}")
    for number, steps in _round_lengths(spec, production):
        round_spec = spec.rounds.get(number)
        assert round_spec is not None
        length = f"of {steps} steps" if steps else "(length unknown until max_train_steps is known)"
        budgets = []
        if round_spec.timeout_h:
            budgets.append(f"stop starting trials after {round_spec.timeout_h:g} h")
        if round_spec.stop_after_no_improvement:
            budgets.append(f"or after {round_spec.stop_after_no_improvement} trials without a new best")
        if number == 1:
            failure = PhaseSettings.build(
                round_spec.trial_budget, max_failed=round_spec.max_failed
            ).max_failed
            text = (
                f"round 1: {round_spec.trial_budget} trials {length} ({round_spec.sampler}), "
                f"failure budget {failure}, max {plural(round_spec.max_retries, 'retry', 'retries')}"
            )
            if round_spec.proxy_fraction:
                text += f", validating on {round_spec.proxy_fraction:.0%} of the training split"
        else:
            multipliers = round_spec.lr_multipliers
            count = round_spec.top_k * round_spec.seeds * len(multipliers)
            text = (
                f"round {number}: top {round_spec.top_k} of round {number - 1}"
                + (f" x {round_spec.seeds} seeds" if round_spec.seeds > 1 else "")
                + (f" x LR multipliers {multipliers}" if multipliers != [1.0] else "")
                + f" = {plural(count, 'trial')} {length}"
            )
        lines.append(("rounds       " if number == 1 else "             ") + "; ".join([text, *budgets]))
    return lines


PROXY_SUGGESTED_FROM = 100  # trials in round 1


@guarded
def validate(
    path: Path = study_argument(),
    set_: list[str] = set_option("Override a field, e.g. --set optimizer.lr=0.01."),
    output_dir: Path = output_dir_option(
        "Where the study's storage is (for sweep-lr's stored max_train_steps)."
    ),
    storage: str | None = storage_option("Storage URL (default: $TUNER_STORAGE, the study's, or SQLite)."),
    no_build: bool = typer.Option(
        False,
        "--no-build",
        help="Check the file alone: do not import the workload, build it and push a batch "
        "through it (fast: torch is not imported).",
    ),
) -> None:
    """Check a study file: one precise error (exit 2), or a summary of what would run.

    It builds the workload and pushes one training batch through it (forward and loss, no
    optimizer step, no file written), so what a run's first step would stop at stops here.
    """
    from tuner.playbook.phases import check_schedule_fits
    from tuner.spec import load_study
    from tuner.workloads import check_study

    loaded = load_study(path, set_)
    check_study(loaded)
    check_schedule_fits(loaded)
    production = stored_production_length(loaded.spec, storage, output_dir)
    built = None
    if not no_build:
        from tuner.train.first_batch import check_first_batch

        built = check_first_batch(loaded.spec, loaded.base_dir)
    out.print(f"{path}: valid")
    for line in summary_lines(loaded.spec, production):
        out.print(f"  {line}")
    if built is not None:
        for line in build_lines(built):
            out.print(f"  {line}")
    for line in notes(loaded.spec, production):
        out.print(f"note: {line}")


def build_lines(built: FirstBatchReport) -> list[str]:
    """What building the workload and pushing its first batch through showed."""
    return [
        f"built        {built.model}, {built.parameters:,} parameters; data: {built.train_examples:,} "
        f"training, {built.eval_examples:,} evaluation examples",
        f"first batch  {built.batch_examples:,} examples: loss {built.loss:.4g}, outputs {built.outputs}; "
        "an evaluation batch of each split scored",
    ]


def stored_production_length(spec: StudySpec, storage: str | None, output_dir: Path) -> ProductionLength:
    """``max_train_steps`` and its source: the file, else sweep-lr's result if its storage exists
    (validate never creates a storage; without one, optuna is not even imported)."""
    from tuner.playbook.phases import ProductionLength, production_length

    if spec.training.max_train_steps is not None:
        return ProductionLength(spec.training.max_train_steps, "the study file")
    from tuner.orchestrate.storage import resolve_storage_url
    from tuner.playbook.study_results import open_existing_storage

    opened = open_existing_storage(storage or resolve_storage_url(spec.storage, output_dir, spec.name))
    return production_length(spec, opened) if opened is not None else ProductionLength(None, "")


def notes(spec: StudySpec, production: ProductionLength) -> list[str]:
    """What is valid but will stop a command, or is unwise: said now, not at the first trial."""
    from tuner.spec import redact_storage_url

    lines = []
    if production.steps is None:
        needs = "tuner train needs it" + (
            ""
            if spec.rounds.round1.steps is not None
            else ", and so does run-round (or set rounds.round1.steps)"
        )
        lines.append(
            f"training.max_train_steps is not set: {needs}; tuner sweep-lr finds it "
            "(or --set max_train_steps=N)"
        )
    lines += _off_grid_notes(spec, production)
    round1 = spec.rounds.round1
    if round1.trial_budget >= PROXY_SUGGESTED_FROM and not round1.proxy_fraction:
        lines.append(
            f"round 1 has {round1.trial_budget} trials: with that many, the search can overfit the "
            "validation set; consider rounds.round1.proxy_fraction: 0.1 (round 1 then validates on a "
            "held-out tenth of the training split, later rounds on the real validation set)"
        )
    if spec.storage is not None and redact_storage_url(spec.storage) != spec.storage:
        lines.append(
            "storage holds a password: tuner keeps it out of run folders and output, but the study file "
            "now holds a secret; prefer $TUNER_STORAGE or ~/.pgpass (see the docs: Scaling out, Secrets)"
        )
    return lines


def _off_grid_notes(spec: StudySpec, production: ProductionLength) -> list[str]:
    """A round length whose last eval no full-length run repeats (none when even the full length
    is one eval: there is no grid to be on)."""
    from tuner.playbook.trial_lengths import off_eval_grid, on_eval_grid

    every, lines = spec.training.eval_every, []
    for number, steps in _round_lengths(spec, production):
        if (
            not steps
            or not off_eval_grid(steps, every)
            or steps == production.steps
            or (production.steps or 0) < every
        ):
            continue
        given = (round_spec := spec.rounds.get(number)) is not None and round_spec.steps == steps
        what = f"rounds.round{number}.steps {steps}" if given else f"round {number}'s length ({steps} steps)"
        fix = (
            f"{on_eval_grid(steps, every, max(production.steps or 0, steps + every))} steps would be on it"
            if steps > every or given
            else f"lower training.eval_every to a divisor of {steps}"
        )
        lines.append(
            f"{what} is off the eval grid (eval_every {every}): its trials are last scored at step "
            f"{steps}, an eval no full-length run makes, so their ranking may not carry over; {fix}"
        )
    return lines


def _round_lengths(spec: StudySpec, production: ProductionLength) -> list[tuple[int, int | None]]:
    """(round number, trial length, None until ``max_train_steps`` is known) of every round."""
    from tuner.playbook.later_rounds import round_length
    from tuner.playbook.phases import round_steps

    lengths: list[tuple[int, int | None]] = []
    previous: int | None = None
    for number in spec.rounds.numbers:
        round_spec = spec.rounds.get(number)
        assert round_spec is not None
        try:
            previous = (
                round_steps(spec, round_spec, number, production.steps)
                if previous is None
                else round_length(spec, number, previous, production)
            )
        except TunerError:
            previous = None
        lengths.append((number, previous))
    return lengths
