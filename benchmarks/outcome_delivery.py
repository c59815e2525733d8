"""Which of `tune`'s runs should it deliver? Delivery rules compared on the same runs.

`tune` delivers from its full-length rounds 2 and later: the point with the best mean over its
seeds (``tuner/report/delivered.py``). Round 1 trains at full length too, yet none of its runs
is a candidate, though a round-1 run can score better on validation than the model delivered.
Letting a point run once compete with points run on several seeds invites the winner's curse:
the best of many single noisy runs is chosen for its luck as much as for its merit.

This benchmark measures that on the outcome benchmark's own runs: every rule below picks a
checkpoint from the same `tune` run folders (read through ``tuner report --csv --json``), and
each pick is scored on the 100,000-example test split nobody tuned on, so the rules are paired
by workload and seed, with no training at all:

- ``current``: the rule `tune` uses (rounds 2 and later; a point's runs pooled, best mean);
- ``with-round-1``: the same ranking, round 1's full-length runs candidates too (a point that a
  later round trained again pools its round-1 run with the new seeds);
- ``shrunk``: candidates as ``with-round-1``, each point ranked by its mean shrunk toward the
  mean of all points by the share of its variance that noise explains (empirical Bayes: the
  run-to-run variance pooled from the points with several seeds, the points' spread beyond it),
  so one lucky run counts for less than the same value over three seeds;
- ``best-run``: the single best full-length run on validation, any round (the winner's curse at
  its strongest, for reference).

``python -m benchmarks.outcome_delivery OUTPUT_DIR [--contender tuner:LABEL]`` (an outcome run's
``--output-dir``, its ``tuner`` contender's folders kept); scores are cached in
``OUTPUT_DIR/delivery_scores.json``.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import re
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.outcome_runs import ResultsFile
from benchmarks.outcome_stats import best_of, compare, relative_gains
from benchmarks.outcome_tables import at_guess, minimizes

RULES = ("current", "with-round-1", "shrunk", "best-run")


@dataclass(frozen=True)
class Run:
    """One completed full-length run of a `tune` study, as its report lists it."""

    phase: str
    round: int
    point: str  # its searched values and length: the same point on other seeds shares it
    seed: int
    value: float
    slot: int  # its trial number in its phase: equal means go to the point of the lowest, as in tune
    checkpoint: Path
    run_dir: Path


def read_runs(folder: Path) -> tuple[list[Run], bool]:
    """The completed runs of every full-length round in a `tune` folder (``study.yaml`` and
    ``runs/``), and whether the objective is minimised. Read through the public CLI."""
    study, runs = folder / "study.yaml", folder / "runs"
    out = _tuner("report", str(study), "--output-dir", str(runs), "--json")
    report = json.loads(out)
    full = {
        p["phase"]
        for p in report["phases"]
        if p["phase"].startswith("round-")
        and p.get("trial_steps") is not None
        and p.get("max_train_steps") is not None
        and p["trial_steps"] >= p["max_train_steps"]
    }
    csv_path = folder / "delivery.csv"
    _tuner("report", str(study), "--output-dir", str(runs), "--csv", str(csv_path))
    rows = list(csv.DictReader(io.StringIO(csv_path.read_text())))
    found = []
    for row in rows:
        if row["phase"] not in full or row["state"] != "complete" or not row["value"]:
            continue
        params = {k: v for k, v in row.items() if "." in k}
        seed = re.search(r"seed_index=(\d+)", row["reproduce"])
        run_dir = Path(row["run_dir"])
        point = json.dumps({"params": params, "length": row["max_train_steps"]}, sort_keys=True)
        found.append(
            Run(
                row["phase"],
                int(row["phase"].split("-")[1]),
                point,
                int(seed.group(1)) if seed else 0,
                float(row["value"]),
                int(row["trial"]),
                run_dir / "checkpoints" / f"best-step{int(row['best_step']):08d}.pt",
                run_dir,
            )
        )
    direction = report["delivered_model"]["direction"]
    return found, direction == "minimize"


def _tuner(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "tuner", *args], capture_output=True, text=True, check=True)
    return done.stdout


def _points(runs: list[Run]) -> dict[str, list[Run]]:
    points: dict[str, list[Run]] = {}
    for run in sorted(runs, key=lambda r: (r.round, r.seed)):
        points.setdefault(run.point, []).append(run)
    return points


def _best_seed(runs: list[Run], sign: float) -> Run:
    return min(runs, key=lambda r: (sign * r.value, r.seed))


def _by_mean(runs: list[Run], sign: float, score: Callable[[list[Run]], float] | None = None) -> Run | None:
    """The best seed run of the best-ranked point (equal scores: more seeds, then the lowest trial
    number, then the later round: ``tuner.report.delivered`` lists the latest round first and
    ``tuner.playbook.ranked_points.ranked`` keeps that order among equals)."""
    points = list(_points(runs).values())
    if not points:
        return None
    rank = score or (lambda p: statistics.fmean(r.value for r in p))
    chosen = min(points, key=lambda p: (sign * rank(p), -len(p), min(r.slot for r in p), -p[0].round))
    return _best_seed(chosen, sign)


def _shrinkage(runs: list[Run]) -> Callable[[list[Run]], float]:
    """A point's mean shrunk toward the grand mean: ``m + (mean - m) * tau2 / (tau2 + s2 / n)``,
    ``s2`` the run-to-run variance pooled within the points of several seeds, ``tau2`` the
    points' own variance (the spread of their means less what noise explains, at least 0)."""
    points = list(_points(runs).values())
    means = [statistics.fmean(r.value for r in p) for p in points]
    grand = statistics.fmean(means)
    within = [(len(p) - 1, statistics.variance([r.value for r in p])) for p in points if len(p) > 1]
    dof = sum(d for d, _ in within)
    s2 = sum(d * v for d, v in within) / dof if dof else 0.0
    spread = statistics.variance(means) if len(means) > 1 else 0.0
    tau2 = max(spread - s2 * statistics.fmean(1 / len(p) for p in points), 0.0)

    def score(point: list[Run]) -> float:
        mean = statistics.fmean(r.value for r in point)
        weight = 1.0 if s2 == 0 else tau2 / (tau2 + s2 / len(point))
        return grand + (mean - grand) * weight

    return score


