"""The float model's intermediate tensors, one feed at a time.

Range estimation (ranges.py) and fast bias correction (passes/fast_correction/onnx.py) both need values
of tensors inside the float model. Making those tensors graph outputs and running the
model once per feed gives them all in one pass; two feeds' tensors are held at a time
(the next feed runs while the caller reads this one's), so memory is two forward
passes' activations, whatever the number of feeds.
"""
from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np


def _probe(model, names: list[str]):
    """A copy of `model` whose outputs are `names` (typed from the shape inference where
    known: a float16 tensor declared float would not load)."""
    from onnx import TensorProto, helper

    from compress.model.onnx_file import tensor_types
    try:
        known = {name: t.elem_type for name, t in tensor_types(model).items()}
    except Exception:  # noqa: BLE001 - the types are a courtesy; float is the usual case
        known = {}
    probe = type(model)()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    probe.graph.output.extend(
        helper.make_tensor_value_info(n, known.get(n) or TensorProto.FLOAT, None) for n in names)
    return probe


def session(model, threads: int | None = None, unoptimized: bool = False):
    """A CPU session on an in-memory model, a ModelProto or its bytes (graph
    optimisations on: a tensor that is a graph output is never fused away, so the probed
    values are the float model's own); its threads do not spin. `unoptimized`: graph
    optimisations off, as onnxruntime's calibrator runs the model: an optimised graph
    (NCHWc convolutions) sums in another order, and ranges one float32 step apart give
    other scales, so other quantized bytes than quantize_static's own calibration."""
    import onnxruntime as ort

    from runtimes.onnx_session import session_options
    options = session_options()   # INT8 layers as the file says on every CPU
    options.log_severity_level = 3
    if unoptimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if threads:
        options.intra_op_num_threads = threads
    # idle threads sleep instead of spinning: the caller's numpy work (the float pass's
    # reductions, GPTQ beside the check) runs while this session waits for its next
    # feed, and spinning threads took its cores (the float pass 2.8 -> 2.1 s on YOLOv8n)
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    serialized = model if isinstance(model, bytes) else model.SerializeToString()
    return ort.InferenceSession(serialized, options,
                                providers=["CPUExecutionProvider"])


def tensor_values(model, names: Iterable[str], feeds: Iterable[dict],
                  threads: int | None = None,
                  unoptimized: bool = False) -> Iterator[dict[str, np.ndarray]]:
    """For each feed, {name: value} of the named tensors of `model` (a ModelProto).
    Graph inputs among `names` are taken from the feed itself (ONNX does not let a
    graph input also be an output). The next feed runs while the caller works on this
    one's values (onnxruntime lets the GIL go): two feeds' tensors are held at a time.
    `unoptimized`: as session()."""
    from concurrent.futures import ThreadPoolExecutor

    names = list(dict.fromkeys(names))
    inputs = {i.name for i in model.graph.input}
    computed = [n for n in names if n not in inputs]
    run = session(_probe(model, computed), threads, unoptimized) if computed else None

    def values(feed: dict, running) -> dict:
        found = dict(zip(computed, running.result())) if running else {}
        found.update({n: np.asarray(feed[n]) for n in names if n in inputs})
        return found

    with ThreadPoolExecutor(1) as worker:
        previous = None
        for feed in feeds:
            current = (feed, worker.submit(run.run, computed, feed) if run else None)
            if previous:
                yield values(*previous)
            previous = current
        if previous:
            yield values(*previous)
