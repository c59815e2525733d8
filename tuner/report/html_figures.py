"""The HTML report's figures, one list per phase, in reading order.

Each is drawn from what the report already computed, not from a second read of the storage
(the learning curves aside: ``StudyData.curves`` reads the top trials' alone).

Why not ``optuna.visualization``: its figures need an Optuna ``Study``. Rebuilding one in memory
from the report's slots costs ~0.6 s on 10,000 trials (0.27 s ``add_trials``, 0.35 s the
figure, measured) against ~0.01 s for the same figure drawn here, and it cannot show what this
report shows: Optuna orders the history by trial number (creation order), not by the order
trials finished in (what the "still improving" verdict counts), sees a retried trial as several
trials (the report merges them into one slot), and has no range edges, divergence marks or
isolation plots. So every figure is built with plotly directly from the report's series.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from tuner.report.best_step import EARLY, LATE
from tuner.report.build import PhaseReport
from tuner.report.findings import fmt
from tuner.report.html_charts import (
    BLUE,
    GREY,
    ORANGE,
    RED,
    Chart,
    Item,
    Note,
    bounded,
    figure,
    label,
    log_axis,
    y_title,
)
from tuner.report.html_space import axis_plots, isolation_plots
from tuner.report.study_data import StudyData

TOP_CURVES = 10


def phase_figures(report: PhaseReport, data: StudyData) -> list[Item]:
    """The phase's figures in reading order; a ``Note`` where a figure has nothing to show."""
    phase = report.data
    items: list[Item] = []
    if report.sweep is not None:
        items.append(_sweep(report))
    if not phase.completed:
        items.append(Note("no completed trial yet: no objective to plot"))
        return items
    if phase.searched:
        items.append(_history(report))
    if report.best_step is not None:
        items.append(_best_steps(report))
    if phase.kind != "sweep-lr":
        items += axis_plots(report)
        if phase.searched:
            items += isolation_plots(report)
    items.append(_curves(report, data))
    if report.transfer is not None:
        items.append(_transfer(report))
    return items


# -- 1. best so far ----------------------------------------------------------------------------


def _history(report: PhaseReport) -> Item:
    history = report.health.best_so_far
    order = np.arange(1, len(history) + 1)
    values = np.array([v for _, v, _ in history], dtype=float)
    best = np.array([b for _, _, b in history], dtype=float)
    trials = np.array([s for s, _, _ in history], dtype=np.int64)
    # the best-so-far line needs only its steps (where it improved) and its end
    steps = np.flatnonzero(np.r_[True, best[1:] != best[:-1]])
    steps = np.unique(np.r_[steps, len(best) - 1])
    sign = 1.0 if report.data.minimize else -1.0
    shown, said = bounded(len(history))
    ranked = np.argsort(sign * values, kind="stable")[shown]
    chosen = np.unique(np.r_[ranked, steps])
    traces = [
        go.Scatter(
            x=order[chosen],
            y=values[chosen],
            customdata=trials[chosen],
            mode="markers",
            name="trial",
            marker={"color": BLUE, "size": 7, "opacity": 0.75},
            hovertemplate="trial %{customdata} (#%{x} in trial order)<br>value %{y:.4g}<extra></extra>",
        ),
        go.Scatter(
            x=order[steps],
            y=best[steps],
            mode="lines",
            line={"shape": "hv", "color": ORANGE, "width": 2},
            name="best so far",
            hoverinfo="skip",
        ),
    ]
    return Chart(
        "best so far over trials" + said,
        "Each dot is a completed trial, in the order trials finished; the line is the best value so far. "
        "A line still stepping among the last trials means the search is still improving; a long flat "
        "tail means it has plateaued (the health verdict).",
        figure(traces, "completed trials, in the order they finished", y_title(report)),
    )


# -- 2. best-step position ---------------------------------------------------------------------


