"""digits-cnn's ``ghost_batch_size`` option: the model it builds, `tuner train`, `tuner validate`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from torch import nn
from typer.testing import CliRunner

from tests.spec_tests._support import REPO, invoke, single_error, write_study
from tests.workloads_tests.test_builtins import _build, _train, _val_predictions
from tuner.cli.app import app
from tuner.train.checkpoints import load_checkpoint
from tuner.workloads import GhostBatchNorm, WorkloadContext
from tuner.workloads.digits import build_cnn

STUDY = """\
name: ghost
seed: 0
workload:
  name: digits-cnn
  options:
    channels: [4, 8]
    ghost_batch_size: {ghost}
objective:
  metric: val/error_rate
training:
  batch_size: 20
  eval_batch_size: 256
  max_train_steps: 6
  eval_every: 3
  tensorboard: false
  device: cpu
  optimizer: {{name: momentum, lr: 0.05, momentum: 0.9}}
"""


def _norms(model: nn.Module) -> list[type[nn.Module]]:
    return [type(m) for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


def test_the_option_swaps_every_batch_norm_for_a_ghost_one() -> None:
    assert _norms(_build(build_cnn).model) == [nn.BatchNorm2d, nn.BatchNorm2d]
    ghost = _build(build_cnn, ghost_batch_size=16).model
    assert _norms(ghost) == [GhostBatchNorm, GhostBatchNorm]
    assert {m.virtual_batch_size for m in ghost.modules() if isinstance(m, GhostBatchNorm)} == {16}


def test_digits_cnn_with_ghost_batch_norm_learns() -> None:
    workload = _build(build_cnn, ghost_batch_size=16)
    _train(workload, steps=150, batch_size=64)  # 4 virtual batches per step
    pred, y = _val_predictions(workload)
    assert (pred == y).float().mean() >= 0.90


def test_tuner_train_runs_digits_cnn_with_ghost_batch_norm(tmp_path: Path) -> None:
    study = write_study(tmp_path, STUDY.format(ghost=8))
    result = CliRunner().invoke(
        app, ["train", str(study), "--output-dir", str(tmp_path / "runs"), "--no-progress"]
    )
    assert result.exit_code == 0, result.output
    run = tmp_path / "runs" / "ghost" / "train" / "run-001"
    options = yaml.safe_load((run / "config.yaml").read_text())["workload"]["options"]
    assert options["ghost_batch_size"] == 8

    # Batches of 20 in virtual batches of 8 are cut 8, 8, 4: every training step updates each
    # layer's running statistics 3 times (a plain BatchNorm2d: once), evaluation never does.
    state = load_checkpoint(run / "checkpoints" / "latest.pt")["model"]
    tracked = {key: int(value) for key, value in state.items() if key.endswith("num_batches_tracked")}
    assert len(tracked) == 2 and set(tracked.values()) == {6 * 3}

    # The run's config builds ghost layers, and the checkpoint loads into them as it is.
    torch.manual_seed(0)
    model = build_cnn(WorkloadContext(options=options, seed=0)).model
    assert _norms(model) == [GhostBatchNorm, GhostBatchNorm]
    model.load_state_dict(state)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", "expected a positive integer, got 0"),
        ("-8", "expected a positive integer, got -8"),
        ("'8'", "expected an integer, got '8' (a string)"),
        ("2.5", "expected an integer, got 2.5"),
        ("true", "expected an integer, got true"),
    ],
)
def test_validate_rejects_a_bad_ghost_batch_size(tmp_path: Path, value: str, expected: str) -> None:
    message = single_error(invoke("validate", str(write_study(tmp_path, STUDY.format(ghost=value)))))
    assert message == f"{tmp_path / 'study.yaml'}:7:23: workload.options.ghost_batch_size: {expected}"


def test_validate_checks_ghost_batch_sizes_in_the_search_space(tmp_path: Path) -> None:
    text = (
        STUDY.format(ghost="null")
        + "search_space:\n  workload.ghost_batch_size: {type: categorical, choices: [8, 0]}\n"
    )
    message = single_error(invoke("validate", str(write_study(tmp_path, text))))
    assert "search_space[workload.ghost_batch_size]: value 0 does not fit" in message
    ok = text.replace("[8, 0]", "[4, 8]")
    assert invoke("validate", str(write_study(tmp_path, ok))).exit_code == 0


def test_the_template_documents_the_option_and_it_validates_uncommented(tmp_path: Path) -> None:
    template = (REPO / "tuner" / "spec" / "templates" / "digits-cnn.yaml").read_text()
    (line,) = [line for line in template.splitlines() if "ghost_batch_size" in line]
    assert line.startswith("    # ghost_batch_size: 16")
    study = write_study(tmp_path, template.replace("# ghost_batch_size", "ghost_batch_size"))
    result = invoke("validate", str(study))
    assert result.exit_code == 0, result.output
