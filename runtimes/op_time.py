"""The share of an ONNX model's time each node takes, measured: onnxruntime's session
profile (enable_profiling) over a few runs on real inputs, per node the median of its
kernel times, as a share of the median run's summed kernel times. The session is built
as the benchmark builds it (default graph optimizations, prepacking on), so the nodes
are those onnxruntime executes: a node fused into another is not listed under its own
name."""
from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
from collections import defaultdict

WARMUP = 2   # the first runs allocate and prepack: not what a node costs


def node_time_shares(path: str, feeds: dict, runs: int = 10,
                     threads: int | None = None) -> dict[str, float]:
    """{node name: share of the model's kernel time} over `runs` runs on `feeds`."""
    from runtimes.onnx_session import OnnxRuntimeSession

    folder = tempfile.mkdtemp(prefix="op-time-")

    def profiling(options) -> None:
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(folder, "profile")

    try:
        session = OnnxRuntimeSession(path, threads=threads, configure=profiling)
        for _ in range(WARMUP + max(runs, 1)):
            session.run(feeds)
        with open(session._session.end_profiling()) as fh:
            events = json.load(fh)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    times: dict[str, list[float]] = defaultdict(list)
    for event in events:
        name = event.get("name", "")
        if event.get("cat") == "Node" and name.endswith("_kernel_time"):
            times[name[:-len("_kernel_time")]].append(float(event.get("dur", 0)))
    medians = {name: statistics.median(t[WARMUP:] or t) for name, t in times.items()}
    total = sum(medians.values())
    return {name: value / total for name, value in medians.items()} if total else {}