def _best_steps(report: PhaseReport) -> Item:
    result = report.best_step
    assert result is not None
    if not result.positions:
        return Note("best-step positions: no completed trial recorded its best step")
    bins = len(result.histogram)
    centers = (np.arange(bins) + 0.5) / bins
    counts = np.array(result.histogram, dtype=np.int64)
    bar = go.Bar(
        x=centers,
        y=counts,
        width=1 / bins,
        marker={"color": BLUE, "line": {"color": "white", "width": 1}},
        name="trials",
        hovertemplate="%{y} trials<extra></extra>",
    )
    drawn = figure([bar], "best step / max_train_steps", "completed trials", height=320)
    drawn.update_xaxes(range=[0, 1], tickformat=".0%", dtick=0.1)
    drawn.update_yaxes(rangemode="tozero", **({"dtick": 1} if counts.max() <= 8 else {}))
    for x0, x1, text in ((0, EARLY, "first 10%"), (LATE, 1, "last 25%")):
        drawn.add_vrect(x0=x0, x1=x1, fillcolor=ORANGE, opacity=0.1, line_width=0, layer="below")
        drawn.add_vline(x=x1 if x0 == 0 else x0, line={"color": ORANGE, "dash": "dash", "width": 1.5})
        label(drawn, (x0 + x1) / 2, text, ORANGE)
    return Chart(
        f"where the best checkpoint was, over {len(result.positions)} completed trials",
        "Where in training each trial's best evaluation came, as a fraction of its length. Most of them in "
        "the first 10% means training is longer than needed; most in the last 25% means the runs were still "
        "improving when they stopped.",
        drawn,
    )


# -- 5. learning curves ------------------------------------------------------------------------


def _curves(report: PhaseReport, data: StudyData) -> Item:
    top = report.data.completed[:TOP_CURVES]
    curves = data.curves(report.data, top)
    traces = []
    marks_x, marks_y, marks_trial = [], [], []
    for slot in top:
        curve = curves.get(slot.slot) or {}
        if not curve:
            continue
        steps = np.fromiter(curve.keys(), dtype=np.int64, count=len(curve))
        values = np.fromiter(curve.values(), dtype=float, count=len(curve))
        traces.append(
            go.Scatter(
                x=steps,
                y=values,
                mode="lines",
                name=f"trial {slot.slot}: {fmt(slot.value)}",
                line={"width": 2 if slot is top[0] else 1.3},
                hovertemplate=f"trial {slot.slot}<br>step %{{x}}<br>value %{{y:.4g}}<extra></extra>",
            )
        )
        if slot.best_step is not None and slot.best_step in curve:
            marks_x.append(slot.best_step)
            marks_y.append(curve[slot.best_step])
            marks_trial.append(slot.slot)
    if not traces:
        return Note("learning curves: the top trials stored no intermediate values")
    if marks_x:
        traces.append(
            go.Scatter(
                x=np.array(marks_x, dtype=np.int64),
                y=np.array(marks_y, dtype=float),
                customdata=np.array(marks_trial, dtype=np.int64),
                mode="markers",
                name="best step",
                marker={"color": "black", "size": 9, "symbol": "diamond-open", "line": {"width": 2}},
                hovertemplate="trial %{customdata}: best step %{x}<extra></extra>",
            )
        )
    drawn = figure(traces, "training step", y_title(report), height=420)
    drawn.update_layout(legend={"orientation": "v", "x": 1.02, "y": 1}, margin={"r": 150})
    return Chart(
        f"learning curves of the {len(top)} best trials",
        "The objective at each evaluation of the best trials (hover for values); a diamond marks the step "
        "whose checkpoint is the trial's result. Curves still falling (rising, for a higher-is-better "
        "objective) at the end were cut short; noisy curves make single evaluations unreliable.",
        drawn,
    )


# -- 6. transfer -------------------------------------------------------------------------------


