"""tuner: hyperparameter tuning for PyTorch, the Deep Learning Tuning Playbook's way.

Layers (each imports only those below it): ``cli`` -> ``report`` -> ``playbook`` ->
``orchestrate`` -> ``train`` -> ``workloads`` -> ``spec``; ``tuner.api`` (``tuner.tune``,
``tuner.get_report``, ``tuner.load_model``) sits on top, beside ``cli``, and is imported on first
use: ``import tuner`` stays light.
"""

from tuner._lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {name: "tuner.api" for name in ("tune", "get_report", "load_model", "TunedModel", "SeedSpread")}

__getattr__ = lazy_exports(__name__, globals(), _EXPORTS)

__all__ = ["SeedSpread", "TunedModel", "__version__", "get_report", "load_model", "tune"]
