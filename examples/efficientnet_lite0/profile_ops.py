"""Where the time goes: onnxruntime's profiler on each ONNX file, by operator type.

    python examples/efficientnet_lite0/profile_ops.py runs/efficientnet_lite0/01-export.onnx/model.onnx \
        runs/efficientnet_lite0/02-quantize/model.onnx
"""
import argparse
import collections
import json
import os
import tempfile

import numpy as np
import onnxruntime as ort


def profile(path: str, runs: int, threads: int) -> collections.Counter:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.enable_profiling = True
    options.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "profile")
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    spec = session.get_inputs()[0]
    feed = {spec.name: np.zeros([d if isinstance(d, int) else 1 for d in spec.shape], np.float32)}
    for _ in range(runs):
        session.run(None, feed)
    with open(session.end_profiling()) as fh:
        events = json.load(fh)
    by_op = collections.Counter()
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            by_op[event["args"]["op_name"]] += event["dur"]
    return by_op


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    for path in args.models:
        by_op = profile(path, args.runs, args.threads)
        total = sum(by_op.values())
        shares = ", ".join(f"{op} {100 * t / total:.0f}%" for op, t in by_op.most_common(6))
        print(f"{path}: {total / args.runs / 1000:.2f} ms of kernels per run; {shares}")


if __name__ == "__main__":
    main()
