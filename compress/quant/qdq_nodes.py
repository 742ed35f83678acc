"""Reading ONNX nodes and the QDQ pairs quantize_static writes: one attribute with its
default, an initializer as an array, a DequantizeLinear's integers, scales and zero
points (per tensor or along its axis) and their float values. Shared by the passes
that read or rewrite a quantized graph (passes/fast_correction/, passes/gptq_rounding/, equalize.py,
streamed_static.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def attr(node, name: str, default):
    """The value of a node's attribute (an int, float, list, bytes...), or `default`."""
    from onnx import helper
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name),
                default)


def array(inits: dict, name: str) -> np.ndarray:
    from onnx import numpy_helper
    return numpy_helper.to_array(inits[name])


@dataclass(frozen=True)
class Quantized:
    """A DequantizeLinear of constants: integers, and scale and zero point (float64)
    shaped to broadcast against them."""
    integers: np.ndarray
    scale: np.ndarray
    zero: np.ndarray

    def values(self) -> np.ndarray:
        return (self.integers.astype(np.float64) - self.zero) * self.scale


def quantized(node, inits: dict) -> Quantized:
    integers = array(inits, node.input[0])
    scale = array(inits, node.input[1]).astype(np.float64)
    zero = (array(inits, node.input[2]).astype(np.float64)
            if len(node.input) > 2 and node.input[2] else np.zeros_like(scale))
    if scale.ndim == 1 and scale.size > 1:  # per channel along `axis`
        shape = [1] * integers.ndim
        shape[attr(node, "axis", 1) % integers.ndim] = -1
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    return Quantized(integers, scale, zero)


def dequantize(node, inits: dict) -> np.ndarray:
    return quantized(node, inits).values()
