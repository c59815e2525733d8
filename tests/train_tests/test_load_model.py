"""``tuner.train.load_model(checkpoint)``: the delivered model in plain PyTorch, from its run folder alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from tests.orchestrate_tests.conftest import toy_study
from tuner.cli.app import app
from tuner.errors import UsageError
from tuner.train import load_model


def _trained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A finished ``tuner train`` of the toy workload, whose file sits next to the study in a
    folder of its own (a relative entry point), run from another folder; its best checkpoint."""
    study = toy_study(tmp_path / "project", max_train_steps=30)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["train", str(study), "--no-progress", "--output-dir", "runs"])
    assert result.exit_code == 0, result.output
    (run,) = (tmp_path / "runs" / "toy" / "train").iterdir()
    index = json.loads((run / "checkpoints" / "index.json").read_text())
    return run / "checkpoints" / index["best"][0]["file"]


def test_a_checkpoint_loads_as_the_workloads_own_module_scoring_what_the_run_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    best = _trained(tmp_path, monkeypatch)
    run = best.parent.parent
    config = yaml.safe_load((run / "config.yaml").read_text())
    workload_file = (tmp_path / "project" / "toy_workload.py").resolve()
    assert config["workload"]["name"] == f"{workload_file}:build"  # resolves from anywhere
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    model = load_model(best)
    assert type(model).__name__ == "_Toy" and not model.training
    state = torch.load(best, weights_only=True)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, state["model"][name])
    # the toy's validation split (its last 32 examples), scored as the run scored it
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(96, 4, generator=generator)
    targets = (inputs[:, 0] + inputs[:, 1] > 0).long()
    with torch.no_grad():
        errors = (model(inputs[64:]).argmax(dim=1) != targets[64:]).float().mean().item()
    status = json.loads((run / "status.json").read_text())
    assert errors == pytest.approx(status["best_value"])


def test_a_checkpoint_without_a_run_folder_or_a_checksum_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    best = _trained(tmp_path, monkeypatch)
    with pytest.raises(UsageError, match="no such checkpoint file"):
        load_model(tmp_path / "missing.pt")
    loose = tmp_path / "loose.pt"
    loose.write_bytes(best.read_bytes())
    with pytest.raises(UsageError, match="not in a run folder"):
        load_model(loose)
    (best.parent / "checksums.json").unlink()
    assert type(load_model(best)).__name__ == "_Toy"  # verified by the copy in index.json
    index = json.loads((best.parent / "index.json").read_text())
    (best.parent / "index.json").write_text(json.dumps({**index, "digests": {}}))
    with pytest.raises(UsageError, match="has no checksum for it, so its weights cannot be trusted"):
        load_model(best)


EVIL = """\
from pathlib import Path


def build(ctx):
    Path(ctx.options["marker"]).write_text("ran")  # outside the run folder
    raise SystemExit("evil ran")
"""


def _received(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A run folder as received from elsewhere: its config.yaml names ``evil.py:build``, beside
    it, which writes a file outside the folder when called. The checkpoint and its checksums are
    the genuine ones of a toy run (so the weights themselves load)."""
    best = _trained(tmp_path, monkeypatch)
    received = tmp_path / "downloads" / "run"
    import shutil

    shutil.copytree(best.parent.parent, received)
    (received / "evil.py").write_text(EVIL)
    marker = tmp_path / "outside.txt"
    config = yaml.safe_load((received / "config.yaml").read_text())
    config["workload"] = {"name": f"{received / 'evil.py'}:build", "options": {"marker": str(marker)}}
    (received / "config.yaml").write_text(yaml.safe_dump(config))
    return received / "checkpoints" / best.name, marker


def test_loading_a_received_run_folder_runs_none_of_its_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoint, marker = _received(tmp_path, monkeypatch)
    with pytest.raises(
        UsageError, match=r"names the workload .*evil\.py:build, code that loading would run: "
    ):
        load_model(checkpoint)
    assert not marker.exists()
    from tests.orchestrate_tests.toy_workload import _Toy

    into = load_model(checkpoint, model=_Toy(sleep_s=0.0))  # the weights alone: no code of the folder's
    assert type(into).__name__ == "_Toy" and not marker.exists()
    state = torch.load(checkpoint, weights_only=True)
    assert all(torch.equal(t, state["model"][k]) for k, t in into.state_dict().items())


def test_trust_code_is_the_users_word_that_the_folders_code_may_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoint, marker = _received(tmp_path, monkeypatch)
    with pytest.raises(SystemExit, match="evil ran"):
        load_model(checkpoint, trust_code=True)
    assert marker.read_text() == "ran"


def test_a_build_function_the_caller_names_builds_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoint, marker = _received(tmp_path, monkeypatch)
    from tests.orchestrate_tests import toy_workload

    seen = []

    def build(ctx):  # the run's options and seed reach it, as they reached the run's own build
        seen.append(ctx.options)
        return toy_workload.build(ctx)

    model = load_model(checkpoint, workload=build)
    assert type(model).__name__ == "_Toy" and seen and not marker.exists()


def test_in_a_fresh_process_a_users_own_file_workload_needs_their_word(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    best = _trained(tmp_path, monkeypatch)
    script = (
        "import sys\n"
        "from tuner.errors import UsageError\n"
        "from tuner.train import load_model\n"
        "try:\n"
        "    load_model(sys.argv[1])\n"
        "except UsageError as error:\n"
        "    print('refused:', error)\n"
        "print(type(load_model(sys.argv[1], trust_code=True)).__name__)\n"
    )
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", script, str(best)], capture_output=True, text=True, check=True
    )
    assert "refused:" in done.stdout and "trust_code=True" in done.stdout
    assert done.stdout.strip().endswith("_Toy")
