"""The outcome benchmark's tables (markdown, ready for the benchmarks page) and its target as
PASS/FAIL figures."""

from __future__ import annotations

import math
import statistics

from benchmarks._common import Result
from benchmarks.outcome_contenders import BASELINES, LENGTHS, baseline_contenders
from benchmarks.outcome_runs import RunRecord, guessed_length, template
from benchmarks.outcome_stats import Comparison, Interval, best_of, compare, relative_gains, t_interval

NAME = "outcome"


def minimizes(workload: str) -> bool:
    return template(workload)["objective"]["direction"] == "minimize"


def test_metric_name(workload: str) -> str:
    return "test/" + template(workload)["objective"]["metric"].split("/", 1)[1]


def by_seed(records: list[RunRecord]) -> dict[str, dict[int, float]]:
    """contender -> seed -> test metric."""
    found: dict[str, dict[int, float]] = {}
    for record in records:
        found.setdefault(record.contender, {})[record.seed] = record.test_metric
    return found


def at_guess() -> list[str]:
    return [f"{b}@guess" for b in BASELINES]


def all_baselines() -> list[str]:
    return [c.name for c in baseline_contenders()]


def tuners(records: list[RunRecord]) -> list[str]:
    """The procedures compared with the baselines: ``tuner`` first, then its ablations and the
    designs in its commands, in the order they appear."""
    names = list(dict.fromkeys(r.contender for r in records if "@" not in r.contender))
    return sorted(names, key=lambda n: n != "tuner")


def _length_of(name: str, workload: str, quick: bool) -> str:
    if "@" not in name:
        return "sweep-lr's"
    return f"{int(guessed_length(workload, quick) * LENGTHS[name.split('@')[1]]):,}"


def _row(*cells: object) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _comparison_row(found: Comparison) -> str:
    return _row(found.b, found.difference.signed(), f"{found.detectable:.4f}", found.seeds, found.verdict)


def table(workload: str, records: list[RunRecord], quick: bool = False) -> str:
    """One workload's tables: every contender, then tuner (and each ablation) against the baselines."""
    metric, minimize = test_metric_name(workload), minimizes(workload)
    sense = "lower" if minimize else "higher"
    seeds = sorted({r.seed for r in records})
    budget, guess = (records[0].budget if records else 0), guessed_length(workload, quick)
    header = ("contender", "trial length", f"mean {metric} [95% CI]", "mean validation", "runs")
    header += ("mean steps", "mean trials", "mean CPU s")
    lines = [
        f"**{workload}**: {metric} ({sense} is better), budget {budget:,} steps a run "
        f"({budget // guess} trials of the guessed {guess:,}), {len(seeds)} seed(s)",
        "",
        _row(*header),
        _row(*("---" for _ in header)),
    ]
    names = [*tuners(records), *all_baselines()]
    for name in names:
        own = [r for r in records if r.contender == name]
        if not own:
            continue
        lines.append(
            _row(
                name,
                _length_of(name, workload, quick),
                t_interval([r.test_metric for r in own]),
                f"{statistics.fmean(r.val_metric for r in own):.4f}",
                len(own),
                f"{statistics.fmean(r.steps for r in own):,.0f}",
                f"{statistics.fmean(r.trials for r in own):.1f}",
                f"{statistics.fmean(r.cpu_s for r in own):.0f}",
            )
        )
    runs = by_seed(records)
    best_guess = best_of(at_guess(), runs, minimize)
    oracle = best_of(all_baselines(), runs, minimize)
    for tuner in tuners(records):
        rows = [compare(tuner, b, runs, minimize) for b in at_guess()]
        if oracle and oracle not in at_guess():
            rows.append(compare(tuner, oracle, runs, minimize))
        if tuner != "tuner":
            rows.insert(0, compare(tuner, "tuner", runs, minimize))
        found = [row for row in rows if row is not None]
        if not found:
            continue
        lines += [
            "",
            f"{tuner} minus each baseline, paired by seed ({sense} is better):",
            "",
            _row("against", "difference [95% CI]", "smallest detectable", "seeds", "verdict"),
            _row(*["---"] * 5),
            *(_comparison_row(row) for row in found),
        ]
    if best_guess:
        lines += [
            "",
            f"Best baseline at the guessed length: {best_guess}; at any length (an oracle's pick): {oracle}.",
        ]
    return "\n".join(lines)


