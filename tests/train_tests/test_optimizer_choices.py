"""The optimizer as users set it: any ``torch.optim`` class with its arguments, no weight decay on
biases and normalisation weights, and parameter groups from the workload with their own LR scale."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from tests.spec_tests._support import invoke, single_error
from tests.train_tests.conftest import write_study
from tests.train_tests.contract_workloads import OwnLossLM
from tuner.spec import OptimizerSpec
from tuner.train import load_checkpoint, run_training
from tuner.train.optimizers import build_optimizer

HERE = Path(__file__).parent


def test_a_torch_optim_class_with_its_options_trains(make_study, tmp_path: Path) -> None:
    loaded = make_study(
        max_train_steps=12,
        eval_every=6,
        optimizer={
            "name": "RMSprop",
            "lr": 0.001,
            "weight_decay": 1e-4,
            "options": {"alpha": 0.9, "centered": True},
        },
    )
    result = run_training(loaded.spec, tmp_path / "run", base_dir=loaded.base_dir, progress=False)
    assert result.status == "completed"
    (group,) = load_checkpoint(tmp_path / "run" / "checkpoints" / "latest.pt")["optimizer"]["param_groups"]
    assert (group["alpha"], group["centered"], group["weight_decay"]) == (0.9, True, 1e-4)


def test_an_optimizer_from_a_module_path(make_study, tmp_path: Path) -> None:
    loaded = make_study(
        max_train_steps=12, eval_every=6, optimizer={"name": "torch.optim:NAdam", "lr": 0.002}
    )
    assert (
        run_training(loaded.spec, tmp_path / "run", base_dir=loaded.base_dir, progress=False).status
        == "completed"
    )


@pytest.mark.parametrize(
    ("optimizer", "words"),
    [
        (
            {"name": "RMSprop", "options": {"alpah": 0.9}},
            "optimizer.options.alpah: RMSprop takes no argument 'alpah'",
        ),
        ({"name": "Adamm"}, "optimizer.name 'Adamm' is not an optimizer"),
        (
            {"name": "adamw", "options": {"lr": 0.1}},
            "optimizer.options.lr: set by tuner from the optimizer's own fields",
        ),
    ],
)
def test_an_optimizer_it_cannot_build_is_one_line(tmp_path: Path, optimizer: dict, words: str) -> None:
    path = write_study(tmp_path, optimizer=optimizer, max_train_steps=12)
    result = invoke("train", str(path), "--output-dir", str(tmp_path / "runs"), "--no-progress")
    assert words in single_error(result)
    assert not (tmp_path / "runs").exists()  # refused before anything was trained


def test_fields_of_the_short_names_are_refused_for_a_class(tmp_path: Path) -> None:
    path = write_study(tmp_path, optimizer={"name": "RMSprop", "momentum": 0.5})
    message = single_error(invoke("validate", str(path)))
    assert (
        "momentum applies to momentum and nesterov only; for the class RMSprop give it in options" in message
    )


def test_no_weight_decay_exempts_biases_and_normalisation_weights() -> None:
    model = OwnLossLM()
    spec = OptimizerSpec(name="adamw", lr=0.01, weight_decay=0.1, no_weight_decay=["bias", "norm"])
    optimizer = build_optimizer(spec, model)
    decayed, exempt = optimizer.param_groups
    names = {id(p): n for n, p in model.named_parameters()}
    assert decayed["weight_decay"] == 0.1 and exempt["weight_decay"] == 0.0
    assert sorted(names[id(p)] for p in exempt["params"]) == [
        "head.bias",
        "mix.bias",
        "norm.bias",
        "norm.weight",
    ]
    assert sorted(names[id(p)] for p in decayed["params"]) == ["embed.weight", "head.weight", "mix.weight"]


def _grouped(tmp_path: Path, groups: str, **training: Any) -> Any:
    """``tuner train`` on the two-input workload with ``param_groups = lambda m: <groups>``."""
    shutil.copy(HERE / "contract_workloads.py", tmp_path / "contract_workloads.py")
    (tmp_path / "grouped.py").write_text(
        "from contract_workloads import two_inputs\n\n"
        "def build(ctx):\n"
        "    workload = two_inputs(ctx)\n"
        f"    workload.param_groups = lambda m: {groups}\n"
        "    return workload\n"
    )
    study = yaml.safe_load(write_study(tmp_path, max_train_steps=12, eval_every=6).read_text())
    study["workload"] = {"name": "grouped.py:build"}
    study["training"].update(training)
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study))
    return invoke(
        "train", str(tmp_path / "study.yaml"), "--output-dir", str(tmp_path / "runs"), "--no-progress"
    )


def test_workload_groups_train_at_their_lr_scale(tmp_path: Path) -> None:
    """The backbone at a tenth of the head's rate, both under the schedule."""
    backbone_and_head = (
        "[{'params': [*m.left.parameters(), *m.right.parameters()], 'lr_scale': 0.1}, "
        "{'params': m.head.parameters()}]"
    )
    result = _grouped(tmp_path, backbone_and_head, schedule=[{"shape": "constant", "start": 0.5}])
    assert result.exit_code == 0, result.output
    (run_dir,) = (tmp_path / "runs" / "engine-test" / "train").iterdir()
    backbone, head = load_checkpoint(run_dir / "checkpoints" / "latest.pt")["optimizer"]["param_groups"]
    lr = 3.0e-3 * 0.5  # the schedule's multiplier of the base LR
    assert head["lr"] == pytest.approx(lr) and backbone["lr"] == pytest.approx(0.1 * lr)


def test_workload_groups_that_leave_a_parameter_out_are_named(tmp_path: Path) -> None:
    message = single_error(_grouped(tmp_path, "[{'params': m.head.parameters()}]"))
    assert (
        "param_groups leave out 4 trainable parameter(s) (e.g. left.weight, left.bias, right.weight)"
        in message
    )


def test_the_five_short_names_build_what_they_always_built() -> None:
    model = torch.nn.Linear(3, 2)
    built = {
        name: build_optimizer(OptimizerSpec(name=name, lr=0.1, weight_decay=0.01), model)
        for name in ("sgd", "momentum", "nesterov", "adam", "adamw")
    }
    assert type(built["sgd"]) is torch.optim.SGD and built["sgd"].defaults["momentum"] == 0
    assert built["nesterov"].defaults["nesterov"] and built["momentum"].defaults["momentum"] == 0.9
    assert type(built["adamw"]) is torch.optim.AdamW and built["adam"].defaults["betas"] == (0.9, 0.999)
