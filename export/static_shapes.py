"""Fix every dynamic dimension of an ONNX model to the shapes the pipeline declares.

NPUs and graph compilers (Qualcomm HTP, Intel NPU, TensorRT engines, the Edge TPU
compiler) compile a model for one shape. onnxruntime's own tools do the work
(`onnxruntime.tools.onnx_model_utils`: make_dim_param_fixed through make_input_shape_fixed,
then fix_output_shapes); this module checks the declared shapes against the model first,
so a contradiction is named instead of silently baked in, re-runs shape inference, and
says whatever is still dynamic.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence


class ShapeConflict(ValueError):
    """The declared shapes do not fit the model, or a dimension cannot be fixed; the
    message names the tensor, the dimension and what to do."""


def _dims(value) -> list:
    """A tensor's dimensions: an int, the dim_param's name, or None (unknown)."""
    if not value.type.HasField("tensor_type") or not value.type.tensor_type.HasField("shape"):
        return []
    return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0
            else (d.dim_param or None) for d in value.type.tensor_type.shape.dim]


def _is_static(value) -> bool:
    """A tensor whose rank is known and every dimension a number."""
    shape = value.type.tensor_type
    return shape.HasField("shape") and all(isinstance(d, int) for d in _dims(value))


def dynamic_tensors(model) -> dict[str, list]:
    """{name: dims} of the graph inputs, outputs and value_info entries that still have a
    symbolic or unknown dimension (empty: the model is fully static)."""
    initializers = {i.name for i in model.graph.initializer}
    values = [*model.graph.input, *model.graph.output, *model.graph.value_info]
    return {v.name: _dims(v) for v in values
            if v.name not in initializers and v.type.HasField("tensor_type")
            and not _is_static(v)}


def _check(model, shapes: Mapping[str, Sequence[int]]) -> dict[str, int]:
    """The dim_param -> value the declared shapes imply; ShapeConflict where they
    contradict the model (rank, a fixed size, one symbol given two sizes)."""
    initializers = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    unknown = sorted(set(shapes) - {i.name for i in inputs})
    if unknown:
        raise ShapeConflict(f"shapes given for {', '.join(unknown)}, which the model does not "
                            f"take (its inputs: {', '.join(i.name for i in inputs)})")
    params: dict[str, tuple[int, str]] = {}
    for value in inputs:
        if value.name not in shapes:
            raise ShapeConflict(f"no shape declared for the model's input {value.name}; declare "
                                "it in model.inputs")
        declared, dims = list(shapes[value.name]), _dims(value)
        if len(dims) != len(declared):
            raise ShapeConflict(
                f"input {value.name} has {len(dims)} dimensions in the model ({_show(dims)}) but "
                f"model.inputs declares {declared}; declare the model's rank")
        for axis, (dim, size) in enumerate(zip(dims, declared)):
            if isinstance(dim, int) and dim != size:
                raise ShapeConflict(
                    f"input {value.name}: the model fixes dimension {axis} to {dim} but "
                    f"model.inputs declares {declared}; declare the shape the model takes "
                    f"({_show(dims)}), or re-export the model for {declared}")
            if isinstance(dim, str):
                seen = params.setdefault(dim, (size, value.name))
                if seen[0] != size:
                    raise ShapeConflict(
                        f"dimension '{dim}' is shared by inputs {seen[1]} and {value.name}, but "
                        f"model.inputs gives it {seen[0]} and {size}; declare one size for it")
    return {name: size for name, (size, _) in params.items()}


def _show(dims: list) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def fix_shapes(model, shapes: Mapping[str, Sequence[int]]) -> dict:
    """Fix `model` (a ModelProto, changed in place) to `shapes` ({input name: full shape}).
    Returns what was done: {"dim_params": {name: size}, "inputs": {name: shape before},
    "already_static": bool}. ShapeConflict when the shapes contradict the model or an
    output stays dynamic after shape inference (e.g. NonZero: data-dependent sizes)."""
    import onnx
    from onnxruntime.tools.onnx_model_utils import fix_output_shapes, make_input_shape_fixed

    if not dynamic_tensors(model):
        _check(model, shapes)
        return {"dim_params": {}, "inputs": {}, "already_static": True}
    params = _check(model, shapes)
    initializers = {i.name for i in model.graph.initializer}
    before = {i.name: _show(_dims(i)) for i in model.graph.input
              if i.name not in initializers and not _is_static(i)}
    for name in before:
        # replaces the input's dim_params everywhere in the graph, and unknown dims in place
        make_input_shape_fixed(model.graph, name, list(shapes[name]))
    # value_info the exporter wrote with derived symbols ("2*batch") would stay symbolic:
    # drop what is still dynamic and let shape inference recompute it from the fixed inputs
    kept = [v for v in model.graph.value_info if _is_static(v)]
    del model.graph.value_info[:]
    model.graph.value_info.extend(kept)
    fix_output_shapes(model)
    inferred = onnx.shape_inference.infer_shapes(model)
    del model.graph.value_info[:]
    model.graph.value_info.extend(v for v in inferred.graph.value_info if _is_static(v))
    left = {n: d for n, d in dynamic_tensors(model).items()
            if n in {o.name for o in model.graph.output}}
    if left:
        listed = ", ".join(f"{n} {_show(d)}" for n, d in sorted(left.items()))
        raise ShapeConflict(f"outputs {listed} stay dynamic with every input fixed (their size "
                            "depends on the data); such a model cannot be compiled for static "
                            "shapes: use a preset without static shapes, or set "
                            "static_shapes: false on the stage")
    return {"dim_params": params, "inputs": before, "already_static": False}


def fix_file(source: Path, target: Path, shapes: Mapping[str, Sequence[int]]) -> dict:
    """fix_shapes on a file; writes `target` (one self-contained file) unless the model
    was static already."""
    import onnx

    model = onnx.load(str(source))
    report = fix_shapes(model, shapes)
    if not report["already_static"]:
        onnx.save(model, str(target))
    return report
