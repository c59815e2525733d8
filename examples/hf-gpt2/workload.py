"""A GPT-2 from Hugging Face transformers, built from a small config (no download), on a character
corpus: dataset items are dicts (``input_ids``, ``attention_mask``, ``labels``), the model computes
its own loss, and tuner scores perplexity and token accuracy as the model shifts its labels.

The corpus is the one tuner ships (``tuner.workloads.char_lm``); windows of ``block_size``
characters, the validation split's last window padded (``attention_mask`` 0, ``labels`` -100).
"""

from __future__ import annotations

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel

from tuner.workloads import IGNORE_INDEX, Workload, WorkloadContext
from tuner.workloads.char_lm import read_text


class CharWindows(Dataset):
    """Windows of ``block_size`` characters as Hugging Face items; a short last window is padded."""

    def __init__(self, ids: torch.Tensor, block_size: int) -> None:
        self.ids, self.block_size = ids, block_size
        self.starts = list(range(0, max(1, len(ids) - 1), block_size))

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        window = self.ids[self.starts[index] : self.starts[index] + self.block_size]
        pad = self.block_size - len(window)
        input_ids = torch.cat([window, torch.zeros(pad, dtype=torch.long)])
        attention_mask = torch.cat(
            [torch.ones(len(window), dtype=torch.long), torch.zeros(pad, dtype=torch.long)]
        )
        labels = torch.cat([window, torch.full((pad,), IGNORE_INDEX, dtype=torch.long)])
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def build(ctx: WorkloadContext) -> Workload:
    text = read_text(None, ctx.base_dir)
    vocab = sorted(set(text))
    ids = torch.tensor([vocab.index(c) for c in text], dtype=torch.long)
    cut = int(0.9 * len(ids))
    block_size = ctx.options.get("block_size", 64)
    dropout = ctx.options.get("dropout", 0.0)
    config = GPT2Config(
        vocab_size=len(vocab),
        n_positions=block_size,
        n_embd=ctx.options.get("n_embd", 64),
        n_layer=ctx.options.get("n_layer", 2),
        n_head=ctx.options.get("n_head", 2),
        resid_pdrop=dropout,
        embd_pdrop=dropout,
        attn_pdrop=dropout,
        bos_token_id=None,  # the corpus has no start or end token (GPT-2's 50256 is past its vocabulary)
        eos_token_id=None,
    )
    model = GPT2LMHeadModel(config)
    # transformers picks a model's loss by its class name, and "GPT2LMHeadModel" names none (it
    # would warn once and fall back to this one): say it
    model.loss_type = "ForCausalLM"
    return Workload(
        model=model,
        train_data=CharWindows(ids[:cut], block_size),
        eval_data=CharWindows(ids[cut:], block_size),
        num_classes=len(vocab),
        shift_labels=True,  # position t's logits predict label t+1, as GPT-2 shifts in its loss
        metrics=("loss", "perplexity", "accuracy"),
    )
