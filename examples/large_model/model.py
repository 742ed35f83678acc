"""A ~1 GB plain MatMul/Gemm ONNX model (a stack of large Linear layers) with its weights
in an external data file, and small calibration/evaluation sets, made with onnx and numpy
only. Weights are random (fixed seed): the model exists to measure memory, not accuracy.

Each weight is generated and written to the data file one layer at a time, so building
the model never holds more than one layer in memory.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

HIDDEN = 4096          # 15 layers of 4096 x 4096 float32: 251.7M parameters, 1.007 GB
LAYERS = 15
TOKENS = 8             # rows per call (the input is [TOKENS, HIDDEN])
ALIGN = 4096           # page-aligned tensors in the data file, as onnx itself writes them


def _external(name: str, array: np.ndarray, data, location: str):
    """A TensorProto that points at `array`'s bytes appended (aligned) to `data`."""
    from onnx import TensorProto, helper
    pad = -data.tell() % ALIGN
    data.write(b"\0" * pad)
    offset = data.tell()
    data.write(np.ascontiguousarray(array).tobytes())
    tensor = TensorProto(name=name, data_type=helper.np_dtype_to_tensor_dtype(array.dtype),
                         dims=array.shape, data_location=TensorProto.EXTERNAL)
    for key, value in (("location", location), ("offset", str(offset)),
                       ("length", str(array.nbytes))):
        tensor.external_data.add(key=key, value=value)
    return tensor


def _layer(index: int, rng, data, location: str, last: bool) -> tuple[list, list]:
    """(nodes, initializers) of Linear layer `index`: even layers as Gemm(transB=1) with
    a torch-style [out, in] weight, odd ones as MatMul + Add with an [in, out] weight
    (the two forms exporters write); ReLU after every layer but the last."""
    from onnx import helper
    # He initialisation keeps the activations' scale roughly constant through the ReLUs
    weight = (rng.standard_normal((HIDDEN, HIDDEN), dtype=np.float32)
              * np.float32(np.sqrt(2.0 / HIDDEN)))
    bias = (rng.standard_normal(HIDDEN, dtype=np.float32) * np.float32(0.01))
    x, y = f"h{index}", ("y" if last else f"z{index}")
    w, b = f"layer{index}.weight", f"layer{index}.bias"
    inits = [_external(w, weight, data, location), _external(b, bias, data, location)]
    if index % 2 == 0:
        nodes = [helper.make_node("Gemm", [x, w, b], [y], name=f"layer{index}", transB=1)]
    else:
        nodes = [helper.make_node("MatMul", [x, w], [f"m{index}"], name=f"layer{index}"),
                 helper.make_node("Add", [f"m{index}", b], [y], name=f"layer{index}_bias")]
    if not last:
        nodes.append(helper.make_node("Relu", [y], [f"h{index + 1}"], name=f"relu{index}"))
    return nodes, inits


def build(path: Path, seed: int = 0) -> Path:
    """Write `path` (the graph) and `path`.data (every weight); returns `path`."""
    import onnx
    from onnx import TensorProto, helper
    path = Path(path)
    location = path.name + ".data"
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    with open(path.with_name(location), "wb") as data:
        for index in range(LAYERS):
            more_nodes, more_inits = _layer(index, rng, data, location, index == LAYERS - 1)
            nodes += more_nodes
            inits += more_inits
    graph = helper.make_graph(
        nodes, "large_linear_stack",
        [helper.make_tensor_value_info("h0", TensorProto.FLOAT, [TOKENS, HIDDEN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [TOKENS, HIDDEN])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="examples/large_model")
    model.ir_version = 8
    onnx.save_model(model, str(path))  # every tensor is external already: a small file
    return path


def parameters() -> int:
    return LAYERS * (HIDDEN * HIDDEN + HIDDEN)


def write_data(folder: Path, seed: int = 1, calibration: int = 16,
               evaluation: int = 16) -> tuple[Path, Path]:
    """calibration.npz and evaluation.npz: `count` feeds of [TOKENS, HIDDEN] each, as
    arrays with the feeds' rows on the first axis (cut into feeds of TOKENS rows)."""
    rng = np.random.default_rng(seed)
    paths = []
    for role, count in (("calibration", calibration), ("evaluation", evaluation)):
        rows = rng.standard_normal((count * TOKENS, HIDDEN), dtype=np.float32)
        paths.append(Path(folder) / f"{role}.npz")
        np.savez(paths[-1], h0=rows)
    return paths[0], paths[1]
