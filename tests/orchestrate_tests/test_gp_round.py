"""``sampler: gp``: a round 1 whose first points are quasi-random and whose later ones Optuna's
``GPSampler`` proposes from the results so far (the sampler runs torch in the worker, which then
forks each trial's process: it must not hang there, on one worker or two)."""

from __future__ import annotations

from pathlib import Path

from tests.orchestrate_tests.conftest import load_phase, run_tuner, sqlite_url, toy_study, tuner_env
from tuner.orchestrate import quasi_random_point
from tuner.playbook.runnable_plan import GP_STARTUP
from tuner.spec import load_study

SPACE = {
    "optimizer.lr": {"type": "float", "low": 0.01, "high": 1.0, "log": True},
    "optimizer.momentum": {"type": "float", "low": 0.0, "high": 0.9},
}


def test_a_gp_round_starts_quasi_random_then_the_gaussian_process_proposes(
    tmp_path: Path, output_dir: Path
) -> None:
    # one eval per trial, at its last step: the sampler reads only each trial's value, and in a
    # round an eval costs more CPU than the 40 steps (measured: 10 more evals a trial, 0.6 s more)
    study = toy_study(
        tmp_path,
        search_space=SPACE,
        round1={"trials": GP_STARTUP + 1, "sampler": "gp"},
        eval_every=40,
        log_every=40,
    )
    args = ("run-round", str(study), "--round", "1", "--output-dir", str(output_dir))
    # one worker with two threads (the suite runs on one: OMP_NUM_THREADS=1), started afresh so
    # that torch reads it: the GP's torch ops run in the worker, which then forks the trial
    done = run_tuner(*args, "--workers", "1", env=tuner_env(OMP_NUM_THREADS="2"), cold=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(quasi-random, then Gaussian-process BO from the 5 points on)" in done.stdout + done.stderr
    more = run_tuner(*args, "--workers", "2", "--trials", str(GP_STARTUP + 3))  # two at once
    assert more.returncode == 0, more.stdout + more.stderr
    trials = load_phase(sqlite_url(output_dir), "toy").trials
    assert len(trials) == GP_STARTUP + 3 and {t.state.name for t in trials} == {"COMPLETE"}
    space = load_study(study).spec.search_space
    by_slot = {t.user_attrs["slot"]: t for t in trials}
    for slot in range(GP_STARTUP):
        expected = quasi_random_point(space, slot, 0)
        assert by_slot[slot].params == {k: float(v) for k, v in expected.items()}, slot
    proposed = [by_slot[slot] for slot in range(GP_STARTUP, GP_STARTUP + 3)]
    assert all(not t.system_attrs.get("fixed_params") for t in proposed)
    assert proposed[0].params not in [by_slot[slot].params for slot in range(GP_STARTUP)]
