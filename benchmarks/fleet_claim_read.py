"""What a claim reads: ``get_trials`` on a phase of R RUNNING trials, in a fresh process.

Part of ``benchmarks.fleet``: a claim reads the phase's trials, and Optuna's cached storage
re-reads every unfinished trial at each read, so the slope of this time over R is what one
running trial costs every claim (``docs/design/scale.md`` extrapolates from it).
"""

from __future__ import annotations

import subprocess
import sys
import uuid

RUNNING_TRIALS = (100, 500, 1000)  # phases of R running trials, for the read a claim makes

_READ_SCRIPT = """
import sys, time, optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
study = optuna.load_study(study_name=sys.argv[1], storage=sys.argv[2])
times = []
for _ in range(3):
    started = time.perf_counter()
    study.get_trials(deepcopy=False)
    times.append(time.perf_counter() - started)
print(sorted(times)[1])
"""


def claim_read_s(url: str, running: int) -> float:
    """Median of 3 ``get_trials`` in a fresh process (Optuna's cache as a worker has it) on a
    phase of ``running`` RUNNING trials like tuner's; the phase is deleted afterwards."""
    import optuna
    from optuna.distributions import FloatDistribution
    from optuna.trial import TrialState, create_trial

    name = f"bench-fleet-read-{running}-{uuid.uuid4().hex[:8]}"
    optuna.create_study(study_name=name, storage=url)
    storage = optuna.storages.get_storage(url)
    study_id = storage.get_study_id_from_name(name)
    template = create_trial(
        state=TrialState.WAITING,
        params={"optimizer.lr": 0.1},
        distributions={"optimizer.lr": FloatDistribution(1e-3, 1.0, log=True)},
        user_attrs={f"attr_{index}": "x" * 40 for index in range(16)},
        intermediate_values={step: 0.5 for step in range(5)},
    )
    try:
        for _ in range(running):
            trial_id = storage.create_new_trial(study_id, template_trial=template)
            storage.set_trial_state_values(trial_id, TrialState.RUNNING)
        done = subprocess.run(
            [sys.executable, "-c", _READ_SCRIPT, name, url], capture_output=True, text=True, check=True
        )
        return float(done.stdout.strip())
    finally:
        optuna.delete_study(study_name=name, storage=url)
