"""The built-in workloads: shapes, deterministic data, option errors, and that they learn.

The learning tests are small on purpose (a few hundred milliseconds to ~2 s on a 2-core
CPU) but real: a broken model, loss target or data pipeline makes them fail.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from pydantic import ValidationError
from sklearn.metrics import matthews_corrcoef

from tuner.errors import WorkloadError
from tuner.workloads import char_lm, digits, imbalanced
from tuner.workloads._interface import IGNORE_INDEX, KNOWN_METRICS, Workload, WorkloadContext

Builder = Callable[[WorkloadContext], Workload]

BUILDERS: dict[str, Builder] = {
    "digits-mlp": digits.build_mlp,
    "digits-cnn": digits.build_cnn,
    "char-lm": char_lm.build,
    "imbalanced": imbalanced.build,
}


def _build(builder: Builder, seed: int = 0, **options: object) -> Workload:
    torch.manual_seed(0)  # what the engine does before calling an entry point
    return builder(WorkloadContext(options=dict(options), seed=seed))


def _tensors(workload: Workload) -> tuple[torch.Tensor, ...]:
    return (*workload.train_data.tensors, *workload.eval_data.tensors)


def _train(workload: Workload, steps: int = 150, batch_size: int | None = None) -> float:
    """Plain Adam(lr=3e-3); returns the validation loss (the model is left in eval mode)."""
    torch.manual_seed(0)
    model = workload.model
    x, y = workload.train_data.tensors
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(steps):
        idx = torch.randint(len(x), (batch_size,), generator=gen) if batch_size else slice(None)
        loss = F.cross_entropy(model(x[idx]).flatten(0, -2), y[idx].flatten(), ignore_index=IGNORE_INDEX)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    xv, yv = workload.eval_data.tensors
    with torch.no_grad():
        logits = model(xv)
    return F.cross_entropy(logits.flatten(0, -2), yv.flatten(), ignore_index=IGNORE_INDEX).item()


def _val_predictions(workload: Workload) -> tuple[torch.Tensor, torch.Tensor]:
    xv, yv = workload.eval_data.tensors
    workload.model.eval()
    with torch.no_grad():
        return workload.model(xv).argmax(-1), yv


# --- every builtin -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", BUILDERS)
def test_model_maps_a_train_batch_to_logits(name: str) -> None:
    workload = _build(BUILDERS[name])
    assert isinstance(workload, Workload)
    assert set(workload.metrics) <= set(KNOWN_METRICS)
    x, y = workload.train_data.tensors
    assert y.dtype == torch.long
    logits = workload.model(x[torch.arange(8)])
    assert logits.shape == (*y[:8].shape, workload.num_classes)
    assert torch.isfinite(logits).all()
    for targets in (y, workload.eval_data.tensors[1]):
        real = targets[targets != IGNORE_INDEX]
        assert real.numel() > 0
        assert int(real.min()) >= 0 and int(real.max()) < workload.num_classes


@pytest.mark.parametrize("name", BUILDERS)
def test_data_is_deterministic_for_a_seed(name: str) -> None:
    first, again = _build(BUILDERS[name], seed=3), _build(BUILDERS[name], seed=3)
    for a, b in zip(_tensors(first), _tensors(again), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("name", ["digits-mlp", "digits-cnn", "imbalanced"])
def test_another_seed_gives_another_split(name: str) -> None:
    one, two = _build(BUILDERS[name], seed=0), _build(BUILDERS[name], seed=1)
    assert not torch.equal(one.eval_data.tensors[0], two.eval_data.tensors[0])


@pytest.mark.parametrize("name", BUILDERS)
def test_unknown_option_is_a_validation_error(name: str) -> None:
    with pytest.raises(ValidationError, match="not_an_option"):
        _build(BUILDERS[name], not_an_option=1)


# --- digits --------------------------------------------------------------------------------------


def test_digits_split_is_complete_and_stratified() -> None:
    workload = _build(digits.build_mlp, val_fraction=0.25)
    (x_tr, y_tr), y_va = workload.train_data.tensors, workload.eval_data.tensors[1]
    assert len(y_tr) + len(y_va) == 1797
    assert x_tr.shape[1:] == (64,) and x_tr.dtype == torch.float32
    assert float(x_tr.min()) >= 0.0 and float(x_tr.max()) <= 1.0
    totals = torch.bincount(torch.cat([y_tr, y_va]), minlength=10)
    val_counts = torch.bincount(y_va, minlength=10)
    assert ((val_counts - totals * 0.25).abs() <= 1).all()


def test_digits_cnn_sees_images_and_accepts_any_depth() -> None:
    assert _build(digits.build_cnn).train_data.tensors[0].shape[1:] == (1, 8, 8)
    for channels in ([8], [8, 8, 8]):
        workload = _build(digits.build_cnn, channels=channels, dropout=0.5)
        assert workload.model(workload.train_data.tensors[0][:4]).shape == (4, 10)


def test_digits_rejects_a_zero_width_layer() -> None:
    with pytest.raises(WorkloadError, match="hidden_sizes"):
        _build(digits.build_mlp, hidden_sizes=[64, 0])


def test_digits_mlp_learns() -> None:
    workload = _build(digits.build_mlp)
    _train(workload, steps=150)  # full batch
    pred, y = _val_predictions(workload)
    assert (pred == y).float().mean() >= 0.90


def test_digits_cnn_learns() -> None:
    workload = _build(digits.build_cnn)
    _train(workload, steps=150, batch_size=64)
    pred, y = _val_predictions(workload)
    assert (pred == y).float().mean() >= 0.90


# --- imbalanced ----------------------------------------------------------------------------------


def test_imbalanced_minority_class_is_rare_in_both_splits() -> None:
    workload = _build(imbalanced.build)
    y_tr, y_va = workload.train_data.tensors[1], workload.eval_data.tensors[1]
    assert len(y_tr) + len(y_va) == 4000
    assert workload.num_classes == 3
    for y in (y_tr, y_va):
        share = torch.bincount(y, minlength=3).float() / len(y)
        assert 0 < share.min() < 0.10
        assert share.argmax() == 0


@pytest.mark.parametrize("weights", [[1.0], [0.9, 0.0], [0.9, -0.1, 0.2]])
def test_imbalanced_rejects_bad_class_weights(weights: list[float]) -> None:
    # the options model refuses them (so `tuner validate` does too); make_data keeps its own check
    with pytest.raises(ValidationError, match="class_weights"):
        _build(imbalanced.build, class_weights=weights)


def test_imbalanced_weights_need_not_sum_to_one() -> None:
    workload = _build(imbalanced.build, n_examples=1000, class_weights=[6.0, 3.0, 1.0])
    y = torch.cat([workload.train_data.tensors[1], workload.eval_data.tensors[1]])
    assert torch.bincount(y).tolist() == [600, 300, 100]


def test_imbalanced_learns_beyond_the_majority_class() -> None:
    workload = _build(imbalanced.build)
    _train(workload, steps=150)  # full batch
    pred, y = _val_predictions(workload)
    assert (pred == y).float().mean() >= 0.88  # always predicting class 0 scores 0.85
    assert matthews_corrcoef(y.numpy(), pred.numpy()) >= 0.5


# --- char-lm -------------------------------------------------------------------------------------


def test_char_lm_uses_the_builtin_corpus_by_default() -> None:
    workload = _build(char_lm.build)
    text = char_lm.read_text(None, base_dir=None)  # type: ignore[arg-type]
    assert 6_000 <= len(text.encode()) <= 10_000 and text.isascii()
    assert workload.num_classes == len(set(text))


def test_char_lm_custom_text_file_sets_the_vocabulary(tmp_path) -> None:
    text = "the cat sat on the mat. " * 20
    (tmp_path / "corpus.txt").write_text(text, encoding="utf-8")
    torch.manual_seed(0)
    options = {"text_file": "corpus.txt", "block_size": 8, "d_model": 16, "n_heads": 2}
    workload = char_lm.build(WorkloadContext(options=options, base_dir=tmp_path))
    vocab = sorted(set(text))
    assert workload.num_classes == len(vocab)
    x, y = workload.train_data.tensors
    assert x.shape[1:] == (8,) and "".join(vocab[i] for i in x[0]) == text[:8]
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one
    # Validation windows tile the tail: every character after its first is a target once.
    n_val = len(text) - math.floor(len(text) * 0.9)
    assert int((workload.eval_data.tensors[1] != IGNORE_INDEX).sum()) == n_val - 1


def test_char_lm_missing_text_file_names_the_path(tmp_path) -> None:
    ctx = WorkloadContext(options={"text_file": "nope.txt"}, base_dir=tmp_path)
    with pytest.raises(WorkloadError, match=r"nope\.txt") as excinfo:
        char_lm.build(ctx)
    assert str(tmp_path) in str(excinfo.value) and "\n" not in str(excinfo.value)


def test_char_lm_rejects_heads_that_do_not_divide_d_model() -> None:
    with pytest.raises(ValidationError, match="n_heads"):
        _build(char_lm.build, d_model=30, n_heads=4)


def test_char_lm_is_causal() -> None:
    workload = _build(char_lm.build, block_size=16)
    workload.model.eval()
    x = workload.train_data.tensors[0][:2].clone()
    with torch.no_grad():
        before = workload.model(x)
        x[:, 10:] = (x[:, 10:] + 1) % workload.num_classes
        after = workload.model(x)
    assert torch.allclose(before[:, :10], after[:, :10], atol=1e-5)
    assert not torch.allclose(before[:, 10:], after[:, 10:])


def test_char_lm_starts_near_uniform_and_learns() -> None:
    workload = _build(char_lm.build)
    x, y = workload.train_data.tensors
    with torch.no_grad():
        initial = F.cross_entropy(workload.model(x[:32]).flatten(0, 1), y[:32].flatten()).item()
    assert initial == pytest.approx(math.log(workload.num_classes), abs=0.15)
    # 100 minibatch steps (~1 s): below the corpus's unigram entropy (~3.07 nats) means
    # the model uses context, not just character frequencies.
    assert _train(workload, steps=100, batch_size=16) < 2.8


def test_a_worker_preloads_a_builtins_module_and_a_users_only_when_asked(tmp_path: Path) -> None:
    """``preload_module``: a built-in's module is imported once per worker (its trials fork from
    it warm); a user's module only with ``TUNER_PRELOAD_WORKLOAD=1``. In a fresh process: this one
    has imported everything already."""
    mine = "import sys\nsys.stdout.write('imported ')\n\ndef build(ctx):\n    pass\n"
    (tmp_path / "mine.py").write_text(mine)
    script = (
        "import sys; from pathlib import Path; from tuner.workloads import preload_module; "
        f"here = Path({str(tmp_path)!r}); "
        "print(preload_module('digits-mlp', here), 'tuner.workloads.digits' in sys.modules, "
        "preload_module('mine.py:build', here))"
    )
    for value, expected in (("", "True True False"), ("1", "imported True True True")):
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=300,
            env={**os.environ, "TUNER_PRELOAD_WORKLOAD": value},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == expected
