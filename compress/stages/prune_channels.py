"""The prune stage's structured channel pruning: torch-pruning's pruner over the model's
dependency graph (coupled layers cut alike), one step with each layer's cut limited by
max_layer_sparsity and round_to, and the loss gradients first-order Taylor importance
ranks channels by. `config` is the stage's Prune settings (compress.stages.prune).
"""
from __future__ import annotations

import math

import numpy as np

from compress.errors import ModelError
from compress.model.stats import first_output, weight_layers


def channel_pruner(model, example, config, ignored: set, tp):
    modules = dict(model.named_modules())
    importance = {"l1": lambda: tp.importance.MagnitudeImportance(p=1),
                  "l2": lambda: tp.importance.MagnitudeImportance(p=2),
                  "bn_scale": tp.importance.BNScaleImportance,
                  "taylor": tp.importance.TaylorImportance}[config.importance]()
    # round_to is applied in channel_step: torch-pruning rounds the channels kept down,
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


def _channels_to_keep(current: int, proposed: int, initial: int, config) -> int:
    floor = math.ceil(initial * (1 - config.max_layer_sparsity))
    keep = max(proposed, floor, 1)
    return min(math.ceil(keep / config.round_to) * config.round_to, current)


def channel_step(pruner, config, initial: dict, torch) -> None:
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


def taylor_gradients(model, teacher, data, config, seed: int, torch) -> None:
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
                target = first_output(teacher(*batch)).argmax(1)
        loss = torch.nn.functional.cross_entropy(first_output(model(*batch)), target,
                                                 reduction="sum")
        (loss / len(pick)).backward()


def channel_counts(model, torch) -> dict:
    return {n: getattr(m, "out_channels", getattr(m, "out_features", None))
            for n, m in weight_layers(model)}
