"""How many evals a run gets, and the ``eval_every`` to suggest when it gets too few.

A trial's best step is only known on the eval grid, so a best-step position verdict needs
``MIN_EVALS`` evals in a run and ``MIN_LATE_EVALS`` in its last 25% (``LATE``) before it can say
"still improving". One ``eval_every`` serves every round of a study, short and long: the one to
suggest must resolve the shortest round, and no more, since every eval is a pass over the eval set.

In the playbook because both sides of a round use it: ``tuner tune`` chooses the rounds'
``eval_every`` by it before they run (``tune/own_settings.py``), and the report (above the
playbook) judges their best steps and suggests an ``eval_every`` by the same numbers.
"""

from __future__ import annotations

EARLY = 0.10  # best step <= 10% of the run: in its first 10%
LATE = 0.75  # best step > 75% of the run: in its last 25%
MIN_EVALS = 4  # evals in a run for any position verdict
MIN_LATE_EVALS = 2  # evals in its last 25% for "still improving"
READABLE = (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.5, 8.0)  # a suggested eval_every: one of these x 10^k


def eval_steps(eval_every: int, trial_steps: int) -> set[int]:
    """The steps a run of ``trial_steps`` is evaluated at: every ``eval_every``, and the last."""
    if eval_every <= 0 or trial_steps <= 0:
        return set()
    return {*range(eval_every, trial_steps + 1, eval_every), trial_steps}


def eval_counts(eval_every: int, trial_steps: int) -> tuple[int, int]:
    """Evals in a run of ``trial_steps`` (every ``eval_every`` steps and after the last), and how
    many of them fall in its last 25%."""
    steps = eval_steps(eval_every, trial_steps)
    return len(steps), sum(1 for step in steps if step > LATE * trial_steps)


def suggested_eval_every(shortest: int) -> int | None:
    """The largest readable ``eval_every`` (1, 1.5, 2, 2.5, 3, 4, 5, 6, 7.5, 8 x a power of 10)
    whose multiples alone give a run of ``shortest`` steps ``MIN_EVALS`` evals and
    ``MIN_LATE_EVALS`` in its last 25%; the eval the engine adds after the last step is not counted,
    so the answer holds whatever the length. Largest, because every eval costs a pass over the eval
    set in every round: ``steps / 20`` of a short round 1 makes a full-length round eval 100 times."""
    for value in sorted(_readable(shortest), reverse=True):
        multiples = range(value, shortest + 1, value)
        late = sum(1 for step in multiples if step > LATE * shortest)
        if len(multiples) >= MIN_EVALS and late >= MIN_LATE_EVALS:
            return value
    return None


def _readable(limit: int) -> set[int]:
    values, scale = set(), 1
    while scale <= limit:
        values.update(int(m * scale) for m in READABLE if m * scale <= limit and (m * scale).is_integer())
        scale *= 10
    return values


def readable_at_most(limit: float) -> int:
    """The largest readable ``eval_every`` not above ``limit`` (at least 1): ``steps / 20`` gives
    numbers like 6 that grow to 100 evals in a 5x longer round."""
    return max((v for v in _readable(int(limit)) if v <= limit), default=1)
