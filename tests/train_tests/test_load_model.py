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
