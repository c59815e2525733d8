"""The report on a terminal: per phase (latest first) its trials, best trial, and each diagnostic's
verdicts, each with its rule and advice, wrapped to at most 100 columns.

Marks: ``!`` a warning (act on it), ``✓`` checked and fine, ``·`` context or too little data.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable

from rich.text import Text

from tuner.orchestrate.storage_url import sqlite_file
from tuner.output import shown_path
from tuner.report.build import PhaseReport, StudyReport
from tuner.report.delivered import DeliveredModel
from tuner.report.findings import Finding, Level, fmt

WIDTH = 100
LABEL = 13  # the label column: "best step", "search space"...
MARKS = {Level.WARNING: ("!", "bold yellow"), Level.OK: ("✓", "green"), Level.INFO: ("·", "dim")}


def render_report(report: StudyReport, width: int = WIDTH) -> list[Text]:
    width = max(60, min(WIDTH, width))
    count = f"{len(report.phases)} phases, latest first" if len(report.phases) != 1 else "1 phase"
    database = sqlite_file(report.storage)
    storage = shown_path(database) if database is not None else report.storage
    lines = labelled("study", f"{report.study} ({count})", width) + labelled("storage", storage, width)
    model = report.delivered
    if report.tuned_into is not None:  # tune's model lives in the next study it searched
        lines += labelled("tuned into", report.tuned_into.line(), width)
        model = report.tuned_into.delivered
    lines += delivered_lines(model, width, reproduce=True)
    for phase in report.phases:
        lines.append(Text(""))
        lines += _phase(phase, width)
    return lines


def wrap(text: str, width: int, first: str, rest: str) -> list[str]:
    return textwrap.wrap(
        text,
        width=width,
        initial_indent=first,
        subsequent_indent=rest,
        break_on_hyphens=False,
        break_long_words=False,
    ) or [first.rstrip()]


def labelled(label: str, text: str, width: int, style: str = "") -> list[Text]:
    """``label`` in the label column, ``text`` wrapped beside it (shared with ``tuner list``)."""
    pad = " " * LABEL
    out = []
    for i, line in enumerate(wrap(text, width, pad, pad)):
        head = f"{label:<{LABEL}}" if i == 0 else pad
        out.append(Text(head, style="bold") + Text(line[LABEL:], style=style))
    return out


def _finding(label: str, finding: Finding, width: int, first: bool, rule: bool = True) -> list[Text]:
    mark, style = MARKS[finding.level]
    head = f"{label if first else '':<{LABEL}}"
    body = wrap(finding.text, width, " " * (LABEL + 2), " " * (LABEL + 2))
    out = [Text(head, style="bold") + Text(mark, style=style) + Text(" " + body[0][LABEL + 2 :])]
    out += [Text(line) for line in body[1:]]
    indent = " " * (LABEL + 2)
    if finding.advice:
        out += [
            Text(line, style="cyan") for line in wrap("-> " + finding.advice, width, indent, indent + "   ")
        ]
    if finding.rule and rule:
        out += [
            Text(line, style="dim")
            for line in wrap("rule: " + finding.rule, width, indent, indent + "      ")
        ]
    return out


def _section(label: str, findings: Iterable[Finding], width: int) -> list[Text]:
    out: list[Text] = []
    items = list(findings)
    for i, finding in enumerate(items):
        # a rule shared by consecutive findings (one per hyperparameter) is said once, after the last
        repeated = i + 1 < len(items) and items[i + 1].rule == finding.rule
        out += _finding(label, finding, width, i == 0, rule=not repeated)
    return out


def _phase(report: PhaseReport, width: int) -> list[Text]:
    data = report.data
    steps = f" of {data.trial_steps} steps" if data.trial_steps else ""
    title = f"━━ {data.phase} · {len(data.slots)} trials{steps} · {data.direction} {data.metric} "
    lines = [Text(title + "━" * max(3, width - len(title)), style="bold")]
    lines += labelled("trials", report.tally, width)
    if report.best is not None:
        lines += _best(report, width)
    elif not data.completed:
        lines += labelled("best", "no completed trial yet: nothing to judge", width)
    if report.sweep is not None:
        lines += _sweep(report, width)
    if report.learning is not None:
        lines += _section("learning", report.learning.findings, width)
    if report.best_step is not None:
        lines += _section("best step", report.best_step.findings, width)
    if report.boundaries is not None:
        lines += _section("search space", report.boundaries.findings, width)
    elif data.kind == "round" and data.plan is not None and data.plan.source_phase:
        lines += labelled(
            "search space", f"fixed points from {data.plan.source_phase} (see it for ranges)", width, "dim"
        )
    lines += _section("health", report.health.findings, width)
    if report.transfer is not None:
        lines += _section("transfer", report.transfer.findings, width)
    if report.imbalance is not None:
        lines += _section("classes", report.imbalance.findings, width)
    for item in report.unreadable:
        lines += labelled("unreadable", f"{shown_path(item.path)}: {item.problem}", width, "yellow")
    for i, step in enumerate(report.next_steps, start=1):
        wrapped = wrap(f"{i}. {step}", width, " " * LABEL, " " * (LABEL + 3))
        for j, line in enumerate(wrapped):
            head = "next" if i == 1 and j == 0 else ""
            lines.append(Text(f"{head:<{LABEL}}", style="bold") + Text(line[LABEL:], style="cyan"))
    return lines


def _best(report: PhaseReport, width: int) -> list[Text]:
    best = report.best
    assert best is not None
    where = "" if best.best_step is None else f" at step {best.best_step}"
    where += f" of {best.max_train_steps}" if best.best_step is not None and best.max_train_steps else ""
    retries = f" ({best.attempts} attempts)" if best.attempts > 1 else ""
    lines = labelled("best", f"trial {best.trial}: {best.metric} = {fmt(best.value)}{where}{retries}", width)
    params = "  ".join(f"{k}={fmt(v)}" for k, v in best.params.items())
    if params:
        lines += labelled("", "params      " + params, width)
    if best.checkpoint and best.checkpoint_on_this_machine:
        lines += labelled("", "checkpoint  " + shown_path(best.checkpoint), width)
    elif best.run_dir:
        lines += labelled(
            "", "run folder  " + shown_path(best.run_dir) + " (best checkpoint not on this machine)", width
        )
    if best.reproduce:
        lines += labelled("", "reproduce   " + best.reproduce, width, "dim")
    return lines


def _sweep(report: PhaseReport, width: int) -> list[Text]:
    from tuner.playbook.sweep_lr import render_lines

    plan = report.data.plan
    assert plan is not None and plan.fit is not None
    rendered = render_lines(report.sweep, plan.fit.metric, plan.fit.threshold, plan.trial_steps)
    lines = [Text("sweep-lr", style="bold")]
    lines += [Text("  " + line) for line in rendered]
    recommended = report.data.recommended_max_train_steps
    if recommended is not None:
        in_file = plan.config.get("training", {}).get("max_train_steps")
        use = (
            f"the study file sets {in_file}, which wins"
            if in_file not in (None, recommended)
            else "used when the study file leaves training.max_train_steps out"
        )
        lines += labelled("stored", f"max_train_steps = {recommended} ({use})", width)
    return lines


def delivered_lines(delivered: DeliveredModel | None, width: int, *, reproduce: bool = False) -> list[Text]:
    """The study's model by the one rule (``tuner.report.delivered``), for ``tuner report`` and
    ``tuner list``: ``delivered`` when a full-length round delivered it, else ``candidate`` with why it
    is not one yet; then its checkpoint (and, with ``reproduce``, its command)."""
    if delivered is None:
        return labelled("delivered", "none yet: no round has a completed trial", width)
    run, spread = delivered.run, delivered.spread
    where = f"{run.phase} trial {run.trial}"
    if run.best_step is not None:
        where += f" at step {run.best_step}" + (f" of {run.max_train_steps}" if run.max_train_steps else "")
    text = f"{run.metric} = {fmt(run.value)} ({run.direction}), {where}"
    if delivered.split == "proxy":
        text += " (on the proxy split, not the validation set)"
    if delivered.delivered:
        lines = labelled("delivered", text, width) + _val_metrics(delivered, width)
        lines += labelled("seeds", delivered.spread_text, width)
        if delivered.unfinished:
            lines += labelled("", f"{run.phase} is unfinished: the choice may change", width, "yellow")
    else:
        lines = labelled("candidate", text, width) + labelled("", delivered.status, width, "yellow")
        lines += _val_metrics(delivered, width)
        if spread.seeds > 1:
            lines += labelled("seeds", delivered.spread_text, width)
    if run.checkpoint is None:
        lines += labelled(
            "checkpoint", "unknown (the trial recorded no run folder or best step)", width, "yellow"
        )
    elif run.checkpoint_on_this_machine:
        lines += labelled_path("checkpoint", run.checkpoint, "", width)
    else:
        lines += labelled_path("checkpoint", run.checkpoint, f"({run.checkpoint_problem})", width, "yellow")
    if reproduce and run.reproduce:  # wrapped at spaces, as the phases' best trials' are
        lines += labelled("reproduce", run.reproduce, width, "dim")
    return lines


def _val_metrics(delivered: DeliveredModel, width: int) -> list[Text]:
    text = delivered.val_metrics_text
    if text is None:
        return []
    return labelled(
        "val metrics",
        text,
        width,
        "dim" if delivered.val_metrics and delivered.val_metrics.unreadable else "",
    )


def labelled_path(label: str, path: str, note: str, width: int, style: str = "") -> list[Text]:
    """A path after its label (relative to the current folder when inside it; an SQLite URL as its
    file), or, too long for that, on a line of its own (never broken), then ``note``."""
    database = sqlite_file(path)
    if database is not None:
        path = shown_path(database)
    elif "://" not in path:  # a file; any other URL (postgresql://, grpc://) as it is
        path = shown_path(path)
    if LABEL + len(path) <= width:
        return labelled(label, f"{path} {note}".rstrip(), width, style)
    lines = [Text(label, style="bold"), Text("  " + path, style=style)]
    if note:
        lines += [Text(line, style=style) for line in wrap(note, width, "  ", "  ")]
    return lines
