"""One training loop for every stage that trains (pruning fine-tune, distillation).

Mini-batch SGD/Adam/AdamW over `data.train`, an optional cosine learning-rate schedule,
evaluation after every epoch, early stopping on the evaluation metric, and the best
weights (not the last) restored at the end. A NaN or infinite loss stops training with
a clear error instead of returning a broken model.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Literal, Optional

import numpy as np
from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt

from compress.errors import DataError, ModelError
from compress.stagebase import Strict

if TYPE_CHECKING:
    from compress.data.feeds import Samples


class TrainSettings(Strict):
    """Training settings shared by the stages that train (YAML: `train: {...}`)."""
    epochs: NonNegativeInt = Field(3, description="passes over data.train (0: no training)")
    batch_size: PositiveInt = Field(64, description="samples per optimizer step")
    optimizer: Literal["adam", "adamw", "sgd"] = Field("adam", description="the optimizer "
                                                       "(sgd with momentum 0.9)")
    lr: PositiveFloat = Field(1e-3, description="learning rate")
    weight_decay: NonNegativeFloat = Field(0.0, description="L2 penalty of the optimizer")
    schedule: Literal["cosine", "constant"] = Field("cosine", description="learning-rate "
                                                    "schedule over all steps")
    patience: Optional[PositiveInt] = Field(
        None, description="stop after this many epochs without a better evaluation metric")
    seed: int = Field(0, description="seed of the shuffling and initialisation")


@dataclass(frozen=True)
class Objective:
    """What a training run minimises and what judges it: `loss(model, batch_inputs:
    list[Tensor], batch_labels)` returns a scalar loss; `evaluate(model) -> float`
    (higher is better), where given, drives early stopping and the choice of the best
    epoch. The two are what a stage brings to the loop (the loss from its teacher or
    labels, the evaluation from the pipeline's metric); the loop brings the rest."""
    loss: Callable
    evaluate: Optional[Callable] = None


@dataclass
class TrainResult:
    epochs_run: int
    best_epoch: int                   # 0 = the weights before training were the best
    best_metric: Optional[float]
    history: list = field(default_factory=list)  # [{epoch, loss, metric}]


def _optimizer(model, settings: TrainSettings, torch):
    params = [p for p in model.parameters() if p.requires_grad]
    if settings.optimizer == "sgd":
        return torch.optim.SGD(params, lr=settings.lr, momentum=0.9, weight_decay=settings.weight_decay)
    cls = torch.optim.AdamW if settings.optimizer == "adamw" else torch.optim.Adam
    return cls(params, lr=settings.lr, weight_decay=settings.weight_decay)


def check_labels(labels: Optional[np.ndarray], classes: int, where: str = "data.train") -> None:
    if labels is not None and len(labels) and (labels.min() < 0 or labels.max() >= classes):
        raise DataError(f"{where}: labels must be in [0, {classes - 1}] for a model with "
                        f"{classes} outputs; found {labels.min()}..{labels.max()}")


@dataclass(frozen=True)
class _Loop:
    """What every epoch of one training run reads."""
    model: object
    loss_fn: Callable
    tensors: list                     # the inputs, in the order loss_fn takes them
    target: object                    # the labels as a tensor, or None
    optimizer: object
    schedule: object                  # the learning-rate scheduler, or None
    settings: TrainSettings
    generator: object                 # the shuffling's
    torch: object


def _loop(model, loss_fn: Callable, inputs: dict, labels: Optional[np.ndarray],
          settings: TrainSettings) -> _Loop:
    import torch

    torch.manual_seed(settings.seed)
    tensors = [torch.from_numpy(inputs[n]) for n in inputs]
    optimizer = _optimizer(model, settings, torch)
    steps = max(1, math.ceil(len(tensors[0]) / settings.batch_size)) * max(1, settings.epochs)
    schedule = (torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
                if settings.schedule == "cosine" else None)
    return _Loop(model, loss_fn, tensors,
                 torch.from_numpy(labels) if labels is not None else None, optimizer,
                 schedule, settings, torch.Generator().manual_seed(settings.seed), torch)


def train(model, objective: Objective, data: Samples, settings: TrainSettings, *,
          progress=None, label: str = "training") -> TrainResult:
    """Train `model` in place on `data` (every array of its inputs sliced with the same
    batch indices) towards `objective`."""
    evaluate = objective.evaluate
    loop = _loop(model, objective.loss, data.inputs, data.labels, settings)
    best = evaluate(model) if evaluate else None
    result = TrainResult(0, 0, best)
    best_state = copy.deepcopy(model.state_dict())
    for epoch in range(1, settings.epochs + 1):
        loss = _epoch(loop, epoch, progress, f"{label}: epoch {epoch}/{settings.epochs}")
        metric = evaluate(model) if evaluate else None
        result.history.append({"epoch": epoch, "loss": loss, "metric": metric})
        result.epochs_run = epoch
        if progress is not None:
            shown = f", metric {metric:.4f}" if metric is not None else ""
            progress.note(f"{label}: epoch {epoch}/{settings.epochs} loss {loss:.4f}{shown}")
        if metric is None or best is None or metric > best:
            best, result.best_epoch = metric, epoch
            best_state = copy.deepcopy(model.state_dict())
        elif settings.patience and epoch - result.best_epoch >= settings.patience:
            break
    model.load_state_dict(best_state)
    result.best_metric = best
    return result


def _epoch(loop: _Loop, epoch: int, progress, description: str) -> float:
    """One pass over the data in a fresh random order; the mean loss per sample."""
    model, torch, settings = loop.model, loop.torch, loop.settings
    model.train()
    order = torch.randperm(len(loop.tensors[0]), generator=loop.generator)
    batches = order.split(settings.batch_size)
    total = 0.0
    task = progress.task(description, len(batches)) if progress is not None else None
    advance = task.__enter__() if task is not None else (lambda *a, **k: None)
    try:
        for step, batch in enumerate(batches, start=1):
            loop.optimizer.zero_grad()
            loss = loop.loss_fn(model, [t[batch] for t in loop.tensors],
                                loop.target[batch] if loop.target is not None else None)
            if not torch.isfinite(loss):
                raise ModelError(
                    f"training diverged: the loss became {loss.item()} at epoch {epoch}, step "
                    f"{step}. Lower the learning rate (lr: {settings.lr:g}) or check the data "
                    "for NaN/inf values")
            loss.backward()
            loop.optimizer.step()
            if loop.schedule is not None:
                loop.schedule.step()
            total += loss.item() * len(batch)
            advance(1)
    finally:
        if task is not None:
            task.__exit__(None, None, None)
        model.eval()
    return total / len(loop.tensors[0])
