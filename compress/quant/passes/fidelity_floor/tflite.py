"""Mixed precision for a full-int8 TFLite file, the fidelity floor's TFLite backend: the
recovery runs as onnx.py runs it on ONNX, with
the same search (mixed_precision.recover: the groups that cost the outputs most given
more bits one at a time, re-scored after each, until the floor holds; then each move
taken back where the floor holds without it) and the same record.

A group is one int8 activation of the file: the tensor, the op that makes it and the
ops that read it. ai-edge-quantizer quantizes per op (its recipe matches an op by its
output tensors' names), and where an int16 op meets an int8 one it puts a QUANTIZE op
between them: to carry one tensor in 16 bits, its producer and every reader compute
with 16-bit activations (int16x8: int8 weights, an int64 bias). Widening the producer
alone requantizes its output to int8 for the readers; widening the readers alone
requantizes the int8 tensor up (on the test's model, tests/compress/quant/
test_tflite_recovery.py, both leave the outputs at -0.5 dB, as int8 does; the group
together lifts them to 32 dB). Where an op of the group
has no int16 activations in ai-edge-quantizer (HARD_SWISH), its group's step up is float:
those ops are left out of the recipe, between DEQUANTIZE and QUANTIZE ops. Each mixed
file is quantized again from the ranges the one calibration pass found (no calibration
per step), then made into the candidate the check kept (GPTQ rounding, bias correction:
tflite_candidates.variants, which round and correct the int16x8 layers too: their bias is
int64, their inputs int16).

A group's cost, as on ONNX, is measured at the outputs: the float file with that one
tensor quantized as the int8 file quantizes it (a QUANTIZE and a DEQUANTIZE op after
it), the outputs' SQNR against the float file's on a few of the check's feeds.
"""
from __future__ import annotations

import copy
import os
import re
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional

import numpy as np

from compress.quant.passes.check import spread
from compress.quant.passes.fidelity_floor.floor import held
from compress.quant.tflite.graph import builtin_code, schema

# The groups moved at most: each move quantizes the model again, makes the check's
# candidate of it and scores it on the check's feeds, and taking it back as much again
MAX_STEPS = 16
# Where the floor is out of reach, a move is taken back unless the outputs lose at least
# this much without it: an int16x8 op runs on LiteRT's reference kernels, outside XNNPACK
MIN_GAIN_DB = 0.5
# The check's feeds each group's cost alone is measured on: one run of the float file
# per group and feed; the costs only order the moves
RANK_FEEDS = 4


class Backend:
    record = "fidelity_floor"

    def apply(self, run) -> dict:
        return held(run, "int8", recover)


@dataclass(frozen=True)
class Group:
    """One int8 activation of the file: `tensor` (its name in the float file and the
    int8 one), made by op `producer` ("op <index in the float file>") of type `op`;
    `ops`, the recipe entries that give it more bits: (scope regex, ai-edge-quantizer's
    op name) of its producer and readers. `bits`: 8, or 16 where one of those ops has no
    int16 activations in ai-edge-quantizer, so that its step up
    (mixed_precision.recover) is float."""
    tensor: str
    producer: str
    op: str
    ops: tuple
    bits: int

    def words(self) -> str:
        """'the output of op 2 (CONV_2D): conv2d_1' for the record and the report."""
        return f"the output of {self.producer} ({self.op}): {self.tensor}"


@lru_cache(maxsize=None)
def _widens(op: str) -> bool:
    """Whether ai-edge-quantizer takes 16-bit activations for `op`."""
    from ai_edge_quantizer import recipe_manager
    from ai_edge_quantizer.qtyping import TFLOperationName
    try:
        recipe_manager.RecipeManager().add_static_config(
            ".*", TFLOperationName[op], activation_num_bits=16, weight_num_bits=8)
    except ValueError:
        return False
    return True


def _entry(model, graph, op) -> Optional[tuple[str, str]]:
    """(scope regex, op name) of `op` in ai-edge-quantizer's recipe; None for an op it
    has no name for (a custom op)."""
    from ai_edge_quantizer.utils import tfl_flatbuffer_utils as fb
    name = fb.TFL_OP_CODE_TO_NAME.get(builtin_code(model, op))
    if name is None:
        return None
    return "^" + re.escape(fb.get_op_scope(op, graph.tensors)) + "$", name.name


