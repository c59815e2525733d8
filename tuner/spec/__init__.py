"""The study file: typed models, loading with positions, dotted keys, one-line errors."""

from tuner._lazy import lazy_exports

# Imported on first use (PEP 562): building the pydantic models costs ~0.25 s, which
# ``tuner --help`` (and ``tuner init``, which only needs the templates) should not pay.
_EXPORTS = {
    "LoadedStudy": "tuner.spec._loader",
    "load_study": "tuner.spec._loader",
    "CategoricalParam": "tuner.spec._models",
    "FloatParam": "tuner.spec._models",
    "IntParam": "tuner.spec._models",
    "ObjectiveSpec": "tuner.spec._models",
    "OptimizerSpec": "tuner.spec._models",
    "RoundSpec": "tuner.spec._models",
    "ScheduleSegment": "tuner.spec._models",
    "StudySpec": "tuner.spec._models",
    "TrainingSpec": "tuner.spec._models",
    "WorkloadSpec": "tuner.spec._models",
    "format_path": "tuner.spec._paths",
    "redact_storage_url": "tuner.spec._models",
    "key_to_path": "tuner.spec._paths",
    "set_path": "tuner.spec._paths",
    "RoundsSpec": "tuner.spec._models",
    "SweepLrSpec": "tuner.spec._models",
}


__getattr__ = lazy_exports(__name__, globals(), _EXPORTS)


__all__ = sorted(_EXPORTS)
