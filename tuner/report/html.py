"""``tuner report STUDY --html PATH``: the report as one self-contained HTML file.

First the study's model (``tuner.report.delivered``: delivered, or a candidate and why not yet).
Per phase (latest first, as on the terminal): the trials, the best trial (with the command that
reproduces it), every verdict with its rule and advice, what to do next, then the figures
(``html_figures``). It works offline: plotly's JavaScript is inlined once in the page's head,
each figure is a ``<div>`` with its data, and nothing is fetched (no CDN, no MathJax, no fonts).

plotly is an optional extra (``pip install 'tuner[html]'``): imported only here, on use.
"""

from __future__ import annotations

import html
import itertools
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tuner._atomic import write_output_file
from tuner.errors import UsageError
from tuner.report.best_trial import BestTrial
from tuner.report.build import PhaseReport, StudyReport
from tuner.report.delivered import DeliveredModel
from tuner.report.findings import Finding, Level, fmt
from tuner.report.study_data import StudyData

INSTALL_HINT = "--html needs plotly: pip install 'tuner[html]' (make install installs it)"
# typesetMath off: plotly.js would look for MathJax; no logo link
PLOTLY_CONFIG = {
    "displaylogo": False,
    "responsive": True,
    "typesetMath": False,
    "modeBarButtonsToRemove": ["select2d", "lasso2d"],
}
MARKS = {Level.WARNING: ("!", "warning"), Level.OK: ("✓", "ok"), Level.INFO: ("·", "info")}

CSS = """
body { margin: 0; background: #f6f7f9; color: #1d2430;
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; }
main { max-width: 1100px; margin: 0 auto; padding: 24px 28px 64px; background: white; }
h1 { font-size: 26px; margin: 8px 0 2px; }
h2 { font-size: 21px; margin: 40px 0 8px; padding-top: 14px; border-top: 3px solid #1d2430; }
h2 .sub { font-size: 15px; font-weight: normal; color: #555; margin-left: 8px; }
h3 { font-size: 16px; margin: 22px 0 6px; color: #333; }
.meta, .note, figcaption .how { color: #5a6270; }
nav a { margin-right: 12px; }
a { color: #1f5fa8; }
table.kv { border-collapse: collapse; }
table.kv th { text-align: left; font-weight: 600; padding: 2px 16px 2px 0; vertical-align: top;
  white-space: nowrap; }
table.kv td { padding: 2px 0; }
code, pre { font: 13px/1.45 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
pre { background: #f3f4f6; border: 1px solid #e1e4e8; border-radius: 4px; padding: 6px 10px;
  overflow-x: auto; margin: 2px 0; white-space: pre-wrap; }
td code { background: #f3f4f6; padding: 1px 4px; border-radius: 3px; }
ul.verdicts { list-style: none; padding: 0; margin: 0; }
ul.verdicts li { margin: 6px 0; padding: 6px 10px 6px 12px; border-left: 5px solid #c9ced6;
  background: #fafbfc; }
ul.verdicts li.warning { border-left-color: #e08a00; background: #fff6e5; }
ul.verdicts li.ok { border-left-color: #2e9e44; }
.mark { display: inline-block; min-width: 84px; margin-right: 6px; font-weight: 700; font-size: 12px;
  text-transform: uppercase; }
li.warning .mark { color: #b86e00; } li.ok .mark { color: #23823a; } li.info .mark { color: #7a828e; }
.area { font-weight: 600; margin-right: 6px; }
.advice { color: #1f5fa8; margin-top: 2px; }
.rule { color: #6b7280; font-size: 13px; }
p.warning { color: #b86e00; font-weight: 600; }
ol.next li { margin: 3px 0; }
figure { margin: 18px 0 28px; }
figcaption .title { font-weight: 600; }
figcaption .how { font-size: 13.5px; }
p.note { font-style: italic; }
"""


def require_plotly() -> None:
    """A one-line UsageError when plotly (the ``html`` extra) is not installed."""
    try:
        import plotly  # noqa: F401
    except ImportError:
        raise UsageError(INSTALL_HINT) from None


def write_html(report: StudyReport, data: StudyData, path: Path) -> None:
    """Write the report to ``path`` (atomically): one file, plotly's JavaScript inlined."""
    require_plotly()
    if path.is_dir():
        raise UsageError(f"--html {path} is a folder: give the path of the file to write")
    import plotly
    import plotly.offline

    from tuner.report.html_figures import phase_figures

    numbers = itertools.count(1)  # figure-1, figure-2...: stable ids, in page order
    sections = []
    for phase in report.phases:
        figures = [_item(item, next(numbers)) for item in phase_figures(phase, data)]
        sections.append(_phase(phase, figures))
    page = _page(report, sections, plotly.offline.get_plotlyjs(), plotly.__version__)
    write_output_file(path, page)


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _anchor(phase: str) -> str:
    return "phase-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in phase)


