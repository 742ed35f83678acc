"""`prune` for torch models: structured channel pruning, unstructured magnitude and
semi-structured N:M sparsity, one-shot or iterative, with optional fine-tuning.

Channel pruning removes filters for real (torch-pruning's dependency graph keeps coupled
layers consistent), so parameters, MACs and latency all drop. Magnitude and N:M pruning
only write zeros: the file compresses better, and N:M runs faster only on kernels that
use it (sparse tensor cores); a dense runtime is not faster.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Literal, Optional

from pydantic import Field, PositiveInt, model_validator

from compress.core.artifacts import Output
from compress.errors import DataError, ModelError
from compress.core.lazy import require
from compress.model.stats import first_output, forward_with_hooks, model_stats, weight_layers
from compress.model.sparsity import apply_masks, magnitude_masks, nm_masks
from compress.stagebase import StageConfig, register
from compress.model.torch_eval import torch_metric
from compress.model.training import Objective, TrainSettings, check_labels, train
from compress.stages.prune_channels import (channel_counts, channel_pruner, channel_step,
                                            taylor_gradients)

MAGNITUDE_NOTE = ("unstructured zeros shrink the compressed (zip/gzip) model file but not "
                  "latency on dense runtimes, which multiply the zeros like any weight")
NM_NOTE = ("N:M zeros speed up only kernels built for them (e.g. sparse tensor cores via "
           "TensorRT); dense runtimes run at dense speed")


class Prune(StageConfig):
    type: Literal["prune"] = Field("prune", description="magnitude, n:m or channel pruning "
                                   "of a torch model, with fine-tuning")
    method: Literal["channel", "magnitude", "n:m"] = Field(
        description="channel: remove filters (smaller and faster everywhere); magnitude: "
        "zero the smallest weights; n:m: keep n of every m weights along the input dimension")
    sparsity: Optional[float] = Field(
        None, ge=0, lt=1, description="channel: fraction of channels removed; magnitude: "
        "fraction of weights zeroed (required for both; n:m uses n and m instead)")
    scope: Literal["global", "per-layer"] = Field(
        "per-layer", description="rank across all layers (global) or within each layer")
    importance: Literal["l1", "l2", "bn_scale", "taylor"] = Field(
        "l2", description="channel: how channels are ranked (taylor needs data.train)")
    ignore: tuple[str, ...] = Field(
        (), description="module names never pruned (channel: their output channels are "
        "kept); the output layer always is, so the number of classes stays")
    max_layer_sparsity: float = Field(
        0.9, gt=0, lt=1, description="channel: no layer loses more than this fraction")
    round_to: PositiveInt = Field(
        8, description="channel: channels kept rounded up to a multiple of this (vector "
        "units and NPUs prefer multiples of 8)")
    n: PositiveInt = Field(2, description="n:m: weights kept in every group of m")
    m: PositiveInt = Field(4, description="n:m: group size along the input dimension")
    schedule: Literal["one-shot", "iterative"] = Field(
        "one-shot", description="prune at once, or in `steps` with fine-tuning between them")
    steps: Optional[PositiveInt] = Field(
        None, description="iterative: reach the target in this many equal steps (default 3)")
    taylor_samples: PositiveInt = Field(512, description="taylor: data.train samples for gradients")
    train: TrainSettings = Field(
        default_factory=lambda: TrainSettings(epochs=0),
        description="fine-tuning after every step (default: none)")

    @model_validator(mode="after")
    def _consistent(self):
        if self.method == "n:m":
            if self.sparsity is not None:
                raise ValueError("n:m sparsity is 1 - n/m: set `n` and `m`, not `sparsity`")
            if self.n >= self.m:
                raise ValueError(f"n:m needs n < m; got n={self.n}, m={self.m}")
        elif self.sparsity is None:
            raise ValueError(f"method {self.method} needs `sparsity` (a fraction in [0, 1))")
        if self.schedule == "one-shot" and self.steps not in (None, 1):
            raise ValueError("`steps` applies to `schedule: iterative` only")
        return self

    @property
    def step_count(self) -> int:
        return (self.steps or 3) if self.schedule == "iterative" else 1

    def formats(self) -> dict[str, str]:
        return {"torch": "torch"}

    def format_hint(self, given: str) -> str:
        return "prune works on the torch model: put it before any export stage"

    def required_data(self) -> tuple[str, ...]:
        taylor = self.method == "channel" and self.importance == "taylor"
        return ("train",) if self.train.epochs > 0 or taylor else ()


def _output_layer(model, example, torch) -> str:
    """The last Conv/Linear to run produces the outputs (the classes): never pruned."""
    order = []
    forward_with_hooks(model, example, {module: (lambda *_, name=name: order.append(name))
                                        for name, module in weight_layers(model)})
    if not order:
        raise ModelError("prune found no Conv or Linear layer in the model: nothing to prune")
    return order[-1]


def _ignored(model, config: Prune, example, torch) -> set:
    names = {n for n, _ in model.named_modules() if n}
    unknown = [n for n in config.ignore if n not in names]
    if unknown:
        valid = ", ".join(n for n, _ in weight_layers(model)[:12])
        raise ModelError(f"prune.ignore names {unknown}, which the model does not have; "
                         f"its Conv/Linear layers include: {valid}")
    return {*config.ignore, _output_layer(model, example, torch)}


def _is_ignored(name: str, ignored: set) -> bool:
    return any(name == i or name.startswith(i + ".") for i in ignored)


def _loss_fn(teacher, torch):
    functional = torch.nn.functional

    def loss(model, inputs, labels):
        out = first_output(model(*inputs))
        if labels is not None:
            return functional.cross_entropy(out, labels)
        with torch.no_grad():
            target = first_output(teacher(*inputs))
        return functional.kl_div(functional.log_softmax(out, 1), functional.log_softmax(target, 1),
                                 log_target=True, reduction="batchmean")
    return loss


@dataclass(frozen=True)
class _Pruning:
    """What every step of one prune stage reads: the model as given (the teacher, never
    modified), the settings, the layers left alone, the stage's context, an example
    input per model input, and torch."""
    teacher: object
    config: Prune
    ignored: set
    ctx: object
    example: list
    torch: object


def _fine_tune(model, job: _Pruning, data, masks: dict, label: str) -> dict:
    ctx, torch = job.ctx, job.torch

    def evaluate(candidate) -> float:
        return torch_metric(candidate, ctx)["value"]

    # Zero gradients of pruned weights: with zero gradients from the start, Adam/SGD
    # state stays zero too, so pruned weights never move; masks re-applied to be sure.
    hooks = [m.weight.register_hook(lambda g, mask=mask: g * mask) for m, mask in masks.items()]
    try:
        objective = Objective(_loss_fn(job.teacher, torch),
                              evaluate if ctx.dataset("evaluation") is not None else None)
        result = train(model, objective, data, job.config.train, progress=ctx.progress,
                       label=label)
    finally:
        for hook in hooks:
            hook.remove()
    apply_masks(masks, torch)
    return {"epochs_run": result.epochs_run, "best_epoch": result.best_epoch,
            "best_metric": result.best_metric, "history": result.history}


def _step_masks(model, config: Prune, ignored: set, step: int, torch) -> tuple[dict, str]:
    layers = [(n, m) for n, m in weight_layers(model) if not _is_ignored(n, ignored)
              and (config.method != "n:m" or m.weight.shape[1] % config.m == 0)]
    if not layers:
        raise ModelError(f"prune found no layer to prune besides the output layer and the ignored "
                         f"ones ({sorted(ignored)}); n:m also skips layers whose input dimension "
                         "is not a multiple of m")
    if config.method == "magnitude":
        target = config.sparsity * step / config.step_count
        return (magnitude_masks(layers, target, config.scope, torch),
                f"{target:.0%} of weights zeroed ({config.scope})")
    # Gradual n:m keeps fewer per group each step: 2:4 in 2 steps is 3:4, then 2:4.
    keep = config.m - round((config.m - config.n) * step / config.step_count)
    return nm_masks(layers, keep, config.m, torch), f"{keep}:{config.m} sparsity"


def _prune(model, job: _Pruning) -> list:
    """Prune `model` in place step by step; returns the fine-tuning history."""
    config, ignored, ctx, torch = job.config, job.ignored, job.ctx, job.torch
    train_data = ctx.dataset("train").samples("prune") if config.required_data() else None
    pruner, initial, masks = None, {}, {}
    if config.method == "channel":
        tp = require("torch_pruning", "prune (method: channel)")
        pruner = channel_pruner(model, job.example, config, ignored, tp)
        initial = dict(pruner.layer_init_out_ch)
    history, steps = [], config.step_count
    for step in range(1, steps + 1):
        if pruner is not None:
            if config.importance == "taylor":
                taylor_gradients(model, job.teacher, train_data, config, ctx.pipeline.seed,
                                 torch)
            channel_step(pruner, config, initial, torch)
            model.zero_grad(set_to_none=True)
            what = (f"{config.sparsity * step / steps:.0%} channels "
                    f"({config.scope}, {config.importance})")
        else:
            masks, what = _step_masks(model, config, ignored, step, torch)
            apply_masks(masks, torch)
        ctx.progress.note(f"prune step {step}/{steps}: {what}")
        if config.train.epochs:
            pruned = torch_metric(model, ctx)  # before fine-tuning: what training recovered
            history.append({"step": step, "metric_pruned": pruned and pruned["value"],
                            **_fine_tune(model, job, train_data, masks,
                                         f"fine-tune {step}/{steps}")})
    return history


def _layers_meta(before: dict, model, config: Prune, ignored: set, torch) -> dict:
    if config.method == "channel":
        after = channel_counts(model, torch)
        return {"layers": {n: {"before": c, "after": after[n]} for n, c in before.items()}}
    layers = weight_layers(model)
    meta = {"layers": {n: {"weights": m.weight.numel(), "sparsity": round(
        float((m.weight == 0).float().mean()), 6)} for n, m in layers}, "note": MAGNITUDE_NOTE}
    if config.method == "n:m":
        meta.update(note=NM_NOTE, skipped_layers=[
            n for n, m in layers if not _is_ignored(n, ignored) and m.weight.shape[1] % config.m])
    return meta


def _meta(artifact, config: Prune, before: dict, after: dict, ignored: set) -> dict:
    return {"factory": artifact.meta.get("factory"), "kwargs": artifact.meta.get("kwargs", {}),
            "method": config.method,
            "sparsity": 1 - config.n / config.m if config.method == "n:m" else config.sparsity,
            "parameters_before": before["parameters"], "parameters_after": after["parameters"],
            "macs_before": before["macs"], "macs_after": after["macs"],
            "weight_sparsity": after["sparsity"], "ignored": sorted(ignored)}


def _example_shapes(decls) -> list[tuple]:
    """The shapes of the zero inputs prune traces the model with (a dynamic dimension: 1),
    refused before any is allocated where together they take over half the memory
    available (runtimes.input_bounds' rule): a DataError naming the largest input, its
    shape, the bytes and the memory."""
    from runtimes.input_bounds import array_bytes, check_fits
    shapes = [tuple(1 if size is None else size for size in d.shape) for d in decls]
    sizes = [array_bytes(shape, d.dtype) for d, shape in zip(decls, shapes)]
    if decls:
        worst = decls[max(range(len(decls)), key=sizes.__getitem__)]
        others = " and the others" if len(decls) > 1 else ""
        check_fits(f"model.inputs: input '{worst.name}' (shape {list(worst.shape)} "
                   f"{worst.dtype}){others}: the zero example prune traces the model with",
                   sum(sizes), "check the shape in model.inputs", error=DataError)
    return shapes


@register(Prune)
def run(artifact, config: Prune, ctx) -> list[Output]:
    if artifact.format != "torch":
        raise ModelError(f"prune takes a torch model but got {artifact.format} artifact "
                         f"{artifact.id}; put prune before `export.onnx`")
    torch = require("torch", "prune")
    from compress.model.torch_artifacts import save_torch_model
    teacher = ctx.torch_model(artifact)  # the source's shared module: read, never modified
    model = copy.deepcopy(teacher).eval()
    example = [torch.zeros(shape, dtype=getattr(torch, d.dtype))
               for d, shape in zip(ctx.inputs, _example_shapes(ctx.inputs))]
    if config.required_data():
        with torch.no_grad():
            classes = first_output(model(*example)).shape[1]
        check_labels(ctx.require_dataset("train", "prune").samples("prune").labels, classes)
    ignored = _ignored(model, config, example, torch)
    before, channels = model_stats(model, example), channel_counts(model, torch)
    history = _prune(model, _Pruning(teacher, config, ignored, ctx, example, torch))
    metric = torch_metric(model, ctx)
    target = ctx.out_dir / "model.pt"
    save_torch_model(model, target)
    meta = {**_meta(artifact, config, before, model_stats(model, example), ignored),
            "metric_after": metric["value"] if metric else None, "fine_tune": history,
            **_layers_meta(channels, model, config, ignored, torch)}
    return [Output(target, "torch", artifact.precision, meta)]
