"""``tuner report`` on a large study: 10,000 trials x 50 evaluations in SQLite, against Optuna's own read.

The study is a real round 1 of ``studies/digits-mlp.yaml`` in a real SQLite file: the phase and
its stored plan are created as ``tuner run-round`` creates them (``start_round``), then 10,000
trials are written through Optuna's public API (``study.add_trials``, in the storage the workers
open) with what a worker records: the slot's quasi-random point, ``slot``, ``attempt``,
``run_dir``, ``worker``, ``max_train_steps``, ``reproduce``, ``git_commit``, ``git_dirty``,
``claim_token``, ``healthy``, ``last_checkpoint_step``, ``worker_rss_mb``, ``train_s``,
``best_step``, ``final_step``, ``final_train_loss``, and 50 intermediate values (one eval every
100 steps of 5,000; the copy of the study file sets those two numbers). About 3% of the trials
diverge at a high learning rate (``failure_reason`` ``diverged``, their curve cut where the loss
blew up) and 1% crash and are retried (``crashed``, ``retried``; the retry resumes in the same
folder with ``retry_of``/``resume_dir``), as the workers record them; the 10,000 count retries.

Optuna commits each added trial on its own (one transaction per ``add_trial``: ~45 ms here for
a trial with its 50 values and 17 attributes, nearly all of it in Optuna's ORM), so writing the
file takes about 8 minutes on the 2-core VM this was written on. It is generated once and kept
in ``bench-results/`` (gitignored), named by a version of this generator, Optuna's version and
the sizes, and reused by later runs (the output says which; delete the file to regenerate). It
is written under a temporary name and renamed when complete, so an interrupted generation is
never reused. Optuna's tables are never written by hand: every row comes from Optuna itself.

Measured as whole commands (a fresh process each, imports included), interleaved over
``ROUNDS`` rounds in alternating order, medians:

- ``python -m tuner report digits-mlp --json --storage sqlite:///FILE``: target at least
  ``RATIO_TARGET`` times faster than the baseline below, paired round by round (an absolute
  figure would measure this machine's speed of the day);
- the same with ``--html OUT.html`` (terminal report + HTML file): target < 10 s and < 15 MB;
- the baseline: a process running ``optuna.load_study`` + ``study.trials_dataframe()`` on the
  same file (what a user scripting Optuna does to look at a study), and the ratio.

Run alone: ``python -m benchmarks.report``.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from benchmarks._common import (
    REPO_ROOT,
    Result,
    interleaved,
    load,
    median,
    paired_ratio,
    report,
    spread,
    stopwatch,
)

NAME = "report"
TRIALS = 10_000
EVALS = 50
EVAL_EVERY = 100
ROUNDS = 3
STUDY = "digits-mlp"
PHASE = "round-1"
RATIO_TARGET = 10.0  # Optuna's load_study + trials_dataframe / tuner report --json, same run
HTML_TARGET_S = 10.0
HTML_TARGET_MB = 15.0
GENERATOR_VERSION = 1  # bump when the generated study changes: the cached file is then rebuilt
CACHE_DIR = REPO_ROOT / "bench-results"
CRASHED_SHARE = 0.01
_LR_BEST = 3e-3  # the synthetic error is lowest here (log distance)
_LR_DIVERGES = 2.5e-2  # 90% of the trials past it diverge: ~3% of the phase, a divergence region

_BASELINE = """
import sys, optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
study = optuna.load_study(study_name=sys.argv[1], storage=sys.argv[2])
frame = study.trials_dataframe()
print(len(frame))
"""


# -- the synthetic study --------------------------------------------------------------------------
def cache_path() -> Path:
    import optuna

    return CACHE_DIR / f"report-v{GENERATOR_VERSION}-optuna{optuna.__version__}-{TRIALS}x{EVALS}.db"


def _study_file(folder: Path) -> Path:
    """``studies/digits-mlp.yaml`` with round 1 at 10,000 trials of 5,000 steps, one eval per 100."""
    document = yaml.safe_load((REPO_ROOT / "studies" / f"{STUDY}.yaml").read_text())
    document["training"]["max_train_steps"] = EVALS * EVAL_EVERY
    document["training"]["eval_every"] = EVAL_EVERY
    document["rounds"]["round1"] = {"trials": TRIALS, "length_fraction": 1.0, "sampler": "quasi-random"}
    path = folder / f"{STUDY}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def _curve(rng: random.Random, value: float, best_step: int, last_step: int) -> dict[int, float]:
    """An error rate that falls to ``value`` at ``best_step``, then creeps up (overfitting)."""
    curve = {}
    for step in range(EVAL_EVERY, last_step + 1, EVAL_EVERY):
        if step <= best_step:
            gap = (best_step - step) / best_step
            curve[step] = value + (0.9 - value) * gap**2 + rng.uniform(0, 0.002)
        else:
            curve[step] = value + 0.02 * (step - best_step) / last_step + rng.uniform(0, 0.002)
    curve[best_step] = value
    return curve


def _write_trials(phase: Any, plan: Any, run_root: Path, rng: random.Random, trials: int) -> int:
    """Every trial of the phase, as its workers would have recorded it; returns how many."""
    from optuna.trial import FrozenTrial, TrialState

    from tuner.orchestrate import distributions

    dists = distributions(plan.search_space())
    steps = plan.stored.trial_steps
    commit = {"git_commit": "0f3c2a9d" * 5, "git_dirty": False}
    clock = datetime.datetime(2025, 3, 1, 9, 0, 0)
    pending_retries: list[tuple[int, FrozenTrial]] = []  # (due at trial number, retry)
    batch: list[FrozenTrial] = []
    written, slot = 0, 0

    def trial(state: TrialState, value: float | None, params: dict[str, Any], attrs: dict[str, Any],
              curve: dict[int, float], train_s: float) -> FrozenTrial:  # fmt: skip
        nonlocal clock
        start = clock
        clock += datetime.timedelta(seconds=train_s / 2 + 0.4)  # two workers
        return FrozenTrial(
            number=0,  # the storage numbers them
            trial_id=0,
            state=state,
            value=value,
            datetime_start=start,
            datetime_complete=start + datetime.timedelta(seconds=train_s + 0.3),
            params=params,
            distributions={key: dists[key] for key in params},
            user_attrs=attrs,
            system_attrs={"fixed_params": dict(params)},
            intermediate_values=curve,
        )

    while written < trials:
        queued = written + len(batch)
        if pending_retries and (pending_retries[0][0] <= queued or queued + len(pending_retries) >= trials):
            batch.append(pending_retries.pop(0)[1])  # its time, or only room left for the retries
        else:
            params = plan.params_for_slot(slot)
            run_dir = run_root / f"trial-{slot:04d}"
            job = plan.make_job(slot, params, run_dir)
            attrs: dict[str, Any] = {
                "slot": slot,
                "attempt": 0,
                "run_dir": str(run_dir),
                "worker": f"bench-host:{4100 + slot % 2}",
                "max_train_steps": steps,
                "reproduce": job.command,
                **commit,
                **job.attrs,
                "claim_token": f"{rng.getrandbits(64):016x}",
                "healthy": True,
            }
            lr = float(params["optimizer.lr"])
            quality = abs(math.log10(lr / _LR_BEST))  # 0 at the best lr, ~1.5 at the edges
            value = min(0.9, 0.02 + 0.05 * quality**2 + 0.02 * float(params["workload.dropout"]))
            value += rng.uniform(0, 0.01)
            best_step = min(steps, EVAL_EVERY * round(rng.uniform(0.55, 1.0) * EVALS))
            train_s = rng.uniform(25.0, 35.0)
            if lr > _LR_DIVERGES and rng.random() < 0.9:
                died = EVAL_EVERY * rng.randint(1, 8)
                curve = _curve(rng, 0.6, died, died)
                attrs.update(
                    failure_reason="diverged",
                    error=f"training diverged: train/loss is nan at step {died + 7}",
                    retried=False,
                    worker_rss_mb=312.5,
                    train_s=round(train_s * died / steps, 4),
                    best_step=died,
                    final_step=died + 7,
                    last_checkpoint_step=died,
                )
                batch.append(trial(TrialState.FAIL, None, params, attrs, curve, train_s * died / steps))
            elif rng.random() < CRASHED_SHARE and queued + len(pending_retries) + 2 <= trials:
                died = EVAL_EVERY * rng.randint(5, EVALS - 5)
                error = "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Bus error."
                attrs.update(
                    failure_reason="crashed",
                    error=error,
                    retried=True,
                    worker_rss_mb=318.0,
                    last_checkpoint_step=died,
                )
                full = _curve(rng, value, best_step, steps)  # the failed part, then the resumed part
                curve = {s: v for s, v in full.items() if s <= died}
                batch.append(trial(TrialState.FAIL, None, params, attrs, curve, train_s * died / steps))
                retry = {
                    **{k: attrs[k] for k in ("slot", "run_dir", "worker", "max_train_steps", "reproduce")},
                    **commit,
                    "attempt": 1,
                    "retry_of": written + len(batch) - 1,  # the failed trial's number (a fresh study)
                    "retries_used": 1,
                    "previous_error": error,
                    "resume_dir": str(run_dir),
                    "claim_token": f"{rng.getrandbits(64):016x}",
                    "resumed_from_step": died,
                    "healthy": True,
                    "worker_rss_mb": 320.0,
                    "train_s": round(train_s * (steps - died) / steps, 4),
                    "best_step": best_step,
                    "final_step": steps,
                    "final_train_loss": round(value * 0.8, 5),
                    "last_checkpoint_step": steps - EVAL_EVERY,
                }
                retry_curve = {s: v for s, v in full.items() if s > died}
                due = written + len(batch) + rng.randint(1, 4)
                pending_retries.append(
                    (due, trial(TrialState.COMPLETE, value, params, retry, retry_curve, train_s))
                )
            else:
                attrs.update(
                    worker_rss_mb=round(rng.uniform(300, 330), 1),
                    train_s=round(train_s, 4),
                    best_step=best_step,
                    final_step=steps,
                    final_train_loss=round(value * 0.8, 5),
                    last_checkpoint_step=steps - EVAL_EVERY,
                )
                curve = _curve(rng, value, best_step, steps)
                batch.append(trial(TrialState.COMPLETE, value, params, attrs, curve, train_s))
            slot += 1
        if len(batch) >= 200 or written + len(batch) >= trials:
            phase.add_trials(batch)
            written += len(batch)
            batch = []
    return written


def _generate_here(partial: Path, trials: int) -> int:
    """In a child process (its exit closes every connection): the phase and its trials."""
    from tuner.playbook import start_round
    from tuner.spec import load_study

    with tempfile.TemporaryDirectory(prefix="tuner-bench-") as tmp:
        folder = Path(tmp)
        started = start_round(
            load_study(_study_file(folder)), PHASE, folder / "runs", storage_url=f"sqlite:///{partial}"
        )
        phase_dir = folder / "runs" / STUDY / PHASE
        return _write_trials(started.study, started.plan, phase_dir, random.Random(0), trials)


def generate(path: Path, trials: int = TRIALS) -> float:
    """Write the synthetic study to ``path`` (through a temporary file); returns the seconds it took."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    for suffix in ("", "-wal", "-shm"):
        partial.with_name(partial.name + suffix).unlink(missing_ok=True)
    elapsed = stopwatch()
    code = (
        "import sys, benchmarks.report as r; print(r._generate_here(r.Path(sys.argv[1]), int(sys.argv[2])))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(partial), str(trials)],
        cwd=REPO_ROOT, env=_env(), capture_output=True, text=True, check=False,
    )  # fmt: skip
    seconds = elapsed()
    if done.returncode != 0:
        raise RuntimeError(f"generating the study failed:\n{done.stderr.strip()}")
    with sqlite3.connect(partial) as connection:  # everything into the main file: no -wal beside it
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for suffix in ("-wal", "-shm"):
        partial.with_name(partial.name + suffix).unlink(missing_ok=True)
    for lock in partial.parent.glob(f".{partial.name}.*lock"):  # tuner's creation locks
        lock.unlink(missing_ok=True)
    os.replace(partial, path)
    meta = {"trials": int(done.stdout.split()[-1]), "generation_s": round(seconds, 1)}
    path.with_suffix(".json").write_text(json.dumps(meta))
    return seconds