def _page(report: StudyReport, sections: list[str], plotly_js: str, plotly_version: str) -> str:
    count = f"{len(report.phases)} phases, latest first" if len(report.phases) != 1 else "1 phase"
    written = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    nav = " ".join(f'<a href="#{_anchor(p.phase)}">{_e(p.phase)}</a>' for p in report.phases)
    suggestions = _suggestions(report)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>tuner report: {_e(report.study)}</title>\n<style>{CSS}</style>\n"
        f'<script type="text/javascript">/* plotly.js, inlined by plotly {_e(plotly_version)} */\n'
        f"{plotly_js}\n</script>\n</head>\n<body>\n<main>\n"
        f"<h1>{_e(report.study)}</h1>\n"
        f"<p class='meta'>tuner report: {count} · storage {_e(report.storage)} · written {written}</p>\n"
        f"<nav>phases: {nav}</nav>\n{_decision_log(report)}{_delivered(report)}\n{suggestions}\n"
        + "\n".join(sections)
        + "\n</main>\n</body>\n</html>\n"
    )


def _decision_log(report: StudyReport) -> str:
    """``tuner tune``'s decisions, in order: the page's first section when tune ran the study."""
    if report.tune is None:
        return ""
    budget = report.tune.budget.text if report.tune.budget else "?"
    items = "".join(
        f"<li><code>{_e(d.kind)}</code> <span class='meta'>{_e(d.stage)}</span> {_e(d.text)}</li>"
        for d in report.tune.decisions
    )
    return (
        f"<section id='decision-log'><h2>tuner tune: decision log</h2>"
        f"<p class='meta'>budget {_e(budget)} ({report.tune.budget_steps or 0:,} training steps)</p>"
        f"<ol>{items}</ol></section>\n"
    )


def _suggestions(report: StudyReport) -> str:
    """What ``--write-next`` would change in the study file."""
    if not report.suggestions:
        return ""
    items = ""
    for suggestion in report.suggestions:
        new = fmt(suggestion.new) if suggestion.new is not None else "removed"
        drop = f" (drop {fmt(suggestion.drop)})" if suggestion.drop is not None else ""
        items += (
            f"<li><code>{_e(suggestion.key)}</code>: {_e(fmt(suggestion.old))} → {_e(new)}{_e(drop)} "
            f"<span class='rule'>{_e(suggestion.reason)}</span></li>"
        )
    return (
        "<h3>suggested changes to the study file</h3><p class='meta'>What <code>tuner report STUDY "
        f"--write-next PATH</code> applies:</p><ul>{items}</ul>"
    )


def _item(item: Any, number: int) -> str:
    from tuner.report.html_figures import Chart

    if not isinstance(item, Chart):
        return f"<p class='note'>{_e(item.text)}</p>"
    div = item.figure.to_html(
        full_html=False,
        include_plotlyjs=False,
        include_mathjax=False,
        config=PLOTLY_CONFIG,
        div_id=f"figure-{number}",
        default_width="100%",
    )
    return (
        f"<figure><figcaption><div class='title'>{_e(item.title)}</div>"
        f"<div class='how'>{_e(item.how)}</div></figcaption>\n{div}\n</figure>"
    )


def _verdicts(report: PhaseReport) -> str:
    """Every verdict, in the terminal report's order; a round of fixed points says where its ranges
    were judged."""
    data = report.data
    items = ""
    for area, part in (
        ("learning", report.learning),
        ("best step", report.best_step),
        ("search space", report.boundaries),
        ("health", report.health),
        ("transfer", report.transfer),
        ("classes", report.imbalance),
    ):
        if part is not None:
            items += "".join(_finding(area, finding) for finding in part.findings)
        elif area == "search space" and data.kind == "round" and data.plan and data.plan.source_phase:
            items += (
                "<li class='info'><span class='mark'>· note</span><span class='area'>search space</span>"
                f"fixed points from {_e(data.plan.source_phase)} (see it for ranges)</li>"
            )
    for missing in report.unreadable:
        items += (
            f"<li class='warning'><span class='mark'>! unreadable</span>{_e(missing.path)}: "
            f"{_e(missing.problem)}</li>"
        )
    return items


def _finding(area: str, finding: Finding) -> str:
    mark, css = MARKS[finding.level]
    word = {"warning": "warning", "ok": "ok", "info": "note"}[css]
    out = f"<li class='{css}'><span class='mark'>{mark} {word}</span><span class='area'>{_e(area)}</span>"
    out += _e(finding.text)
    if finding.advice:
        out += f"<div class='advice'>→ {_e(finding.advice)}</div>"
    if finding.rule:
        out += f"<div class='rule'>rule: {_e(finding.rule)}</div>"
    return out + "</li>"


def _best(report: PhaseReport) -> str:
    if report.best is None:
        return "<h3>best trial</h3><p class='note'>no completed trial yet: nothing to judge</p>"
    return f"<h3>best trial</h3>{_run_table(report.best)}"