def read(content: bytes):
    """A .tflite file as a mutable object (ModelT), its buffers inline as numpy bytes."""
    from ai_edge_litert.tools import flatbuffer_utils
    model = flatbuffer_utils.read_model_from_bytearray(bytearray(content))
    for buffer in model.buffers:  # packed as numpy vectors (byte by byte otherwise)
        if buffer.data is not None and not isinstance(buffer.data, np.ndarray):
            buffer.data = np.frombuffer(bytes(buffer.data), np.uint8)
    return model


def int8_grids(quantized) -> dict[str, tuple[float, int]]:
    """The int8 activations of the quantized file (ModelT): name -> (scale, zero point)."""
    graph, grids = quantized.subgraphs[0], {}
    for tensor in graph.tensors:
        q = tensor.quantization
        if tensor.type == schema().TensorType.INT8 and q is not None and q.scale is not None \
                and len(q.scale) == 1:   # an activation's grid (weights are per channel)
            grids[tensor.name.decode()] = (float(q.scale[0]), int(q.zeroPoint[0]))
    return grids


def groups(float_model, grids: dict) -> list[Group]:
    """The groups of the float file (ModelT) whose tensor is int8 in the quantized file
    (`grids`), in graph order; the model's inputs and outputs, whose types the file's
    interface fixes, left out."""
    graph = float_model.subgraphs[0]
    ends = set(graph.inputs) | set(graph.outputs)
    readers: dict[int, list] = {}
    for op in graph.operators:
        for index in op.inputs:
            readers.setdefault(index, []).append(op)
    found = []
    for position, op in enumerate(graph.operators):
        for index in op.outputs:
            name = graph.tensors[index].name.decode()
            entries = [_entry(float_model, graph, o) for o in [op, *readers.get(index, [])]]
            if index in ends or name not in grids or entries[0] is None:
                continue
            entries = tuple(dict.fromkeys(e for e in entries if e is not None))
            bits = 8 if all(_widens(kind) for _, kind in entries) else 16
            found.append(Group(name, f"op {position}", entries[0][1], entries, bits))
    return found


def _tensor(source, suffix: bytes, kind: int, grid: Optional[tuple[float, int]]):
    """A new tensor shaped as `source`, of TensorType `kind`, on `grid` where given."""
    graphs = schema()
    tensor = graphs.TensorT()
    tensor.name, tensor.type, tensor.buffer = source.name + suffix, kind, source.buffer
    tensor.shape, tensor.shapeSignature = source.shape, source.shapeSignature
    if grid is not None:
        tensor.quantization = graphs.QuantizationParametersT()
        tensor.quantization.scale, tensor.quantization.zeroPoint = [grid[0]], [grid[1]]
    return tensor


def _op(code: int, inputs: list, outputs: list):
    op = schema().OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = code, inputs, outputs
    return op


def _reading(op, old: int, new: int):
    """`op`, reading tensor `new` where it read `old` (a copy; `op` itself unchanged)."""
    if old not in op.inputs:
        return op
    twin = copy.copy(op)
    twin.inputs = [new if i == old else i for i in op.inputs]
    return twin


def alone(model, index: int, grid: tuple[float, int]) -> bytes:
    """The float file (ModelT `model`, left as it was) with tensor `index` quantized to
    int8 on `grid` and back for its readers: a QUANTIZE and a DEQUANTIZE op after the
    op that makes it."""
    from ai_edge_litert.tools import flatbuffer_utils

    from compress.quant.tflite.normalise import _opcode
    graphs, graph = schema(), model.subgraphs[0]
    tensors, ops = graph.tensors, graph.operators
    at = len(tensors)
    added = [_op(_opcode(model, graphs.BuiltinOperator.QUANTIZE, 2), [index], [at]),
             _op(_opcode(model, graphs.BuiltinOperator.DEQUANTIZE, 2), [at], [at + 1])]
    after = next(i for i, op in enumerate(ops) if index in op.outputs) + 1
    rewired = [_reading(op, index, at + 1) for op in ops]
    graph.tensors = [*tensors, _tensor(tensors[index], b"/int8", graphs.TensorType.INT8, grid),
                     _tensor(tensors[index], b"/dequantized", graphs.TensorType.FLOAT32, None)]
    graph.operators = rewired[:after] + added + rewired[after:]
    try:
        return bytes(flatbuffer_utils.convert_object_to_bytearray(model))
    finally:
        graph.tensors, graph.operators = tensors, ops


