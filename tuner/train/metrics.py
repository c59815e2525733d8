"""Evaluation metrics accumulated across batches, exactly as if scored in one batch.

Everything is kept as sums (float64 / int64) and divided only in ``compute()``: averaging
per-batch means would over-weight a short last batch, and padding (``IGNORE_INDEX``) must weigh
zero. The sums stay on the logits' device and nothing is read back per batch, because each
``.item()`` on a GPU is a sync point that stalls evaluation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from tuner.errors import WorkloadCodeError
from tuner.workloads import IGNORE_INDEX, KNOWN_METRICS

_TOP_K = 5


def masked_mean_loss(item_losses: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean of ``item_losses`` over items whose target is not ``IGNORE_INDEX`` (the training loss).

    Masked with ``where`` rather than a multiply so a NaN/inf a custom ``loss_fn`` puts at a
    padding position cannot leak in. A batch of pure padding gives 0, not NaN.
    """
    mask = targets != IGNORE_INDEX
    kept = torch.where(mask, item_losses, torch.zeros((), dtype=item_losses.dtype, device=item_losses.device))
    return kept.sum() / mask.sum().clamp(min=1).to(item_losses.dtype)


class MetricAccumulator:
    """Running sums for the requested metrics; ``compute()`` turns them into Python floats."""

    def __init__(self, names: Sequence[str], num_classes: int) -> None:
        unknown = [name for name in names if name not in KNOWN_METRICS]
        if unknown:
            raise ValueError(f"unknown metric(s) {unknown}; known metrics are {list(KNOWN_METRICS)}")
        if num_classes < 1:
            raise ValueError(f"num_classes must be at least 1, got {num_classes}")
        self.names: tuple[str, ...] = tuple(dict.fromkeys(names))  # dedupe, keep order
        self.num_classes = num_classes
        # The confusion matrix is C x C, which is large for a language model's vocabulary:
        # keep it only when a metric needs more than the diagonal.
        self._needs_confusion = "mcc" in self.names or "per_class" in self.names
        self._state: dict[str, torch.Tensor] | None = None

    def output_names(self) -> list[str]:
        out: list[str] = []
        for name in self.names:
            if name == "per_class":
                for k in range(self.num_classes):
                    out += [f"class_{k}_correct", f"class_{k}_recall"]
            else:
                out.append(name)
        return out

    def reset(self) -> None:
        self._state = None

    def _init_state(self, device: torch.device) -> dict[str, torch.Tensor]:
        # Created on first update, because only then do we know the device.
        state = {
            "loss_sum": torch.zeros((), dtype=torch.float64, device=device),
            "count": torch.zeros((), dtype=torch.int64, device=device),
            "correct": torch.zeros((), dtype=torch.int64, device=device),
            "top_k_correct": torch.zeros((), dtype=torch.int64, device=device),
        }
        if self._needs_confusion:
            # One spare bin at the end collects padding items, so no data-dependent masking.
            state["confusion"] = torch.zeros(
                self.num_classes * self.num_classes + 1, dtype=torch.int64, device=device
            )
        return state

    def sums(self, device: torch.device) -> list[torch.Tensor]:
        """The running sums themselves (created on ``device`` if no batch was seen), in a fixed
        order: adding them up across processes, in place, gives the metrics of all their batches."""
        if self._state is None:
            self._state = self._init_state(device)
        return [self._state[key] for key in sorted(self._state)]

    @torch.no_grad()
    def update(
        self,
        logits: torch.Tensor | None,
        targets: torch.Tensor | None,
        item_losses: torch.Tensor | None = None,
        *,
        mean_loss: torch.Tensor | None = None,
        count: torch.Tensor | int | None = None,
    ) -> None:
        """Add one batch. ``logits (..., C)``, ``targets (...)`` class indices, ``item_losses (...)``;
        or, for a loss the model computed itself, its ``mean_loss`` over ``count`` counted targets
        (``logits`` may then be None: only ``loss`` and ``perplexity`` can be scored)."""
        if item_losses is None:
            self._update_mean(logits, targets, mean_loss, count)
            return
        assert logits is not None and targets is not None
        c = self.num_classes
        if logits.shape[-1] != c:
            raise ValueError(f"logits have {logits.shape[-1]} classes in the last dim, expected {c}")
        if logits.shape[:-1] != targets.shape:
            raise ValueError(
                f"logits {tuple(logits.shape)} do not match targets {tuple(targets.shape)} "
                "(expected logits to be targets' shape plus a class dim)"
            )
        if item_losses.shape != targets.shape:
            raise ValueError(
                f"item_losses {tuple(item_losses.shape)} must have the targets' shape {tuple(targets.shape)}"
            )
        if self._state is None:
            self._state = self._init_state(logits.device)
        state = self._state
        device = state["count"].device
        logits = logits.detach().reshape(-1, c).to(device)
        targets = targets.detach().reshape(-1).to(device=device, dtype=torch.int64)
        losses = item_losses.detach().reshape(-1).to(device=device, dtype=torch.float64)

        mask = targets != IGNORE_INDEX
        zero = torch.zeros((), dtype=torch.float64, device=device)
        state["loss_sum"] += torch.where(mask, losses, zero).sum()
        state["count"] += mask.sum()
        self._add_predictions(logits, targets, mask)

    def _add_predictions(self, logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> None:
        """The counts the logits decide: correct, top-k correct, the confusion matrix."""
        state, c = self._state, self.num_classes
        assert state is not None
        preds = logits.argmax(dim=-1)
        state["correct"] += ((preds == targets) & mask).sum()
        if "top5_accuracy" in self.names:
            top = logits.topk(min(_TOP_K, c), dim=-1).indices
            state["top_k_correct"] += ((top == targets.unsqueeze(-1)).any(dim=-1) & mask).sum()
        if self._needs_confusion:
            # index_add_ rather than bincount: bincount on CUDA reads min/max back to the host.
            cell = torch.where(mask, targets * c + preds, torch.full_like(targets, c * c))
            state["confusion"].index_add_(0, cell, torch.ones_like(cell))

    def _update_mean(
        self,
        logits: torch.Tensor | None,
        targets: torch.Tensor | None,
        mean_loss: torch.Tensor | None,
        count: torch.Tensor | int | None,
    ) -> None:
        """A batch whose loss is a mean over ``count`` targets (a model's own loss)."""
        assert mean_loss is not None and count is not None, "a batch needs item_losses or mean_loss and count"
        if logits is None and any(name not in ("loss", "perplexity") for name in self.names):
            wanted = [name for name in self.names if name not in ("loss", "perplexity")]
            raise WorkloadCodeError(
                f"metric(s) {', '.join(wanted)} need the model's logits; the model gave only a loss"
            )
        device = mean_loss.device if logits is None else logits.device
        if self._state is None:
            self._state = self._init_state(device)
        state = self._state
        device = state["count"].device
        counted = torch.as_tensor(count, device=device, dtype=torch.int64)
        state["loss_sum"] += mean_loss.detach().to(device=device, dtype=torch.float64) * counted
        state["count"] += counted
        if logits is not None and targets is not None:
            flat = targets.detach().reshape(-1).to(device=device, dtype=torch.int64)
            logits = logits.detach().reshape(-1, self.num_classes).to(device)
            self._add_predictions(logits, flat, flat != IGNORE_INDEX)

    def compute(self) -> dict[str, float]:
        """The metrics so far, as Python floats (averages are NaN if no real item was seen)."""
        state = self._state or self._init_state(torch.device("cpu"))
        count = int(state["count"].item())
        loss = float(state["loss_sum"].item()) / count if count else math.nan
        accuracy = int(state["correct"].item()) / count if count else math.nan
        confusion: list[list[int]] | None = None
        if self._needs_confusion:
            c = self.num_classes
            confusion = state["confusion"][: c * c].reshape(c, c).tolist()

        out: dict[str, float] = {}
        for name in self.names:
            if name == "loss":
                out["loss"] = loss
            elif name == "accuracy":
                out["accuracy"] = accuracy
            elif name == "error_rate":
                out["error_rate"] = 1.0 - accuracy
            elif name == "top5_accuracy":
                out["top5_accuracy"] = int(state["top_k_correct"].item()) / count if count else math.nan
            elif name == "perplexity":
                out["perplexity"] = _safe_exp(loss)
            elif name == "mcc":
                assert confusion is not None
                out["mcc"] = _multiclass_mcc(confusion)
            elif name == "per_class":
                assert confusion is not None
                for k, row in enumerate(confusion):
                    total = sum(row)
                    out[f"class_{k}_correct"] = float(row[k])
                    out[f"class_{k}_recall"] = row[k] / total if total else 0.0
        return out


def _safe_exp(x: float) -> float:
    # A diverged model's loss can exceed exp's float range; report inf rather than crash eval.
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _multiclass_mcc(confusion: list[list[int]]) -> float:
    """Gorodkin's R_K from a confusion matrix (rows = true, cols = predicted); 0.0 if undefined.

    Python ints keep the products exact (they reach s^2, which overflows int64 for ~3e9 items).
    """
    n = len(confusion)
    true_counts = [sum(row) for row in confusion]
    pred_counts = [sum(confusion[i][j] for i in range(n)) for j in range(n)]
    correct = sum(confusion[k][k] for k in range(n))
    total = sum(true_counts)
    cov_true_pred = correct * total - sum(t * p for t, p in zip(true_counts, pred_counts, strict=True))
    cov_pred_pred = total * total - sum(p * p for p in pred_counts)
    cov_true_true = total * total - sum(t * t for t in true_counts)
    denominator = cov_pred_pred * cov_true_true
    if denominator == 0:
        return 0.0  # sklearn's convention: a constant prediction or target has no correlation
    return cov_true_pred / math.sqrt(denominator)
