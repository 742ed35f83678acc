"""fp16 conversion of ONNX models (for GPU targets) with onnxruntime's float16 converter."""
from __future__ import annotations

from collections import Counter
from pathlib import Path


def convert_fp16(source: Path, target: Path, config) -> dict:
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = onnx.load(str(source))
    # keep_io_types: float32 inputs/outputs with Casts inside, so callers feed what they
    # fed the FP32 model; the converter's default block list keeps ops that have no fp16
    # kernel (e.g. Resize modes, Range) in float32.
    converted = convert_float_to_float16(model, keep_io_types=config.keep_io_types)
    onnx.save(converted, str(target))
    kinds = Counter(onnx.TensorProto.DataType.Name(i.data_type).lower()
                    for i in converted.graph.initializer)
    io = {v.name: onnx.TensorProto.DataType.Name(v.type.tensor_type.elem_type).lower()
          for v in [*converted.graph.input, *converted.graph.output]}
    return {"keep_io_types": config.keep_io_types, "initializer_types": dict(kinds), "io_types": io}
