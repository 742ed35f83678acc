"""ONNX -> OpenVINO IR (model.xml + model.bin) with the `openvino` package's own converter,
weights kept in float32 or stored compressed to float16 (half the file; OpenVINO expands
them when it compiles the model). An INT8 QDQ ONNX file keeps its QuantizeLinear /
DequantizeLinear pairs as FakeQuantize-style nodes that OpenVINO's CPU plugin runs in int8.
"""
from __future__ import annotations

from pathlib import Path


def convert(onnx_path: Path, xml_path: Path, fp16_weights: bool) -> dict:
    """Write the IR; what it holds (opset, sizes) for the artifact's meta."""
    import openvino as ov

    model = ov.convert_model(str(onnx_path))
    ov.save_model(model, str(xml_path), compress_to_fp16=fp16_weights)
    weights = xml_path.with_suffix(".bin")
    return {"openvino": ov.get_version().split("-")[0], "ir_weights": "fp16" if fp16_weights
            else "fp32", "xml_bytes": xml_path.stat().st_size,
            "bin_bytes": weights.stat().st_size if weights.is_file() else 0}
