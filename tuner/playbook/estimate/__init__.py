"""What the study's search costs: ``tuner estimate``, counted from what ran plus what is planned.

- ``figures``: the dataclasses (per phase what ran, what is planned, their sum) and the JSON;
- ``formulas``: the playbook's search cost and days;
- ``forecast``: the study file's phases and the workers that would run them;
- ``what_ran``: trials, trained steps and seconds read from the storage and run folders;
- ``probe``: seconds per step timed here for a phase that has not run;
- ``study_estimate``: all of it together.
"""

from tuner.playbook.estimate.figures import (
    CostSource,
    Estimate,
    LengthSource,
    PhaseEstimate,
    PhaseLength,
    PhaseRan,
    StepCost,
    Workers,
)
from tuner.playbook.estimate.forecast import plan_workers, planned_phases, with_max_train_steps
from tuner.playbook.estimate.formulas import search_cost_hours, search_days
from tuner.playbook.estimate.probe import DEFAULT_PROBE_STEPS, MIN_PROBE_STEPS, probe_cost
from tuner.playbook.estimate.study_estimate import estimate
from tuner.playbook.estimate.what_ran import load_stored_phase, measured_cost, what_ran
from tuner.playbook.study_results import RECOMMENDED_ATTR

__all__ = [
    "DEFAULT_PROBE_STEPS",
    "MIN_PROBE_STEPS",
    "RECOMMENDED_ATTR",
    "CostSource",
    "Estimate",
    "LengthSource",
    "PhaseEstimate",
    "PhaseLength",
    "PhaseRan",
    "StepCost",
    "Workers",
    "estimate",
    "load_stored_phase",
    "measured_cost",
    "plan_workers",
    "planned_phases",
    "probe_cost",
    "search_cost_hours",
    "search_days",
    "what_ran",
    "with_max_train_steps",
]
