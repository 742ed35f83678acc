"""GPTQ rounding (gptq.py) of the int8 weights of a full-int8 .tflite file's
CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED ops, from the pass of the float file
that the fast bias correction makes (fast_correction/tflite.py); and the pass's TFLite backend.

The ONNX rounding's pieces, for TFLite's layouts: each layer's float input (NHWC) is
read as NCHW so that hessian.patches samples its rows, and each weight is brought to
(groups, outputs per group, inputs per group) in the order of those rows:

    CONV_2D            OHWI  -> O, (I, kh, kw)    groups = input channels / I
    DEPTHWISE_CONV_2D  1HWC  -> C*M, (kh, kw)     groups = input channels (M outputs each)
    FULLY_CONNECTED    [out, in]                  one group

ai-edge-quantizer's scales and zero points stay: only the integers change, written in
place into the weight buffers of the file's bytes.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np

from compress.quant.hessian import MAX_WIDTH, Geometry, Hessian
from compress.quant.passes.gptq_rounding.gptq import gptq_by_outputs
from compress.quant.tflite.graph import buffer_views, schema


class Backend:
    def title(self, settings) -> str:
        return "GPTQ rounding"

    def apply(self, work) -> dict:
        """Round the weights of tflite_candidates.TfliteLayers `work` in its bytes; its
        plans then hold the new integers."""
        work.plans, report = round_weights(work.model, work.plans, work.hessians, work.weights,
                                           work.memo)
        work.seconds += report.seconds
        return {"layers_rounded": report.layers_rounded,
                "weights_changed": report.weights_changed}


@dataclass(frozen=True)
class TfliteRounding:
    layers_rounded: int
    weights_changed: float  # the share of integer weights that differ from before
    seconds: float


def _geometry(plan) -> Geometry:
    """How hessian.patches turns the layer's NCHW input into rows."""
    if plan.fully_connected:
        return Geometry(groups=1)
    taps = plan.taps
    return Geometry(_groups(plan), taps.kernel, taps.stride, (*taps.pad, *taps.pad_after),
                    taps.dilation)


def _groups(plan) -> int:
    """A conv's groups (depthwise: one per input channel)."""
    channels = plan.input_shape[2]
    return channels if plan.depthwise else channels // plan.integers.shape[3]


def _by_outputs(weight: np.ndarray, plan) -> np.ndarray:
    """The weight as (outputs, inputs per group), inputs in hessian.patches' row order."""
    if plan.fully_connected:
        return weight
    if plan.depthwise:  # 1HWC -> C*M, kh*kw
        return weight[0].transpose(2, 0, 1).reshape(weight.shape[3], -1)
    return weight.transpose(0, 3, 1, 2).reshape(weight.shape[0], -1)  # OHWI -> O, I*kh*kw


def _in_layout(rows: np.ndarray, plan) -> np.ndarray:
    """_by_outputs undone."""
    shape = plan.integers.shape
    if plan.fully_connected:
        return rows
    if plan.depthwise:
        return rows.reshape(shape[3], shape[1], shape[2]).transpose(1, 2, 0)[None]
    return rows.reshape(shape[0], shape[3], shape[1], shape[2]).transpose(0, 2, 3, 1)


def _width(plan) -> int:
    """Inputs per group: a depthwise channel's kh*kw taps, a conv's I*kh*kw, an FC's in."""
    shape = plan.integers.shape
    return shape[1] * shape[2] if plan.depthwise else int(np.prod(shape[1:]))


def hessians(plans: list, feeds: int) -> dict[int, Hessian]:
    """An accumulator per float weight tensor (layers of several int8 files quantized
    from one float file share it), none for a layer wider than MAX_WIDTH."""
    found = {}
    for seed, plan in enumerate(plans):
        if plan.weight not in found and _width(plan) <= MAX_WIDTH:
            found[plan.weight] = Hessian.budgeted(_geometry(plan), _width(plan), feeds, seed)
    return found


def as_rows_input(x: np.ndarray, plan) -> np.ndarray:
    """The layer's float input as hessian.patches reads it: NCHW, or rows of inputs."""
    return x if plan.fully_connected else x.transpose(0, 3, 1, 2)


def _rounded(plan, weight: np.ndarray, h: np.ndarray) -> np.ndarray | None:
    """The layer's new integers, in its layout; None where H cannot be factored or its
    scales do not run along its outputs."""
    rows = _by_outputs(weight.astype(np.float64), plan)
    if any(v.size not in (1, rows.shape[0]) for v in plan.grid):
        return None
    found = gptq_by_outputs(rows, h, *plan.grid, plan.integers)
    return None if found is None else _in_layout(found, plan)


def round_weights(model: bytearray, plans: list, hessians_: dict, weights: dict,
                  memo: dict) -> tuple:
    """GPTQ-round each layer with an H (`hessians_`, by float weight tensor) against its
    float weight (`weights`, likewise), writing the integers into `model`'s bytes.
    `memo` keeps what was found for a weight on a grid: another file with the same
    weight integers and scales (only its activation ranges differ) takes it as is.
    Returns the plans with their new integers, and a report."""
    started = time.perf_counter()
    shared = _shared_buffers(model)
    rounded, changed, total, new_plans = 0, 0, 0, []
    for plan in plans:
        found = None
        if plan.weight in hessians_ and plan.weight_buffer not in shared:
            key = (plan.weight, plan.integers.tobytes(), *(v.tobytes() for v in plan.grid))
            if key not in memo:
                memo[key] = _rounded(plan, weights[plan.weight], hessians_[plan.weight].mean())
            found = memo[key]
        view = None if found is None else buffer_views(model, [plan.weight_buffer], found.dtype)[0]
        if view is None or view.size != found.size:  # not stored as plain int8 values
            new_plans.append(plan)
            continue
        view[:] = found.reshape(-1)
        rounded, total = rounded + 1, total + found.size
        changed += int((found != plan.integers).sum())
        new_plans.append(replace(plan, integers=found))
    return new_plans, TfliteRounding(rounded, round(changed / max(total, 1), 4),
                                     time.perf_counter() - started)


def _shared_buffers(model: bytearray) -> set[int]:
    """Buffers more than one tensor reads: rounding one layer's would change another's."""
    root = schema().Model.GetRootAs(model, 0)
    graph, counts = root.Subgraphs(0), {}
    for i in range(graph.TensorsLength()):
        buffer = graph.Tensors(i).Buffer()
        counts[buffer] = counts.get(buffer, 0) + 1
    return {buffer for buffer, count in counts.items() if count > 1 and buffer > 0}
