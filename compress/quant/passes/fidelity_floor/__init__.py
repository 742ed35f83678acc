"""The fidelity floor as an INT8 pass: on the quantized graph, after every other pass,
the model as kept is scored as the check scores (output SQNR of the worst output against
the float model on the check's feeds; the check's own score where it made one). At or
above `floor_db`, nothing more is done. Below it, with `recover` (the default), the
activation groups are ranked by what each costs the outputs alone, then given more
bits one at a time, costliest first: 16 bits over the same range, float (clipped to its
range) where 16 bits were not enough (where an op has no 16-bit kernel on TFLite),
re-scored after each, until the floor holds or MAX_STEPS groups were moved; then each
move is taken back where the floor holds without it. Every step is recorded under the
artifact's `fidelity_floor`, with the precision each group ended at. docs/int8.md, "The
fidelity floor and recovery"; docs/tflite.md, "The fidelity floor on TFLite files".

    floor.py            the rule, for both formats: score, recover below the floor, record
    onnx.py             a QDQ model's groups; the ONNX backend
    mixed_precision.py  the ONNX search: groups ranked, moved, taken back
    tflite.py           a full-int8 .tflite file's groups, remade by ai-edge-quantizer; the
                        TFLite backend
"""
from __future__ import annotations

from compress.quant.passes.base import GRAPH, Int8Pass, register_pass
from compress.quant.passes.fidelity_floor import onnx, tflite

FIDELITY_FLOOR = register_pass(Int8Pass(
    name="fidelity_floor", when=GRAPH, after=("sequential_correction", "hard_swish"),
    on=lambda settings: settings.floor_db is not None,
    backends={"onnx": onnx.Backend(), "tflite": tflite.Backend()}))
# Never refuses the tensor-by-tensor path (`asked` unset): that path is for models too
# large to hold several times, which the recovery's copies would be.
