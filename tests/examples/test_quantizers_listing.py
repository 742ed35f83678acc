"""examples/anchors/quantizers.py on a QDQ file quantize_static wrote: every activation
quantizer counted, none per channel, the depthwise convolutions told apart."""
from __future__ import annotations

import sys
from pathlib import Path

from tests.compress.quant.test_int8_techniques import _quantize, tiny  # noqa: F401

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "anchors"))
import quantizers  # noqa: E402


def test_the_listing_counts_quantizers_and_names_depthwise_inputs(tiny, tmp_path):
    import onnx

    path = _quantize(tiny["pre"], tmp_path / "int8.onnx", tiny["calibration"])
    graph = onnx.load(str(path)).graph
    weights = {i.name for i in graph.initializer}
    activations = [n for n in graph.node
                   if n.op_type == "QuantizeLinear" and n.input[0] not in weights]
    row = quantizers.describe(str(path)).split(" | ")
    assert row[1] == str(len(activations)) and row[2] == "0"
    assert "Conv (depthwise) 3" in row[3] and "Conv 4" in row[3]
