"""sweep-lr's table and verdicts as text, at most 100 columns wide."""

from __future__ import annotations

import textwrap

from tuner.playbook.sweep_grid import format_lr
from tuner.playbook.sweep_result import SweepResult, steps_text
from tuner.playbook.sweep_rows import RowOutcome, SweepOutcome

TABLE_WIDTH = 100
_GAP_WIDTH = 2


# -- rendering --------------------------------------------------------------------------------


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}"


def render_lines(result: SweepResult, fit_metric: str, fit_threshold: float, max_steps: int) -> list[str]:
    """The table (at most 100 columns), then each verdict (wrapped), its advice after "->".

    With several seeds, "steps to fit" is the slowest seed's (what the recommendation uses) and
    a column shows the median [min..max]. "val best at" is the step where the objective (the
    validation metric) was best, median over the seeds: far before the fit step, the rest of the
    way fit what does not generalise (``BestLongBeforeFit``); shown once a trial has one (a seed
    stopped because it could not win has none: its best is cut off at its stop). An LR stopped
    that way shows "over N" steps to fit (N: the last step it trained). A long
    fit-metric name shortens its header to "best value"; then "final train loss" to "train loss";
    a long outcome wraps onto a continuation line.
    """
    multi = any(row.seeds > 1 for row in result.rows)
    best_at_shown = any(row.median_best_step is not None for row in result.rows)
    table: list[list[str]] = []
    for row in result.rows:
        if row.slowest_fit_step is not None:
            steps = str(row.slowest_fit_step)
        elif row.outcome in (RowOutcome.NOT_FIT, RowOutcome.PARTLY_FIT) and row.count(SweepOutcome.NOT_FIT):
            steps = f"not within {max_steps} steps"
        elif row.stopped_at_step is not None:  # stopped (cannot win): it would fit later, if ever
            steps = f"over {row.stopped_at_step}"
        else:
            steps = "-"
        cells = [format_lr(row.lr), steps]
        if multi:
            median = "-" if row.median_fit_step is None else steps_text(row.median_fit_step)
            if row.spread is not None:
                median += f" [{row.spread[0]}..{row.spread[1]}]"
            cells.append(median)
        if best_at_shown:
            cells.append("-" if row.median_best_step is None else steps_text(row.median_best_step))
        cells += [_num(row.final_train_loss), _num(row.best_fit_value), row.outcome_text]
        table.append(cells)
    best = f"best {fit_metric}"
    for best_header, loss_header in (
        (best, "final train loss"),
        ("best value", "final train loss"),
        ("best value", "train loss"),
    ):
        headers = ["lr", "steps to fit (slowest)" if multi else "steps to fit"]
        headers += ["median [min..max]"] if multi else []
        headers += ["val best at"] if best_at_shown else []
        headers += [loss_header, best_header, "outcome"]
        widths = [max([len(headers[i])] + [len(cells[i]) for cells in table]) for i in range(len(headers))]
        room = TABLE_WIDTH - sum(widths[:-1]) - _GAP_WIDTH * (len(widths) - 1)
        if room >= min(widths[-1], 20):
            break
    widths[-1] = max(10, min(widths[-1], room))

    def line(cells: list[str]) -> list[str]:
        *first, last = cells
        parts = textwrap.wrap(last, widths[-1]) or [""]
        head = "  ".join(cell.ljust(width) for cell, width in zip(first, widths, strict=False))
        indent = " " * (len(head) + _GAP_WIDTH)
        return [f"{head}  {parts[0]}".rstrip()] + [indent + part for part in parts[1:]]

    lines = line(headers) + line(["-" * w for w in widths])
    for cells in table:
        lines += line(cells)
    if result.verdicts:
        lines.append("")
    for verdict in result.verdicts:
        lines += textwrap.wrap(verdict.text, TABLE_WIDTH, initial_indent="- ", subsequent_indent="  ")
        if verdict.advice:
            lines += textwrap.wrap(
                verdict.advice, TABLE_WIDTH, initial_indent="  -> ", subsequent_indent="     "
            )
    return lines
