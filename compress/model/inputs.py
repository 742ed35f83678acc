"""The inputs a model takes in one call: declared in model.inputs, or read from the file.

For an ONNX or TFLite source `model.inputs` may be omitted: names, dtypes and static
dimensions come from the graph, and dimensions the graph leaves dynamic stay dynamic
(null), to be fixed by the data's feeds or, where no data fixes them, by a declaration
the one error asks for. Declared inputs are checked against the graph.
"""
from __future__ import annotations

import numpy as np

from compress.model.spec import DTYPES, TensorDecl
from compress.errors import ModelError

# ONNX TensorProto element types -> the dtypes model.inputs can declare
_ONNX_DTYPES = {1: "float32", 10: "float16", 11: "float64", 7: "int64", 6: "int32",
                5: "int16", 3: "int8", 2: "uint8", 9: "bool"}
_SUPPORTED = set(DTYPES.__args__)


def onnx_inputs(graph) -> list[TensorDecl]:
    """The graph's inputs (initializers that older exporters list as inputs left out)."""
    initializers = {i.name for i in graph.initializer}
    decls = []
    for value in graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        dtype = _ONNX_DTYPES.get(tensor.elem_type)
        if dtype is None:
            raise ModelError(f"input '{value.name}' has ONNX element type {tensor.elem_type} "
                             "(not a float, int or bool tensor), which this pipeline cannot "
                             "feed")
        dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                     for d in tensor.shape.dim)
        decls.append(TensorDecl(name=value.name, shape=dims, dtype=dtype))
    return decls


def tflite_inputs(path) -> list[TensorDecl]:
    """As the file stores them (a quantized input as its integer type: data already
    quantized is fed as it is; declare float32 in model.inputs to feed real values, which
    the LiteRT session quantizes with the tensor's scale and zero point); -1 in the
    signature as dynamic."""
    from runtimes.litert_session import interpreter_module
    interpreter = interpreter_module().Interpreter(model_path=str(path))
    decls = []
    for detail in interpreter.get_input_details():
        dtype = np.dtype(detail["dtype"]).name
        if dtype not in _SUPPORTED:
            raise ModelError(f"input '{detail['name']}' is {dtype}, which this pipeline "
                             "cannot feed")
        signature = detail.get("shape_signature", detail["shape"])
        dims = tuple(int(s) if s > 0 else None for s in signature)
        decls.append(TensorDecl(name=detail["name"], shape=dims, dtype=dtype))
    return decls


def reconcile(declared, actual: list[TensorDecl], what: str,
              real_for_quantized: bool = False) -> tuple[TensorDecl, ...]:
    """The declared inputs checked against the file's (or the file's when none are
    declared): the same names in order, the same dtypes (float32 also for a quantized
    TFLite input, `real_for_quantized`: the runtime quantizes real values), and no
    declared size against a fixed one."""
    if declared is None:
        return tuple(actual)
    names, have = [d.name for d in declared], [d.name for d in actual]
    if names != have:
        raise ModelError(f"model.inputs declares {names} but {what} has inputs {have}; "
                         "declare the file's input names in its order, or omit model.inputs "
                         "to read them from the file")
    for mine, theirs in zip(declared, actual):
        quantized = real_for_quantized and theirs.dtype in ("int8", "uint8", "int16")
        if mine.dtype != theirs.dtype and not (quantized and mine.dtype == "float32"):
            raise ModelError(f"model.inputs declares input '{mine.name}' as {mine.dtype} but "
                             f"{what} takes {theirs.dtype}; declare the dtype the model takes")
        if len(mine.shape) != len(theirs.shape) or any(
                a is not None and b is not None and a != b
                for a, b in zip(mine.shape, theirs.shape)):
            raise ModelError(f"model.inputs declares input '{mine.name}' with shape "
                             f"{list(mine.shape)} but {what} takes {list(theirs.shape)} "
                             "(None: any size); declare the shape the model takes")
    return tuple(declared)


def unfixed_dims(decls, data_given: bool) -> None:
    """Without any data, every dynamic dimension must be declared: nothing else fixes it."""
    if data_given:
        return
    open_dims = {d.name: d.dynamic_dims for d in decls if d.dynamic_dims}
    if open_dims:
        listed = "; ".join(f"'{name}' axes {axes}" for name, axes in open_dims.items())
        example = next(d for d in decls if d.dynamic_dims)
        shape = [1 if size is None else size for size in example.shape]
        raise ModelError(f"the model leaves dimensions dynamic ({listed}) and no data fixes "
                         f"them: declare them in model.inputs (e.g. - {{name: {example.name}, "
                         f"shape: {shape}, dtype: {example.dtype}}}), or give "
                         "calibration/evaluation data")
