"""The study file: typed models, loading with positions, dotted keys, one-line errors."""

from tuner.spec._loader import LoadedStudy, load_study
from tuner.spec._models import (
    CategoricalParam,
    FloatParam,
    IntParam,
    ObjectiveSpec,
    OptimizerSpec,
    RoundSpec,
    ScheduleSegment,
    StudySpec,
    TrainingSpec,
    WorkloadSpec,
)
from tuner.spec._paths import format_path, key_to_path

__all__ = [
    "CategoricalParam",
    "FloatParam",
    "IntParam",
    "LoadedStudy",
    "ObjectiveSpec",
    "OptimizerSpec",
    "RoundSpec",
    "ScheduleSegment",
    "StudySpec",
    "TrainingSpec",
    "WorkloadSpec",
    "format_path",
    "key_to_path",
    "load_study",
]
