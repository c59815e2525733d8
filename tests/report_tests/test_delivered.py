"""The model a study delivers (``tuner.report.delivered``): one rule, the same in ``tuner list``,
``tuner report`` (terminal, JSON, HTML), on constructed studies whose answer is known.

The rule: of the rounds (2 or later) at full length or longer, the point with the best mean over
completed seeds, a point's runs at one length pooled across rounds (equal means: more seeds, then
the earlier point); that point's best seed at its best step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.report_tests.builders import Built, add_trial, run_folder, study
from tests.spec_tests._support import invoke, plain
from tuner.playbook.plan import load_plan

# round 1 (4 points, one run each): on the real validation set, slot 1 looks best
ROUND1 = [(0.30, 0.05), (0.10, 0.1), (0.25, 0.2), (0.40, 0.5)]


pytestmark = pytest.mark.usefixtures("clean_env")


def _round1(built: Built) -> None:
    phase = built.start("round-1")
    for slot, (value, lr) in enumerate(ROUND1):
        add_trial(phase, slot, value, {"optimizer.lr": lr}, best_step=30)


def _round2(
    built: Built, values: list[float | None], name: str = "round-2", examples: int | None = None
) -> None:
    """Round 2's (or ``name``'s) slots (in plan order: each point's seeds together) with ``values``
    (None: failed); each completed run has a run folder with its best checkpoint at its last step
    (and ``examples`` validation examples, when given: the noise of an error rate)."""
    phase = built.start(name)
    plan = load_plan(phase.user_attrs)
    assert plan is not None
    last = plan.trial_steps
    for slot, planned in enumerate(plan.slots):
        value = values[slot]
        folder = built.output_dir / built.name / name / f"trial-{slot}"
        if value is not None:
            status = {"eval_examples": {"val": examples}} if examples else None
            run_folder(folder, best_step=last, metrics={"val/error_rate": value}, status=status)
        add_trial(
            phase,
            slot,
            value,
            planned.values,
            state="COMPLETE" if value is not None else "FAIL",
            best_step=last if value is not None else None,
            run_dir=folder,
            reproduce=f"tuner train study.yaml --set slot={slot} ({name.replace('-', ' ')})",
            **planned.attrs,
        )


def _two_rounds(tmp_path: Path, round2: dict[str, Any], values: list[float | None]) -> Built:
    built = study(tmp_path / "s", round2=round2)
    _round1(built)
    _round2(built, values)
    return built


def _delivered_json(built: Built, *args: str) -> dict[str, Any]:
    """``tuner report --json``'s ``delivered_model``, checked equal to ``tuner list --json``'s."""
    report = invoke("report", "toy", "--output-dir", str(built.output_dir), "--json", *args)
    assert report.exit_code == 0, report.output
    listed = invoke("list", "--output-dir", str(built.output_dir), "--json")
    assert listed.exit_code == 0, listed.output
    [row] = json.loads(listed.stdout)
    delivered = json.loads(report.stdout)["delivered_model"]
    assert row["delivered_model"] == delivered  # one rule: list and report agree
    if delivered is not None:
        assert (row["best"]["phase"], row["best"]["trial"]) == (delivered["phase"], delivered["trial"])
    return delivered


def _list_block(built: Built) -> str:
    result = invoke("list", "--output-dir", str(built.output_dir))
    assert result.exit_code == 0, result.output
    return " ".join(plain(result.stdout).split())


def test_a_truncated_or_unverified_checkpoint_is_not_named_the_model_without_a_word(tmp_path: Path) -> None:
    built = _two_rounds(tmp_path, {"top_k": 2}, [0.15, 0.12])
    checkpoint = built.output_dir / "toy" / "round-2" / "trial-1" / "checkpoints" / "best-step00000040.pt"
    checkpoint.write_bytes(b"PK\x03\x04 cut")  # not the bytes that were written
    delivered = _delivered_json(built)
    assert delivered["checkpoint"] == str(checkpoint) and delivered["checkpoint_on_this_machine"] is False
    assert (
        delivered["checkpoint_problem"]
        == "damaged: its sha256 differs from the one recorded when it was written"
    )
    text = " ".join(plain(invoke("report", "toy", "--output-dir", str(built.output_dir)).stdout).split())
    assert "(damaged: its sha256 differs from the one recorded when it was written)" in text
    (checkpoint.parent / "checksums.json").unlink()
    delivered = _delivered_json(built)
    assert delivered["checkpoint_problem"] == (
        "unverified: checksums.json beside it (nor its copy in index.json) records no checksum for it"
    )


def test_round_2_delivers_even_when_a_short_round_1_run_looks_better(tmp_path: Path) -> None:
    # round 1's best is 0.10 (slot 1); round 2 retrains round 1's slots 1 and 2: 0.15 and 0.12
    built = _two_rounds(tmp_path, {"top_k": 2}, [0.15, 0.12])
    delivered = _delivered_json(built)
    assert delivered["delivered"] is True and delivered["status"] == "delivered model"
    assert (delivered["phase"], delivered["trial"], delivered["value"]) == ("round-2", 1, 0.12)
    assert delivered["best_step"] == 40 and delivered["split"] == "validation"
    checkpoint = built.output_dir / "toy" / "round-2" / "trial-1" / "checkpoints" / "best-step00000040.pt"
    assert delivered["checkpoint"] == str(checkpoint) and delivered["checkpoint_on_this_machine"] is True
    assert delivered["reproduce"] == "tuner train study.yaml --set slot=1 (round 2)"
    assert delivered["seeds"] == {
        "mean": 0.12, "min": 0.12, "max": 0.12, "seeds": 1, "trials": [1],
        "runs": [{"phase": "round-2", "trial": 1}],
    }  # fmt: skip
    assert delivered["why_not"] is None and delivered["next_step"] is None
    # the list says it, and never calls round 1's 0.10 the best
    block = _list_block(built)
    assert "delivered val/error_rate = 0.12 (minimize), round-2 trial 1 at step 40 of 40" in block
    assert "seeds 1 seed: no spread measured" in block
    assert "0.1 (minimize)" not in block and " best " not in block
    # the report says it first, with --phase too (the model is the study's, not the phase's)
    text = plain(invoke("report", "toy", "--output-dir", str(built.output_dir)).stdout)
    first = " ".join(text.split("━━")[0].split())
    assert "delivered val/error_rate = 0.12 (minimize), round-2 trial 1 at step 40 of 40" in first
    assert "reproduce tuner train study.yaml --set slot=1 (round 2)" in first
    assert _delivered_json(built, "--phase", "round-1")["trial"] == 1


def test_a_point_is_ranked_by_its_mean_over_seeds_not_by_its_luckiest_seed(tmp_path: Path) -> None:
    # point A (slots 0, 1): 0.09 and 0.15, mean 0.12, the best single run; point B (slots 2, 3):
    # 0.11 and 0.11, mean 0.11: B is delivered, at its first seed (equal values: the lower seed)
    built = _two_rounds(tmp_path, {"top_k": 2, "seeds": 2}, [0.09, 0.15, 0.11, 0.11])
    delivered = _delivered_json(built)
    assert (delivered["phase"], delivered["trial"], delivered["value"]) == ("round-2", 2, 0.11)
    assert delivered["seeds"] == {
        "mean": 0.11, "min": 0.11, "max": 0.11, "seeds": 2, "trials": [2, 3],
        "runs": [{"phase": "round-2", "trial": 2}, {"phase": "round-2", "trial": 3}],
    }  # fmt: skip
    block = _list_block(built)
    assert "round-2 trial 2 at step 40 of 40 seeds mean 0.11 over 2 seeds (0.11-0.11)" in block


def test_the_delivered_run_is_the_chosen_points_best_seed(tmp_path: Path) -> None:
    # point A: 0.14 and 0.10 (mean 0.12); point B: 0.13 and 0.13 (mean 0.13): A, its second seed
    delivered = _delivered_json(_two_rounds(tmp_path, {"top_k": 2, "seeds": 2}, [0.14, 0.10, 0.13, 0.13]))
    assert (delivered["trial"], delivered["value"]) == (1, 0.10)
    assert delivered["seeds"] == {
        "mean": pytest.approx(0.12),
        "min": 0.10,
        "max": 0.14,
        "seeds": 2,
        "trials": [0, 1],
        "runs": [{"phase": "round-2", "trial": 0}, {"phase": "round-2", "trial": 1}],
    }


@pytest.mark.parametrize(
    ("values", "trial", "seeds"),
    [
        # a mean is a mean: A's one completed seed (0.25; its other failed) beats B's mean 0.5
        ([0.25, None, 0.25, 0.75], 0, 1),
        # equal means (0.5): the point with more seeds wins over the earlier point
        ([0.5, None, 0.25, 0.75], 2, 2),
    ],
    ids=["single-seed-better-mean-wins", "equal-means-more-seeds-wins"],
)
def test_a_single_seed_point_competes_by_its_one_value(
    tmp_path: Path, values: list[float | None], trial: int, seeds: int
) -> None:
    delivered = _delivered_json(_two_rounds(tmp_path, {"top_k": 2, "seeds": 2}, values))
    assert (delivered["trial"], delivered["seeds"]["seeds"]) == (trial, seeds)


def test_a_round_on_new_seeds_at_the_same_length_pools_each_points_runs_with_round_2s(tmp_path: Path) -> None:
    # round 2: point A (round 1's slot 1) 0.05, point B (slot 2) 0.13; round 3 trains both again on
    # 2 new seeds: A 0.12, 0.12; B 0.10, 0.10. Round 3 alone would choose B (0.10 < 0.12); pooled,
    # A's mean is (0.05 + 0.24) / 3 = 0.0967 and B's (0.13 + 0.20) / 3 = 0.11: A, at its round-2 run
    built = study(tmp_path / "s", round2={"top_k": 2}, round3={"top_k": 2, "seeds": 2, "steps": 40})
    _round1(built)
    _round2(built, [0.05, 0.13])
    _round2(built, [0.12, 0.12, 0.10, 0.10], name="round-3")
    delivered = _delivered_json(built)
    assert delivered["delivered"] is True
    assert (delivered["phase"], delivered["trial"], delivered["value"]) == ("round-2", 0, 0.05)
    assert delivered["seeds"]["mean"] == pytest.approx(0.29 / 3)
    assert delivered["seeds"]["seeds"] == 3 and delivered["seeds"]["trials"] == [0]
    assert delivered["seeds"]["runs"] == [
        {"phase": "round-2", "trial": 0}, {"phase": "round-3", "trial": 0}, {"phase": "round-3", "trial": 1},
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("longer", "phase", "trial", "seeds", "told"),
    [
        ([0.02, 0.03], "round-3", 0, 2, "better beyond the noise"),
        ([0.095, 0.10], "round-3", 0, 2, "within the noise"),
        ([0.25, 0.27], "round-2", 0, 1, "worse beyond the noise"),
    ],
    ids=[
        "longer-is-better-delivers",
        "longer-within-noise-delivers-by-its-mean",
        "longer-is-worse-keeps-round-2",
    ],
)
def test_a_longer_round_is_a_point_of_its_own_compared_by_its_mean(
    tmp_path: Path, longer: list[float], phase: str, trial: int, seeds: int, told: str
) -> None:
    # round 2 at max_train_steps (40): A 0.10, B 0.12; round 3 trains A at 80 steps on 2 seeds:
    # a mean under A's 0.10 at 40 steps delivers round 3, one over it does not (the longer run is
    # not assumed better); 1,000 validation examples: a Wilson band of about +-0.02 at 0.10
    built = study(tmp_path / "s", round2={"top_k": 2}, round3={"top_k": 1, "seeds": 2, "steps": 80})
    _round1(built)
    _round2(built, [0.10, 0.12], examples=1000)
    _round2(built, longer, name="round-3", examples=1000)
    delivered = _delivered_json(built)
    assert delivered["delivered"] is True
    assert (delivered["phase"], delivered["trial"], delivered["seeds"]["seeds"]) == (phase, trial, seeds)
    assert {r["phase"] for r in delivered["seeds"]["runs"]} == {phase}
    # round 3's section says what the longer runs did, against round 2's run of the same point
    report = json.loads(invoke("report", "toy", "--output-dir", str(built.output_dir), "--json").stdout)
    third = next(p for p in report["phases"] if p["phase"] == "round-3")
    [longer_runs] = [v for v in third["transfer"]["verdicts"] if v["kind"] == "longer_runs"]
    assert (longer_runs["source_steps"], longer_runs["steps"], longer_runs["points"]) == (40, 80, 1)
    mean = f"{sum(longer) / 2:.4g}"
    assert longer_runs["text"].endswith(
        f"longer, 40 -> 80 steps: mean {mean} over 2 seeds against 0.1 over 1 at 40 steps: {told}"
    )
    assert longer_runs["level"] == {"better": "ok", "within": "info", "worse": "warning"}[told.split()[0]]


def test_a_point_trained_longer_on_one_seed_shows_its_spread_at_the_shorter_length(tmp_path: Path) -> None:
    # round 2: A on 2 seeds (0.10, 0.14), B on 2 (0.12, 0.13); round 3 trains A at 80 steps on 1
    # seed (0.05): delivered from round 3, whose spread is unmeasured; A's at 40 steps stands in
    built = study(
        tmp_path / "s", round2={"top_k": 2, "seeds": 2}, round3={"top_k": 1, "seeds": 1, "steps": 80}
    )
    _round1(built)
    _round2(built, [0.10, 0.14, 0.12, 0.13])
    _round2(built, [0.05], name="round-3")
    delivered = _delivered_json(built)
    assert (delivered["phase"], delivered["seeds"]["seeds"]) == ("round-3", 1)
    other = delivered["seeds_at_another_length"]
    assert (other["steps"], other["seeds"], other["min"], other["max"]) == (40, 2, 0.10, 0.14)
    assert other["mean"] == pytest.approx(0.12)
    assert {r["phase"] for r in other["runs"]} == {"round-2"}
    text = " ".join(plain(invoke("report", "toy", "--output-dir", str(built.output_dir)).stdout).split())
    assert (
        "seeds 1 seed: no spread measured at its length; the same point at 40 steps: mean 0.12 over 2 "
        "seeds (0.1-0.14)" in text
    )
    # a point run once with no other length measured: the setting that would measure it, as before
    built = study(tmp_path / "t", round2={"top_k": 2})
    _round1(built)
    _round2(built, [0.10, 0.12])
    delivered = _delivered_json(built)
    assert delivered["seeds"]["seeds"] == 1 and delivered["seeds_at_another_length"] is None


def test_several_points_trained_longer_are_counted_better_worse_and_within_the_noise(tmp_path: Path) -> None:
    built = study(tmp_path / "s", round2={"top_k": 2}, round3={"top_k": 2, "steps": 80})
    _round1(built)
    _round2(built, [0.10, 0.12], examples=1000)
    _round2(built, [0.02, 0.30], name="round-3", examples=1000)  # A much better, B much worse
    report = json.loads(invoke("report", "toy", "--output-dir", str(built.output_dir), "--json").stdout)
    third = next(p for p in report["phases"] if p["phase"] == "round-3")
    [longer_runs] = [v for v in third["transfer"]["verdicts"] if v["kind"] == "longer_runs"]
    assert longer_runs["text"] == (
        "round-3 trained 2 of round-2's points longer, 40 -> 80 steps: 1 better beyond the noise, 1 worse, "
        "0 within it"
    )
    assert (longer_runs["better"], longer_runs["worse"], longer_runs["within_noise"]) == (1, 1, 0)
    assert longer_runs["level"] == "info"
    # round 2 trained round 1's points longer too, but round 1 is short by design: the transfer's
    second = next(p for p in report["phases"] if p["phase"] == "round-2")
    assert "longer_runs" not in {v["kind"] for v in second["transfer"]["verdicts"]}


def test_without_round_2_round_1s_best_is_a_candidate_not_the_delivered_model(tmp_path: Path) -> None:
    built = study(tmp_path / "s", round1={"steps": 20})  # max_train_steps 40: round 1 is short
    phase = built.start("round-1")
    for slot, (value, lr) in enumerate(ROUND1):
        add_trial(phase, slot, value, {"optimizer.lr": lr}, best_step=20)
    delivered = _delivered_json(built)
    assert delivered["delivered"] is False
    assert (delivered["phase"], delivered["trial"], delivered["value"]) == ("round-1", 1, 0.1)
    why = "round 1 trains at a fraction of max_train_steps, 20 of 40 steps"
    assert delivered["why_not"] == why
    assert delivered["status"] == f"not a delivered model yet ({why}): {delivered['next_step']}"
    assert delivered["next_step"].startswith("run round 2 (tuner run-round ")
    block = _list_block(built)
    assert "candidate val/error_rate = 0.1 (minimize), round-1 trial 1 at step 20 of 20" in block
    assert f"not a delivered model yet ({why}): run round 2" in block
    assert " delivered val/" not in block
    text = " ".join(plain(invoke("report", "toy", "--output-dir", str(built.output_dir)).stdout).split())
    candidate = "candidate val/error_rate = 0.1 (minimize), round-1 trial 1 at step 20 of 20"
    assert f"{candidate} not a delivered model yet ({why})" in text


def test_a_round_2_shorter_than_max_train_steps_does_not_deliver(tmp_path: Path) -> None:
    built = _two_rounds(tmp_path, {"top_k": 2, "steps": 20}, [0.15, 0.12])
    delivered = _delivered_json(built)
    assert delivered["delivered"] is False and (delivered["phase"], delivered["trial"]) == ("round-2", 1)
    assert delivered["why_not"] == "round 2 trains at a fraction of max_train_steps, 20 of 40 steps"
    assert delivered["next_step"].startswith("run round 3 ")


def test_no_completed_round_delivers_nothing(tmp_path: Path) -> None:
    built = study(tmp_path / "s")
    add_trial(built.start("round-1"), 0, None, {"optimizer.lr": 0.1}, state="RUNNING")
    assert _delivered_json(built) is None
    assert "delivered none yet: no round has a completed trial" in _list_block(built)


def test_the_html_report_opens_with_the_delivered_model(tmp_path: Path) -> None:
    pytest.importorskip("plotly")
    built = _two_rounds(tmp_path, {"top_k": 2}, [0.15, 0.12])
    path = tmp_path / "report.html"
    result = invoke("report", "toy", "--output-dir", str(built.output_dir), "--html", str(path))
    assert result.exit_code == 0, result.output
    page = path.read_text()
    section = page[page.index("<h2>delivered model</h2>") : page.index("<section class='phase'")]
    assert "<tr><th>phase</th><td>round-2</td></tr>" in section
    assert "<tr><th>trial</th><td>1</td></tr>" in section and "best-step00000040.pt" in section


def test_an_unfinished_round_delivers_from_its_completed_runs_and_says_so(tmp_path: Path) -> None:
    built = study(tmp_path / "s", round2={"top_k": 2})
    _round1(built)
    phase = built.start("round-2")
    planned = load_plan(phase.user_attrs).slots  # type: ignore[union-attr]
    add_trial(phase, 0, 0.15, planned[0].values, best_step=40, **planned[0].attrs)
    add_trial(phase, 1, None, planned[1].values, state="RUNNING", **planned[1].attrs)
    delivered = _delivered_json(built)
    assert delivered["delivered"] is True and (delivered["trial"], delivered["unfinished"]) == (0, 1)
    assert "round-2 is unfinished: the choice may change" in _list_block(built)
