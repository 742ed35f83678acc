"""Error-compensating weight rounding (GPTQ, Frantar et al. 2022, the one-shot form of
Optimal Brain Quantization) for the int8 weights of Conv and Gemm layers.

Rounding each weight to its nearest int8 step ignores what the layer computes: on
EfficientNet-Lite0 the weights alone, rounded to nearest per channel, already bring the
output down to 19.5 dB SQNR and top-1 agreement 0.924 before any activation is quantized
(`python examples/anchors/stage_time.py --weights-only efficientnet`). GPTQ
rounds the weights of an output channel one input column at a time and spreads each
column's rounding error over the columns not yet rounded, in proportion to how the
layer's inputs co-vary (H = E[x x^T] over the calibration feeds), so that the layer's
OUTPUT error E[((W - W_q) x)^2] is what gets small, not each weight's. The scales and
zero points stay as quantize_static chose them: only the integers change, so the file's
ops, types and speed are those of nearest rounding.

H comes from the float model's inputs of each layer in the pass that fast bias
correction already makes (fast_bias.py): per feed, `positions` output positions drawn
at random (seeded) and their input patches (im2col, padding and stride exact), so the
cost does not grow with the feature maps. Grouped and depthwise convolutions get one H
per group (a depthwise 3x3 channel: a 9x9 H).
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np

from compress.quant.qdq_nodes import Quantized, array, attr, quantized

DAMPING = 0.01     # of H's mean diagonal, added to it: keeps the inverse well conditioned
BLOCK = 128        # columns rounded together before the rest are updated (GPTQ's lazy batch)
# rows of H per layer, over all feeds: ROWS_PER_INPUT per input of the layer, within
# [MIN_ROWS, MAX_ROWS]. A row costs width^2 multiply-adds, so wide layers are what the
# cap bounds. A time budget, not a measured optimum: in a trial, up to 16 times the rows
# did not raise EfficientNet-Lite0's or the orientation classifier's calibration SQNR.
ROWS_PER_INPUT, MIN_ROWS, MAX_ROWS = 8, 1024, 2048
MAX_WIDTH = 2304    # wider layers (e.g. CREPE's 128x64 kernels: 8192) keep nearest rounding:
# factoring H grows with width^3 (8192 wide took longer than the rest of CREPE's stage)
FLUSH_ROWS = 512    # rows gathered before they are multiplied out
HESSIAN_FEEDS = 64  # at most, spread over the pass's feeds: H's cost is per feed and layer


@dataclass(frozen=True)
class Geometry:
    """How a layer turns its input into rows of H: a Conv's attributes, or a Gemm."""
    groups: int
    kernel: tuple = ()      # (kh, kw); () for Gemm
    strides: tuple = (1, 1)
    pads: tuple = (0, 0, 0, 0)  # top, left, bottom, right
    dilations: tuple = (1, 1)


def geometry(node) -> Geometry | None:
    """The layer's Geometry, or None for what this module does not round (3-D convs,
    auto_pad other than NOTSET, a Gemm with transA). A 1-D conv is a 2-D one of height 1."""
    if node.op_type == "Gemm":
        return None if attr(node, "transA", 0) else Geometry(groups=1)
    kernel = tuple(attr(node, "kernel_shape", ()))
    if attr(node, "auto_pad", b"NOTSET") not in (b"", b"NOTSET") or len(kernel) not in (1, 2):
        return None
    groups, strides = attr(node, "group", 1), tuple(attr(node, "strides", (1,) * len(kernel)))
    pads = tuple(attr(node, "pads", (0,) * 2 * len(kernel)))  # all begins, then all ends
    dilations = tuple(attr(node, "dilations", (1,) * len(kernel)))
    if len(kernel) == 1:
        return Geometry(groups, (1, *kernel), (1, *strides), (0, pads[0], 0, pads[1]),
                        (1, *dilations))
    return Geometry(groups, kernel, strides, pads, dilations)


