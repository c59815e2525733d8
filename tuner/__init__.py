"""tuner: hyperparameter tuning for PyTorch, the Deep Learning Tuning Playbook's way.

Layers (each imports only those below it): ``cli`` -> ``report`` -> ``playbook`` ->
``orchestrate`` -> ``train`` -> ``workloads`` -> ``spec``.
"""

__version__ = "0.1.0"
