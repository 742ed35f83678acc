"""This CPU's achievable peak GMAC/s for fp32 and int8 matrix products, per engine.

A model's GMAC/s (its multiply-adds over its p50 latency) means little alone; against
what the same engine reaches on one large GEMM at the same thread count, it says how much
of the machine the model's kernels use. That reference is measured, not a datasheet's
cores x clock x SIMD lanes, which no real kernel reaches.

An M=N=K=--size GEMM is built in memory with onnx.helper (weight an initializer,
activation the graph input) and run as: onnxruntime fp32 MatMul; onnxruntime int8 as the
pipeline's INT8 models run, a QDQ MatMul (uint8 activation, int8 per-tensor weight) with
and without an output Q/DQ pair, and a plain MatMulInteger; OpenVINO at f32 inference
precision on the fp32 and QDQ graphs; numpy's matmul (its BLAS held to --threads) as a
reference. Every output is checked against a float64 reference of the dequantized
tensors before it is timed. Engines are timed in turn, then again in mirrored order so
that drift in clock or load favours none; a row's p50 is its faster pass's.

    python examples/engines/peaks.py [--threads 2] [--size 1024] [--seconds 1] [--json F]
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import openvino as ov
from onnx import TensorProto, helper, numpy_helper

from runtimes.onnx_session import timed_session_options

X_SCALE, X_ZP = 2 / 255, 128  # uint8 activation covering [-1, 1]
W_SCALE = 1 / 127             # symmetric int8 weight covering [-1, 1]
FLOAT = TensorProto.FLOAT


def _model(nodes, inputs, output, inits) -> bytes:
    graph = helper.make_graph(nodes, "gemm", inputs, [output], initializer=inits)
    # opset 17 at IR 8: a pair both engines read, as exported models have
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _const(name: str, value, dtype) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def _io(name: str, elem_type: int, n: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, [n, n])


def fp32_gemm(w: np.ndarray) -> bytes:
    n = w.shape[0]
    return _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [_io("x", FLOAT, n)],
                  _io("y", FLOAT, n), [_const("w", w, np.float32)])


def qdq_gemm(wq: np.ndarray, y_scale: float | None) -> bytes:
    """Q/DQ on the activation, DQ on the int8 weight, MatMul, and with `y_scale` a uint8
    Q/DQ pair on the output (what a fully quantized layer looks like) else float out."""
    n = wq.shape[0]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"]),
             helper.make_node("MatMul", ["xd", "wd"], ["yd" if y_scale else "y"])]
    inits = [_const("xs", X_SCALE, np.float32), _const("xz", X_ZP, np.uint8),
             _const("wq", wq, np.int8), _const("ws", W_SCALE, np.float32),
             _const("wz", 0, np.int8)]
    if y_scale:
        nodes += [helper.make_node("QuantizeLinear", ["yd", "ys", "yz"], ["yq"]),
                  helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
        inits += [_const("ys", y_scale, np.float32), _const("yz", 128, np.uint8)]
    return _model(nodes, [_io("x", FLOAT, n)], _io("y", FLOAT, n), inits)


def matmul_integer(wq: np.ndarray) -> bytes:
    n = wq.shape[0]
    node = helper.make_node("MatMulInteger", ["a", "wq", "az", "wz"], ["y"])
    return _model([node], [_io("a", TensorProto.UINT8, n)], _io("y", TensorProto.INT32, n),
                  [_const("wq", wq, np.int8), _const("az", X_ZP, np.uint8),
                   _const("wz", 0, np.int8)])


def ort_engine(model: bytes, feed: np.ndarray, threads: int, tmp: Path, tag: str):
    """(run, kernel): the session as runtimes.onnx_session builds it; the kernel is the
    node chain of the graph onnxruntime actually runs, after its fusions."""
    optimized = str(tmp / f"{tag}.ort.onnx")
    options = timed_session_options(
        threads, configure=lambda o: setattr(o, "optimized_model_filepath", optimized))
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    ran = onnx.load(optimized).graph.node
    kernel = " > ".join(node.op_type for node in ran)
    feeds = {session.get_inputs()[0].name: feed}
    return (lambda: session.run(None, feeds)[0]), kernel


def ov_engine(model: bytes, feed: np.ndarray, threads: int, tmp: Path, tag: str):
    """(run, kernel): compiled as runtimes.openvino_session does at f32; the kernel is the
    matrix node of the runtime graph: its primitive and the precision it ran at."""
    path = tmp / f"{tag}.ov.onnx"
    path.write_bytes(model)
    core = ov.Core()
    compiled = core.compile_model(core.read_model(str(path)), "CPU", {
        "INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": threads,
        "PERFORMANCE_HINT": "LATENCY"})
    kernels = []
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = {key: value.astype(str) for key, value in op.get_rt_info().items()}
        if info.get("layerType") in ("FullyConnected", "MatMul", "Convolution"):
            kernels.append(f"{info['layerType']} {info.get('primitiveType', '?')} "
                           f"{info.get('runtimePrecision', '?')}")
    request = compiled.create_infer_request()
    request.set_input_tensor(ov.Tensor(feed, shared_memory=True))  # no copy per call

    def run():
        request.infer()
        return request.get_output_tensor().data
    return run, "; ".join(kernels) or "?"


def numpy_engine(x: np.ndarray, w: np.ndarray, threads: int):
    """(run, kernel), or None without threadpoolctl: an unlimited BLAS would use every
    core and not be comparable at --threads."""
    try:
        from threadpoolctl import threadpool_info, threadpool_limits
    except ImportError:
        return None
    threadpool_limits(limits=threads, user_api="blas")  # for the rest of the process
    blas = [i for i in threadpool_info() if i["user_api"] == "blas"][:1]
    kernel = "matmul" + "".join(f" ({i['internal_api']} {i.get('version')}, "
                                f"{i.get('architecture')} kernels)" for i in blas)
    return (lambda: x @ w), kernel


def engines(n: int, threads: int, tmp: Path) -> list[dict]:
    """Every engine, built and checked: a row with a wrong output is kept but not timed."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    w = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    wq = rng.integers(-127, 128, (n, n), dtype=np.int8)
    xq = np.clip(np.rint(x / np.float32(X_SCALE)) + X_ZP, 0, 255).astype(np.uint8)
    want32 = x.astype(np.float64) @ w.astype(np.float64)
    want_int = (xq.astype(np.int64) - X_ZP) @ wq.astype(np.int64)
    want_q = want_int * (X_SCALE * W_SCALE)
    y_scale = float(np.abs(want_q).max()) / 127 * 1.05
    loose = 0.01 * float(np.abs(want_q).max())  # 1 % of the range: a wrong graph is far off
    fp32 = 1e-4 * float(np.abs(want32).max())  # float32 rounding over K products, with room
    specs = [
        ("onnxruntime", "fp32", "MatMul", ort_engine, fp32_gemm(w), x, want32, fp32),
        ("onnxruntime", "int8", "QDQ MatMul, Q/DQ out", ort_engine, qdq_gemm(wq, y_scale),
         x, want_q, max(2 * y_scale, loose)),
        ("onnxruntime", "int8", "QDQ MatMul, float out", ort_engine, qdq_gemm(wq, None),
         x, want_q, loose),
        ("onnxruntime", "int8", "MatMulInteger u8s8", ort_engine, matmul_integer(wq),
         xq, want_int, 0.5),  # integer accumulation is exact
        ("openvino", "fp32", "MatMul", ov_engine, fp32_gemm(w), x, want32, fp32),
        ("openvino", "int8", "QDQ MatMul, Q/DQ out", ov_engine, qdq_gemm(wq, y_scale),
         x, want_q, max(2 * y_scale, loose)),
    ]
    rows = []
    for i, (engine, precision, graph, build, model, feed, want, tol) in enumerate(specs):
        run, kernel = build(model, feed, threads, tmp, f"m{i}")
        rows.append(_checked(engine, precision, graph, kernel, run, want, tol))
    reference = numpy_engine(x, w, threads)
    if reference:
        run, kernel = reference
        rows.append(_checked("numpy", "fp32", "x @ w", kernel, run, want32, fp32))
    return rows


