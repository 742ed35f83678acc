"""Sparsity masks for unstructured (magnitude) and semi-structured (N:M) pruning.

A mask is a bool tensor shaped like a layer's weight: False marks a weight to zero.
"""
from __future__ import annotations


def keep_largest(scores, count: int, torch):
    """Bool mask (shape of scores) that drops the `count` smallest entries."""
    mask = torch.ones(scores.numel(), dtype=torch.bool)
    if count > 0:
        mask[torch.topk(scores.flatten(), count, largest=False).indices] = False
    return mask.view_as(scores)


def magnitude_masks(layers: list, sparsity: float, scope: str, torch) -> dict:
    if scope == "per-layer":
        return {m: keep_largest(m.weight.detach().abs(), round(sparsity * m.weight.numel()),
                                 torch) for _, m in layers}
    scores = torch.cat([m.weight.detach().abs().flatten() for _, m in layers])
    flat = keep_largest(scores, round(sparsity * scores.numel()), torch)
    sizes = [m.weight.numel() for _, m in layers]
    return {m: part.view_as(m.weight) for (_, m), part in zip(layers, flat.split(sizes))}


def nm_masks(layers: list, keep: int, m: int, torch) -> dict:
    """Groups of m along the input dimension (dim 1, innermost as sparse kernels read it)."""
    masks = {}
    for _, module in layers:
        weight = module.weight.detach().abs().movedim(1, -1)
        groups = weight.reshape(-1, m)
        mask = torch.zeros_like(groups, dtype=torch.bool)
        mask.scatter_(1, groups.topk(keep, dim=1).indices, True)
        masks[module] = mask.view_as(weight).movedim(-1, 1)
    return masks


def apply_masks(masks: dict, torch) -> None:
    with torch.no_grad():
        for module, mask in masks.items():
            module.weight.mul_(mask)
