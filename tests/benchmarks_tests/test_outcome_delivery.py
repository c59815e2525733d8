"""The delivery rules the outcome benchmark compares pick the run their definitions say, on
constructed runs whose answer is known."""

from __future__ import annotations

from pathlib import Path

from benchmarks.outcome_delivery import Run, choose


def _run(phase: str, point: str, seed: int, value: float) -> Run:
    folder = Path(f"/runs/{phase}/{point}-{seed}")
    slot = "abc".index(point) * 3 + seed
    return Run(phase, int(phase.split("-")[1]), point, seed, value, slot, folder / "best.pt", folder)


def _study(lucky: float) -> list[Run]:
    """Round 1: points a and b (the top two, trained again by round 2 on 2 new seeds) and c, one
    run at ``lucky``; a is the better point on every later seed."""
    return [
        _run("round-1", "a", 0, 0.20),
        _run("round-1", "b", 0, 0.21),
        _run("round-1", "c", 0, lucky),
        _run("round-2", "a", 1, 0.22),
        _run("round-2", "a", 2, 0.23),
        _run("round-2", "b", 1, 0.26),
        _run("round-2", "b", 2, 0.27),
    ]


def test_the_current_rule_delivers_from_round_2_only() -> None:
    chosen = choose("current", _study(lucky=0.10), minimize=True)
    assert (chosen.point, chosen.seed) == ("a", 1)


def test_round_1_candidates_let_a_single_lucky_run_win_and_pool_the_points_runs() -> None:
    assert choose("with-round-1", _study(lucky=0.10), minimize=True).point == "c"
    # a's three runs pooled (mean 0.2167) beat c's single 0.218; a's best seed is round 1's
    chosen = choose("with-round-1", _study(lucky=0.218), minimize=True)
    assert (chosen.point, chosen.phase) == ("a", "round-1")


def test_shrinkage_counts_a_single_run_for_less_than_the_same_mean_over_three_seeds() -> None:
    """c at 0.2160 beats a's mean 0.2167 by a hair, but its one run is shrunk further toward the
    mean of all points than a's three: a is chosen."""
    assert choose("with-round-1", _study(lucky=0.216), minimize=True).point == "c"
    assert choose("shrunk", _study(lucky=0.216), minimize=True).point == "a"
    # far enough ahead, it wins anyway
    assert choose("shrunk", _study(lucky=0.10), minimize=True).point == "c"


def test_best_run_takes_the_single_best_value_for_a_metric_to_maximise() -> None:
    runs = [_run("round-1", "a", 0, 0.7), _run("round-2", "b", 1, 0.9), _run("round-2", "b", 2, 0.4)]
    assert choose("best-run", runs, minimize=False).point == "b"
    assert choose("current", runs, minimize=False).seed == 1
    assert choose("with-round-1", runs, minimize=False).point == "a"


def test_equal_means_on_equal_seeds_go_to_the_lowest_trial_number_then_the_later_round() -> None:
    """A round-2 point (trials 2 and 3) and round 3's longer run of it (trials 0 and 1) with the
    same mean: tune's ranking takes the lowest trial number, whatever its round; on the same
    trial numbers, the later round."""
    folder = Path("/runs")
    runs = [
        Run("round-2", 2, "p", 1, 0.03, 2, folder / "a.pt", folder),
        Run("round-2", 2, "p", 2, 0.02, 3, folder / "b.pt", folder),
        Run("round-3", 3, "p-longer", 3, 0.02, 0, folder / "c.pt", folder),
        Run("round-3", 3, "p-longer", 4, 0.03, 1, folder / "d.pt", folder),
    ]
    assert choose("current", runs, minimize=True).checkpoint.name == "c.pt"
    runs[0] = Run("round-2", 2, "p", 1, 0.03, 0, folder / "a.pt", folder)
    runs[1] = Run("round-2", 2, "p", 2, 0.02, 1, folder / "b.pt", folder)
    assert choose("current", runs, minimize=True).checkpoint.name == "c.pt"
