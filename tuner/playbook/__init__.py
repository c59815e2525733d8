"""The playbook's procedures, each a phase: round 1 so far (sweep-lr and round 2 come next)."""

from tuner.playbook.phases import PhasePlan, StartedPhase, phase_plan, start_round

__all__ = ["PhasePlan", "StartedPhase", "phase_plan", "start_round"]
