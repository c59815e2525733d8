"""``tuner tune``'s procedure: sweep-lr when ``max_train_steps`` is unknown, round 1, the report's
suggestions (a next study searched by its own round 1), the later rounds, the delivered model,
all within one budget, and resumable.

``tune`` (``procedure``) takes a ``TuneRequest`` and says what it decides and finds as typed
messages (``messages``) to a function its caller gives; ``tuner tune`` renders them. What it
needs from the layers above the playbook, a round's report and a phase run with its live view,
it asks through Protocols (``advisor``, ``phase_runner``) that the command passes in. The
decisions themselves are the playbook's (``tuner.playbook.tune_plan``, ``budget``,
``decision_log``).
"""

from tuner._lazy import lazy_exports

_EXPORTS = {
    "TuneRequest": "tuner.playbook.tune.request",
    "tune": "tuner.playbook.tune.procedure",
}

__getattr__ = lazy_exports(__name__, globals(), _EXPORTS)

__all__ = sorted(_EXPORTS)
