"""`prune` for torch models: structured channel pruning, unstructured magnitude and
semi-structured N:M sparsity, one-shot or iterative, with optional fine-tuning.

Channel pruning removes filters for real (torch-pruning's dependency graph keeps coupled
layers consistent), so parameters, MACs and latency all drop. Magnitude and N:M pruning
only write zeros: the file compresses better, and N:M runs faster only on kernels that
use it (sparse tensor cores); a dense runtime is not faster.
"""
from __future__ import annotations

import copy
import math
from typing import Literal, Optional

import numpy as np
from pydantic import Field, PositiveInt, model_validator

from compress.core.artifacts import Output
from compress.errors import ModelError
from compress.core.lazy import require
from compress.model.stats import forward_with_hooks, model_stats, weight_layers
from compress.model.sparsity import apply_masks, magnitude_masks, nm_masks
from compress.stagebase import StageConfig, register
from compress.model.torch_eval import torch_metric
from compress.model.training import TrainSettings, check_labels, train

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


def _first(output):
    return output[0] if isinstance(output, (tuple, list)) else output


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


def _channel_pruner(model, example, config: Prune, ignored: set, tp):
    modules = dict(model.named_modules())
    importance = {"l1": lambda: tp.importance.MagnitudeImportance(p=1),
                  "l2": lambda: tp.importance.MagnitudeImportance(p=2),
                  "bn_scale": tp.importance.BNScaleImportance,
                  "taylor": tp.importance.TaylorImportance}[config.importance]()
    # round_to is applied in _channel_step: torch-pruning rounds the channels kept down,
    # which in global mode can empty a layer (and then silently skips it).
    try:
        pruner = tp.pruner.BasePruner(
            model, example, importance, global_pruning=config.scope == "global",
            pruning_ratio=config.sparsity, max_pruning_ratio=config.max_layer_sparsity,
            iterative_steps=config.step_count, ignored_layers=[modules[n] for n in ignored])
    except Exception as exc:  # tracing runs the user's model code
        raise ModelError(f"torch-pruning could not trace the model's layer dependencies: "
                         f"{type(exc).__name__}: {exc}. Try `method: magnitude`") from exc
    if pruner.initial_total_channels == 0:
        raise ModelError("prune found no prunable channels: every Conv/Linear layer is the "
                         f"output layer or ignored ({sorted(ignored)})")
    return pruner


def _channels_to_keep(current: int, proposed: int, initial: int, config: Prune) -> int:
    floor = math.ceil(initial * (1 - config.max_layer_sparsity))
    keep = max(proposed, floor, 1)
    return min(math.ceil(keep / config.round_to) * config.round_to, current)


def _channel_step(pruner, config: Prune, initial: dict, torch) -> None:
    """One pruner step, each layer's cut limited by max_layer_sparsity and round_to."""
    graph = pruner.DG
    for group in pruner.step(interactive=True):
        module, handler = group[0].dep.target.module, group[0].dep.handler
        if pruner._get_channel_groups(group) > 1:
            group.prune()  # grouped layers: torch-pruning's indices keep the groups equal
            continue
        current = graph.get_out_channels(module)
        keep = _channels_to_keep(current, current - len(group[0].idxs), initial[module], config)
        if keep >= current:
            continue
        full = graph.get_pruning_group(module, handler, list(range(current)))
        order = torch.argsort(pruner.estimate_importance(full))
        graph.get_pruning_group(module, handler, order[:current - keep].tolist()).prune()


def _taylor_gradients(model, teacher, data, config: Prune, seed: int, torch) -> None:
    """Loss gradients for first-order Taylor importance. Without labels the target is the
    unpruned model's top-1 class: KL to its own outputs has a zero gradient before pruning."""
    pick = np.random.default_rng(seed).permutation(len(data))[:config.taylor_samples]
    inputs = [torch.from_numpy(a[pick]) for a in data.inputs.values()]
    labels = torch.from_numpy(data.labels[pick]) if data.labels is not None else None
    model.zero_grad(set_to_none=True)
    for start in range(0, len(pick), 64):
        batch = [t[start:start + 64] for t in inputs]
        if labels is not None:
            target = labels[start:start + 64]
        else:
            with torch.no_grad():
                target = _first(teacher(*batch)).argmax(1)
        loss = torch.nn.functional.cross_entropy(_first(model(*batch)), target, reduction="sum")
        (loss / len(pick)).backward()


