"""The tracking table on a terminal: one block per study, readable at 100 columns.

The reproduce command has a line of its own, never wrapped, so it can be copied whole.
"""

from __future__ import annotations

from rich.text import Text

from tuner._format import duration
from tuner.report.terminal import WIDTH, delivered_lines, labelled, labelled_path
from tuner.report.tracking import TrackingRow


def render_row(row: TrackingRow, width: int = WIDTH) -> list[Text]:
    width = max(60, min(WIDTH, width))
    title = f"━━ {row.study} "
    lines = [Text(title + "━" * max(3, width - len(title)), style="bold")]
    if row.notes:
        lines += labelled("notes", " ".join(row.notes.split()), width)
    lines += (
        labelled_path("file", row.study_file, "", width)
        if row.study_file
        else labelled("file", "unknown", width)
    )
    lines += labelled_path("storage", row.storage, "", width, "dim")
    lines += _phases(row, width)
    if row.tune_text():
        lines += labelled("tune", row.tune_text(), width)
    lines += delivered_lines(row.delivered, width)
    trials = f"{row.trials} {'trial' if row.trials == 1 else 'trials'}"
    if row.attempts != row.trials:
        trials += f", {row.attempts} attempts"
    lines += labelled("training", f"{duration(row.train_s)} (sum over {trials})", width)
    lines += labelled("code", row.code_text() or "no trial has started", width)
    if row.reproduce:
        lines.append(Text("reproduce", style="bold"))
        lines.append(Text("  " + row.reproduce, style="dim"))
    return lines


def _phases(row: TrackingRow, width: int) -> list[Text]:
    if not row.phases:
        return labelled("phases", "none", width)
    name_width = max(len(p.phase) for p in row.phases)
    count_width = max(len(str(p.trials)) for p in row.phases)
    lines: list[Text] = []
    for i, phase in enumerate(row.phases):
        noun = "trial " if phase.trials == 1 else "trials"
        text = f"{phase.phase:<{name_width}}  {phase.trials:>{count_width}} {noun}: {phase.tally}"
        if phase.proxy_fraction:
            text += f"; validates on a proxy split ({phase.proxy_fraction:.0%} of the training split)"
        lines += labelled("phases" if i == 0 else "", text, width)
    return lines
