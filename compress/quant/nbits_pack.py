"""neural-compressor's 4-bit weights (an INCWeightOnlyLinear's unpacked integers, scales
and zero points) in the tensors of onnxruntime's MatMulNBits: B [N, K / block, block / 2]
two weights a byte (the first in the low nibble), scales [N * K / block] float32, zero
points [N * ceil(K / block / 2)] two a byte, absent for a symmetric grid (MatMulNBits then
takes 8). The ONNX model computes exactly what the INC model computes: nothing is
rounded again.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np


@dataclass
class NBitsTensors:
    packed: np.ndarray                 # uint8 [N, blocks, block / 2]
    scales: np.ndarray                 # float32 [N * blocks]
    zero_points: Optional[np.ndarray]  # uint8 [N * ceil(blocks / 2)], None: symmetric
    n: int
    k: int
    block: int


def _two_a_byte(values: np.ndarray) -> np.ndarray:
    """Pairs along the last axis in one byte, the first in the low nibble."""
    return (values[..., 0::2] | (values[..., 1::2] << 4)).astype(np.uint8)


def from_inc(unpacked: dict, block: int) -> NBitsTensors:
    """MatMulNBits' tensors from INCWeightOnlyLinear.unpack() of a 4-bit module whose
    groups are `block` consecutive inputs (no activation reordering)."""
    values = unpacked["int_weight"].numpy().astype(np.int32)
    # INC's symmetric grid is signed (-8..7), its asymmetric one unsigned (0..15)
    values = (values + (8 if values.min() < 0 else 0)).astype(np.uint8)
    n, k = values.shape
    blocks = k // block
    packed = _two_a_byte(values.reshape(n, blocks, block))
    scales = unpacked["scales"].float().numpy().reshape(-1).astype(np.float32)
    zero = unpacked.get("zp")
    zero_points = None
    if zero is not None:
        zero = np.pad(zero.numpy().astype(np.int32).astype(np.uint8), ((0, 0), (0, blocks % 2)))
        zero_points = _two_a_byte(zero).reshape(-1)
    return NBitsTensors(packed, scales, zero_points, n, k, block)


def stacked(parts: list[NBitsTensors]) -> NBitsTensors:
    """Modules side by side along the outputs (a fused q, k, v projection): one node's
    tensors. The parts share K and the block; all have zero points or none."""
    first = parts[0]
    if any((p.k, p.block) != (first.k, first.block) for p in parts):
        raise ValueError("stacked modules must share their inputs and their block")
    zeros = [p.zero_points for p in parts]
    if any(z is None for z in zeros) and not all(z is None for z in zeros):
        raise ValueError("stacked modules must all have zero points, or none")
    return NBitsTensors(np.concatenate([p.packed for p in parts]),
                        np.concatenate([p.scales for p in parts]),
                        None if zeros[0] is None else np.concatenate(zeros),
                        sum(p.n for p in parts), first.k, first.block)