def _transfer(report: PhaseReport) -> Item:
    transfer = report.transfer
    assert transfer is not None
    points = [p for p in transfer.points if p.value is not None]
    if not points:
        return Note(f"{transfer.source_phase} vs {report.phase}: no point has a completed trial yet")
    xs = np.array([p.source_value for p in points], dtype=float)
    ys = np.array([p.value for p in points], dtype=float)
    low, high = float(min(xs.min(), ys.min())), float(max(xs.max(), ys.max()))
    pad = 0.05 * (high - low or abs(high) or 1.0)
    line = np.array([low - pad, high + pad])
    traces = [
        go.Scatter(
            x=line, y=line, mode="lines", name="y = x", line={"color": GREY, "dash": "dot"}, hoverinfo="skip"
        ),
        go.Scatter(
            x=xs,
            y=ys,
            text=[f"trial {p.source_trial}" for p in points],
            customdata=np.array([[p.source_rank, p.rank or 0] for p in points], dtype=np.int64),
            mode="markers+text",
            textposition="top center",
            name="point",
            marker={"color": BLUE, "size": 10},
            hovertemplate="%{text}<br>rank %{customdata[0]} -> %{customdata[1]}<extra></extra>",
        ),
    ]
    drawn = figure(
        traces,
        f"{transfer.source_phase} {report.data.metric} (short trials)",
        f"{report.phase} {report.data.metric} (median over seeds)",
        showlegend=False,
    )
    return Chart(
        f"{transfer.source_phase} vs {report.phase}: did the ranking hold?",
        f"Each point is one of {transfer.source_phase}'s trials (labelled with its number), trained again in "
        f"{report.phase}. Points in the same order along both axes mean the short trials ranked the points "
        "as the long ones do (the transfer verdict); the dotted line is equal values.",
        drawn,
    )


# -- 7. sweep-lr -------------------------------------------------------------------------------


def _sweep(report: PhaseReport) -> Item:
    from tuner.playbook.sweep_lr import RowOutcome

    sweep = report.sweep
    plan = report.data.plan
    cap = plan.trial_steps if plan is not None else 0
    fit = [r for r in sweep.rows if r.slowest_fit_step is not None or r.median_fit_step is not None]
    not_fit = [
        r for r in sweep.rows if r.outcome in (RowOutcome.NOT_FIT, RowOutcome.PARTLY_FIT) and r not in fit
    ]
    diverged = [r for r in sweep.rows if r.outcome is RowOutcome.DIVERGED]
    if not (fit or not_fit or diverged):
        return Note("sweep-lr: no grid point has finished yet")
    traces = []
    if fit:
        traces.append(
            go.Scatter(
                x=np.array([r.lr for r in fit]),
                y=np.array([float(r.slowest_fit_step or r.median_fit_step) for r in fit]),
                text=[r.outcome_text for r in fit],
                mode="lines+markers",
                name="steps to fit",
                marker={"color": BLUE, "size": 10},
                hovertemplate="lr %{x:.3g}: %{y} steps (%{text})<extra></extra>",
            )
        )
    for rows, name, colour, symbol in (
        (not_fit, f"did not fit within {cap} steps", ORANGE, "triangle-up"),
        (diverged, "diverged", RED, "x"),
    ):
        if rows:
            traces.append(
                go.Scatter(
                    x=np.array([r.lr for r in rows]),
                    y=np.full(len(rows), float(cap)),
                    text=[r.outcome_text for r in rows],
                    mode="markers",
                    name=name,
                    marker={"color": colour, "size": 11, "symbol": symbol},
                    hovertemplate="lr %{x:.3g}: %{text}<extra></extra>",
                )
            )
    drawn = figure(traces, "learning rate (constant)", "steps to fit the training set", height=340)
    lrs = [r.lr for r in sweep.rows if r.lr > 0]
    log_axis(drawn, min(lrs), max(lrs))
    if sweep.recommended_max_train_steps is not None:
        drawn.add_hline(
            y=sweep.recommended_max_train_steps,
            line={"color": GREY, "dash": "dash"},
            label={
                "text": f"recommended max_train_steps {sweep.recommended_max_train_steps}",
                "textposition": "end",
                "yanchor": "bottom",
                "font": {"color": GREY, "size": 11},
            },
        )
    return Chart(
        "sweep-lr: steps to fit the training set per learning rate",
        "Each grid LR trained with a constant schedule until the training set was fit; the fewest steps any "
        "LR needs is the first max_train_steps (dashed). An LR marked at the top did not fit or diverged.",
        drawn,
    )
