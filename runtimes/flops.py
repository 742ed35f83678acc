"""FLOPs of a model's nodes, estimated from their tensor shapes (ONNX op types and TFLite
builtin names alike): convolutions 2*out_elements*(Cin/groups)*kh*kw, matrix products
2*M*N*K, transposed convolutions 2*in_elements*Cout/groups*kh*kw, every other op one
operation per output element.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

FLOPS_NOTE = ("estimate from tensor shapes: convolutions and matrix products counted as "
              "2 x multiply-adds, every other op as one operation per output element")

Shape = Sequence[int] | None

_CONV_WEIGHT_INPUT = {"Conv": 1, "FusedConv": 1, "NhwcConv": 1, "ConvInteger": 1,
                      "QLinearConv": 3, "NhwcFusedConv": 1, "CONV_2D": 1, "CONV_3D": 1,
                      "DEPTHWISE_CONV_2D": 1}
_MATMUL = {"MatMul", "FusedMatMul", "MatMulInteger", "QLinearMatMul", "MatMulNBits",
           "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "BATCH_MATMUL"}


def _dim(dim) -> int:
    """A dimension as a count: a symbolic or unknown one (None, "batch", -1) counts as 1."""
    return max(int(dim), 1) if isinstance(dim, (int, np.integer)) else 1


def _prod(shape: Iterable) -> int:
    total = 1
    for dim in shape:
        total *= _dim(dim)
    return total


def _get(shapes: Sequence[Shape], index: int) -> Shape:
    return shapes[index] if index < len(shapes) and shapes[index] is not None else None


def node_flops(op: str, inputs: Sequence[Shape], outputs: Sequence[Shape]) -> int | None:
    """Estimated FLOPs of one node (ONNX op types and TFLite builtin names alike); None
    when its output shape is unknown. Symbolic dimensions count as 1."""
    out = _get(outputs, 0)
    if out is None:
        return None
    out_elements = _prod(out)
    weight = _get(inputs, _CONV_WEIGHT_INPUT[op]) if op in _CONV_WEIGHT_INPUT else None
    if weight is not None and len(weight) >= 3:
        if op == "DEPTHWISE_CONV_2D":          # [1, kh, kw, C*multiplier]
            return 2 * out_elements * _prod(weight[1:-1])
        if op == "CONV_3D":                    # [kd, kh, kw, Cin, Cout]
            return 2 * out_elements * _prod(weight[:-1])
        return 2 * out_elements * _prod(weight[1:])   # ONNX [Cout, Cin/g, k...], TFLite OHWI
    if op == "ConvTranspose" and _get(inputs, 1) and _get(inputs, 0):
        return 2 * _prod(inputs[0]) * _prod(inputs[1][1:])       # W [Cin, Cout/g, k...]
    if op == "TRANSPOSE_CONV" and _get(inputs, 1) and _get(inputs, 2):
        return 2 * _prod(inputs[2]) * _prod(inputs[1][:-1])      # W [Cout, kh, kw, Cin]
    first = _get(inputs, 0)
    if op in _MATMUL and first:
        return 2 * out_elements * _dim(first[-1])
    if op in ("Gemm", "QGemm") and first and out:
        return 2 * out_elements * max(_prod(first) // _dim(out[0]), 1)
    if op == "FULLY_CONNECTED" and _get(inputs, 1):
        return 2 * out_elements * _dim(inputs[1][-1])    # W [N, K]
    return sum(_prod(o) for o in outputs if o is not None)
