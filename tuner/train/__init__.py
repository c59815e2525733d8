"""The training engine: loop, events, callbacks, metrics, schedules, checkpoints, loggers.

It knows nothing of Optuna: the orchestrator talks to it through callbacks.
"""

from tuner._lazy import lazy_exports

# Imported on first use (PEP 562): a command that only needs, say, ``tuner.train.schedules``
# does not pay for importing torch.
_EXPORTS = {
    "Callback": "tuner.train.events",
    "CheckpointCallback": "tuner.train.checkpoints",
    "CsvLogger": "tuner.train.loggers",
    "Evaluator": "tuner.train.evaluation",
    "Event": "tuner.train.events",
    "FitCriterion": "tuner.train.fit",
    "MetricAccumulator": "tuner.train.metrics",
    "ObjectiveTracker": "tuner.train.objective",
    "PredictionsLogger": "tuner.train.loggers",
    "ProgressCallback": "tuner.train.progress",
    "RankError": "tuner.train.launch",
    "RankKilled": "tuner.train.launch",
    "Ranks": "tuner.train.distributed",
    "RunResult": "tuner.train.run",
    "Schedule": "tuner.train.schedules",
    "StepBatches": "tuner.train.data",
    "StopReason": "tuner.train.events",
    "StopTraining": "tuner.train.events",
    "TensorBoardLogger": "tuner.train.loggers",
    "Trainer": "tuner.train.loop",
    "build_schedule": "tuner.train.schedules",
    "build_workload": "tuner.train.build",
    "launch": "tuner.train.launch",
    "has_ended": "tuner.train.run_folder",
    "choose_run_dir": "tuner.train.run_folder",
    "load_checkpoint": "tuner.train.checkpoints",
    "load_model": "tuner.train.model_loading",
    "masked_mean_loss": "tuner.train.metrics",
    "metric_direction": "tuner.train.objective",
    "read_status": "tuner.train.run_folder",
    "run_training": "tuner.train.run",
    "should_eval": "tuner.train.loop",
}


__getattr__ = lazy_exports(__name__, globals(), _EXPORTS)


__all__ = [
    "Callback",
    "CheckpointCallback",
    "CsvLogger",
    "Evaluator",
    "Event",
    "FitCriterion",
    "MetricAccumulator",
    "ObjectiveTracker",
    "PredictionsLogger",
    "ProgressCallback",
    "RankError",
    "RankKilled",
    "Ranks",
    "RunResult",
    "Schedule",
    "StepBatches",
    "StopReason",
    "StopTraining",
    "TensorBoardLogger",
    "Trainer",
    "build_schedule",
    "build_workload",
    "choose_run_dir",
    "has_ended",
    "launch",
    "load_checkpoint",
    "load_model",
    "masked_mean_loss",
    "metric_direction",
    "read_status",
    "run_training",
    "should_eval",
]
