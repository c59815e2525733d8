"""The training engine: loop, events, callbacks, metrics, schedules, checkpoints, loggers.

It knows nothing of Optuna: the orchestrator talks to it through callbacks.
"""

from tuner.train.checkpoints import CheckpointCallback, load_checkpoint
from tuner.train.data import StepBatches
from tuner.train.evaluation import Evaluator
from tuner.train.events import Callback, Event, StopReason, StopTraining
from tuner.train.loggers import CsvLogger, PredictionsLogger, TensorBoardLogger
from tuner.train.loop import Trainer, should_eval
from tuner.train.metrics import MetricAccumulator, masked_mean_loss
from tuner.train.objective import ObjectiveTracker
from tuner.train.progress import ProgressCallback
from tuner.train.run import RunResult, run_training
from tuner.train.run_folder import choose_run_dir, read_status
from tuner.train.schedules import Schedule, build_schedule

__all__ = [
    "Callback",
    "CheckpointCallback",
    "CsvLogger",
    "Evaluator",
    "Event",
    "MetricAccumulator",
    "ObjectiveTracker",
    "PredictionsLogger",
    "ProgressCallback",
    "RunResult",
    "Schedule",
    "StepBatches",
    "StopReason",
    "StopTraining",
    "TensorBoardLogger",
    "Trainer",
    "build_schedule",
    "choose_run_dir",
    "load_checkpoint",
    "masked_mean_loss",
    "read_status",
    "run_training",
    "should_eval",
]
