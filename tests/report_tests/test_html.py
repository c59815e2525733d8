"""``tuner report STUDY --html PATH``: one offline file whose every figure a real browser draws.

The study (sweep-lr, a round 1 of 12 trials with 2 diverged and a scientific LR, a round 2 of
round 1's top 3) is built with ``builders``; the page is opened in headless Chromium with every
host name unresolvable, so a figure that needed the network would stay empty.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests._processes import run
from tests.report_tests.builders import Built, add_trial, study
from tests.spec_tests._support import REPO, invoke, plain, single_error

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
ARTIFACTS = Path(os.environ.get("TUNER_TEST_ARTIFACTS") or REPO / "test-artifacts")
SPACE = {
    "optimizer.lr": {"type": "float", "low": 0.01, "high": 1.0, "log": True, "role": "scientific"},
    "training.batch_size": {"type": "categorical", "choices": [8, 16, 32]},
    "optimizer.weight_decay": {"type": "float", "low": 0.0, "high": 0.1},
}
LRS = [0.012, 0.02, 0.03, 0.05, 0.08, 0.12, 0.2, 0.3, 0.45, 0.6, 0.8, 0.95]  # >= 0.8 diverge
# the figures each phase must have:
# round-2 (3 fixed points): best-step histogram, 3 axis plots, learning curves, round 1 vs 2
# round-1 (searched): best so far, best-step histogram, 3 axis plots, 1 isolation (lr), curves
# sweep-lr: steps to fit per LR, learning curves
FIGURES = {"round-2": 6, "round-1": 7, "sweep-lr": 2}
# a resource the page would load: a tag's src/href/data, a CSS url() or @import
EXTERNAL = re.compile(
    r"<(?:script|link|img|iframe|source|video|audio|embed|object|image|use)\b[^>]*"
    r"\b(?:src|href|data|xlink:href)\s*=\s*[\"']?\s*(?:https?:)?//"
    r"|url\(\s*[\"']?\s*(?:https?:)?//|@import",
    re.IGNORECASE,
)


def _env() -> dict[str, str | None]:
    return {"TUNER_STORAGE": None, "TUNER_OUTPUT_DIR": None}


def _params(i: int) -> dict[str, Any]:
    return {
        "optimizer.lr": LRS[i],
        "training.batch_size": [8, 16, 32][i % 3],
        "optimizer.weight_decay": round((i * 0.037) % 0.1, 4),
    }


def _build(folder: Path) -> Built:
    from tuner.playbook.plan import load_plan

    # eval_every 5: 8 evals in a 40-step trial, 2 after step 30, enough to judge "still improving"
    built = study(folder, search_space=SPACE, round1={"trials": 12}, round2={"top_k": 3}, eval_every=5)
    sweep = built.start("sweep-lr")
    for i, planned in enumerate(load_plan(sweep.user_attrs).slots):
        add_trial(sweep, i, 0.1, dict(planned.values), best_step=30, fit_step=20 + 10 * (i % 2))
    round1 = built.start("round-1")
    for i, lr in enumerate(LRS):
        if lr >= 0.8:
            add_trial(round1, i, None, _params(i), state="FAIL", failure_reason="diverged")
        else:  # most best steps at the very end: a "train longer" warning
            add_trial(round1, i, 0.1 + (math.log10(lr) + 1) ** 2, _params(i), best_step=40 if i % 4 else 20)
    round2 = built.start("round-2")
    for i, planned in enumerate(load_plan(round2.user_attrs).slots):
        add_trial(round2, i, 0.08 + 0.01 * i, dict(planned.values), best_step=40, **planned.attrs)
    return built


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("html")
    built = _build(folder)
    path = folder / "out" / "report.html"
    result = invoke(
        "report", str(built.path), "--output-dir", str(built.output_dir), "--html", str(path), env=_env()
    )
    assert result.exit_code == 0, plain(result.output)
    assert f"html         {path}" in plain(result.stdout)
    return path


def test_the_page_holds_every_phase_its_verdicts_and_the_best_trial(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    sections = re.findall(r"<section class='phase' id='phase-([^']+)'>", text)
    assert sections == ["round-2", "round-1", "sweep-lr"]  # latest first
    round1 = text[text.index("id='phase-round-1'") : text.index("id='phase-sweep-lr'")]
    # a warning is marked as one, its text and rule escaped (">" in "best step > 75%")
    assert "<li class='warning'><span class='mark'>! warning</span>" in round1
    assert "training may be too short" in round1
    assert "best step &gt; 75% of max_train_steps" in round1
    assert "best step > 75%" not in text
    assert "<pre><code>tuner train study.yaml --set slot=5</code></pre>" in round1  # round 1's best
    assert "<h3>next steps</h3>" in round1
    assert "<code>training.max_train_steps</code>: 40 → 60" in text  # what --write-next applies
    assert "lr      steps to fit" in text  # the sweep's table


def test_the_page_loads_nothing_from_the_network(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert EXTERNAL.search(text) is None, EXTERNAL.search(text)
    assert text.count("plotly.js v") == 1  # the library inlined once, not per figure
    assert "cdn.plot.ly" not in text.split("</script>", 1)[1]  # nor a CDN fallback after it
    assert len(re.findall(r"class=\"plotly-graph-div\"", text)) == sum(FIGURES.values())


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (CI installs it: apt-get install chromium)")
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--host-resolver-rules=MAP * ~NOTFOUND",  # offline: a page needing the network draws nothing
        f"--user-data-dir={profile}",
        "--virtual-time-budget=10000",
        *args,
    ]
    done = run(command, timeout=120)  # a timeout kills chromium's whole process tree
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def _page_requests(net_log: Path) -> list[str]:
    """URLs the page itself asked for (the browser's own background requests have no origin)."""
    log = json.loads(net_log.read_text())
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    requests = [event.get("params", {}) for event in log["events"] if event["type"] == start]
    return [r["url"] for r in requests if "url" in r and r.get("initiator") != "not an origin"]


def test_chromium_draws_every_figure_offline(page: Path, tmp_path: Path) -> None:
    net_log = tmp_path / "net-log.json"
    done = _chromium(
        tmp_path, "--enable-logging=stderr", f"--log-net-log={net_log}", "--dump-dom", page.as_uri()
    )
    dom = done.stdout
    assert [u for u in _page_requests(net_log) if not u.startswith("file:")] == []
    assert "Uncaught" not in done.stderr, done.stderr[-2000:]  # no JavaScript error
    sections = re.split(r'<section class="phase" id="phase-([^"]+)">', dom)[1:]
    drawn = dict(zip(sections[::2], sections[1::2], strict=True))
    assert list(drawn) == list(FIGURES)
    for phase, html in drawn.items():
        containers = re.split(r'<div id="figure-\d+" class="([^"]*)"', html)[1:]
        assert len(containers) // 2 == FIGURES[phase], phase
        for classes, body in zip(containers[::2], containers[1::2], strict=True):
            figure = body.split("</figure>", 1)[0]
            assert "js-plotly-plot" in classes, (phase, classes)  # plotly ran on it
            assert '<svg class="main-svg"' in figure, phase
            assert re.search(r'class="trace (scatter|bars)', figure), phase
            assert re.search(r'class="(point|js-line)"', figure), phase  # a marker, bar or line drawn


def test_a_screenshot_of_the_page(page: Path, tmp_path: Path) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report-html.png"
    shot.unlink(missing_ok=True)
    _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,4000", page.as_uri())
    assert shot.stat().st_size > 50_000  # a page with figures, not a blank one
    print(f"screenshot: {shot}")


def test_a_phase_with_no_completed_trial_still_gets_a_page(tmp_path: Path) -> None:
    built = study(tmp_path, search_space=SPACE)
    round1 = built.start("round-1")
    add_trial(round1, 0, None, _params(10), state="FAIL", failure_reason="diverged")
    add_trial(round1, 1, None, _params(2), state="FAIL", failure_reason="crashed")
    add_trial(round1, 2, None, _params(3), state="RUNNING")
    path = tmp_path / "report.html"
    result = invoke("report", "toy", "--output-dir", str(built.output_dir), "--html", str(path), env=_env())
    assert result.exit_code == 0, plain(result.output)
    text = path.read_text(encoding="utf-8")
    assert "no completed trial yet: no objective to plot" in text
    assert "plotly-graph-div" not in text  # no empty figure
    assert "1 diverged · 1 failed · 1 running" in text


def test_without_plotly_one_line_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = study(tmp_path)
    built.start("round-1")
    monkeypatch.setitem(sys.modules, "plotly", None)  # what `import plotly` meets where it is missing
    result = invoke(
        "report", "toy", "--output-dir", str(built.output_dir), "--html", str(tmp_path / "r.html"), env=_env()
    )
    assert "pip install 'tuner[html]'" in single_error(result)
    assert not (tmp_path / "r.html").exists()