def _env() -> dict[str, str]:
    """This checkout's ``tuner`` first on the path of every child process."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def study_file() -> tuple[Path, str]:
    """The cached synthetic study (generated now if missing); and how it came to be, for the output."""
    path = cache_path()
    meta = path.with_suffix(".json")
    if path.exists() and meta.exists():
        seconds = json.loads(meta.read_text())["generation_s"]
        return path, f"reused {path.relative_to(REPO_ROOT)} (generated in {seconds:.0f} s by an earlier run)"
    print(f"  generating {TRIALS} trials x {EVALS} evals through Optuna's API (minutes; kept for later runs)")
    seconds = generate(path)
    return path, f"generated {path.relative_to(REPO_ROOT)} in {seconds:.0f} s (kept: later runs reuse it)"


# -- the measurements -----------------------------------------------------------------------------
def _command(args: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Run a whole command in a fresh process; (wall seconds, its result)."""
    elapsed = stopwatch()
    done = subprocess.run(args, cwd=REPO_ROOT, env=_env(), capture_output=True, text=True, check=False)
    seconds = elapsed()
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args[:6])}... failed ({done.returncode}): {done.stderr.strip()[-2000:]}"
        )
    return seconds, done


def run() -> list[Result]:
    path, origin = study_file()
    trials = json.loads(path.with_suffix(".json").read_text())["trials"]
    url = f"sqlite:///{path}"
    report_cmd = [sys.executable, "-m", "tuner", "report", STUDY, "--storage", url]
    seen: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="tuner-bench-") as tmp:
        html_path = Path(tmp) / "report.html"

        def as_json() -> float:
            seconds, done = _command([*report_cmd, "--json"])
            phase = json.loads(done.stdout)["phases"][0]
            if phase["attempts"] != trials:  # fast because it read everything, not because it skipped
                raise RuntimeError(f"tuner report --json saw {phase['attempts']} trials, not {trials}")
            seen["json_kb"] = len(done.stdout) / 1e3
            return seconds

        def optuna_baseline() -> float:
            seconds, done = _command([sys.executable, "-c", _BASELINE, f"{STUDY}/{PHASE}", url])
            if int(done.stdout.split()[-1]) != trials:
                raise RuntimeError(f"the Optuna baseline read {done.stdout.strip()} trials, not {trials}")
            return seconds

        def as_html() -> float:
            html_path.unlink(missing_ok=True)
            seconds, _ = _command([*report_cmd, "--html", str(html_path)])
            seen["html_mb"] = html_path.stat().st_size / 1e6
            return seconds

        runs = {
            "tuner report --json": as_json,
            "optuna load_study + trials_dataframe": optuna_baseline,
            "tuner report --html": as_html,
        }
        print(f"== {NAME}: {trials} trials x {EVALS} evals in SQLite; {origin}")
        times = interleaved(runs, ROUNDS, label=NAME)
    json_s = median(times["tuner report --json"])
    optuna_s = median(times["optuna load_study + trials_dataframe"])
    ratio = paired_ratio(times["optuna load_study + trials_dataframe"], times["tuner report --json"])
    generation_s = json.loads(path.with_suffix(".json").read_text())["generation_s"]
    print(
        f"  tuner report --json {json_s:.2f}s ({spread(times['tuner report --json'])}, "
        f"{seen['json_kb']:.0f} kB of JSON); optuna load_study + trials_dataframe {optuna_s:.2f}s "
        f"({spread(times['optuna load_study + trials_dataframe'])}); optuna / tuner {ratio.median:.1f}x  "
        f"[{load()}]"
    )
    results = [
        Result(NAME, "tuner report --json, 10k trials", json_s, "{:.2f} s"),
        Result(NAME, "optuna load_study + trials_dataframe", optuna_s, "{:.2f} s"),
        Result(NAME, "optuna / tuner report --json", ratio.median, "{:.1f}x", f">= {RATIO_TARGET:g}x",
               ratio.median >= RATIO_TARGET),
    ]  # fmt: skip
    html_s = median(times["tuner report --html"])
    html_spread = spread(times["tuner report --html"])
    print(f"  tuner report --html {html_s:.2f}s ({html_spread}), {seen['html_mb']:.2f} MB")
    results += [
        Result(NAME, "tuner report --html, 10k trials", html_s, "{:.2f} s", f"< {HTML_TARGET_S:g} s",
               html_s < HTML_TARGET_S),
        Result(NAME, "html file size", seen["html_mb"], "{:.2f} MB", f"< {HTML_TARGET_MB:g} MB",
               seen["html_mb"] < HTML_TARGET_MB),
    ]  # fmt: skip
    results.append(Result(NAME, "study generation (one-time, cached)", generation_s, "{:.0f} s"))
    return results


def main() -> None:
    report(NAME, run())


if __name__ == "__main__":
    main()
