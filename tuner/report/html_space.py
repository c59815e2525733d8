"""The HTML report's search-space figures: the objective along each hyperparameter (axis plots)
and, for each scientific one, the best value per bucket of it (isolation plots)."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import plotly.graph_objects as go

from tuner.report.build import PhaseReport
from tuner.report.findings import fmt
from tuner.report.html_charts import (
    BLUE,
    GOLD,
    GREY,
    KEEP_BEST,
    RED,
    Chart,
    Item,
    bounded,
    figure,
    label,
    log_axis,
    trial_numbers,
    y_title,
)
from tuner.report.study_data import SlotState, TrialSlot

ISOLATION_BINS = 8


def axis_plots(report: PhaseReport) -> list[Item]:
    """One plot per hyperparameter the phase's trials took at least two values of."""
    phase = report.data
    completed = phase.completed  # sorted on each access: once
    if phase.plan is None or not phase.plan.space or not completed:
        return []
    shown, said = bounded(len(completed))
    slots = [completed[i] for i in shown]
    diverged = phase.with_state(SlotState.DIVERGED)
    if len(diverged) > KEEP_BEST:
        diverged = diverged[:: math.ceil(len(diverged) / KEEP_BEST)]
    values = np.array([s.value for s in slots], dtype=float)
    low, high = float(values.min()), float(values.max())
    pad = 0.08 * (high - low or abs(high) or 1.0)
    worst = high + pad if phase.minimize else low - pad  # where diverged trials (no value) are drawn
    items: list[Item] = []
    for key, param in phase.plan.search_space().items():
        tried = [s for s in slots if key in s.params]
        if len({repr(s.params[key]) for s in tried}) < 2:
            continue  # one value (a round of fixed points that kept it): nothing to see along it
        items.append(_axis(report, key, param, tried, [s for s in diverged if key in s.params], worst, said))
    return items


def _xs(param: Any, slots: list[TrialSlot], key: str) -> np.ndarray:
    if param.type == "categorical":
        return np.array([_label(param, key, s.params[key]) for s in slots], dtype=object)
    return np.array([float(s.params[key]) for s in slots], dtype=float)


def _axis(
    report: PhaseReport,
    key: str,
    param: Any,
    slots: list[TrialSlot],
    diverged: list[TrialSlot],
    worst: float,
    said: str,
) -> Chart:
    hover = f"trial %{{customdata}}<br>{key} = %{{x}}"
    traces = [
        go.Scatter(
            x=_xs(param, slots, key),
            y=np.array([s.value for s in slots], dtype=float),
            customdata=trial_numbers(slots),
            mode="markers",
            name="completed",
            marker={"color": BLUE, "size": 7, "opacity": 0.65},
            hovertemplate=hover + "<br>value %{y:.4g}<extra></extra>",
        ),
        go.Scatter(
            x=_xs(param, slots[:1], key),
            y=np.array([slots[0].value], dtype=float),
            mode="markers",
            name=f"best (trial {slots[0].slot})",
            marker={"color": GOLD, "size": 15, "symbol": "star", "line": {"color": "black", "width": 1}},
            hoverinfo="skip",
        ),
    ]
    if diverged:
        traces.append(
            go.Scatter(
                x=_xs(param, diverged, key),
                y=np.full(len(diverged), worst),
                customdata=trial_numbers(diverged),
                mode="markers",
                name="diverged (no value)",
                marker={"color": RED, "size": 9, "symbol": "x"},
                hovertemplate=hover + " diverged<extra></extra>",
            )
        )
    drawn = figure(traces, key, y_title(report))
    if param.type == "categorical":
        drawn.update_xaxes(
            type="category", categoryorder="array", categoryarray=[str(c) for c in param.choices]
        )
        edges = "each choice on its own column"
    else:
        if param.log:
            log_axis(drawn, float(param.low), float(param.high))
        for edge, text, anchor in ((param.low, "low", "left"), (param.high, "high", "right")):
            drawn.add_vline(x=edge, line={"color": GREY, "dash": "dash", "width": 1.5})
            label(drawn, float(edge), f"{text} {fmt(edge)}", GREY, log=param.log, anchor=anchor)
        scale = ", log scale" if param.log else ""
        edges = f"dashed lines: the range's edges ({fmt(param.low)} .. {fmt(param.high)}{scale})"
    return Chart(
        f"{report.data.metric} vs {key} ({getattr(param, 'role', 'nuisance')}){said}",
        f"One dot per completed trial; {edges}. The best trials crowding against an edge mean the optimum "
        "may lie beyond it (the search-space verdict); red crosses are diverged trials (they have no value: "
        "drawn past the worst one), often a region to stay out of.",
        drawn,
    )