def patches(x: np.ndarray, shape: Geometry, count: int, rng) -> np.ndarray:
    """(groups, samples, inputs per group) rows of the layer's input: `count` output
    positions at most, drawn from every sample of `x`."""
    if not shape.kernel:
        rows = x.reshape(-1, x.shape[-1])
        picked = rows[rng.choice(len(rows), min(count, len(rows)), replace=False)]
        return picked[None].astype(np.float32)
    if x.ndim == 3:
        x = x[:, :, None, :]
    (kh, kw), (sh, sw), (dh, dw) = shape.kernel, shape.strides, shape.dilations
    top, left, bottom, right = shape.pads
    height, width = x.shape[2], x.shape[3]
    out_h = (height + top + bottom - dh * (kh - 1) - 1) // sh + 1
    out_w = (width + left + right - dw * (kw - 1) - 1) // sw + 1
    total = x.shape[0] * out_h * out_w
    flat = rng.choice(total, min(count, total), replace=False)
    n, rest = np.divmod(flat, out_h * out_w)
    oh, ow = np.divmod(rest, out_w)
    # each tap's row and column in the unpadded input; taps on the padding read zero
    rows = ((oh * sh - top)[:, None] + np.arange(kh) * dh)[:, :, None]
    cols = ((ow * sw - left)[:, None] + np.arange(kw) * dw)[:, None, :]
    inside = ((rows >= 0) & (rows < height) & (cols >= 0) & (cols < width)).reshape(len(flat), -1)
    where = (n[:, None, None] * height * width + np.clip(rows, 0, height - 1) * width
             + np.clip(cols, 0, width - 1)).reshape(len(flat), -1)
    # (C, N * H * W): a view when there is one sample, as there mostly is
    planes = x.reshape(x.shape[0], x.shape[1], -1).transpose(1, 0, 2).reshape(x.shape[1], -1)
    taken = planes[:, where.ravel()] * inside.ravel()  # (C, m * taps)
    taps = kh * kw
    grouped = (taken.reshape(shape.groups, x.shape[1] // shape.groups, len(flat), taps)
               .transpose(0, 2, 1, 3).reshape(shape.groups, len(flat), -1))
    return np.ascontiguousarray(grouped, dtype=np.float32)


class Hessian:
    """E[x x^T] of one layer's input rows, per group: `positions` rows of every
    `every`-th feed given to add()."""

    def __init__(self, shape: Geometry, positions: int, seed: int, every: int = 1):
        self.shape, self.positions, self.every = shape, positions, every
        self.rng = np.random.default_rng(seed)
        self.sum, self.rows, self.pending, self.offered = None, 0, [], 0

    @classmethod
    def budgeted(cls, shape: Geometry, width: int, feeds: int, seed: int) -> "Hessian":
        """One that takes at most HESSIAN_FEEDS of `feeds`, spread over them, and the
        rows from each that spread the layer's row budget over those."""
        every = -(-feeds // HESSIAN_FEEDS) if feeds else 1
        taken = -(-feeds // every) if feeds else 1
        rows = int(np.clip(ROWS_PER_INPUT * width, MIN_ROWS, MAX_ROWS))
        return cls(shape, -(-rows // taken), seed, every)

    def add(self, x: np.ndarray) -> None:
        self.offered += 1
        if (self.offered - 1) % self.every:
            return
        self.pending.append(patches(x, self.shape, self.positions, self.rng))
        if sum(rows.shape[1] for rows in self.pending) >= FLUSH_ROWS:
            self._flush()

    def _flush(self) -> None:
        """One product over the rows of several feeds: a few feeds' rows of a wide layer
        are too few for BLAS to run at speed, and each sum is a width^2 addition."""
        if not self.pending:
            return
        rows = np.concatenate(self.pending, axis=1)
        self.pending = []
        # one group: einsum's BLAS route is ~5x numpy's matmul of a transposed view here
        product = (np.einsum("gmi,gmj->gij", rows, rows, optimize=True)
                   if self.shape.groups == 1 else np.matmul(rows.transpose(0, 2, 1), rows))
        self.sum = product if self.sum is None else self.sum + product
        self.rows += rows.shape[1]

    def mean(self) -> np.ndarray | None:
        self._flush()
        return None if self.sum is None else self.sum.astype(np.float64) / max(self.rows, 1)


def _inverse_factor(h: np.ndarray) -> np.ndarray | None:
    """Upper Cholesky factor U of H^-1 (H^-1 = U^T U), per group, H damped first (a dead
    input, always zero, gets a unit diagonal and its weight is simply rounded); None when
    H is not finite or stays singular at 100x the damping.

    One Cholesky of H itself, in float64: with J the order-reversing permutation and
    J H J = L L^T, U = J L^-1 J. (Inverting H and then factoring H^-1 in float32 failed
    as "not positive definite" on EfficientNet-Lite0 with 128 feeds.)"""
    if not np.all(np.isfinite(h)):
        return None
    index = np.arange(h.shape[1])
    diagonal = h[:, index, index].copy()
    diagonal[diagonal <= 0] = 1.0
    scale = diagonal.mean(axis=1, keepdims=True)
    for damping in (DAMPING, 10 * DAMPING, 100 * DAMPING):
        damped = h.copy()
        damped[:, index, index] = diagonal + damping * scale
        try:
            lower = np.linalg.cholesky(damped[:, ::-1, ::-1])
        except np.linalg.LinAlgError:
            continue
        return np.ascontiguousarray(np.linalg.inv(lower)[:, ::-1, ::-1])
    return None


def gptq(weight: np.ndarray, h: np.ndarray, step: np.ndarray, zero: np.ndarray,
         limits: tuple[int, int]) -> np.ndarray:
    """The integers for `weight` (groups, outputs per group, inputs per group), each output
    channel on its own grid (`step`, `zero`: (groups, outputs per group, 1)), rounded
    against H (groups, inputs, inputs). Returns integers in `weight`'s shape, or None
    where H cannot be factored (the caller keeps nearest rounding)."""
    factor = _inverse_factor(h)
    if factor is None:
        return None
    w = weight.astype(np.float64).copy()
    integers = np.zeros_like(w)
    width = w.shape[2]
    for start in range(0, width, BLOCK):
        stop = min(start + BLOCK, width)
        errors = np.zeros(w.shape[:2] + (stop - start,))
        for i in range(start, stop):
            q = np.clip(np.round(w[:, :, i:i + 1] / step) + zero, *limits)
            integers[:, :, i:i + 1] = q
            pivot = factor[:, i, i][:, None, None]
            error = (w[:, :, i:i + 1] - (q - zero) * step) / pivot
            w[:, :, i:stop] -= error * factor[:, None, i, i:stop]
            errors[:, :, i - start] = error[:, :, 0]
        w[:, :, stop:] -= np.matmul(errors, factor[:, start:stop, stop:])
    return integers


def _inputs_by_outputs(node) -> bool:
    """A Gemm without transB holds its weight as (inputs, outputs), not (outputs, inputs)."""
    return node.op_type == "Gemm" and not attr(node, "transB", 0)


def _width(node, weight_shape: tuple) -> int:
    """Inputs per group of a layer: a Conv's Cin/groups * kernel taps, a Gemm's inputs."""
    if node.op_type == "Gemm":
        return weight_shape[0] if _inputs_by_outputs(node) else weight_shape[1]
    return int(np.prod(weight_shape[1:]))


def hessians(float_model, nodes: list, feeds: int) -> list[Hessian | None]:
    """A Hessian accumulator per float Conv/Gemm node, for a pass over `feeds` feeds
    (None where this module does not round, or the layer is wider than MAX_WIDTH); each
    with its own seed and as many rows as its width needs: a 9-wide depthwise H is well
    estimated from far fewer rows than a 1152-wide one."""
    shapes = {i.name: tuple(i.dims) for i in float_model.graph.initializer}
    found = []
    for seed, node in enumerate(nodes):
        shape, width = geometry(node), _width(node, shapes[node.input[1]])
        found.append(None if shape is None or width > MAX_WIDTH
                     else Hessian.budgeted(shape, width, feeds, seed))
    return found


@dataclass(frozen=True)
class RoundingReport:
    layers_rounded: int
    weights_changed: float  # the share of integer weights that differ from nearest rounding
    seconds: float


def round_weights(seen, qdq, float_model) -> RoundingReport:
    """GPTQ-round the int8 weights of every layer in `seen` (fast_bias.LayerPass, taken
    with hessians=True) in `qdq`, in memory; `seen.pairs` then hold the new W_q, so a
    bias correction made from `seen` afterwards corrects the rounded weights."""
    from onnx import numpy_helper
    started = time.perf_counter()
    inits = {i.name: i for i in qdq.graph.initializer}
    producer = {o: n for n in qdq.graph.node for o in n.output}
    floats = {i.name: i for i in float_model.graph.initializer}
    rounded, changed, total = 0, 0, 0
    for k, ((layer, twin), hessian) in enumerate(zip(seen.pairs, seen.hessians)):
        h = hessian.mean() if hessian is not None else None
        dq = producer[layer.node.input[1]]
        grid = quantized(dq, inits)
        new = None if h is None else _rounded(layer.node, grid, array(floats, twin.input[1]), h)
        if new is None:
            continue
        inits[dq.input[0]].CopyFrom(numpy_helper.from_array(new, dq.input[0]))
        rounded_grid = dataclasses.replace(grid, integers=new)
        seen.pairs[k] = (dataclasses.replace(layer, weight_q=rounded_grid.values()), twin)
        rounded, total = rounded + 1, total + new.size
        changed += int((new != grid.integers).sum())
    return RoundingReport(rounded, round(changed / max(total, 1), 4),
                          time.perf_counter() - started)


def _rounded(node, grid: Quantized, weight: np.ndarray, h: np.ndarray) -> np.ndarray | None:
    """The new integers of one layer on `grid` (its nearest-rounded weights), in the
    layout of its weight initializer; None where its scales do not run along its outputs
    or its H cannot be factored."""
    flipped = _inputs_by_outputs(node)  # then rounded as (outputs, inputs)
    w, axis = (weight.T, 1) if flipped else (weight, 0)
    if grid.scale.size > 1 and grid.scale.shape[axis] != grid.scale.size:
        return None
    groups = h.shape[0]
    step, zero = (np.broadcast_to(v.reshape(-1), (w.shape[0],)).reshape(groups, -1, 1)
                  for v in (grid.scale, grid.zero))
    # the integer range quantize_static used (symmetric [-127, 127], 7-bit with
    # reduce_range): nearest rounding reaches its ends at each channel's extreme
    limits = (int(grid.integers.min()), int(grid.integers.max()))
    found = gptq(w.reshape(groups, w.shape[0] // groups, -1), h, step, zero, limits)
    if found is None:
        return None
    found = found.reshape(w.shape)
    return (found.T if flipped else found).astype(grid.integers.dtype)
