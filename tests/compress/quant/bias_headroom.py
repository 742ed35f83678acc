"""A pass made for the tests, and the example in docs/quantization-design.md of a pass
being one module: how close the int32 biases of the quantized graph come to overflowing
(equalizations scale biases up: swish_equalize.py bounds its scales by it), recorded in
the artifact's meta. Its declaration and its ONNX backend; no TFLite backend, so TFLite
runs leave it out. A pass in compress/quant/passes/ registers itself on import
(register_pass); the tests register this one only while they run."""
from __future__ import annotations

import numpy as np

from compress.quant.passes import GRAPH, Int8Pass


class _Onnx:
    record = "int32_bias_headroom"

    def apply(self, run) -> dict:
        """The int32 biases behind a DequantizeLinear in the model as kept, and the
        largest of them as a share of the int32 range."""
        import onnx
        from onnx import numpy_helper
        graph = onnx.load(str(run.target)).graph
        inits = {i.name: i for i in graph.initializer}
        biases = [numpy_helper.to_array(inits[n.input[0]]) for n in graph.node
                  if n.op_type == "DequantizeLinear" and n.input[0] in inits
                  and inits[n.input[0]].data_type == onnx.TensorProto.INT32]
        largest = max((int(np.abs(b.astype(np.int64)).max()) for b in biases if b.size),
                      default=0)
        return {"int32_biases": len(biases), "largest_share": largest / (2**31 - 1)}


# on the model the check kept, after every other pass on the graph; it needs nothing from
# the float pass, is not fitted (it changes nothing) and reads no setting
BIAS_HEADROOM = Int8Pass(name="bias_headroom", when=GRAPH, on=lambda settings: True,
                         backends={"onnx": _Onnx()}, after=("hard_swish",))
