"""``tuner tune``: the driver loop (``driver``), the report's suggestions between rounds
(``suggestions``), the delivered model (``deliver``). The decisions themselves are the
playbook's (``tuner.playbook.tune_plan``, ``budget``, ``decision_log``)."""