def _checked(engine, precision, graph, kernel, run, want, tol) -> dict:
    """The row, with `error` set when the output is further than `tol` from `want`."""
    error = float(np.abs(np.asarray(run(), dtype=np.float64) - want).max())
    row = {"engine": engine, "precision": precision, "graph": graph, "kernel": kernel,
           "max_abs_error": error, "run": run}
    if error > tol:
        row["error"] = f"output off by {error:.3g} (> {tol:.3g}): not timed"
    return row


def _time(run, seconds: float) -> list[float]:
    for _ in range(2):  # caches, lazily packed weights, other pools winding down
        run()
    times, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 5:
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return times


def measure(rows: list[dict], n: int, seconds: float) -> None:
    """Each timed row's p50 in two passes, the second in mirrored order; the faster pass
    counts (a peak is what the machine reaches when nothing else runs); both are kept:
    far apart, they say the machine was busy meanwhile."""
    timed = [row for row in rows if "error" not in row]
    passes = {id(row): [] for row in timed}
    for row in timed + timed[::-1]:
        passes[id(row)].append(_time(row["run"], seconds))
    for row in timed:
        p50 = min(statistics.median(one) for one in passes[id(row)])
        row.update(p50_ms=round(p50 * 1e3, 3), gmac_s=round(n ** 3 / p50 / 1e9, 1),
                   calls=sum(len(one) for one in passes[id(row)]),
                   pass_p50_ms=[round(statistics.median(one) * 1e3, 3)
                                for one in passes[id(row)]])


