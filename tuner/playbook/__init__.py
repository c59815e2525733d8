"""The playbook's procedures, each a phase: round 1 so far (sweep-lr and round 2 come next)."""

from tuner.playbook.phases import (
    PhasePlan,
    StartedPhase,
    create_round,
    phase_plan,
    prepare_round,
    start_round,
)

__all__ = ["PhasePlan", "StartedPhase", "create_round", "phase_plan", "prepare_round", "start_round"]
