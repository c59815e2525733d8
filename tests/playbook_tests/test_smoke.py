"""``tuner smoke``: every phase on a tiny budget, in a throw-away folder; exit 0 only if all completed."""

from __future__ import annotations

from pathlib import Path

from tests.orchestrate_tests.conftest import run_tuner, toy_study, tuner_env


def test_smoke_runs_every_phase_and_leaves_nothing_behind(tmp_path: Path) -> None:
    study = toy_study(tmp_path / "study")
    before = sorted(p.name for p in (tmp_path / "study").iterdir())
    temporary = tmp_path / "tmp"  # where smoke's own folder goes
    temporary.mkdir()
    done = run_tuner("smoke", str(study), "--workers", "1", env=tuner_env(TMPDIR=str(temporary)))
    assert done.returncode == 0, done.stderr
    assert "smoke: every phase completed" in done.stdout
    assert "sweep-lr (3 trials), round-1 (2 trials), round-2 (1 trial)" in done.stdout
    assert sorted(p.name for p in (tmp_path / "study").iterdir()) == before  # no runs/ next to the study
    # its run folders and storage deleted, the zygote's log too (torch keeps a cache of its own there)
    assert not list(temporary.glob("tuner-smoke-*"))


def test_smoke_fails_when_a_phase_cannot_complete(tmp_path: Path) -> None:
    study = toy_study(tmp_path / "study", options={"fail": "raise_at_step", "fail_at_step": 2})
    kept = tmp_path / "kept"
    done = run_tuner("smoke", str(study), "--workers", "1", "--keep", str(kept))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "smoke failed: sweep-lr" in done.stderr
    assert (kept / "study.db").exists()  # --keep: the evidence stays for the CI log