def cpu_name() -> str:
    info = Path("/proc/cpuinfo")
    lines = info.read_text().splitlines() if info.is_file() else []
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    return names[0] if names else platform.processor() or platform.machine()


def report(rows: list[dict], args) -> dict:
    clean = [{k: v for k, v in row.items() if k != "run"} for row in rows]
    peak = {}
    for precision in ("fp32", "int8"):
        timed = [row for row in clean if row["precision"] == precision and "gmac_s" in row]
        if timed:
            peak[precision] = max(timed, key=lambda row: row["gmac_s"])
    print(f"{cpu_name()}, {args.threads} threads, M=N=K={args.size}\n")
    print("| engine | precision | graph | kernel | p50 ms (passes) | GMAC/s |\n"
          "|---|---|---|---|--:|--:|")
    for row in clean:
        timing = (f"{row['p50_ms']:.2f} ({' / '.join(f'{t:.2f}' for t in row['pass_p50_ms'])})"
                  f" | {row['gmac_s']:.1f}" if "gmac_s" in row else f"{row['error']} | -")
        print(f"| {row['engine']} | {row['precision']} | {row['graph']} | {row['kernel']} "
              f"| {timing} |")
    print("\n" + "; ".join(f"peak {precision}: {row['gmac_s']:.1f} GMAC/s ({row['engine']}, "
                           f"{row['graph']})" for precision, row in peak.items()))
    return {"cpu": cpu_name(), "threads": args.threads, "size": args.size,
            "seconds": args.seconds, "versions": {"onnxruntime": ort.__version__,
                                                  "openvino": ov.get_version(),
                                                  "numpy": np.__version__},
            "rows": clean, "peak": peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--size", type=int, default=1024, help="M = N = K")
    parser.add_argument("--seconds", type=float, default=1.0, help="timed calls per pass")
    parser.add_argument("--json", type=Path, help="also write the record here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = engines(args.size, args.threads, Path(tmp))
        measure(rows, args.size, args.seconds)
    record = report(rows, args)
    if args.json:
        args.json.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
