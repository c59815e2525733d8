"""How long ``tuner --help`` and ``tuner validate --no-build`` take, against a bare ``python -c pass``.

``--no-build``: the file check alone, the command's own start-up. Without it, ``validate`` builds
the workload and pushes a batch through it, which imports torch and the workload's libraries:
that time is the workload's, not the CLI's.

Each command is a fresh subprocess (what a user waits for); the three alternate, one untimed
warm-up round first (so the page cache is warm for all of them), then the median of 5 rounds.
A last pair of runs lists which heavy libraries each command imports (there should be none).

Run alone: ``python -m benchmarks.cli_startup``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmarks._common import REPO_ROOT, Result, interleaved, median, report, spread, stopwatch

NAME = "cli_startup"
REPETITIONS = 5
TARGET_S = 0.3
STUDY = "studies/digits-mlp.yaml"
HEAVY = (
    "torch",
    "optuna",
    "pandas",
    "sklearn",
    "sqlalchemy",
    "tensorboard",
    "transformers",
    "timm",
    "torchmetrics",
)


def tuner_command() -> list[str]:
    """The installed ``tuner`` script next to this interpreter, else ``python -m tuner``."""
    script = Path(sys.executable).parent / "tuner"
    return [str(script)] if script.exists() else [sys.executable, "-m", "tuner"]


def timed(command: list[str]) -> float:
    elapsed = stopwatch()
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True)
    seconds = elapsed()
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return seconds


def heavy_imports(args: list[str]) -> list[str]:
    """The heavy libraries imported by running the CLI with ``args`` (in a fresh interpreter)."""
    probe = (
        "import sys\n"
        f"sys.argv = ['tuner', *{args!r}]\n"
        "from tuner.cli.app import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True)
    lines = done.stderr.strip().splitlines()
    return lines[-1].split() if lines else []


def run(repetitions: int = REPETITIONS) -> list[Result]:
    tuner = tuner_command()
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "tuner --help": [*tuner, "--help"],
        f"tuner validate --no-build {STUDY}": [*tuner, "validate", "--no-build", STUDY],
    }
    print(f"== {NAME}: {' '.join(tuner)}, median of {repetitions} subprocess runs each, interleaved")
    runs = {label: (lambda command=command: timed(command)) for label, command in commands.items()}
    interleaved(runs, 1)  # warm-up, untimed
    times = interleaved(runs, repetitions)
    baseline = median(times["python -c pass"])
    results: list[Result] = [Result(NAME, "python -c pass (baseline)", baseline, "{:.3f} s")]
    for label in list(commands)[1:]:
        value = median(times[label])
        print(
            f"  {label}: {value:.3f}s ({spread(times[label])})  baseline {baseline:.3f}s  "
            f"difference {value - baseline:+.3f}s  ratio {value / baseline:.2f}"
        )
        short = label.split(" studies/")[0]
        target = f"< {TARGET_S} s" if label == "tuner --help" else ""
        passed = value < TARGET_S if target else None
        results += [
            Result(NAME, short, value, "{:.3f} s", target, passed),
            Result(NAME, f"{short} - baseline", value - baseline, "{:+.3f} s"),
            Result(NAME, f"{short} / baseline", value / baseline, "{:.2f}"),
        ]
    for args in (["--help"], ["validate", "--no-build", STUDY]):
        heavy = heavy_imports(args)
        print(f"  heavy libraries imported by tuner {' '.join(args)}: {', '.join(heavy) or 'none'}")
    print(f"  python -c pass: {baseline:.3f}s ({spread(times['python -c pass'])})")
    return results


def main() -> None:
    report(NAME, run())


if __name__ == "__main__":
    main()
