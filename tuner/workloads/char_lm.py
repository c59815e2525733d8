"""Built-in workload: a tiny character-level causal transformer language model.

It exercises what the image workloads do not: sequence outputs ``(B, T, V)``, padding
with ``IGNORE_INDEX``, and perplexity, while still training in seconds on a CPU.
"""

from __future__ import annotations

import importlib.resources
import math
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import TensorDataset

from tuner.errors import WorkloadError
from tuner.workloads._builtins import CHAR_LM_METRICS, CharLmOptions
from tuner.workloads._interface import IGNORE_INDEX, Workload, WorkloadContext

_METRICS = CHAR_LM_METRICS


def read_text(text_file: str | None, base_dir: Path) -> str:
    """The user's text file (relative to the study file), or the corpus shipped with tuner."""
    if text_file is None:
        resource = importlib.resources.files("tuner.workloads") / "data" / "tiny_corpus.txt"
        return resource.read_text(encoding="utf-8")
    path = Path(text_file).expanduser()
    if not path.is_absolute():
        path = base_dir / path
    if not path.is_file():
        raise WorkloadError(f"char-lm: text_file not found: {path}")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkloadError(f"char-lm: cannot read text_file {path}: {exc}") from exc


def _windows(ids: torch.Tensor, block_size: int, stride: int, pad_tail: bool) -> TensorDataset:
    """Cut ``ids`` into ``(inputs, targets)`` pairs of length ``block_size``, targets shifted by one.

    With ``pad_tail`` the last partial window is kept, its missing targets set to
    ``IGNORE_INDEX``, so that with ``stride == block_size`` every character after the first
    is a target exactly once (an unbiased validation perplexity).
    """
    span = block_size + 1
    starts = list(range(0, len(ids) - span + 1, stride))
    if pad_tail:
        next_start = starts[-1] + stride if starts else 0
        if next_start < len(ids) - 1:  # characters left that were never a target
            starts.append(next_start)
    inputs = torch.zeros(len(starts), block_size, dtype=torch.long)
    targets = torch.full((len(starts), block_size), IGNORE_INDEX, dtype=torch.long)
    for row, start in enumerate(starts):
        window = ids[start : start + span]
        inputs[row, : len(window) - 1] = window[:-1]
        targets[row, : len(window) - 1] = window[1:]
    return TensorDataset(inputs, targets)


class CharTransformer(nn.Module):
    """Token + learned position embeddings, pre-norm causal encoder layers, a linear head."""

    def __init__(
        self, vocab_size: int, block_size: int, d_model: int, n_heads: int, n_layers: int, dropout: float
    ) -> None:
        super().__init__()
        self.block_size = block_size
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(block_size, d_model)
        self.drop = nn.Dropout(dropout)
        # A plain ModuleList rather than nn.TransformerEncoder: the latter warns about its
        # nested-tensor fast path being unavailable with norm_first=True.
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(
                d_model, n_heads, 4 * d_model, dropout, batch_first=True, norm_first=True
            )
            for _ in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)
        self.apply(_init_weights)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """``(B, T)`` character ids -> ``(B, T, V)`` next-character logits."""
        t = idx.shape[-1]
        if t > self.block_size:
            raise ValueError(f"sequence length {t} exceeds block_size {self.block_size}")
        pos = torch.arange(t, device=idx.device)
        x = self.drop(self.tok(idx) + self.pos(pos))
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=idx.device, dtype=x.dtype)
        for layer in self.layers:
            x = layer(x, src_mask=mask, is_causal=True)
        return self.head(self.norm(x))


def _init_weights(module: nn.Module) -> None:
    # GPT-style small init: logits start near zero, so the initial loss is ~log(vocab) and
    # a learning-rate sweep is not dominated by recovering from a bad start.
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.MultiheadAttention) and module.in_proj_weight is not None:
        nn.init.normal_(module.in_proj_weight, mean=0.0, std=0.02)


def build(ctx: WorkloadContext) -> Workload:
    """Character LM on ``text_file`` (or the built-in corpus); the tail of the text is validation."""
    opts = CharLmOptions.model_validate(ctx.options)
    if opts.d_model % opts.n_heads:
        raise WorkloadError(
            f"char-lm: d_model ({opts.d_model}) must be divisible by n_heads ({opts.n_heads})"
        )
    text = read_text(opts.text_file, ctx.base_dir)

    vocab = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(vocab)}
    ids = torch.tensor([stoi[ch] for ch in text], dtype=torch.long)
    n_train = math.floor(len(ids) * (1 - opts.val_fraction))
    train_ids, val_ids = ids[:n_train], ids[n_train:]
    if len(train_ids) < opts.block_size + 1 or len(val_ids) < 2:
        raise WorkloadError(
            f"char-lm: text too short ({len(ids)} characters) for block_size={opts.block_size} "
            f"and val_fraction={opts.val_fraction}"
        )

    # Half-overlapping training windows double the examples from a small corpus; validation
    # windows tile the text so each character is scored once.
    train = _windows(train_ids, opts.block_size, max(1, opts.block_size // 2), pad_tail=False)
    val = _windows(val_ids, opts.block_size, opts.block_size, pad_tail=True)
    model = CharTransformer(
        len(vocab), opts.block_size, opts.d_model, opts.n_heads, opts.n_layers, opts.dropout
    )
    return Workload(
        model=model,
        train_data=train,
        eval_data=val,
        num_classes=len(vocab),
        metrics=_METRICS,
    )
