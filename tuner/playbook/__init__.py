"""The playbook's procedures, each a phase: round 1 so far (sweep-lr and round 2 come next)."""

from tuner.playbook.phases import PhasePlan, phase_plan

__all__ = ["PhasePlan", "phase_plan"]