def isolation_plots(report: PhaseReport) -> list[Item]:
    """For each scientific hyperparameter: the best value in each bucket of it, i.e. the best over
    every other hyperparameter (the nuisance ones optimised away), as the playbook compares them."""
    phase = report.data
    if phase.plan is None:
        return []
    items: list[Item] = []
    completed = phase.completed
    for key, param in phase.plan.search_space().items():
        slots = [s for s in completed if key in s.params]  # best first
        if getattr(param, "role", "nuisance") != "scientific" or not slots:
            continue
        buckets, centers, names = _buckets(param, key, slots)
        best: dict[int, TrialSlot] = {}
        counts: dict[int, int] = {}
        for bucket, slot in zip(buckets, slots, strict=True):
            best.setdefault(bucket, slot)  # the first of a bucket is its best
            counts[bucket] = counts.get(bucket, 0) + 1
        filled = sorted(best)
        categorical = param.type == "categorical"
        trace = go.Scatter(
            x=centers[filled],
            y=np.array([best[b].value for b in filled], dtype=float),
            text=[f"{names[b]}: best of {counts[b]} trials (trial {best[b].slot})" for b in filled],
            mode="markers" if categorical else "lines+markers",
            marker={"color": BLUE, "size": 10},
            line={"color": BLUE, "width": 2},
            name="best in bucket",
            hovertemplate="%{text}<br>value %{y:.4g}<extra></extra>",
        )
        drawn = figure([trace], key, "best " + y_title(report))
        if categorical:
            drawn.update_xaxes(type="category", categoryorder="array", categoryarray=names)
            what = "choice"
        else:
            if param.log:
                log_axis(drawn, float(param.low), float(param.high), fixed=True)
            else:
                drawn.update_xaxes(range=[float(param.low), float(param.high)])
            what = f"of {ISOLATION_BINS} buckets ({'log ' if param.log else ''}equal width)"
        items.append(
            Chart(
                f"isolation plot: best {phase.metric} per {key} {'choice' if categorical else 'bucket'}",
                f"{key} is a scientific hyperparameter: for each {what} the best value of any trial in it, "
                "i.e. with the nuisance hyperparameters optimised away. This is the fair comparison of its "
                "values; a bucket with few trials (hover) is a weaker answer.",
                drawn,
            )
        )
    return items


def _label(param: Any, key: str, stored: Any) -> str:
    """A categorical value as the study file writes it (Optuna keeps a list or mapping as JSON
    text, which would otherwise show as a second category beside the choice itself)."""
    from tuner.orchestrate.search_space import to_config_values

    return str(to_config_values({key: param}, {key: stored})[key])


def _buckets(param: Any, key: str, slots: list[TrialSlot]) -> tuple[list[int], np.ndarray, list[str]]:
    """Each slot's bucket, the buckets' x positions and names: a categorical's choices (in the
    space's order, then any other value seen), or ``ISOLATION_BINS`` equal bins (log ones for log)."""
    if param.type == "categorical":
        index = {str(c): i for i, c in enumerate(param.choices)}
        labels = [_label(param, key, s.params[key]) for s in slots]
        for label in labels:
            index.setdefault(label, len(index))
        names = list(index)
        return [index[label] for label in labels], np.array(names, dtype=object), names
    low, high = float(param.low), float(param.high)
    space = np.geomspace if param.log else np.linspace
    edges = space(low, high, ISOLATION_BINS + 1)
    xs = np.array([float(s.params[key]) for s in slots])
    buckets = np.clip(np.searchsorted(edges, xs, side="right") - 1, 0, ISOLATION_BINS - 1)
    centers = np.sqrt(edges[:-1] * edges[1:]) if param.log else (edges[:-1] + edges[1:]) / 2
    names = [f"{fmt(float(a))} .. {fmt(float(b))}" for a, b in itertools.pairwise(edges)]
    return [int(b) for b in buckets], centers, names
