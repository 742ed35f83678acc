"""The one INT8 runner, for both formats: from the passes the settings turn on, the
one float pass's needs; then, in this order,

    the passes on the float model     (a new float model: cross-layer equalization)
    the passes on the ranges          (activation ranges the quantizer reads), or the
                                      one float pass where it finds the ranges too
    the quantizer                     (quantize_static, ai-edge-quantizer's files)
    the passes on the quantized layers, from the one float pass's layer statistics,
                                      and the check over the candidates they make
    the passes on the quantized graph, on the model the check kept

A format backend (onnx_backend.OnnxRun, tflite_backend.TfliteRun) holds one run: what it
quantizes, with what, and the record it writes; it does each step for its format, and
calls each pass's backend for that format.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import reduce

from compress.quant.passes.base import (FLOAT_MODEL, GRAPH, LAYERS, RANGES, Int8Pass, Needs,
                                        ordered)


@dataclass(frozen=True)
class Plan:
    """The passes a run makes, in declared order; what the one float pass takes for
    them; whether the check judges the passes on the quantized layers (the settings
    leave them to it) or they are applied as asked."""
    passes: tuple[Int8Pass, ...]
    needs: Needs
    checked: bool

    def at(self, when: str) -> list[Int8Pass]:
        return [p for p in self.passes if p.when == when]


def plan(settings, fmt: str) -> Plan:
    passes = ordered(settings, fmt)
    checked = any(p.checked(settings) for p in passes if p.when == LAYERS)
    # the check scores its candidates against the float outputs
    needs = reduce(Needs.__or__, (p.needs(settings) for p in passes), Needs(outputs=checked))
    return Plan(tuple(passes), needs, checked)


def run(fmt) -> dict:
    """Quantize with the format backend `fmt` and every pass its settings turn on; the
    artifact's record of what was done."""
    made = plan(fmt.settings, fmt.name)
    for each in made.at(FLOAT_MODEL):
        fmt.rewrite(each)
    fmt.quantize(made.at(RANGES), made)
    fmt.check(made.at(LAYERS), made)
    for each in made.at(GRAPH):
        fmt.graph(each)
    return fmt.finish()