def _channel_counts(model, torch) -> dict:
    return {n: getattr(m, "out_channels", getattr(m, "out_features", None))
            for n, m in weight_layers(model)}


def _loss_fn(teacher, torch):
    functional = torch.nn.functional

    def loss(model, inputs, labels):
        out = _first(model(*inputs))
        if labels is not None:
            return functional.cross_entropy(out, labels)
        with torch.no_grad():
            target = _first(teacher(*inputs))
        return functional.kl_div(functional.log_softmax(out, 1), functional.log_softmax(target, 1),
                                 log_target=True, reduction="batchmean")
    return loss


def _fine_tune(model, teacher, data, masks: dict, config: Prune, ctx, label: str, torch) -> dict:
    def evaluate(candidate) -> float:
        return torch_metric(candidate, ctx)["value"]

    # Zero gradients of pruned weights: with zero gradients from the start, Adam/SGD
    # state stays zero too, so pruned weights never move; masks re-applied to be sure.
    hooks = [m.weight.register_hook(lambda g, mask=mask: g * mask) for m, mask in masks.items()]
    try:
        result = train(model, _loss_fn(teacher, torch), data.inputs, data.labels, config.train,
                       evaluate=evaluate if ctx.dataset("evaluation") is not None else None,
                       progress=ctx.progress, label=label)
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


def _prune(model, teacher, config: Prune, ignored: set, ctx, example, torch) -> list:
    """Prune `model` in place step by step; returns the fine-tuning history."""
    train_data = ctx.dataset("train").samples("prune") if config.required_data() else None
    pruner, initial, masks = None, {}, {}
    if config.method == "channel":
        tp = require("torch_pruning", "prune (method: channel)")
        pruner = _channel_pruner(model, example, config, ignored, tp)
        initial = dict(pruner.layer_init_out_ch)
    history, steps = [], config.step_count
    for step in range(1, steps + 1):
        if pruner is not None:
            if config.importance == "taylor":
                _taylor_gradients(model, teacher, train_data, config, ctx.pipeline.seed, torch)
            _channel_step(pruner, config, initial, torch)
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
                            **_fine_tune(model, teacher, train_data, masks, config, ctx,
                                         f"fine-tune {step}/{steps}", torch)})
    return history


def _layers_meta(before: dict, model, config: Prune, ignored: set, torch) -> dict:
    if config.method == "channel":
        after = _channel_counts(model, torch)
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


@register(Prune)
def run(artifact, config: Prune, ctx) -> list[Output]:
    if artifact.format != "torch":
        raise ModelError(f"prune takes a torch model but got {artifact.format} artifact "
                         f"{artifact.id}; put prune before `export.onnx`")
    torch = require("torch", "prune")
    from compress.model.torch_artifacts import save_torch_model
    teacher = ctx.torch_model(artifact)  # the source's shared module: read, never modified
    model = copy.deepcopy(teacher).eval()
    example = [torch.zeros(d.shape, dtype=getattr(torch, d.dtype)) for d in ctx.inputs]
    if config.required_data():
        with torch.no_grad():
            classes = _first(model(*example)).shape[1]
        check_labels(ctx.require_dataset("train", "prune").samples("prune").labels, classes)
    ignored = _ignored(model, config, example, torch)
    before, channels = model_stats(model, example), _channel_counts(model, torch)
    history = _prune(model, teacher, config, ignored, ctx, example, torch)
    metric = torch_metric(model, ctx)
    target = ctx.out_dir / "model.pt"
    save_torch_model(model, target)
    meta = {**_meta(artifact, config, before, model_stats(model, example), ignored),
            "metric_after": metric["value"] if metric else None, "fine_tune": history,
            **_layers_meta(channels, model, config, ignored, torch)}
    return [Output(target, "torch", artifact.precision, meta)]
