"""How often would a pruner have stopped round 1's best run? Replayed on the curves of an outcome run.

``rounds.round1.pruner`` stops a full-length round-1 trial from its early evals. Under a decaying
schedule the early evals understate a run, so a pruner can stop the run that would have been best;
an ablation that prunes never learns it did, since the stopped run's end is never seen. The
default ``tune`` trains every round-1 trial to the end, so its runs hold the whole curves: this
replays Optuna's pruners on them, in trial order (one worker, as the outcome benchmark runs), with
``tune``'s settings (``PhasePlan.pruner``), through Optuna's own ``report`` / ``should_prune``.

Per workload: the share of round 1's steps a pruner would have saved, how often it stopped the
round's best run (by the value ``tune`` ranks on: the best eval), and how often it stopped one of
the 3 best (the points round 2 trains again). The live pruner stops a trial one eval after the
eval it judged (the worker learns the verdict after it), so it saves a little less than replayed.

``python -m benchmarks.pruning_replay OUTPUT_DIR`` (an outcome run with ``tuner``'s runs).
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass
from pathlib import Path

TOP = 3  # round 2's top_k in the benchmark's studies


@dataclass(frozen=True)
class Curve:
    """One round-1 trial as it ran to the end: its evals, and the value tune ranks it on."""

    number: int
    evals: dict[int, float]
    value: float


@dataclass(frozen=True)
class Replay:
    steps_saved: float  # share of the round's steps
    best_stopped: bool
    top_stopped: int  # of the TOP best runs


def round1_curves(storage_url: str, study: str) -> tuple[list[Curve], str]:
    """Round 1's completed trials of ``study`` in trial order, and the objective's direction."""
    import optuna

    phase = optuna.load_study(study_name=f"{study}/round-1", storage=storage_url)
    curves = [
        Curve(t.number, dict(t.intermediate_values), float(t.value))
        for t in sorted(phase.get_trials(deepcopy=False), key=lambda t: t.number)
        if t.state == optuna.trial.TrialState.COMPLETE and t.value is not None and t.intermediate_values
    ]
    return curves, phase.direction.name.lower()


def replay(curves: list[Curve], direction: str, kind: str) -> Replay:
    """The round again with a pruner: each trial reports its evals in order until it is pruned."""
    import optuna

    from tuner.playbook.runnable_plan import round1_pruner

    length = max(max(c.evals) for c in curves)
    steps = sorted(curves[0].evals)
    eval_every = steps[1] - steps[0] if len(steps) > 1 else steps[0]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction=direction, pruner=round1_pruner(kind, length, eval_every))
    stopped: set[int] = set()
    trained = 0
    for curve in curves:
        trial = study.ask()
        for step in sorted(curve.evals):
            trial.report(curve.evals[step], step)
            if trial.should_prune():
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                stopped.add(curve.number)
                trained += step
                break
        else:
            study.tell(trial, curve.value)
            trained += max(curve.evals)
    full = sum(max(c.evals) for c in curves)
    ranked = sorted(curves, key=lambda c: c.value, reverse=direction == "maximize")
    return Replay(
        steps_saved=1 - trained / full,
        best_stopped=ranked[0].number in stopped,
        top_stopped=sum(c.number in stopped for c in ranked[:TOP]),
    )


def replay_run(root: Path, kind: str) -> dict[str, list[Replay]]:
    """Every tuner run under an outcome output folder, by workload."""
    found: dict[str, list[Replay]] = {}
    for database in sorted(root.glob("*/seed-*/tuner/runs/*/study.db")):
        workload = database.relative_to(root).parts[0]
        curves, direction = round1_curves(f"sqlite:///{database}", database.parent.name)
        if len(curves) >= 2:
            found.setdefault(workload, []).append(replay(curves, direction, kind))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output_dir", type=Path, help="an outcome benchmark's --output-dir")
    args = parser.parse_args()
    print("| pruner | workload | runs | round-1 steps saved | best run stopped | top-3 runs stopped |")
    print("| --- | --- | --- | --- | --- | --- |")
    for kind in ("median", "successive-halving"):
        for workload, replays in replay_run(args.output_dir, kind).items():
            saved = statistics.fmean(r.steps_saved for r in replays)
            best = sum(r.best_stopped for r in replays)
            top = sum(r.top_stopped for r in replays)
            print(
                f"| {kind} | {workload} | {len(replays)} | {100 * saved:.0f}% | {best} of {len(replays)} "
                f"| {top} of {TOP * len(replays)} |"
            )


if __name__ == "__main__":
    main()
