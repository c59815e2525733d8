"""The playbook's procedures, each a phase with a stored plan: sweep-lr, round 1, round 2 and later."""

from tuner.playbook.phases import (
    PhasePlan,
    StartedPhase,
    create_phase,
    phase_plan,
    prepare_phase,
    start_round,
)

__all__ = ["PhasePlan", "StartedPhase", "create_phase", "phase_plan", "prepare_phase", "start_round"]
