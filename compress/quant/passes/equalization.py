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
        source = onnx.load(str(run.source))
        model, report = equalize(source)
        target = run.target.parent / "equalized.onnx"
        onnx.save(model, str(target))
        record = dataclasses.asdict(report)
        if not report.pairs:   # asked for on purpose: an unchanged model must say why
            record["said"] = nothing_said(source, report)
            run.ctx.progress.note(f"int8-static: equalize changed nothing: it {record['said']}")
        return target, record


def nothing_said(model, report) -> str:
    """Why cross-layer equalization found no pair: what stood between the convolutions
    where that is known (a ReLU6's bound, a hard-swish in any of its forms)."""
    from compress.quant.swish.sites import hard_swishes
    said = "found no Conv pair joined only by ReLU, LeakyRelu, PRelu or pooling"
    if report.skipped_bounded_clip:
        said += (f"; {report.skipped_bounded_clip} pair(s) through a bounded Clip (ReLU6) "
                 "left alone")
    swishes = hard_swishes(model)
    if swishes:
        said += (f"; {swishes} convolution output(s) go through hard-swish, which no scale "
                 "passes through (equalize_hard_swish rescales around it into a depthwise "
                 "convolution)")
    return said


EQUALIZATION = register_pass(Int8Pass(
    name="equalization", when=FLOAT_MODEL, on=lambda settings: settings.equalize,
    backends={"onnx": _Onnx()},
    asked=lambda settings: "equalize" if settings.equalize else None))
