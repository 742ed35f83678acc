"""How much does the device runner add to what it measures?

For the quickstart CNN and EfficientNet-Lite0 (ONNX, 2 threads, batch 1), in one process
on the same inputs and the same onnxruntime session, alternating in rounds so machine
drift hits both alike:
  bare     a plain loop: t0; InferenceSession.run(None, feeds); t1
  runner   runtimes.measure() on the runtimes session wrapping that InferenceSession
and, for reference, the runner as the pipeline calls it: `python -m runtimes bench` in a
fresh process (its own session, same options). Prints p50 of each and the ratio.

    python examples/device/runner_overhead.py [--runs 200] [--rounds 9]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from runtimes.loader import load  # noqa: E402
from runtimes.measure import Timing, measure  # noqa: E402

THREADS = 2


def example_module(example: str, name: str):
    """examples/<example>/<name>.py, imported under its own name (both examples have a
    model.py)."""
    path = REPO / "examples" / example / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{example}_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def quickstart_model(folder: Path) -> tuple[Path, np.ndarray]:
    import torch
    evaluation = example_module("quickstart", "data").evaluation
    build = example_module("quickstart", "model").build
    checkpoint = REPO / "examples" / "quickstart" / "digits_cnn.pt"
    if not checkpoint.exists():
        sys.exit(f"{checkpoint} is missing: run `make demo` (or examples/quickstart/train.py)")
    model = build()
    model.load_state_dict(torch.load(checkpoint, weights_only=True))
    image = evaluation()["image"][:1].astype(np.float32)
    return export(model.eval(), image, folder / "quickstart.onnx"), image


def efficientnet_model(folder: Path) -> tuple[Path, np.ndarray]:
    build = example_module("efficientnet_lite0", "model").build
    evaluation = example_module("efficientnet_lite0", "photos").evaluation
    image = evaluation()["images"][:1].astype(np.float32)
    return export(build(), image, folder / "efficientnet_lite0.onnx"), image


def export(model, image: np.ndarray, path: Path) -> Path:
    import torch
    from export.onnx import OnnxExport, export_onnx
    export_onnx(model, (torch.from_numpy(image),), ["image"], path, OnnxExport(opset=18))
    return path


def bare_loop(ort_session, feeds: dict, runs: int) -> list[float]:
    latencies = []
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        ort_session.run(None, feeds)
        latencies.append((time.perf_counter_ns() - t0) / 1e6)
    return latencies


def runner_cli(path: Path, inputs: Path, runs: int) -> list[float]:
    out = subprocess.run([sys.executable, "-m", "runtimes", "bench", str(path), "--inputs",
                          str(inputs), "--threads", str(THREADS), "--runs", str(runs),
                          "--warmup", "20", "--samples", "--json", "--meter", "none"],
                         capture_output=True, text=True, cwd=REPO, check=True)
    return json.loads(out.stdout)["latency_samples_ms"]


def compare(name: str, path: Path, image: np.ndarray, runs: int, rounds: int) -> dict:
    session = load(str(path), engine="onnxruntime", threads=THREADS)
    feeds = {"image": image}
    ort_session = session._session  # the very InferenceSession the runner times
    inputs = path.with_suffix(".npz")
    np.savez(inputs, image=image)
    bare_loop(ort_session, feeds, 50)  # warm both before the first round
    ways = {"bare": lambda: bare_loop(ort_session, feeds, runs),
            "runner": lambda: measure(session, feeds,
                                      Timing(warmup=0, runs=runs))["latency_samples_ms"],
            "runner_cli": lambda: runner_cli(path, inputs, runs)}
    pooled = {key: [] for key in ways}
    order = list(ways)
    for _ in range(rounds):
        for key in order:
            pooled[key] += ways[key]()
        order = order[1:] + order[:1]  # each way goes first in turn: drift hits all alike
    p50 = {key: statistics.median(values) for key, values in pooled.items()}
    return {"model": name, "runs_each": runs * rounds, **{f"p50_{k}_ms": v for k, v in p50.items()},
            "runner_vs_bare": p50["runner"] / p50["bare"],
            "runner_cli_vs_bare": p50["runner_cli"] / p50["bare"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="timed runs per round and way")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        models = [("quickstart CNN", *quickstart_model(folder)),
                  ("EfficientNet-Lite0", *efficientnet_model(folder))]
        rows = [compare(name, path, image, args.runs, args.rounds)
                for name, path, image in models]
    print("| model | runs each | bare p50 ms | runner p50 ms | runner / bare | "
          "runner CLI p50 ms | CLI / bare |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['runs_each']} | {r['p50_bare_ms']:.4f} | "
              f"{r['p50_runner_ms']:.4f} | {r['runner_vs_bare']:.3f} | "
              f"{r['p50_runner_cli_ms']:.4f} | {r['runner_cli_vs_bare']:.3f} |")


if __name__ == "__main__":
    main()
