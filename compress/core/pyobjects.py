"""Python objects in a Pipeline built from Python: a torch module, an onnx.ModelProto,
a factory, loader or metric function, arrays, feed lists, generators, DataLoaders.

The YAML names these things (`module:function`, a path); from Python the objects
themselves may stand in the same places. They are kept out of the JSON Schema, shown as
`<python object: type>` when the pipeline is written out, and identified by their
content (weights, serialised graph, code) for cache keys, never by id().
"""
from __future__ import annotations

import hashlib
import inspect
import os
from typing import Annotated, Any

from pydantic import AfterValidator, PlainSerializer


def describe(value) -> str:
    kind = type(value)
    return f"<python object: {kind.__module__}.{kind.__qualname__}>"


def from_yaml(info) -> bool:
    """Whether the document being validated was read from a YAML file (where a value
    is never a Python object: a number or a list there is a mistake, not data)."""
    return bool(info is not None and info.context and info.context.get("yaml"))


def _not_text(value, info):
    # a string (or a mapping) in an object's place is a name or settings, never the
    # object: let the union's other members report what is wrong with it
    if isinstance(value, (str, bytes, os.PathLike, dict)) or value is None:
        raise ValueError("expected a Python object here")
    if from_yaml(info):
        raise ValueError("expected a name here (a Python object cannot come from YAML)")
    return value


PyObject = Annotated[Any, AfterValidator(_not_text), PlainSerializer(describe, when_used="json")]
# data given from Python: anything (a dict of arrays too); compress.data.feeds says what fits
PyData = Annotated[Any, PlainSerializer(describe, when_used="json")]


def is_torch_module(value) -> bool:
    import sys
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.nn.Module)


def is_onnx_model(value) -> bool:
    return type(value).__name__ == "ModelProto" and hasattr(value, "SerializeToString")


def _code_digest(fn, h) -> None:
    """The code of a function: its module's source where it has one (it may call helpers
    there), else its own bytecode and constants."""
    h.update(f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', '')}".encode())
    try:
        h.update(inspect.getsource(inspect.getmodule(fn)).encode())
        return
    except (OSError, TypeError):
        pass
    code = getattr(fn, "__code__", None)
    if code is not None:
        h.update(code.co_code)
        h.update(repr(code.co_consts).encode())


def digest(value) -> str:
    """A content digest of a model object or a function (see the module docstring)."""
    h = hashlib.sha256()
    if is_onnx_model(value):
        h.update(value.SerializeToString(deterministic=True))
    elif is_torch_module(value):
        import torch
        _code_digest(type(value), h)
        for name, tensor in sorted(value.state_dict().items()):
            h.update(f"{name}{tuple(tensor.shape)}{tensor.dtype}".encode())
            # as bytes, whatever the dtype (bfloat16 has no numpy type)
            raw = tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
            h.update(raw.numpy().tobytes())
    elif callable(value):
        _code_digest(value, h)
    else:
        raise TypeError(f"no content digest for {describe(value)}")
    return h.hexdigest()
