"""A two-input model with an auxiliary loss, scored by torchmetrics (macro F1, macro AUROC: the
objective) and by a plain function (scikit-learn's balanced accuracy), on imbalanced classes.

The data: tuner's ``imbalanced`` generator (three Gaussian blobs, 75/18/7%), its 16 features
read as two views of 8 (two sensors, say). Each view has a tower; a head classifies from both
towers, and each tower has a head of its own whose loss is added at ``aux_weight`` (deep
supervision). The model returns a tuple ``(logits, tower_a_logits, tower_b_logits)``, which no
default loss reads: the workload's ``step`` says what the loss is and what the metrics score.
The towers train at ``tower_lr_scale`` times the scheduled learning rate (``param_groups``).
"""

from __future__ import annotations

import torch
from sklearn.metrics import balanced_accuracy_score
from torch import nn
from torch.nn import functional
from torch.utils.data import Dataset
from torchmetrics.classification import MulticlassAUROC, MulticlassF1Score

from tuner.workloads import Step, Workload, WorkloadContext
from tuner.workloads.imbalanced import make_data
from tuner.workloads.stratified_split import stratified_split

CLASS_WEIGHTS = [0.75, 0.18, 0.07]


def tower(width: int, hidden: int, dropout: float) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(width, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, hidden), nn.ReLU()
    )


class TwoTowers(nn.Module):
    """``forward(view_a, view_b) -> (logits, tower_a_logits, tower_b_logits)``."""

    def __init__(self, width: int, hidden: int, classes: int, dropout: float) -> None:
        super().__init__()
        self.tower_a, self.tower_b = tower(width, hidden, dropout), tower(width, hidden, dropout)
        self.aux_a, self.aux_b = nn.Linear(hidden, classes), nn.Linear(hidden, classes)
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(2 * hidden, classes))

    def forward(self, view_a: torch.Tensor, view_b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a, b = self.tower_a(view_a), self.tower_b(view_b)
        return self.head(torch.cat([a, b], dim=-1)), self.aux_a(a), self.aux_b(b)

    def towers(self) -> list[nn.Parameter]:
        return [p for part in (self.tower_a, self.tower_b, self.aux_a, self.aux_b) for p in part.parameters()]


class TwoViews(Dataset):
    """Items ``((view_a, view_b), label)``: a tuple of inputs, so the model is called as
    ``model(view_a, view_b)``."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        half = x.shape[1] // 2
        self.view_a, self.view_b, self.y = x[:, :half], x[:, half:], y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, index: int) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
        return (self.view_a[index], self.view_b[index]), self.y[index]


def balanced_accuracy(outputs: torch.Tensor, targets: torch.Tensor) -> float:
    """The mean of the classes' recalls, by scikit-learn, on the whole split at once."""
    return float(balanced_accuracy_score(targets.numpy(), outputs.argmax(dim=-1).numpy()))


def build(ctx: WorkloadContext) -> Workload:
    x, y = make_data(ctx.options.get("n_examples", 3000), 16, CLASS_WEIGHTS, ctx.seed)
    split = stratified_split(y, 0.25, ctx.seed)
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    classes, aux_weight = len(CLASS_WEIGHTS), ctx.options.get("aux_weight", 0.3)
    tower_lr_scale = ctx.options.get("tower_lr_scale", 0.1)
    model = TwoTowers(8, ctx.options.get("hidden", 64), classes, ctx.options.get("dropout", 0.1))

    def step(model: TwoTowers, batch: tuple) -> Step:
        (view_a, view_b), labels = batch
        logits, aux_a, aux_b = model(view_a, view_b)
        aux = functional.cross_entropy(aux_a, labels) + functional.cross_entropy(aux_b, labels)
        loss = functional.cross_entropy(logits, labels) + aux_weight * aux / 2
        return Step(loss=loss, outputs=logits, targets=labels)

    def param_groups(model: TwoTowers) -> list[dict]:
        towers = {id(p) for p in model.towers()}
        return [
            {"params": model.towers(), "lr_scale": tower_lr_scale},
            {"params": [p for p in model.parameters() if id(p) not in towers]},
        ]

    return Workload(
        model=model,
        train_data=TwoViews(x[split.train], y[split.train]),
        eval_data=TwoViews(x[split.held_out], y[split.held_out]),
        num_classes=classes,
        step=step,
        param_groups=param_groups,
        metrics=(
            "loss",
            "accuracy",
            {
                "f1": MulticlassF1Score(classes, average="macro"),
                "auroc": MulticlassAUROC(classes, average="macro"),
                "balanced_accuracy": balanced_accuracy,
            },
        ),
    )
