"""Size and cost of a torch model: parameters, multiply-accumulates, sparsity; and what
reading one takes (its weight layers, a forward pass with hooks, its first output)."""
from __future__ import annotations


def first_output(output):
    """The first output of a model that returns one or several."""
    return output[0] if isinstance(output, (tuple, list)) else output


def weight_layers(model) -> list:
    """(name, module) of every Conv and Linear layer: the layers that carry the weights."""
    import torch
    kinds = (torch.nn.modules.conv._ConvNd, torch.nn.Linear)
    return [(n, m) for n, m in model.named_modules() if isinstance(m, kinds)]


def forward_with_hooks(model, inputs: list, hooks: dict) -> None:
    """One no-grad forward pass with `{module: forward hook}` attached, then removed."""
    import torch
    handles = [module.register_forward_hook(hook) for module, hook in hooks.items()]
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        for handle in handles:
            handle.remove()


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

    forward_with_hooks(model, example_inputs, {
        module: linear_hook if isinstance(module, torch.nn.Linear) else conv_hook
        for _, module in weight_layers(model)})
    return total[0]


def model_stats(model, example_inputs: list) -> dict:
    """Parameters, MACs per inference (batch as given) and weight sparsity."""
    import torch

    weights = [m.weight for _, m in weight_layers(model)]
    weight_count = sum(w.numel() for w in weights)
    zeros = sum(int((w == 0).sum()) for w in weights)
    return {"parameters": sum(p.numel() for p in model.parameters()),
            "macs": count_macs(model, example_inputs),
            "sparsity": zeros / weight_count if weight_count else 0.0}