def ranked(fp32: bytes, kept: bytes, feeds: list[dict], reference: list,
           folder: Path) -> list[tuple[Group, Optional[float]]]:
    """The groups of the int8 file `kept` with their cost (the outputs' SQNR with that
    tensor alone quantized, on `feeds`), costliest first; one whose cost could not be
    measured (None) last."""
    float_model, grids = read(fp32), int8_grids(read(kept))
    index = {t.name.decode(): i for i, t in enumerate(float_model.subgraphs[0].tensors)}
    costs = [(group, _cost(float_model, (index[group.tensor], grids[group.tensor]),
                           (feeds, reference), folder))
             for group in groups(float_model, grids)]   # one file held at a time
    return sorted(costs, key=lambda c: np.inf if c[1] is None else c[1])


def _cost(float_model, tensor: tuple, scored: tuple, folder: Path) -> Optional[float]:
    """The outputs' SQNR on `scored` (feeds, reference) with `tensor` (index, grid) alone
    quantized; None where that file cannot be made or run (the group is tried last)."""
    from compress.quant.passes.tflite_backend import scores
    try:
        return scores({"": alone(float_model, *tensor)}, *scored, folder)[""]
    except Exception:  # noqa: BLE001 - LiteRT's and the flatbuffer writer's errors vary
        return None


def recipe(levels: dict) -> dict[str, tuple]:
    """export.tflite.quantize_mixed's `ops` for `levels` ({Group: 16-bit or float}): an
    op of several groups takes the most bits (float over 16)."""
    from compress.quant.passes.fidelity_floor.mixed_precision import EIGHT_BIT, FLOAT
    ops: dict[str, tuple] = {}
    for group, level in levels.items():
        for scope, op in group.ops if level != EIGHT_BIT else ():
            if scope not in ops or level == FLOAT:
                ops[scope] = (op, None if level == FLOAT else 16)
    return ops


@dataclass(frozen=True)
class Mixer:
    """Makes the file of a set of levels: ai-edge-quantizer on the float file with the
    ranges the kept file was quantized with, then the check's kept candidate of it."""
    run: object           # tflite_backend.TfliteRun
    folder: Path

    def __call__(self, levels: dict) -> bytes:
        from export.tflite import converter_logs_hidden, quantize_mixed
        run, path = self.run, self.folder / "mixed.tflite"
        with converter_logs_hidden():
            quantize_mixed(run.fp32, run.ranges[run.kept[0]], path, recipe(levels))
        return self.finished(path)

    def finished(self, path: Path) -> bytes:
        """The file at `path` as the check's kept candidate was made: GPTQ-rounded and
        corrected where it was, corrected sequentially where the settings ask."""
        from compress.quant.passes.tflite_candidates import variants
        run, pair, threads = self.run, self.run.kept[1:], os.cpu_count() or 1
        feeds = spread(run.calibration, run.settings.samples)
        if pair != ("nearest", False):
            made, _ = variants(run.fp32.read_bytes(), {"": path.read_bytes()}, feeds, [pair],
                               threads=threads)
            path.write_bytes(made[("", *pair)])
        if run.settings.bias_method() == "sequential":
            from compress.quant.passes.sequential_correction.tflite import correct_biases
            correct_biases(run.fp32, path, feeds, threads=threads)
        return path.read_bytes()


def recover(run, kept: bytes, score: float):
    """mixed_precision.recover on the TFLite file `kept` (its check score `score`) of
    `run` (tflite_backend.TfliteRun): the groups ranked on RANK_FEEDS of the check's
    feeds, each step scored on all of them."""
    from compress.quant.passes.fidelity_floor import mixed_precision as mp
    feeds, reference = run.check_feeds()
    picks = spread(list(range(len(feeds))), RANK_FEEDS)
    with tempfile.TemporaryDirectory(dir=run.target.parent, prefix=".recovery-") as folder:
        costs = ranked(run.fp32.read_bytes(), kept, [feeds[i] for i in picks],
                       [reference[i] for i in picks], Path(folder))
        aim = mp.Greedy(run.settings.floor_db, MIN_GAIN_DB, MAX_STEPS)
        return mp.recover((kept, score), costs, Mixer(run, Path(folder)), run.score_of, aim)
