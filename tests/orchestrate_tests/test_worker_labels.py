"""Two ``run-round`` commands on one study: their local workers never share a label."""

from __future__ import annotations

import os
import re
from pathlib import Path

from tests.orchestrate_tests.conftest import load_phase, sqlite_url, start_tuner, toy_study


def test_two_commands_on_one_study_label_their_workers_apart(tmp_path: Path) -> None:
    path = toy_study(tmp_path, round1={"trials": 4, "steps": 10})
    output_dir = tmp_path / "runs"
    args = ("run-round", str(path), "--round", "1", "--output-dir", str(output_dir), "--workers", "1")
    commands = [start_tuner(*args, "--no-progress", start_new_session=True) for _ in range(2)]
    try:
        outputs = [p.communicate(timeout=600)[0] for p in commands]
    finally:
        for p in commands:
            if p.poll() is None:
                os.killpg(p.pid, 9)
    assert [p.returncode for p in commands] == [0, 0], outputs
    labels = [re.search(r"1 worker \((\S+)\)", out).group(1) for out in outputs]  # type: ignore[union-attr]
    assert labels[0] != labels[1]
    assert all(re.fullmatch(r"cpu0@.+:\d+", label) for label in labels), labels
    logs = sorted(p.name for p in (output_dir / "toy" / "round-1" / ".workers").glob("*.log"))
    zygotes = [label.replace("cpu0@", "warm-start@") for label in labels]  # what each forked its worker from
    assert logs == sorted(f"{label}.log" for label in labels + zygotes)
    trials = load_phase(sqlite_url(output_dir), "toy").trials
    assert {t.user_attrs["worker"] for t in trials} <= set(labels)
