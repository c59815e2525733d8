"""Workloads shaped as the ecosystem shapes them, small enough to train in a second: dict items
with ``labels`` and a model that computes its own (shifted) loss, as a Hugging Face causal LM
does; two inputs with an auxiliary loss through a workload ``step``; and models that break the
contract on purpose. Entry points for study files (``contract_workloads.py:<name>``)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset, TensorDataset

from tuner.workloads import IGNORE_INDEX, Step, Workload, WorkloadContext

VOCAB = 7
BLOCK = 6


class TokenItems(Dataset):
    """Dict items as a Hugging Face dataset gives them; every third sequence ends in padding."""

    def __init__(self, count: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        # a learnable rule: each token is the previous one plus one, mod VOCAB, from a random start
        starts = torch.randint(0, VOCAB, (count, 1), generator=generator)
        self.ids = (starts + torch.arange(BLOCK)) % VOCAB
        self.lengths = [BLOCK - 2 if i % 3 == 0 else BLOCK for i in range(count)]

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        length = self.lengths[index]
        mask = (torch.arange(BLOCK) < length).long()
        labels = torch.where(mask.bool(), self.ids[index], torch.full((BLOCK,), IGNORE_INDEX))
        return {"input_ids": self.ids[index] * mask, "attention_mask": mask, "labels": labels}


class OwnLossLM(torch.nn.Module):
    """Returns ``{"loss", "logits"}`` as ``GPT2LMHeadModel`` does: the loss of position t's logits
    against label t+1, a mean over the labels that are not padding (none without ``labels``)."""

    def __init__(self, width: int = 16, dropout: float = 0.0) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, width)
        self.mix = torch.nn.Linear(width, width)
        self.norm = torch.nn.LayerNorm(width)
        self.drop = torch.nn.Dropout(dropout)
        self.head = torch.nn.Linear(width, VOCAB)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor | None = None
    ) -> dict[str, Any]:
        hidden = self.drop(torch.relu(self.mix(self.embed(input_ids))))
        logits = self.head(self.norm(hidden)) * attention_mask.unsqueeze(-1)
        out: dict[str, Any] = {"logits": logits}
        if labels is not None:
            shifted = logits[:, :-1].reshape(-1, VOCAB)
            out["loss"] = F.cross_entropy(shifted, labels[:, 1:].reshape(-1), ignore_index=IGNORE_INDEX)
        return out


def own_loss_lm(ctx: WorkloadContext) -> Workload:
    options = dict(ctx.options)
    return Workload(
        model=OwnLossLM(dropout=options.get("dropout", 0.0)),
        train_data=TokenItems(48, seed=ctx.seed),
        eval_data=TokenItems(17, seed=ctx.seed + 1),
        num_classes=VOCAB,
        shift_labels=True,
        metrics=("loss", "perplexity", "accuracy"),
    )


def two_input_data(count: int, seed: int) -> TensorDataset:
    """``((a, b), target)`` items: the class is which of a's and b's sums is larger (3 classes by margin)."""
    generator = torch.Generator().manual_seed(seed)
    a, b = torch.randn(count, 4, generator=generator), torch.randn(count, 4, generator=generator)
    difference = a.sum(1) - b.sum(1)
    targets = (difference > 0.5).long() + (difference > -0.5).long()
    return TensorDataset(torch.stack([a, b], dim=1), targets)


class TwoInputs(torch.nn.Module):
    """Two inputs in, ``(logits, auxiliary)`` out: what ``loss_fn(outputs, targets)`` cannot score."""

    def __init__(self) -> None:
        super().__init__()
        self.left, self.right = torch.nn.Linear(4, 8), torch.nn.Linear(4, 8)
        self.head = torch.nn.Linear(16, 3)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = torch.cat([torch.tanh(self.left(a)), torch.tanh(self.right(b))], dim=-1)
        return self.head(hidden), hidden.pow(2).mean()


def two_input_step(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> Step:
    pairs, targets = batch
    logits, auxiliary = model(pairs[:, 0], pairs[:, 1])
    return Step(loss=F.cross_entropy(logits, targets) + 0.01 * auxiliary, outputs=logits, targets=targets)


def two_inputs(ctx: WorkloadContext) -> Workload:
    return Workload(
        model=TwoInputs(),
        train_data=two_input_data(96, ctx.seed),
        eval_data=two_input_data(40, ctx.seed + 1),
        num_classes=3,
        step=two_input_step,
    )


class _Pair(torch.nn.Module):
    """One input, ``(logits, features)`` out: a tuple the engine cannot read a loss from."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.layer(x), x


def two_inputs_f1(ctx: WorkloadContext) -> Workload:
    """``two_inputs`` scored by torchmetrics' macro F1 too (the objective of a test)."""
    from torchmetrics.classification import MulticlassF1Score

    workload = two_inputs(ctx)
    workload.metrics = ("loss", "accuracy", {"f1": MulticlassF1Score(num_classes=3, average="macro")})
    return workload


def tuple_model(ctx: WorkloadContext) -> Workload:
    data = TensorDataset(torch.randn(32, 4), torch.randint(0, 3, (32,)))
    return Workload(model=_Pair(), train_data=data, eval_data=data, num_classes=3)


class _Nothing(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"hidden_states": self.layer(x)}


def no_logits_nor_loss(ctx: WorkloadContext) -> Workload:
    data = TensorDataset(torch.randn(32, 4), torch.randint(0, 3, (32,)))
    return Workload(model=_Nothing(), train_data=data, eval_data=data, num_classes=3)


class _Texts(Dataset):
    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {
            "input_ids": torch.arange(BLOCK) % VOCAB,
            "text": f"example {index}",
            "labels": torch.arange(BLOCK) % VOCAB,
        }


def strings_in_batch(ctx: WorkloadContext) -> Workload:
    return Workload(model=OwnLossLM(), train_data=_Texts(), eval_data=_Texts(), num_classes=VOCAB)


def vector_metric(ctx: WorkloadContext) -> Workload:
    """A metric that returns one value per class instead of one number."""
    data = TensorDataset(torch.randn(32, 4), torch.randint(0, 3, (32,)))
    per_class = {"recall_per_class": lambda outputs, targets: torch.ones(3)}
    return Workload(
        model=torch.nn.Linear(4, 3),
        train_data=data,
        eval_data=data,
        num_classes=3,
        metrics=("loss", per_class),
    )