def choose(rule: str, runs: list[Run], minimize: bool) -> Run | None:
    sign = 1.0 if minimize else -1.0
    later = [r for r in runs if r.round >= 2]
    if rule == "current":
        return _by_mean(later, sign)
    if rule == "with-round-1":
        return _by_mean(runs, sign)
    if rule == "shrunk":
        return _by_mean(runs, sign, _shrinkage(runs)) if runs else None
    if rule == "best-run":
        return _best_seed(runs, sign) if runs else None
    raise ValueError(rule)


def _score(run: Run, cache: dict[str, float]) -> float:
    from benchmarks.outcome_contenders import Delivered, delivered_metric

    key = str(run.checkpoint)
    if key not in cache:
        cache[key] = delivered_metric(Delivered(run.checkpoint, run.run_dir, 0, 0), "test")
    return cache[key]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output_dir", type=Path)
    parser.add_argument("--contender", default="tuner", help="whose runs: tuner, or tuner:LABEL")
    args = parser.parse_args(argv)
    root: Path = args.output_dir
    records = ResultsFile.read(root / "results.json").runs
    cache_path = root / "delivery_scores.json"
    cache: dict[str, float] = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    by_workload: dict[str, dict[str, dict[int, float]]] = {}
    differs: dict[tuple[str, str], int] = {}
    for record in records:
        runs = by_workload.setdefault(record.workload, {})
        runs.setdefault(record.contender, {})[record.seed] = record.test_metric
        if record.contender != args.contender:
            continue
        folder = root / record.workload / f"seed-{record.seed}" / args.contender.replace(":", "-")
        found, minimize = read_runs(folder)
        current = choose("current", found, minimize)
        for rule in RULES:
            chosen = choose(rule, found, minimize)
            if chosen is None:
                continue
            runs.setdefault(f"tuner:{rule}", {})[record.seed] = _score(chosen, cache)
            if current is not None and chosen.checkpoint != current.checkpoint:
                differs[(record.workload, rule)] = differs.get((record.workload, rule), 0) + 1
        cache_path.write_text(json.dumps(cache, indent=1))
    print(_table(by_workload, differs))
    return 0


def _table(by_workload: dict[str, dict[str, dict[int, float]]], differs: dict[tuple[str, str], int]) -> str:
    lines = [
        "| workload | rule | test metric | minus current [95% CI] | detectable | picks another run |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    best_baseline: dict[str, str] = {}
    minimize = {w: minimizes(w) for w in by_workload}
    for workload, runs in by_workload.items():
        best = best_of(at_guess(), runs, minimize[workload])
        if best is not None:
            best_baseline[workload] = best
        for rule in RULES:
            name = f"tuner:{rule}"
            if name not in runs:
                continue
            mean = statistics.fmean(runs[name].values())
            found = compare(name, "tuner:current", runs, minimize[workload])
            paired = found is not None and rule != "current"
            diff = found.difference.signed() if paired else ""
            det = f"{found.detectable:.4f}" if paired and not math.isnan(found.detectable) else ""
            picks = differs.get((workload, rule), 0)
            lines.append(
                f"| {workload} | {rule} | {mean:.4f} | {diff} | {det} | {picks} of {len(runs[name])} |"
            )
    lines.append("")
    lines.append("Mean relative gain over the best baseline at the guess (95% CI), seeds paired:")
    for rule in RULES:
        gain = relative_gains(f"tuner:{rule}", best_baseline, by_workload, minimize)
        if gain is not None:
            lines.append(f"- {rule}: {gain.mean:+.2%} [{gain.low:+.2%}, {gain.high:+.2%}]")
    for rule in RULES[1:]:
        gain = relative_gains(
            f"tuner:{rule}", {w: "tuner:current" for w in by_workload}, by_workload, minimize
        )
        if gain is not None:
            lines.append(f"- {rule} over current: {gain.mean:+.2%} [{gain.low:+.2%}, {gain.high:+.2%}]")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