def _delivered(report: StudyReport) -> str:
    """The study's model by the one rule (``tuner.report.delivered``), first on the page."""
    from tuner.report.delivered import RULE

    delivered = report.tuned_into.delivered if report.tuned_into else report.delivered
    into = f"<p class='note'>{_e(report.tuned_into.line())}</p>" if report.tuned_into else ""
    if delivered is None:
        return f"<h2>delivered model</h2>{into}<p class='note'>none yet: no round has a completed trial</p>"
    heading = "delivered model" if delivered.delivered else "candidate: not a delivered model yet"
    extra = [("phase", delivered.run.phase)]
    after = _val_metric_rows(delivered)
    if delivered.delivered or delivered.spread.seeds > 1:
        after.append(("seeds", delivered.spread_text))
    if delivered.split == "proxy":
        after.append(("scored on", "the proxy split, not the validation set"))
    status = "" if delivered.delivered else f"<p class='warning'>{_e(delivered.status)}</p>"
    if delivered.delivered and delivered.unfinished:
        status = f"<p class='warning'>{_e(delivered.run.phase)} is unfinished: the choice may change</p>"
    return (
        f"<h2>{_e(heading)}</h2>{into}{status}{_run_table(delivered.run, extra, after)}"
        f"<p class='rule'>rule: {_e(RULE)}</p>"
    )


def _val_metric_rows(delivered: DeliveredModel) -> list[tuple[str, str]]:
    """A row for each other validation metric of the delivered run's best eval (``val/r2`` beside
    an objective of ``val/mse``), or one saying why they could not be read."""
    metrics = delivered.val_metrics
    if metrics is None:
        return []
    if metrics.unreadable is not None:
        return [("val metrics", delivered.val_metrics_text or "")]
    rows = [(key, fmt(value)) for key, value in metrics.shown(delivered.run.metric)]
    if metrics.per_class:
        rows.append(("per class", "in tuner report --json (val_metrics)"))
    return rows


def _run_table(
    best: BestTrial, extra: list[tuple[str, str]] | None = None, after: list[tuple[str, str]] | None = None
) -> str:
    """One trial's value, step, params, checkpoint and reproduce command as a table (``extra`` rows
    first, ``after`` rows after its value and step)."""
    where = f"step {best.best_step}" + (f" of {best.max_train_steps}" if best.max_train_steps else "")
    rows = [
        *(extra or []),
        ("trial", f"{best.trial}" + (f" ({best.attempts} attempts)" if best.attempts > 1 else "")),
        (best.metric, fmt(best.value)),
        ("best step", where if best.best_step is not None else "not recorded"),
        *(after or []),
    ]
    cells = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    if best.params:
        params = " ".join(f"<code>{_e(k)}={_e(fmt(v))}</code>" for k, v in best.params.items())
        cells += f"<tr><th>params</th><td>{params}</td></tr>"
    if best.checkpoint and best.checkpoint_on_this_machine:
        cells += f"<tr><th>checkpoint</th><td><code>{_e(best.checkpoint)}</code></td></tr>"
    elif best.run_dir:
        cells += (
            f"<tr><th>run folder</th><td><code>{_e(best.run_dir)}</code> "
            "(best checkpoint not on this machine)</td></tr>"
        )
    if best.reproduce:
        cells += f"<tr><th>reproduce</th><td><pre><code>{_e(best.reproduce)}</code></pre></td></tr>"
    return f"<table class='kv'>{cells}</table>"


def _sweep(report: PhaseReport) -> str:
    from tuner.playbook.sweep_lr import render_lines

    plan = report.data.plan
    if report.sweep is None or plan is None or plan.fit is None:
        return ""
    lines = render_lines(report.sweep, plan.fit.metric, plan.fit.threshold, plan.trial_steps)
    out = "<h3>sweep-lr</h3><pre>" + _e("\n".join(lines).rstrip()) + "</pre>"
    if report.data.recommended_max_train_steps is not None:
        out += (
            f"<p>stored: max_train_steps = {report.data.recommended_max_train_steps} (used when the study "
            "file leaves training.max_train_steps out)</p>"
        )
    return out


def _phase(report: PhaseReport, figures: list[str]) -> str:
    data = report.data
    steps = f" of {data.trial_steps} steps" if data.trial_steps else ""
    sub = f"{len(data.slots)} trials{steps} · {data.direction} {data.metric}"
    parts = [
        f"<section class='phase' id='{_anchor(data.phase)}'>",
        f"<h2>{_e(data.phase)}<span class='sub'>{_e(sub)}</span></h2>",
        f"<table class='kv'><tr><th>trials</th><td>{_e(report.tally)}</td></tr></table>",
        _best(report),
        _sweep(report),
    ]
    parts.append(f"<h3>verdicts</h3><ul class='verdicts'>{_verdicts(report)}</ul>")
    if report.next_steps:
        steps_html = "".join(f"<li>{_e(step)}</li>" for step in report.next_steps)
        parts.append(f"<h3>next steps</h3><ol class='next'>{steps_html}</ol>")
    parts.append("<h3>figures</h3>")
    parts += figures or ["<p class='note'>nothing to plot for this phase</p>"]
    parts.append("</section>")
    return "\n".join(p for p in parts if p)
