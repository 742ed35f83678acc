"""GPTQ rounding (gptq.py) of the int8 weights of a QDQ model's Conv and Gemm layers, and
the pass's ONNX backend. H comes from the float model's inputs of each layer
(compress/quant/hessian.py), in the pass that the fast bias correction already makes
(compress/quant/float_pass.py); quantize_static's scales and zero points stay.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np

from compress.quant.hessian import inputs_by_outputs
from compress.quant.passes.gptq_rounding.gptq import gptq_by_outputs
from compress.quant.qdq_nodes import Quantized, array, quantized


class Backend:
    record = "bias_correction"   # ONNX records what was done to the layers in one place
    # made in a second thread while the check scores the candidates without it (GPTQ is
    # the costly pass: 0.3-1.6 s on the corpus' CNNs), then scored once
    beside_check = True

    def title(self, settings) -> str:
        return "GPTQ rounding"

    def apply(self, work) -> dict:
        """Round the weights of onnx_backend.OnnxLayers `work`; its layer statistics then
        hold the new W_q, so a bias correction after it corrects the rounded weights."""
        report = round_weights(work.seen, work.model, work.float_model)
        return {"layers_rounded": report.layers_rounded,
                "weights_changed": report.weights_changed,
                "rounding_seconds": round(report.seconds, 3)}


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
        if hessian is None:
            continue  # a layer GPTQ does not round, or too wide
        dq = producer[layer.node.input[1]]
        grid = quantized(dq, inits)
        new = _rounded(layer.node, grid, array(floats, twin.input[1]), hessian.mean())
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
    flipped = inputs_by_outputs(node)  # then rounded as (outputs, inputs)
    w, axis = (weight.T, 1) if flipped else (weight, 0)
    if grid.scale.size > 1 and grid.scale.shape[axis] != grid.scale.size:
        return None
    found = gptq_by_outputs(w, h, grid.scale, grid.zero, grid.integers)
    if found is None:
        return None
    return found.T if flipped else found
