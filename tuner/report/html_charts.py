"""What every figure of the HTML report shares: its look, its caption, and the bound on its points.

Figures are ``go.Scatter``/``go.Bar`` (SVG): WebGL (``scattergl``) draws nothing in a browser
without a GPU. Data go in as numpy arrays, which plotly writes as compact base64 typed arrays.

Point counts are bounded (``MAX_POINTS`` per trace: the best ``KEEP_BEST`` and an even sample of
the rest, said in the title), so a 10,000-trial study stays a small file a browser draws quickly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import plotly.graph_objects as go

from tuner.report.build import PhaseReport

MAX_POINTS = 2000
KEEP_BEST = 500
BLUE, RED, ORANGE, GREY, GOLD = "#1f77b4", "#d62728", "#ff7f0e", "#8c8c8c", "#e6a700"
# a small template of our own: plotly's default one would be copied into every figure (~8 KB each)
TEMPLATE = go.layout.Template(
    layout={
        "font": {"family": "system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif", "size": 12},
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "xaxis": {"gridcolor": "#e8e8e8", "linecolor": "#999", "zeroline": False, "ticks": "outside"},
        "yaxis": {"gridcolor": "#e8e8e8", "linecolor": "#999", "zeroline": False, "ticks": "outside"},
        "hoverlabel": {"font": {"size": 12}},
        "legend": {"orientation": "h", "y": -0.22, "x": 0},
    }
)


@dataclass
class Chart:
    title: str
    how: str  # how to read it, one or two sentences
    figure: go.Figure


@dataclass
class Note:
    text: str  # why a figure is not drawn


Item = Chart | Note


def figure(traces: list[Any], x_title: str, y_title: str, height: int = 380, **layout: Any) -> go.Figure:
    """Traces with the report's look; a legend when there are several."""
    drawn = go.Figure(traces)
    drawn.update_layout(
        template=TEMPLATE,
        height=height,
        margin={"l": 64, "r": 24, "t": 48, "b": 56},  # t: room for the labels and tool bar
        xaxis_title=x_title,
        yaxis_title=y_title,
        **{"showlegend": len(traces) > 1, **layout},
    )
    return drawn


def label(
    drawn: go.Figure, x: float, text: str, colour: str, *, log: bool = False, anchor: str = "center"
) -> None:
    """A label above the plot at data ``x`` (an annotation on a log axis takes log10 of it)."""
    drawn.add_annotation(
        x=math.log10(x) if log else x,
        xref="x",
        y=1,
        yref="paper",
        yanchor="bottom",
        xanchor=anchor,
        text=text,
        showarrow=False,
        font={"color": colour, "size": 11},
    )


def log_axis(drawn: go.Figure, low: float, high: float, *, fixed: bool = False) -> None:
    """A log x axis, ticks at 1, 2 and 5 of each decade (each decade alone past 3 of them);
    ``fixed``: exactly ``low .. high``."""
    decades = math.log10(high / low) if low > 0 and high > low else 0.0
    ticks = {"dtick": 1} if decades > 3 else {"dtick": "D2"}
    span = {"range": [math.log10(low), math.log10(high)]} if fixed and decades else {}
    drawn.update_xaxes(type="log", **ticks, **span)


def y_title(report: PhaseReport) -> str:
    data = report.data
    return f"{data.metric} ({'lower' if data.minimize else 'higher'} is better)"


def trial_numbers(slots: list[Any]) -> np.ndarray:
    return np.array([s.slot for s in slots], dtype=np.int64)


def bounded(count: int) -> tuple[np.ndarray, str]:
    """Indices of a best-first list of ``count`` to draw: all, or the best ``KEEP_BEST`` and every
    k-th of the rest; and the words that say so (empty when all are drawn)."""
    if count <= MAX_POINTS:
        return np.arange(count), ""
    every = math.ceil((count - KEEP_BEST) / (MAX_POINTS - KEEP_BEST))
    chosen = np.concatenate([np.arange(KEEP_BEST), np.arange(KEEP_BEST, count, every)])
    return (
        chosen,
        f" ({len(chosen)} of {count} drawn: the {KEEP_BEST} best and every {every}th of the others)",
    )
