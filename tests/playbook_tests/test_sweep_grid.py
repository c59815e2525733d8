"""sweep-lr's grid: the default one around the file's LR, and its extension past an edge."""

from __future__ import annotations

import pytest

from tuner.errors import UsageError
from tuner.playbook.sweep_grid import default_grid, extend_grid


def test_default_grid_is_five_half_decades_around_the_lr():
    assert default_grid(1e-3) == [0.0001, 0.000316, 0.001, 0.00316, 0.01]
    assert default_grid(0.1) == [0.01, 0.0316, 0.1, 0.316, 1.0]
    with pytest.raises(UsageError):
        default_grid(0.0)


def test_extend_grid_keeps_the_spacing_at_each_edge():
    assert extend_grid(default_grid(1e-3), "high") == [0.0316, 0.1]
    assert extend_grid(default_grid(1e-3), "low", count=3) == [3.16e-06, 1e-05, 3.16e-05]
    # A user's non-uniform grid: x10 at the low edge, x3 at the high edge.
    user = [0.003, 0.0001, 0.001]  # unsorted on purpose
    assert extend_grid(user, "high") == [0.009, 0.027]
    assert extend_grid(user, "low") == [1e-06, 1e-05]
    with pytest.raises(UsageError):
        extend_grid([0.1], "high")