def _gain_cell(gain: Interval | None) -> str:
    """A mean relative gain as a percentage with its interval (``-`` when there is none)."""
    if gain is None:
        return "-"
    shown = f"{100 * gain.mean:+.2f}%"
    if not math.isnan(gain.low):
        shown += f" [{100 * gain.low:+.2f}%, {100 * gain.high:+.2f}%]"
    return shown


def procedures_table(records: list[RunRecord], workloads: list[str]) -> str:
    """One row a procedure (tuner, each ablation, each design): its difference from the best
    baseline at the guessed length on each workload, and its mean relative gain over them."""
    by_workload = {w: by_seed([r for r in records if r.workload == w]) for w in workloads}
    minimize = {w: minimizes(w) for w in workloads}
    best = {w: best_of(at_guess(), by_workload[w], minimize[w]) for w in workloads}
    if not all(best.values()):
        return ""
    header = (
        "procedure",
        *(f"{w}: minus {best[w]} [95% CI]" for w in workloads),
        "mean relative gain [95% CI]",
    )
    lines = [_row(*header), _row(*("---" for _ in header))]
    for name in tuners(records):
        cells: list[str] = [name]
        for workload in workloads:
            found = compare(name, str(best[workload]), by_workload[workload], minimize[workload])
            cells.append(found.difference.signed() if found else "-")
        gain = relative_gains(name, {w: str(b) for w, b in best.items()}, by_workload, minimize)
        lines.append(_row(*cells, _gain_cell(gain)))
    return "\n".join(lines)


def targets(records: list[RunRecord], workloads: list[str]) -> list[Result]:
    """The target as PASS/FAIL: on every workload tuner is not behind the best baseline at the
    guessed length beyond the noise, nor the oracle's pick among every length; and over the
    workloads its mean relative gain over the best at the guess is above 0 beyond the noise."""
    out: list[Result] = []
    best: dict[str, str] = {}
    by_workload = {w: by_seed([r for r in records if r.workload == w]) for w in workloads}
    minimize = {w: minimizes(w) for w in workloads}
    for workload in workloads:
        runs = by_workload[workload]
        for label, names in (("best at the guess", at_guess()), ("oracle's pick", all_baselines())):
            baseline = best_of(names, runs, minimize[workload])
            found = compare("tuner", baseline, runs, minimize[workload]) if baseline else None
            if found is None:
                continue
            if label == "best at the guess":
                best[workload] = found.b
            behind = found.difference.excludes_zero and found.gain.mean < 0
            out.append(
                Result(NAME, f"{workload}: tuner - {found.b} ({label})", found.difference.mean, "{:+.4f}",
                       f"not behind beyond the noise (detectable {found.detectable:.4f})", not behind)
            )  # fmt: skip
    gain = relative_gains("tuner", best, by_workload, minimize) if len(best) == len(workloads) else None
    if gain is not None:
        ahead = gain.mean > 0 and gain.excludes_zero
        interval = (
            "one seed"
            if math.isnan(gain.low)
            else f"95% CI {100 * gain.low:+.2f}% .. {100 * gain.high:+.2f}%"
        )
        out.append(
            Result(NAME, "mean relative gain over the best at the guess", 100 * gain.mean, "{:+.2f}%",
                   f"> 0 beyond the noise ({interval})", ahead)
        )  # fmt: skip
    return out


def ablations_table(records: list[RunRecord], workloads: list[str]) -> str:
    """One row an ablation (``tuner:LABEL``): its difference from ``tuner`` (the default, the
    same seeds) on each workload, and its mean relative gain over them; empty without both."""
    by_workload = {w: by_seed([r for r in records if r.workload == w]) for w in workloads}
    minimize = {w: minimizes(w) for w in workloads}
    ablations = [name for name in tuners(records) if name != "tuner"]
    if not ablations or not all(by_workload[w].get("tuner") for w in workloads):
        return ""
    header = ("ablation", *(f"{w}: minus tuner [95% CI]" for w in workloads), "mean relative gain [95% CI]")
    lines = [_row(*header), _row(*("---" for _ in header))]
    for name in ablations:
        cells: list[str] = [name]
        for workload in workloads:
            found = compare(name, "tuner", by_workload[workload], minimize[workload])
            mark = " (beyond the noise)" if found and found.difference.excludes_zero else ""
            cells.append(found.difference.signed() + mark if found else "-")
        gain = relative_gains(name, {w: "tuner" for w in workloads}, by_workload, minimize)
        lines.append(_row(*cells, _gain_cell(gain)))
    return "\n".join(lines)
