"""The candidates of a full-int8 TFLite file: each file ai-edge-quantizer made (one per
range estimator) with the passes on the quantized layers a candidate names, from one run
of the float file over the feeds (fast_correction/tflite.py: float_pass) that serves every file.

A candidate is named by (file, rounding, corrected): "gptq" where GPTQ rounded it
(gptq_rounding/), corrected where the fast correction moved its biases
(fast_correction/); made in that order, the correction for the weights the rounding
left. A candidate shares its first passes' work with the others that start the same way.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from compress.quant.passes.base import PASSES


@dataclass
class TfliteLayers:
    """A candidate as the passes on the quantized layers change it: the file's bytes (in
    place) and its layers' plans, with what the float pass took for them."""
    model: bytearray
    plans: list            # fast_correction/tflite.py's plans, with the integers the file holds
    sums: list             # fast_correction/tflite.py's sums, per plan
    weights: dict          # float weights, by tensor
    hessians: dict         # H accumulators, by float weight tensor
    memo: dict             # GPTQ's integers found for a weight on a grid, for every file
    record: dict = field(default_factory=dict)   # what the passes did to it
    seconds: float = 0.0   # the rounding's time in this step (not its parent's)

    def copy(self) -> "TfliteLayers":
        return replace(self, model=bytearray(self.model), record=dict(self.record),
                       seconds=0.0)


def passes_of(pair: tuple) -> tuple:
    """The passes a candidate's (rounding, corrected) names, in the order they are made."""
    named = (("gptq_rounding", pair[0] == "gptq"), ("fast_correction", pair[1]))
    return tuple(PASSES[name] for name, wanted in named if wanted)


def _made(states: dict, passes: tuple) -> TfliteLayers:
    """The candidate `passes` make, each step made once (`states`: by the passes so far)."""
    for step in range(1, len(passes) + 1):
        if passes[:step] not in states:
            state = states[passes[:step - 1]].copy()
            state.record.update(passes[step - 1].backends["tflite"].apply(state))
            states[passes[:step]] = state
    return states[passes]


def variants(float_bytes: bytes, files: dict[str, bytes], feeds: list[dict], wanted: list[tuple],
             *, threads: int = 2, advance: Callable[[int], None] = lambda n: None
             ) -> tuple[dict, dict]:
    """Each int8 model in `files` (the float model quantized in different ways) as each
    (rounding, corrected) pair in `wanted` asks, from one run of the float model over
    `feeds`: rounding "nearest" (as it is) or "gptq"; corrected: its biases moved by the
    fast correction. Returns the bytes by (file name, rounding, corrected), and a report
    whose "candidates" holds what was done to each, by the same key."""
    from compress.quant.passes.gptq_rounding import tflite as tflite_rounding
    from compress.quant.passes.fast_correction.tflite import float_pass, plans
    from compress.quant.tflite.graph import correctable_layers
    started = time.perf_counter()
    found = {name: plans(float_bytes, content, correctable_layers(float_bytes, content), threads)
             for name, content in files.items()}
    keys = [(name, *pair) for name in files for pair in wanted]
    if not any(found.values()):
        return ({key: files[key[0]] for key in keys},
                {"samples": len(feeds), "method": "fast",
                 "candidates": {key: {"layers_corrected": 0} for key in keys}})
    rounding = any(pair[0] == "gptq" for pair in wanted)
    hessians = tflite_rounding.hessians([p for ps in found.values() for p in ps], len(feeds)) \
        if rounding else {}
    sums, weights = float_pass(float_bytes, found, feeds, threads, advance, hessians)
    made, done, memo, seconds = {}, {}, {}, 0.0
    for name, content in files.items():
        states = {(): TfliteLayers(bytearray(content), found[name], sums[name], weights,
                                   hessians, memo)}
        for pair in wanted:
            state = _made(states, passes_of(pair))
            made[(name, *pair)], done[(name, *pair)] = bytes(state.model), dict(state.record)
        seconds += sum(state.seconds for state in states.values())
    report = {"samples": len(feeds), "candidates": done}
    if rounding:
        report["rounding_seconds"] = round(seconds, 3)
    return made, {**report, "seconds": round(time.perf_counter() - started, 3)}


def correct_biases_fast(float_path: Path, quantized_path: Path, feeds: list[dict], *,
                        threads: int = 2, advance: Callable[[int], None] = lambda n: None,
                        candidate: tuple[str, bool] = ("nearest", True)) -> dict:
    """Rewrite the int8 model at `quantized_path` in place from one run of the float
    model at `float_path` over `feeds` (`advance(1)` after each) into the `candidate`
    (rounding, corrected) that variants() names: its int8 weights GPTQ-rounded (rounding
    "gptq", gptq_rounding/tflite.py), then (corrected) its int32 biases corrected for the
    weights it then has."""
    key = ("", *candidate)
    made, report = variants(float_path.read_bytes(), {"": quantized_path.read_bytes()}, feeds,
                            [key[1:]], threads=threads, advance=advance)
    quantized_path.write_bytes(made[key])
    return {**{k: v for k, v in report.items() if k != "candidates"},
            **report["candidates"][key]}
