"""Cross-layer equalization (compress/quant/equalize.py) as an INT8 pass: on the float
model, before quantizing, data-free; ONNX only. Asked for with `equalize: true`."""
from __future__ import annotations

import dataclasses

from compress.quant.passes.base import FLOAT_MODEL, Int8Pass, register_pass


class _Onnx:
    record = "equalization"

    def rewrite(self, run) -> tuple:
        """The float model equalized into the run's folder (the model quantize_static then
        takes, and the passes after it compare with), and the equalization's report."""
        import onnx

        from compress.quant.equalize import equalize
        model, report = equalize(onnx.load(str(run.source)))
        target = run.target.parent / "equalized.onnx"
        onnx.save(model, str(target))
        return target, dataclasses.asdict(report)


EQUALIZATION = register_pass(Int8Pass(
    name="equalization", when=FLOAT_MODEL, on=lambda settings: settings.equalize,
    backends={"onnx": _Onnx()},
    asked=lambda settings: "equalize" if settings.equalize else None))
