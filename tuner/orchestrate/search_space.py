"""The study's search space as Optuna distributions, and quasi-random points in it.

Round 1 is quasi-random by default (the playbook's choice for exploration): slot ``i`` trains
point ``i`` of a scrambled Halton sequence, so the points cover the space evenly from the very
first trials, whatever the number of workers, and re-running with a larger budget continues the
same sequence. Optuna's own QMC sampler only learns the space from the first
finished trial, so its first parallel trials would be plain random. Without a fixed point, the
study's sampler picks one once the trial exists (``sampled_point``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from tuner.spec import CategoricalParam, FloatParam, IntParam

Param = FloatParam | IntParam | CategoricalParam
_PLAIN = (str, int, float, bool, type(None))


def _choice_to_optuna(choice: Any) -> Any:
    """Optuna stores plain choices only; lists and mappings travel as JSON text."""
    return choice if isinstance(choice, _PLAIN) else json.dumps(choice, sort_keys=True)


def _choice_from_optuna(param: CategoricalParam, stored: Any) -> Any:
    for choice in param.choices:
        if _choice_to_optuna(choice) == stored:
            return choice
    return stored


def distributions(space: Mapping[str, Param]) -> dict[str, Any]:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    result: dict[str, Any] = {}
    for key, param in space.items():
        if isinstance(param, FloatParam):
            result[key] = FloatDistribution(param.low, param.high, log=param.log)
        elif isinstance(param, IntParam):
            result[key] = IntDistribution(param.low, param.high, log=param.log, step=param.step)
        else:
            result[key] = CategoricalDistribution([_choice_to_optuna(c) for c in param.choices])
    return result


def suggest(trial: Any, name: str, distribution: Any) -> Any:
    """``trial.suggest_*`` for one of ``distributions``'s values (the sampler picks the value)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    if isinstance(distribution, FloatDistribution):
        return trial.suggest_float(name, distribution.low, distribution.high, log=distribution.log)
    if isinstance(distribution, CategoricalDistribution):
        return trial.suggest_categorical(name, distribution.choices)
    return trial.suggest_int(
        name, distribution.low, distribution.high, log=distribution.log, step=distribution.step
    )


def sampled_point(study: Any, trial_id: int, distributions: Mapping[str, Any]) -> dict[str, Any]:
    """The sampler's point for trial ``trial_id``, which the worker created (not ``Study.ask``):
    one ``suggest`` per parameter. A sampler that computes with torch (``GPSampler``) runs torch
    ops in the worker, which then forks each trial's process: an OpenMP thread pool started here
    would be copied half-alive into the child, whose first parallel op hangs. On one thread no
    pool is started; the trial's process sets its own threads."""
    import sys

    from tuner.orchestrate._optuna_adapter import trial_for_sampling

    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != 1:
        torch.set_num_threads(1)
    trial = trial_for_sampling(study, trial_id)
    return {key: suggest(trial, key, dist) for key, dist in distributions.items()}


def to_config_values(space: Mapping[str, Param], params: Mapping[str, Any]) -> dict[str, Any]:
    """Optuna's params -> the values to set in the study (JSON choices decoded)."""
    return {
        key: _choice_from_optuna(space[key], value) if isinstance(space.get(key), CategoricalParam) else value
        for key, value in params.items()
    }


def _from_unit(param: Param, u: float) -> Any:
    """Map ``u`` in [0, 1) onto the parameter (log-uniform for ``log: true``)."""
    if isinstance(param, CategoricalParam):
        return _choice_to_optuna(param.choices[min(int(u * len(param.choices)), len(param.choices) - 1)])
    if param.log:
        value = math.exp(math.log(param.low) + u * (math.log(param.high) - math.log(param.low)))
    else:
        value = param.low + u * (param.high - param.low)
    if isinstance(param, IntParam):
        if param.log:
            return int(min(param.high, max(param.low, round(value))))
        steps = (param.high - param.low) // param.step
        return int(param.low + min(steps, int(u * (steps + 1))) * param.step)
    return float(min(param.high, max(param.low, value)))


def _primes(count: int) -> list[int]:
    primes: list[int] = []
    candidate = 2
    while len(primes) < count:
        if all(candidate % p for p in primes if p * p <= candidate):
            primes.append(candidate)
        candidate += 1
    return primes


def _scrambled_halton(dimensions: int, index: int, seed: int) -> list[float]:
    """Point ``index`` of scipy's ``qmc.Halton(d, scramble=True, seed=seed)``, bit for bit.

    Written out (digit-permutation scrambled radical inverses, permutations drawn from
    ``numpy.random.default_rng(seed)`` exactly as scipy draws them) because importing
    ``scipy.stats`` costs a worker about 1.5 s of CPU; a test holds it equal to scipy.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    point = []
    for base in _primes(dimensions):
        digits = math.ceil(54 / math.log2(base)) - 1  # enough for double precision
        permutations = np.repeat(np.arange(base)[None], digits, axis=0)
        for row in permutations:
            rng.shuffle(row)
        quotient, value, scale = index, 0.0, 1.0 / base
        for row in permutations:
            quotient, remainder = divmod(quotient, base)
            value += row[remainder] * scale
            scale /= base
        point.append(float(value))
    return point


def quasi_random_point(space: Mapping[str, Param], index: int, seed: int) -> dict[str, Any]:
    """Point ``index`` of a scrambled Halton sequence over ``space`` (deterministic per seed)."""
    if not space:
        return {}
    unit = _scrambled_halton(len(space), index, seed)
    return {key: _from_unit(param, u) for (key, param), u in zip(space.items(), unit, strict=True)}


def random_point(space: Mapping[str, Param], index: int, seed: int) -> dict[str, Any]:
    """Point ``index`` of a seeded uniform (log-uniform) random sequence over ``space``."""
    import numpy as np

    rng = np.random.default_rng([seed, index])
    return {key: _from_unit(param, float(rng.random())) for key, param in space.items()}
