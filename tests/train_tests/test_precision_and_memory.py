"""``training.precision`` (bf16 autocast, fp16 autocast with a gradient scaler), ``micro_batch_size``
(gradient accumulation: the same update as one batch) and ``compile``, each with bit-exact resume."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.spec_tests._support import invoke, single_error
from tests.train_tests.conftest import write_study
from tests.train_tests.test_model_contracts import contract_study
from tests.train_tests.test_resume_and_checkpoints import InterruptAt, losses
from tuner.spec import load_study
from tuner.train import load_checkpoint, load_model, run_training
from tuner.train.precision import Precision, precision_problem


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(run / "checkpoints" / "latest.pt")["model"]


def test_mixed_precision_runs_the_forward_in_its_dtype() -> None:
    layer = torch.nn.Linear(4, 3)
    for name, dtype in (
        ("bf16-mixed", torch.bfloat16),
        ("16-mixed", torch.float16),
        ("32-true", torch.float32),
    ):
        with Precision(name, "cpu").autocast():
            assert layer(torch.randn(2, 4)).dtype == dtype, name


@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
def test_mixed_precision_trains_and_resumes_bit_for_bit(make_study, tmp_path: Path, precision: str) -> None:
    loaded = make_study(max_train_steps=40, eval_every=20, log_every=1, precision=precision)
    full = run_training(loaded.spec, tmp_path / "full", base_dir=loaded.base_dir, progress=False)
    assert full.status == "completed"
    split = tmp_path / "split"
    stop = [InterruptAt(13)]
    run_training(loaded.spec, split, base_dir=loaded.base_dir, extra_callbacks=stop, progress=False)
    run_training(loaded.spec, split, base_dir=loaded.base_dir, progress=False)
    assert losses(split) == losses(tmp_path / "full")
    a, b = _weights(tmp_path / "full"), _weights(split)
    assert all(torch.equal(a[k], b[k]) for k in a)
    plain = make_study(max_train_steps=40, eval_every=20, log_every=1)
    float32 = run_training(plain.spec, tmp_path / "float32", base_dir=plain.base_dir, progress=False)
    assert float32.status == "completed"
    assert losses(tmp_path / "float32") != losses(tmp_path / "full")  # autocast changed the numbers


def test_float16s_scaler_state_is_in_the_checkpoint(make_study, tmp_path: Path) -> None:
    loaded = make_study(max_train_steps=20, eval_every=10, precision="fp16")  # Accelerate's word
    assert loaded.spec.training.precision == "16-mixed"
    run_training(loaded.spec, tmp_path / "run", base_dir=loaded.base_dir, progress=False)
    state = load_checkpoint(tmp_path / "run" / "checkpoints" / "latest.pt")
    assert state["scaler"]["scale"] > 0 and "_growth_tracker" in state["scaler"]
    bf16 = make_study(max_train_steps=20, eval_every=10, precision="bf16")
    run_training(bf16.spec, tmp_path / "bf16", base_dir=bf16.base_dir, progress=False)
    assert "scaler" not in load_checkpoint(tmp_path / "bf16" / "checkpoints" / "latest.pt")


def test_a_precision_the_device_cannot_run_is_named() -> None:
    no_bf16 = precision_problem("bf16-mixed", "cuda", bf16_supported=lambda: False)
    assert no_bf16 is not None and "bfloat16 (compute capability 8.0, Ampere, or newer)" in no_bf16
    assert precision_problem("bf16-mixed", "cuda", bf16_supported=lambda: True) is None
    assert precision_problem("16-mixed", "cpu") is None and precision_problem("32-true", "meta") is None
    assert "needs autocast" in (precision_problem("16-mixed", "meta") or "")


def test_an_unknown_precision_is_refused_by_validate(tmp_path: Path) -> None:
    path = write_study(tmp_path, precision="bf8")
    message = single_error(invoke("validate", str(path)))
    assert "training.precision" in message and "'32-true', 'bf16-mixed' or '16-mixed'" in message


def test_micro_batches_give_the_update_of_one_batch(make_study, tmp_path: Path) -> None:
    """No dropout, no batch norm: 4 micro-batches of 8 add up to the gradient of the batch of 32."""
    whole = make_study(max_train_steps=20, eval_every=10, log_every=1)
    parts = make_study(max_train_steps=20, eval_every=10, log_every=1, micro_batch_size=8)
    for loaded in (whole, parts):
        loaded.spec.workload.options = {"hidden_sizes": [32], "dropout": 0.0}
    run_training(whole.spec, tmp_path / "whole", base_dir=whole.base_dir, progress=False)
    run_training(parts.spec, tmp_path / "parts", base_dir=parts.base_dir, progress=False)
    a, b = _weights(tmp_path / "whole"), _weights(tmp_path / "parts")
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert not all(torch.equal(a[k], b[k]) for k in a)  # summed in another order: not bit-identical


def test_micro_batches_weigh_padding_as_one_batch_does(tmp_path: Path) -> None:
    """Dict items whose padding differs between the parts: each part's mean weighs by its real tokens."""
    whole = load_study(contract_study(tmp_path / "whole", "own_loss_lm", max_train_steps=10))
    parts = load_study(
        contract_study(tmp_path / "parts", "own_loss_lm", max_train_steps=10, micro_batch_size=2)
    )
    run_training(whole.spec, tmp_path / "whole" / "run", base_dir=whole.base_dir, progress=False)
    run_training(parts.spec, tmp_path / "parts" / "run", base_dir=parts.base_dir, progress=False)
    a, b = _weights(tmp_path / "whole" / "run"), _weights(tmp_path / "parts" / "run")
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)


