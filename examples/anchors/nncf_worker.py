"""NNCF's post-training quantization of an ONNX file, as a user calls it: nncf.quantize
with its defaults (preset performance, subset_size 300, fast bias correction) on the
calibration feeds. Runs under .venv-nncf (`make nncf-env`), which has NNCF and not the
pipeline, so it imports only numpy, onnx and nncf.

    .venv-nncf/bin/python nncf_worker.py FP32.onnx FEEDS.npz TARGET.onnx

FEEDS.npz holds one array per feed and input, named `<feed index>/<input name>`.
Prints one JSON line: {"seconds": the nncf.quantize call, "nncf": its version}.
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np
import onnx


def read_feeds(path: str) -> list[dict]:
    feeds: dict[int, dict] = {}
    with np.load(path) as archive:
        for key in archive.files:
            index, name = key.split("/", 1)
            feeds.setdefault(int(index), {})[name] = archive[key]
    return [feeds[i] for i in sorted(feeds)]


def main(fp32: str, feeds_path: str, target: str) -> None:
    import nncf

    model = onnx.load(fp32)
    dataset = nncf.Dataset(read_feeds(feeds_path))
    started = time.perf_counter()
    quantized = nncf.quantize(model, dataset)
    seconds = time.perf_counter() - started
    onnx.save(quantized, target)
    print(json.dumps({"seconds": seconds, "nncf": nncf.__version__}))


if __name__ == "__main__":
    main(*sys.argv[1:4])
