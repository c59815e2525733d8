"""Creating a phase is compare-and-set: two commands racing to create it agree on one plan."""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from tests.orchestrate_tests.conftest import load_phase, run_tuner, sqlite_url, start_tuner, toy_study
from tests.playbook_tests.test_rounds import _add
from tuner.orchestrate.locks import sqlite_lock_path
from tuner.playbook import start_round
from tuner.playbook.plan import load_plan
from tuner.spec import load_study


def _opened(pid: int, path: Path) -> bool:
    try:
        return any(os.readlink(fd) == str(path) for fd in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:  # the process exited, or an fd closed while we looked
        return False


def _wait_for(condition: Any, processes: list[subprocess.Popen[str]], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert all(p.poll() is None for p in processes), [p.communicate()[0] for p in processes]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _race_round_2(tmp_path: Path, *extra: tuple[str, ...]) -> tuple[list[int | None], list[str], str]:
    """Round 1 recorded; then two ``run-round --round 2`` (each with its ``extra`` arguments) held
    at the phase's lock until both have read the phase (no plan yet), and let go together."""
    path = toy_study(tmp_path)
    document = yaml.safe_load(path.read_text())
    document["rounds"]["round2"] = {"top_k": 1, "steps": 10}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    output_dir = tmp_path / "runs"
    round1 = start_round(load_study(path), "round-1", output_dir).study
    for slot, (value, lr) in enumerate([(0.3, 0.02), (0.1, 0.05), (0.2, 0.3), (0.25, 0.01)]):
        _add(round1, slot, value, lr=lr)

    url = sqlite_url(output_dir)
    lock_path = sqlite_lock_path(url, "toy/round-2")
    assert lock_path is not None
    args = ("run-round", str(path), "--round", "2", "--output-dir", str(output_dir), "--no-progress")
    with lock_path.open("a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # both commands get as far as the phase's lock, then wait
        racers = [start_tuner(*args, *more, start_new_session=True) for more in extra]
        try:
            _wait_for(lambda: all(_opened(p.pid, lock_path) for p in racers), racers)
            fcntl.flock(held, fcntl.LOCK_UN)
            outputs = [p.communicate(timeout=300)[0] for p in racers]
        finally:
            for p in racers:
                if p.poll() is None:
                    os.killpg(p.pid, 9)
    return [p.returncode for p in racers], outputs, url


def test_two_commands_racing_to_create_round_2_agree_on_one_plan(tmp_path: Path) -> None:
    codes, outputs, url = _race_round_2(tmp_path, (), ())
    assert codes == [0, 0], outputs
    continuing = [out for out in outputs if "continuing the phase's stored plan" in out]
    assert len(continuing) == 1, outputs  # one created the plan, the other used it
    phase = load_phase(url, "toy", "round-2")
    stored = load_plan(phase.user_attrs)
    assert stored is not None and len(stored.slots) == 1
    assert len({t.user_attrs["slot"] for t in phase.trials}) == 1


def test_the_loser_of_the_race_with_other_inputs_refuses_and_names_them(tmp_path: Path) -> None:
    codes, outputs, url = _race_round_2(tmp_path, (), ("--set", "rounds.round2.top_k=2"))
    assert sorted(c or 0 for c in codes) == [0, 2], outputs
    refused = outputs[codes.index(2)]
    assert "rounds.round2.top_k" in refused, refused
    # the loser removed its own logs, not the winner's folder (its trials and worker logs)
    folder = tmp_path / "runs" / "toy" / "round-2"
    assert list(folder.glob("trial-*")) and list((folder / ".workers").glob("cpu*.log"))
    stored = load_plan(load_phase(url, "toy", "round-2").user_attrs)
    assert stored is not None  # the winner's plan, whole: 1 point for top_k 1, 2 for top_k 2
    assert len(stored.slots) == (2 if codes[0] == 2 else 1)


def test_a_refused_round_2_before_round_1_leaves_nothing_behind(tmp_path: Path) -> None:
    path = toy_study(tmp_path)
    document = yaml.safe_load(path.read_text())
    document["rounds"]["round2"] = {"top_k": 1}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    output_dir = tmp_path / "runs"
    refused = run_tuner("run-round", str(path), "--round", "2", "--output-dir", str(output_dir))
    assert refused.returncode == 2
    assert "round-1 has not run in this storage" in refused.stderr
    assert [p for p in output_dir.rglob("*") if p.is_file()] == []
    listed = run_tuner("list", "--output-dir", str(output_dir))  # no damaged study: just none yet
    assert listed.returncode == 2 and "no study storage under" in listed.stderr
