"""``tuner list``: the tracking table over the studies of an output folder or a shared storage.

Two studies share one output folder: ``alpha`` (round 1 on a proxy split, then round 2, whose
best checkpoint is on disk) and ``beta`` (round 1 only: a crash retried into a completion, a
divergence, a final crash; its best trial's run folder is not on this machine). Storages
elsewhere, shared, protected by a password, or broken: ``test_list_storages.py``.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import pytest

from tests.report_tests.builders import Built, add_trial, described_study, run_folder
from tests.spec_tests._support import invoke, plain
from tuner.playbook.plan import load_plan

pytestmark = pytest.mark.usefixtures("clean_env")

COUNT_KEYS = {"complete", "stopped", "diverged", "failed", "running", "waiting"}
ROW_KEYS = {
    "study",
    "storage",
    "study_file",
    "notes",
    "phases",
    "trials",
    "attempts",
    "counts",
    "delivered_model",
    "best",
    "train_s",
    "reproduce",
    "code_versions",
    "tune_studies",
}
PHASE_KEYS = {
    "phase",
    "kind",
    "study_file",
    "proxy_fraction",
    "trials",
    "attempts",
    "counts",
    "best_value",
    "train_s",
}
BEST_KEYS = {
    "attempts",
    "train_s",
    "git_commit",
    "git_dirty",
    "value",
    "metric",
    "direction",
    "split",
    "phase",
    "trial",
    "best_step",
    "max_train_steps",
    "params",
    "run_dir",
    "checkpoint",
    "checkpoint_on_this_machine",
    "checkpoint_problem",
    "reproduce",
}


def _alpha(root: Path, output_dir: Path) -> Built:
    """Round 1 on a 10% proxy split (best 0.10, better than round 2's: not comparable), then round
    2 (best 0.15, trial 0, checkpoint on disk). Training time: 4 x 60 s + 2 x 300 s = 840 s."""
    built = described_study(
        root / "alpha",
        output_dir,
        "Two rounds of the toy",
        name="alpha",
        round2={"top_k": 2},
        proxy_fraction=0.1,
    )
    round1 = built.start("round-1")
    for slot, (value, lr) in enumerate([(0.30, 0.05), (0.10, 0.1), (0.25, 0.2), (0.40, 0.5)]):
        add_trial(round1, slot, value, {"optimizer.lr": lr}, best_step=30, train_s=60.0)
    round2 = built.start("round-2")
    for slot, planned in enumerate(load_plan(round2.user_attrs).slots):  # type: ignore[union-attr]
        value = 0.15 + slot / 100
        folder = run_folder(
            output_dir / built.name / "round-2" / f"trial-{slot}",
            best_step=40,
            metrics={"val/error_rate": value},
        )
        add_trial(
            round2,
            slot,
            value,
            planned.values,
            best_step=40,
            run_dir=folder,
            train_s=300.0,
            reproduce=f"tuner train {built.path} --set optimizer.lr={planned.values['optimizer.lr']}",
            git_commit="89abcdef0123",
            **planned.attrs,
        )
    return built


def _beta(root: Path, output_dir: Path) -> Built:
    """Round 1: 2 complete (trial 1 after a retry, 0.31, the best; its run folder absent),
    1 diverged, 1 failed; one attempt on a dirty tree. 5 attempts x 1.5 s = 7.5 s."""
    built = described_study(root / "beta", output_dir, "Round 1 only,\nwith failures", name="beta")
    phase = built.start("round-1")
    add_trial(phase, 0, 0.35, {"optimizer.lr": 0.05}, best_step=20)
    first = add_trial(
        phase, 1, None, {"optimizer.lr": 0.3}, state="FAIL", retried=True, failure_reason="crashed"
    )
    add_trial(
        phase,
        1,
        0.31,
        {"optimizer.lr": 0.3},
        attempt=1,
        retry_of=first,
        best_step=30,
        run_dir=output_dir / built.name / "round-1" / "trial-1",
        git_dirty=True,
    )
    add_trial(phase, 2, None, {"optimizer.lr": 1.0}, state="FAIL", failure_reason="diverged")
    add_trial(phase, 3, None, {"optimizer.lr": 0.7}, state="FAIL", failure_reason="crashed")
    return built


@pytest.fixture(scope="module")
def two_studies(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The output folder holding alpha's and beta's ``study.db``."""
    root = tmp_path_factory.mktemp("list")
    output_dir = root / "runs"
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("TUNER_STORAGE", raising=False)  # the phases go to each study's own study.db
        _alpha(root, output_dir)
        _beta(root, output_dir)
    return output_dir


def _blocks(text: str) -> dict[str, str]:
    """The terminal output's block of each study, by name."""
    blocks: dict[str, str] = {}
    for block in plain(text).split("\n\n"):
        head = block.splitlines()[0]
        if head.startswith("━━ "):
            blocks[head.split()[1]] = block
    return blocks


def _line(block: str, label: str) -> str:
    return next(line for line in block.splitlines() if line.startswith(label))


def _value(block: str, label: str) -> str:
    """What follows ``label``: on its line, or (a long path, a command) alone on the next."""
    lines = block.splitlines()
    index = next(i for i, line in enumerate(lines) if line.split(None, 1)[0] == label)
    rest = lines[index][len(label) :].strip()
    return rest or lines[index + 1].strip()


def test_the_table_shows_every_study_of_the_output_folder(two_studies: Path) -> None:
    result = invoke("list", "--output-dir", str(two_studies))
    assert result.exit_code == 0, result.output
    blocks = _blocks(result.stdout)
    assert set(blocks) == {"alpha", "beta"}
    # 100 columns, but for a path or command alone on its line (never broken: it must copy whole)
    lines = plain(result.stdout).splitlines()
    for i, line in enumerate(lines):
        assert len(line) <= 100 or " " not in line.strip() or lines[i - 1] == "reproduce", line
    alpha, beta = blocks["alpha"], blocks["beta"]
    assert _value(alpha, "notes") == "Two rounds of the toy"
    assert _value(alpha, "file") == str(two_studies.parent / "alpha" / "study.yaml")
    assert _value(beta, "notes") == "Round 1 only, with failures"  # on one line
    # phases in the order they ran, trials by state; the proxy phase said so
    assert "round-1  4 trials: 4 complete; validates on a proxy split (10% of the training split)" in alpha
    assert "round-2  2 trials: 2 complete" in alpha
    assert "round-1  4 trials: 2 complete, 1 diverged, 1 failed (1 retry merged)" in beta
    # round 2 (full length) delivers the model: round 1's 0.10 (on a proxy split) never does
    assert "val/error_rate = 0.15 (minimize), round-2 trial 0 at step 40 of 40" in _line(alpha, "delivered")
    checkpoint = two_studies / "alpha" / "round-2" / "trial-0" / "checkpoints" / "best-step00000040.pt"
    assert _value(alpha, "checkpoint") == str(checkpoint)
    # round 1 only: its best is a candidate, not the study's model
    assert "val/error_rate = 0.31 (minimize), round-1 trial 1 at step 30 of 40" in _line(beta, "candidate")
    assert "not a delivered model yet (round 1 ranks points" in " ".join(beta.split())
    assert not any(line.startswith(("best", "delivered")) for line in beta.splitlines())
    missing = two_studies / "beta" / "round-1" / "trial-1" / "checkpoints" / "best-step00000030.pt"
    assert _value(beta, "checkpoint") == str(missing)
    assert "  (not on this machine: no run folder here)" in beta.splitlines()
    assert _value(alpha, "training") == "14m 00s (sum over 6 trials)"
    assert _value(beta, "training") == "8s (sum over 4 trials, 5 attempts)"
    assert _value(alpha, "code") == "0123abc (4 trials), 89abcde (2 trials)"
    assert _value(beta, "code") == "0123abc (4 trials), 0123abc dirty (1 trial)"
    reproduce = _value(alpha, "reproduce")
    assert reproduce.startswith("tuner train ") and reproduce.endswith(
        "alpha/study.yaml --set optimizer.lr=0.1"
    )
    assert "2 studies in 2 storages under" in plain(result.stdout)


def test_json_has_the_documented_schema(two_studies: Path) -> None:
    result = invoke("list", "--output-dir", str(two_studies), "--json")
    assert result.exit_code == 0, result.output
    rows = {row["study"]: row for row in json.loads(result.stdout)}
    assert set(rows) == {"alpha", "beta"}
    for row in rows.values():
        assert set(row) == ROW_KEYS
        assert set(row["counts"]) == COUNT_KEYS
        assert set(row["best"]) == BEST_KEYS
        for phase in row["phases"]:
            assert set(phase) == PHASE_KEYS and set(phase["counts"]) == COUNT_KEYS
    alpha, beta = rows["alpha"], rows["beta"]
    assert [p["phase"] for p in alpha["phases"]] == ["round-1", "round-2"]
    assert [p["proxy_fraction"] for p in alpha["phases"]] == [0.1, 0.0]
    assert [p["best_value"] for p in alpha["phases"]] == [0.1, 0.15]
    assert alpha["best"]["split"] == "validation" and alpha["best"]["phase"] == "round-2"
    assert alpha["best"]["checkpoint_on_this_machine"] is True and alpha["best"]["checkpoint_problem"] is None
    assert alpha["train_s"] == 840.0 and [p["train_s"] for p in alpha["phases"]] == [240.0, 600.0]
    assert alpha["reproduce"] == alpha["best"]["reproduce"]
    assert alpha["code_versions"] == [
        {"git_commit": "0123abc", "git_dirty": False, "trials": 4},
        {"git_commit": "89abcdef0123", "git_dirty": False, "trials": 2},
    ]
    assert beta["counts"] == {
        "complete": 2,
        "stopped": 0,
        "diverged": 1,
        "failed": 1,
        "running": 0,
        "waiting": 0,
    }
    assert (beta["trials"], beta["attempts"]) == (4, 5)
    assert beta["best"]["value"] == 0.31 and beta["best"]["trial"] == 1 and beta["best"]["best_step"] == 30
    assert beta["best"]["checkpoint"].endswith("beta/round-1/trial-1/checkpoints/best-step00000030.pt")
    assert beta["best"]["checkpoint_on_this_machine"] is False
    assert beta["notes"] == "Round 1 only,\nwith failures"
    assert beta["train_s"] == 7.5


def test_csv_writes_one_row_per_study(two_studies: Path, tmp_path: Path) -> None:
    path = tmp_path / "table.csv"
    result = invoke("list", "--output-dir", str(two_studies), "--csv", str(path), "--json")
    assert result.exit_code == 0, result.output
    json.loads(result.stdout)  # stdout holds the JSON alone; the CSV note went to stderr
    from tuner.output import shown_path

    assert f"csv          {shown_path(path)} (2 studies)" in plain(result.stderr)
    with path.open(newline="") as handle:
        rows = {row["study"]: row for row in csv.DictReader(handle)}
    assert set(rows) == {"alpha", "beta"}
    beta = rows["beta"]
    assert beta["phases"] == "round-1: 2 complete, 1 diverged, 1 failed (1 retry merged)"
    assert (beta["trials"], beta["attempts"], beta["failed"], beta["diverged"]) == ("4", "5", "1", "1")
    assert (beta["best_value"], beta["best_phase"], beta["best_trial"]) == ("0.31", "round-1", "1")
    assert (
        beta["checkpoint_on_this_machine"] == "false"
        and rows["alpha"]["checkpoint_on_this_machine"] == "true"
    )
    assert rows["alpha"]["code_versions"] == "0123abc (4 trials), 89abcdef0123 (2 trials)"  # full commits
    assert rows["alpha"]["train_s"] == "840.0"
    assert not list(tmp_path.glob(".table.csv*"))  # no temp file left by the atomic write


def test_a_study_validated_only_on_a_proxy_split_shows_that_best_marked(tmp_path: Path) -> None:
    built = described_study(
        tmp_path / "gamma", tmp_path / "runs", "proxy only", name="gamma", proxy_fraction=0.2
    )
    phase = built.start("round-1")
    add_trial(phase, 0, 0.4, {"optimizer.lr": 0.05}, best_step=20)
    add_trial(phase, 1, 0.2, {"optimizer.lr": 0.1}, best_step=40)
    add_trial(phase, 2, None, {"optimizer.lr": 0.2}, state="RUNNING")
    text = plain(invoke("list", "--storage", built.storage_url).stdout)
    assert "round-1  3 trials: 2 complete, 1 running; validates on a proxy split (20%" in text
    best = " ".join(text[text.index("\ncandidate ") :].split())
    assert best.startswith(
        "candidate val/error_rate = 0.2 (minimize), round-1 trial 1 at step 40 of 40 (on the proxy split"
    )
    [row] = json.loads(invoke("list", "--storage", built.storage_url, "--json").stdout)
    assert (row["best"]["split"], row["best"]["value"], row["best"]["checkpoint"]) == ("proxy", 0.2, None)


def test_tuner_storage_names_the_storage_and_one_unreadable_file_among_several_is_skipped(
    two_studies: Path, tmp_path: Path
) -> None:
    url = f"sqlite:///{(two_studies / 'beta' / 'study.db').resolve()}"
    result = invoke("list", "--json", env={"TUNER_STORAGE": url})
    assert result.exit_code == 0, result.output
    assert [row["study"] for row in json.loads(result.stdout)] == ["beta"]
    # an output folder with one good and one damaged study.db: the good one listed, a warning
    output_dir = tmp_path / "mixed"
    (output_dir / "broken").mkdir(parents=True)
    (output_dir / "broken" / "study.db").write_bytes(b"\x00garbage\xff" * 100)
    shutil.copytree(two_studies / "beta", output_dir / "beta")  # study.db and its WAL
    result = invoke("list", "--output-dir", str(output_dir))
    assert result.exit_code == 0, result.output
    assert set(_blocks(result.stdout)) == {"beta"}
    [warning] = plain(result.stderr).splitlines()
    assert warning.startswith("warning: skipped: cannot read storage sqlite:///") and "broken" in warning


def test_a_study_run_on_another_storage_is_listed_from_its_output_folder(tmp_path: Path) -> None:
    """A study run with a storage of its own (another SQLite file here, as a journal file or a
    PostgreSQL would be) is found through the ``storage.json`` its phase wrote in its folder; of a
    storage shared with other studies, only the studies of this output folder are listed."""
    output_dir, shared = tmp_path / "runs", f"sqlite:///{tmp_path / 'shared.db'}"
    for value, name, where in ((0.3, "one", output_dir), (0.2, "two", tmp_path / "elsewhere")):
        built = described_study(tmp_path / name, where, f"study {name}", storage=shared, name=name)
        add_trial(built.start("round-1"), 0, value, {"optimizer.lr": 0.1}, best_step=20)
    pointer = json.loads((output_dir / "one" / "storage.json").read_text())
    assert pointer == {"study": "one", "storage": shared, "needs_password": False}
    result = invoke("list", "--output-dir", str(output_dir), "--json")
    assert result.exit_code == 0, result.output
    assert [(row["study"], row["best"]["value"]) for row in json.loads(result.stdout)] == [("one", 0.3)]
    # a pointer whose URL needed a password, and a file that is not a pointer: a warning each
    (output_dir / "pw").mkdir()
    needs = {"study": "pw", "storage": "postgresql://me:***@db/t", "needs_password": True}
    (output_dir / "pw" / "storage.json").write_text(json.dumps(needs))
    (output_dir / "junk").mkdir()
    (output_dir / "junk" / "storage.json").write_text("{")
    result = invoke("list", "--output-dir", str(output_dir))
    assert result.exit_code == 0, result.output
    assert set(_blocks(result.stdout)) == {"one"}
    assert "1 study in 1 storage under" in plain(result.stdout)
    junk, pw = plain(result.stderr).splitlines()
    assert junk.startswith("warning: skipped: ") and "junk/storage.json: not readable as JSON" in junk
    assert pw == (
        "warning: skipped: study pw: its storage postgresql://me:***@db/t needs a password, which "
        "tuner never writes down; list it with --storage URL (or $TUNER_STORAGE)"
    )


def test_every_study_under_the_output_folder_is_listed_at_any_depth(
    two_studies: Path, tmp_path: Path
) -> None:
    """``make demo`` writes its study to ``runs/demo/digits-mlp/``, a folder deeper than
    ``runs/<study>/``: ``tuner list`` (``--output-dir runs``) lists it beside the others. A study
    folder's own subfolders (phases, run folders) are not searched: they hold no other study."""
    output_dir = tmp_path / "runs"
    shutil.copytree(two_studies / "alpha", output_dir / "demo" / "alpha")
    shutil.copytree(two_studies / "beta", output_dir / "beta")
    shutil.copytree(two_studies / "alpha", output_dir / "beta" / "round-1" / "copy")  # inside a study
    result = invoke("list", "--output-dir", str(output_dir))
    assert result.exit_code == 0, result.output
    assert set(_blocks(result.stdout)) == {"alpha", "beta"}
    assert f"2 studies in 2 storages under {output_dir}" in plain(result.stdout)
    storages = {
        row["study"]: row["storage"]
        for row in json.loads(invoke("list", "--json", "--output-dir", str(output_dir)).stdout)
    }
    assert storages["alpha"] == f"sqlite:///{output_dir / 'demo' / 'alpha' / 'study.db'}"


def test_help_is_clean_at_80_columns() -> None:
    result = invoke("list", "--help", env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    text = plain(result.stdout)
    assert text.startswith("Usage: tuner list [OPTIONS]\n")
    assert all(len(line) <= 80 for line in text.splitlines()), text
    for option in ("--storage URL", "--output-dir DIR", "--csv PATH", "--json"):
        assert f"  {option} " in text, text
    root = plain(invoke("--help", env={"COLUMNS": "80"}).stdout)
    assert re.search(r"^  list +Every study: the experiment-tracking table\.$", root, re.MULTILINE), root
    assert all(len(line) <= 80 for line in root.splitlines()), root
