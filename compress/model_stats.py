"""Size and cost of a torch model: parameters, multiply-accumulates, sparsity."""
from __future__ import annotations


def count_macs(model, example_inputs: list) -> int:
    """Multiply-accumulates of one forward pass, counted on Conv and Linear layers (the
    layers that dominate inference cost; norms and activations are ignored)."""
    import torch

    total = [0]

    def conv_hook(module, _inputs, output):
        kernel = module.weight.shape[1] * module.weight[0, 0].numel()  # in/groups * k*k
        total[0] += output.numel() * kernel

    def linear_hook(module, _inputs, output):
        total[0] += output.numel() * module.in_features

    hooks = []
    for module in model.modules():
        if isinstance(module, torch.nn.modules.conv._ConvNd):
            hooks.append(module.register_forward_hook(conv_hook))
        elif isinstance(module, torch.nn.Linear):
            hooks.append(module.register_forward_hook(linear_hook))
    try:
        with torch.no_grad():
            model(*example_inputs)
    finally:
        for hook in hooks:
            hook.remove()
    return total[0]


def model_stats(model, example_inputs: list) -> dict:
    """Parameters, MACs per inference (batch as given) and weight sparsity."""
    import torch

    weights = [m.weight for m in model.modules()
               if isinstance(m, (torch.nn.modules.conv._ConvNd, torch.nn.Linear))]
    weight_count = sum(w.numel() for w in weights)
    zeros = sum(int((w == 0).sum()) for w in weights)
    return {"parameters": sum(p.numel() for p in model.parameters()),
            "macs": count_macs(model, example_inputs),
            "sparsity": zeros / weight_count if weight_count else 0.0}
