"""``make demo`` shows the README's path: ``tuner validate``, then ``tuner tune`` within a budget,
then the report and its HTML page (the page ``make screenshot`` draws); its ``tune`` is a plan
the CLI accepts. The recipe is read as make runs it (``make -n``), never run here: it trains."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from tests.orchestrate_tests.conftest import run_tuner

ROOT = Path(__file__).resolve().parent.parent


def _recipe(target: str) -> list[list[str]]:
    """The commands ``make TARGET`` would run (``make install`` taken as done)."""
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "-o", ".venv/.installed", target],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return [shlex.split(line) for line in done.stdout.replace("\\\n", " ").splitlines() if line.strip()]


def _option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_make_demo_validates_then_tunes_then_writes_the_html_report() -> None:
    commands = _recipe("demo")
    assert [(Path(command[0]).name, command[1]) for command in commands] == [
        ("tuner", "validate"),
        ("tuner", "tune"),
        ("tuner", "report"),
    ]
    validate, tune, report = commands
    assert validate[2] == tune[2] == report[2] == "studies/digits-mlp.yaml"
    assert int(_option(tune, "--budget")) > 0
    assert _option(tune, "--output-dir") == _option(report, "--output-dir") == "runs/demo"
    assert _option(report, "--html") == "runs/demo/report.html"
    screenshot = _recipe("screenshot")
    assert screenshot[: len(commands)] == commands  # the screenshot is the demo's page
    assert screenshot[-1][-1] == f"file://{ROOT}/runs/demo/report.html"
    (line,) = [line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("make demo")]
    assert "tune" in line


def test_the_demos_tune_plans_the_whole_procedure_within_its_budget(tmp_path: Path) -> None:
    tune = _recipe("demo")[1]
    budget = int(_option(tune, "--budget"))
    args = [str(ROOT / tune[2]), "--budget", str(budget), "--output-dir", str(tmp_path), "--dry-run"]
    done = run_tuner("tune", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "digits-mlp/round-1" in done.stdout and "digits-mlp/round-2" in done.stdout
    assert f"= {budget:,} of the budget's {budget:,}" in done.stdout
    assert not any(tmp_path.iterdir())  # a dry run creates no storage
