"""The tracking table on a terminal: one block per study, readable at 100 columns.

The reproduce command has a line of its own, never wrapped, so it can be copied whole.
"""

from __future__ import annotations

from rich.text import Text

from tuner._format import duration
from tuner.orchestrate.storage_url import is_postgres, sqlite_file
from tuner.output import shown_path
from tuner.report.findings import fmt
from tuner.report.terminal import LABEL, WIDTH, labelled, wrap
from tuner.report.tracking import BestRow, TrackingRow


def render_row(row: TrackingRow, width: int = WIDTH) -> list[Text]:
    width = max(60, min(WIDTH, width))
    title = f"━━ {row.study} "
    lines = [Text(title + "━" * max(3, width - len(title)), style="bold")]
    if row.notes:
        lines += labelled("notes", " ".join(row.notes.split()), width)
    lines += (
        _path("file", row.study_file, "", width) if row.study_file else labelled("file", "unknown", width)
    )
    lines += _path("storage", row.storage, "", width, "dim")
    lines += _phases(row, width)
    lines += _best(row.best, width)
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


def _best(best: BestRow | None, width: int) -> list[Text]:
    if best is None:
        return labelled("best", "no completed trial yet", width)
    where = f"{best.phase} trial {best.trial}"
    if best.best_step is not None:
        where += f" at step {best.best_step}" + (
            f" of {best.max_train_steps}" if best.max_train_steps else ""
        )
    text = f"{best.metric} = {fmt(best.value)} ({best.direction}), {where}"
    if best.split == "proxy":
        text += " (on the proxy split, not the validation set: no other phase has a completed trial)"
    lines = labelled("best", text, width)
    if best.checkpoint is None:
        lines += labelled(
            "checkpoint", "unknown (the trial recorded no run folder or best step)", width, "yellow"
        )
    elif best.checkpoint_on_this_machine:
        lines += _path("checkpoint", best.checkpoint, "", width)
    else:
        lines += _path("checkpoint", best.checkpoint, f"({best.checkpoint_problem})", width, "yellow")
    return lines


def _path(label: str, path: str, note: str, width: int, style: str = "") -> list[Text]:
    """A path after its label (relative to the current folder when inside it; an SQLite URL as its
    file), or, too long for that, on a line of its own (never broken), then ``note``."""
    database = sqlite_file(path)
    path = shown_path(database if database is not None else path) if not is_postgres(path) else path
    if LABEL + len(path) <= width:
        return labelled(label, f"{path} {note}".rstrip(), width, style)
    lines = [Text(label, style="bold"), Text("  " + path, style=style)]
    if note:
        lines += [Text(line, style=style) for line in wrap(note, width, "  ", "  ")]
    return lines
