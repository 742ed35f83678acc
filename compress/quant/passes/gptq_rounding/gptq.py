"""Error-compensating weight rounding (GPTQ, Frantar et al. 2022, the one-shot form of
Optimal Brain Quantization): the algorithm, on arrays, for both formats' backends
(onnx.py, tflite.py).

Rounding each weight to its nearest int8 step ignores what the layer computes: on
EfficientNet-Lite0 the weights alone, rounded to nearest per channel, already bring the
output down to 19.5 dB SQNR and top-1 agreement 0.924 before any activation is quantized
(`python examples/anchors/stage_time.py --weights-only efficientnet`). GPTQ
rounds the weights of an output channel one input column at a time and spreads each
column's rounding error over the columns not yet rounded, in proportion to how the
layer's inputs co-vary (H = E[x x^T] over the calibration feeds), so that the layer's
OUTPUT error E[((W - W_q) x)^2] is what gets small, not each weight's. The scales and
zero points stay as the quantizer chose them: only the integers change, so the file's
ops, types and speed are those of nearest rounding.
"""
from __future__ import annotations

import numpy as np

DAMPING = 0.01     # of H's mean diagonal, added to it: keeps the inverse well conditioned
BLOCK = 128        # columns rounded together before the rest are updated (GPTQ's lazy batch)


def _inverse_factor(h: np.ndarray) -> np.ndarray | None:
    """Upper Cholesky factor U of H^-1 (H^-1 = U^T U), per group, H damped first (a dead
    input, always zero, gets a unit diagonal and its weight is simply rounded); None when
    H is not finite or stays singular at 100x the damping.

    One Cholesky of H itself: with J the order-reversing permutation and J H J = L L^T,
    U = J L^-1 J. (Inverting H and then factoring H^-1 in float32 failed as "not positive
    definite" on EfficientNet-Lite0 with 128 feeds; one factoring of the damped H in
    float32 did not, and kept the SQNR to 0.1 dB on every CNN of the corpus at a
    fraction of float64's time: docs/rounding.md.)"""
    if not np.all(np.isfinite(h)):
        return None
    index = np.arange(h.shape[1])
    # J H J (only its diagonal changes below), in float32 like the rounding loop
    damped = np.ascontiguousarray(h[:, ::-1, ::-1], dtype=np.float32)
    diagonal = damped[:, index, index].copy()
    diagonal[diagonal <= 0] = 1.0
    scale = diagonal.mean(axis=1, keepdims=True)
    for damping in (DAMPING, 10 * DAMPING, 100 * DAMPING):
        damped[:, index, index] = diagonal + damping * scale
        try:
            lower = np.linalg.cholesky(damped)
        except np.linalg.LinAlgError:
            continue
        return np.ascontiguousarray(_lower_inverse(lower)[:, ::-1, ::-1])
    return None


def _lower_inverse(lower: np.ndarray) -> np.ndarray:
    """The inverse of lower-triangular matrices (groups, n, n), by halves:
    [[A, 0], [C, D]]^-1 = [[A^-1, 0], [-D^-1 C A^-1, D^-1]]. Two matrix products per
    level instead of a general inverse's LU and solve: 0.10 s against np.linalg.inv's
    0.48 s for a 2304-wide H on this 2-core machine, equal to 2e-16 in float64 (numpy has no
    triangular inverse; scipy's LAPACK brings a second BLAS whose threads slowed the
    whole stage)."""
    n = lower.shape[-1]
    if n <= 128:
        return np.linalg.inv(lower)
    k = n // 2
    first, second = _lower_inverse(lower[:, :k, :k]), _lower_inverse(lower[:, k:, k:])
    inverse = np.zeros_like(lower)
    inverse[:, :k, :k], inverse[:, k:, k:] = first, second
    inverse[:, k:, :k] = -(second @ (lower[:, k:, :k] @ first))
    return inverse


def gptq(weight: np.ndarray, h: np.ndarray, step: np.ndarray, zero: np.ndarray,
         limits: tuple[int, int]) -> np.ndarray:
    """The integers for `weight` (groups, outputs per group, inputs per group), each output
    channel on its own grid (`step`, `zero`: (groups, outputs per group, 1)), rounded
    against H (groups, inputs, inputs). Returns integers in `weight`'s shape, or None
    where H cannot be factored (the caller keeps nearest rounding)."""
    factor = _inverse_factor(h)
    if factor is None:
        return None
    w = weight.astype(np.float32).copy()
    integers = np.zeros_like(w)
    step, zero = step[:, :, 0].astype(np.float32), zero[:, :, 0].astype(np.float32)
    low, high = float(limits[0]), float(limits[1])
    width = w.shape[2]
    reciprocal = 1.0 / factor[:, np.arange(width), np.arange(width)]  # (groups, width)
    # the loop runs once per input column on small arrays: its cost is numpy's per-call
    # overhead, so it makes few calls (ufuncs in place rather than np.clip)
    for start in range(0, width, BLOCK):
        stop = min(start + BLOCK, width)
        errors = np.empty(w.shape[:2] + (stop - start,), dtype=w.dtype)
        for i in range(start, stop):
            column = w[:, :, i]
            q = np.rint(column / step)
            q += zero
            np.maximum(q, low, out=q)
            np.minimum(q, high, out=q)
            integers[:, :, i] = q
            error = (column - (q - zero) * step) * reciprocal[:, i, None]
            w[:, :, i:stop] -= error[:, :, None] * factor[:, None, i, i:stop]
            errors[:, :, i - start] = error
        w[:, :, stop:] -= np.matmul(errors, factor[:, start:stop, stop:])
    return integers


def gptq_by_outputs(rows: np.ndarray, h: np.ndarray, scale: np.ndarray, zero: np.ndarray,
                    integers: np.ndarray) -> np.ndarray | None:
    """gptq for a layer's float weight laid out as `rows` (outputs, then its inputs), its
    outputs grouped as H is, each on its own grid (`scale`, `zero`: one per output, or
    one for all); `integers` are its nearest-rounded ones, in any layout. Returns the new
    integers in `rows`' shape and `integers`' type, or None where H cannot be factored."""
    outputs, groups = rows.shape[0], h.shape[0]
    step, zero = (np.broadcast_to(np.reshape(v, -1), (outputs,)).reshape(groups, -1, 1)
                  for v in (scale, zero))
    # the integer range the quantizer used (symmetric [-127, 127], 7-bit with
    # reduce_range): nearest rounding reaches its ends at each channel's extreme
    limits = (int(integers.min()), int(integers.max()))
    found = gptq(rows.reshape(groups, outputs // groups, -1), h, step, zero, limits)
    return None if found is None else found.reshape(rows.shape).astype(integers.dtype)