def test_micro_batches_resume_bit_for_bit(make_study, tmp_path: Path) -> None:
    loaded = make_study(max_train_steps=30, eval_every=10, log_every=1, micro_batch_size=16)
    run_training(loaded.spec, tmp_path / "full", base_dir=loaded.base_dir, progress=False)
    stop = [InterruptAt(17)]
    run_training(
        loaded.spec, tmp_path / "split", base_dir=loaded.base_dir, extra_callbacks=stop, progress=False
    )
    run_training(loaded.spec, tmp_path / "split", base_dir=loaded.base_dir, progress=False)
    assert losses(tmp_path / "split") == losses(tmp_path / "full")


@pytest.mark.parametrize(
    ("training", "words"),
    [
        ({"micro_batch_size": 24}, "micro_batch_size 24 does not divide batch_size 32"),
        ({"micro_batch_size": 12, "processes_per_trial": 2}, "does not divide each process's share (16 of"),
    ],
)
def test_micro_batches_that_do_not_divide_the_batch_are_refused(
    tmp_path: Path, training: dict, words: str
) -> None:
    message = single_error(invoke("validate", str(write_study(tmp_path, **training))))
    assert words in message, message


def test_a_compiled_model_trains_resumes_and_loads_without_compiling(make_study, tmp_path: Path) -> None:
    """Through dynamo and AOT autograd (``aot_eager``: inductor's C++ build would take minutes
    here), without dropout (a compiled graph draws its masks another way): eager's losses."""
    loaded = make_study(max_train_steps=20, eval_every=10, log_every=1, compile="aot_eager")
    eager = make_study(max_train_steps=20, eval_every=10, log_every=1)
    for study in (loaded, eager):
        study.spec.workload.options = {"hidden_sizes": [32], "dropout": 0.0}
    run_training(loaded.spec, tmp_path / "compiled", base_dir=loaded.base_dir, progress=False)
    run_training(eager.spec, tmp_path / "eager", base_dir=eager.base_dir, progress=False)
    compiled_losses, eager_losses = losses(tmp_path / "compiled"), losses(tmp_path / "eager")
    assert compiled_losses.keys() == eager_losses.keys()
    for step in eager_losses:
        assert float(compiled_losses[step]) == pytest.approx(float(eager_losses[step]), rel=1e-5)
    stop = [InterruptAt(7)]
    split = tmp_path / "split"
    run_training(loaded.spec, split, base_dir=loaded.base_dir, extra_callbacks=stop, progress=False)
    run_training(loaded.spec, split, base_dir=loaded.base_dir, progress=False)
    assert losses(split) == compiled_losses
    model = load_model(tmp_path / "compiled" / "checkpoints" / "latest.pt")
    assert type(model).__name__ == "Sequential"  # the plain module's weights: no compile to load them


def test_an_unknown_compile_backend_is_one_line(make_study, tmp_path: Path) -> None:
    path = write_study(tmp_path, compile="no_such_backend")
    result = invoke("train", str(path), "--output-dir", str(tmp_path / "runs"), "--no-progress")
    assert "training.compile: no torch.compile backend 'no_such_backend'" in single_error(result)


def test_micro_batches_across_two_processes_give_the_update_of_one_pass(tmp_path: Path) -> None:
    """Each rank's share of 16 in two micro-batches of 8; only the last synchronises gradients
    (DDP's ``no_sync`` on the first): the same weights as two processes without micro-batches."""
    from tests.orchestrate_tests.conftest import run_tuner

    runs = {}
    for name, extra in (("whole", {}), ("parts", {"micro_batch_size": 8})):
        (tmp_path / name).mkdir()
        study = write_study(tmp_path / name, max_train_steps=12, eval_every=6, processes_per_trial=2, **extra)
        text = study.read_text().replace("dropout: 0.1", "dropout: 0.0")
        study.write_text(text)
        done = run_tuner("train", str(study), "--output-dir", str(tmp_path / name / "runs"), "--no-progress")
        assert done.returncode == 0, done.stdout + done.stderr
        (runs[name],) = (tmp_path / name / "runs" / "engine-test" / "train").iterdir()
    a, b = _weights(runs["whole"]), _weights(runs["parts"])
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
