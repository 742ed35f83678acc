"""The second moments H = E[x x^T] of each Conv / Gemm layer's inputs that GPTQ
rounding (passes/gptq_rounding/) rounds against, gathered in the float pass that fast bias
correction already makes (float_pass.py): per feed, a few output positions drawn at random
(seeded) and their input patches (im2col, padding and stride exact), so the cost does
not grow with the feature maps. Grouped and depthwise convolutions get one H per group
(a depthwise 3x3 channel: a 9x9 H).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from compress.quant.qdq_nodes import attr

# rows of H per layer, over all feeds: ROWS_PER_INPUT per input of the layer, within
# [MIN_ROWS, MAX_ROWS]. A row costs width^2 multiply-adds, so wide layers are what the
# cap bounds. A time budget, not a measured optimum: in a trial, up to 16 times the rows
# did not raise EfficientNet-Lite0's or the orientation classifier's calibration SQNR.
ROWS_PER_INPUT, MIN_ROWS, MAX_ROWS = 8, 1024, 2048
# Wider layers keep nearest rounding: H's rows, its factoring and GPTQ's column loop grow
# with width^2 to width^3. 1280 holds the classifiers of mobile CNNs (EfficientNet-Lite0's
# 1280-input Gemm) and leaves out 3x3 convs of 256 channels (2304 wide): rounding YOLOv8n's
# two of them added about a second to its stage (7.2 s against 6.0 s with the limit at
# 1152, one stage_time.py run each) and did not raise its SQNR (31.3 dB either way;
# docs/rounding.md). CREPE's 128x64 kernels (8192 wide) took longer than the rest of its
# stage.
MAX_WIDTH = 1280
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
    """The layer's Geometry, or None for what GPTQ does not round (3-D convs,
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
    # (C, N * H * W): a view when there is one sample, as there mostly is
    planes = x.reshape(x.shape[0], x.shape[1], -1).transpose(1, 0, 2).reshape(x.shape[1], -1)
    if shape.kernel == (1, 1) and shape.strides == (1, 1) and not any(shape.pads) \
            and shape.groups == 1:  # a pointwise conv: its rows are the input's positions
        return np.ascontiguousarray(planes[:, flat].T[None], dtype=np.float32)
    n, rest = np.divmod(flat, out_h * out_w)
    oh, ow = np.divmod(rest, out_w)
    # each tap's row and column in the unpadded input; taps on the padding read zero
    rows = ((oh * sh - top)[:, None] + np.arange(kh) * dh)[:, :, None]
    cols = ((ow * sw - left)[:, None] + np.arange(kw) * dw)[:, None, :]
    inside = ((rows >= 0) & (rows < height) & (cols >= 0) & (cols < width)).reshape(len(flat), -1)
    where = (n[:, None, None] * height * width + np.clip(rows, 0, height - 1) * width
             + np.clip(cols, 0, width - 1)).reshape(len(flat), -1)
    taken = planes[:, where.ravel()]  # (C, m * taps)
    if not inside.all():
        taken *= inside.ravel()
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
        # one group: numpy's 2-D dot of an array with its own transpose is BLAS's symmetric
        # product (half the work: 56 ms against einsum's 98 ms for 2048 x 2304 rows here);
        # a batched matmul of a transposed view is far slower for one wide group
        product = (np.dot(rows[0].T, rows[0])[None] if self.shape.groups == 1
                   else np.matmul(rows.transpose(0, 2, 1), rows))
        self.sum = product if self.sum is None else self.sum + product
        self.rows += rows.shape[1]

    def mean(self) -> np.ndarray | None:
        """E[x x^T] in float32, the precision GPTQ factors and rounds in."""
        self._flush()
        if self.sum is None:
            return None
        return self.sum / np.float32(max(self.rows, 1))


def inputs_by_outputs(node) -> bool:
    """A Gemm without transB holds its weight as (inputs, outputs), not (outputs, inputs)."""
    return node.op_type == "Gemm" and not attr(node, "transB", 0)


def _width(node, weight_shape: tuple) -> int:
    """Inputs per group of a layer: a Conv's Cin/groups * kernel taps, a Gemm's inputs."""
    if node.op_type == "Gemm":
        return weight_shape[0] if inputs_by_outputs(node) else weight_shape[1]
    return int(np.prod(weight_shape[1:]))


def hessians(float_model, nodes: list, feeds: int) -> list[Hessian | None]:
    """A Hessian accumulator per float Conv/Gemm node, for a pass over `feeds` feeds
    (None where GPTQ does not round, or the layer is wider than MAX_WIDTH); each
    with its own seed and as many rows as its width needs: a 9-wide depthwise H is well
    estimated from far fewer rows than a 1152-wide one."""
    shapes = {i.name: tuple(i.dims) for i in float_model.graph.initializer}
    found = []
    for seed, node in enumerate(nodes):
        shape, width = geometry(node), _width(node, shapes[node.input[1]])
        found.append(None if shape is None or width > MAX_WIDTH
                     else Hessian.budgeted(shape, width, feeds, seed))
    return found
