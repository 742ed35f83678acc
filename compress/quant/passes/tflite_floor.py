"""The fidelity floor on a full-int8 TFLite file, as an INT8 pass: recovery.py's pass
for the TFLite backend. On the quantized graph, after every other pass, the file as kept
is scored as the check scores (output SQNR of the worst output against the float file
on the check's feeds; the check's own score where it made one). At or above `floor_db`,
nothing more is done. Below it, with `recover` (the default), the int8 activations that
cost the outputs most get 16-bit activations (float where an op has none), one at a time,
by compress/quant/tflite/recovery.py; every step is recorded under the artifact's
`fidelity_floor`, in the ONNX pass's record. docs/tflite.md, "The fidelity floor on
TFLite files".
"""
from __future__ import annotations

from compress.quant.passes.base import GRAPH, Int8Pass, register_pass
from compress.quant.passes.recovery import held


class _Tflite:
    record = "fidelity_floor"

    def apply(self, run) -> dict:
        from compress.quant.tflite.recovery import recover
        return held(run, "int8", recover)


TFLITE_FLOOR = register_pass(Int8Pass(
    name="tflite_floor", when=GRAPH, after=("sequential_correction",),
    on=lambda settings: settings.floor_db is not None, backends={"tflite": _Tflite()}))
