"""Saving and reloading torch models whose architecture a stage has changed.

A pruned model no longer matches its factory (fewer channels), so a plain state_dict
will not load into `factory()`. Pickling the whole module would, but loading a pickle
runs arbitrary code. We keep `torch.load(weights_only=True)`: the file holds the
state_dict plus the size attributes of every Conv/Linear/norm layer (plain ints and
tuples). Reloading builds `factory(**kwargs)`, resizes the layers whose attributes
differ to the saved shapes, then loads the weights strictly.
"""
from __future__ import annotations

from pathlib import Path

from compress.errors import ModelError

# Attributes that encode a layer's shape; everything else comes from the factory's code.
SHAPE_ATTRIBUTES = ("in_channels", "out_channels", "groups", "in_features", "out_features",
                    "num_features", "normalized_shape", "num_embeddings", "embedding_dim")


def _shape_attributes(model) -> dict:
    attributes = {}
    for name, module in model.named_modules():
        found = {a: getattr(module, a) for a in SHAPE_ATTRIBUTES if hasattr(module, a)}
        if found:
            attributes[name] = {k: (tuple(v) if isinstance(v, (list, tuple)) else v)
                                for k, v in found.items()}
    return attributes


def save_torch_model(model, path: Path) -> None:
    import torch
    torch.save({"format": "edge-compress/torch-v1", "state_dict": model.state_dict(),
                "shape_attributes": _shape_attributes(model)}, path)


def _resize(model, state_dict: dict, attributes: dict, torch) -> None:
    modules = dict(model.named_modules())
    for name, attrs in attributes.items():
        module = modules.get(name)
        if module is None:
            raise ModelError(f"saved model has a layer '{name}' that the factory's model lacks")
        for attr, value in attrs.items():
            setattr(module, attr, value)
    for key, tensor in state_dict.items():
        owner_name, _, leaf = key.rpartition(".")
        owner = modules.get(owner_name)
        if owner is None:
            continue  # load_state_dict below names the mismatch
        if leaf in owner._parameters and owner._parameters[leaf] is not None:
            if owner._parameters[leaf].shape != tensor.shape:
                owner._parameters[leaf] = torch.nn.Parameter(torch.empty_like(tensor))
        elif leaf in owner._buffers and owner._buffers[leaf] is not None:
            if owner._buffers[leaf].shape != tensor.shape:
                owner._buffers[leaf] = torch.empty_like(tensor)


def load_torch_model(path: Path, factory):
    """Rebuild a model saved by `save_torch_model` (or a plain state_dict) on `factory()`."""
    import torch
    saved = torch.load(path, map_location="cpu", weights_only=True)
    model = factory()
    if isinstance(saved, dict) and saved.get("format") == "edge-compress/torch-v1":
        _resize(model, saved["state_dict"], saved["shape_attributes"], torch)
        saved = saved["state_dict"]
    try:
        model.load_state_dict(saved)
    except RuntimeError as exc:
        raise ModelError(f"{path} does not fit the factory's model: "
                         f"{' '.join(str(exc).split())[:400]}") from None
    return model.eval()
