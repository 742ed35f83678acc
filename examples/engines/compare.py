"""Every anchor model's files on every engine that opens them, in one table: the FP32
file, this pipeline's INT8, `quantize_static` by hand and NNCF's INT8 (the anchors'
files), and the TFLite files where the model has them, each on onnxruntime, OpenVINO (f32,
and bf16 for the FP32 file) and LiteRT.

Latency: `python -m runtimes bench` in a fresh process per measurement (the first
evaluation feed, batch 1, --threads, --runs timed calls after 10 untimed), every variant in turn for
--rounds rounds, the median of the rounds' p50s; speed-ups against onnxruntime FP32 in
the same run. Fidelity: every file's outputs on the anchor's evaluation feeds against
onnxruntime FP32's (SQNR; top-1 agreement for the classifiers). GMAC/s: multiply-adds of
the FP32 file's Conv, Gemm and MatMul nodes (from ONNX shape inference at the timed
feed's shapes) over p50. "auto chose": once per round, each file that more than one
engine opens is given to `--engine auto` (as host-cpu does), and the table says how
often its probe chose each engine, beside that engine's measured p50.

    make anchors      # the files
    python examples/engines/compare.py [efficientnet yolov8n ...] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "anchors"))

from run import OUT, conformance  # noqa: E402  (the anchors' run.py, before anchors' path)
from anchors import REPO, chosen  # noqa: E402

import compress  # noqa: E402
from compress.runner.checks import resolve_inputs  # noqa: E402
from compress.data.feeds import load_dataset  # noqa: E402
from compress.model.run import run_feeds  # noqa: E402
from runtimes import engines  # noqa: E402
from runtimes.metrics import feed_fidelity  # noqa: E402
from runtimes.flops import node_flops  # noqa: E402


def _files(anchor) -> list[tuple[str, Path]]:
    """(label, file) of the anchor's run folder that exist."""
    entry = anchor.corpus
    folder = OUT / conformance.slug(entry.name)
    fp32 = folder / "01-fp32" / "model.onnx" if entry.fp32 == "fp32" else Path(entry.model()["onnx"])
    if not fp32.is_file():
        raise SystemExit(f"{fp32} is missing: run `make anchors` first")
    found = [("FP32", fp32),
             *[("INT8, this pipeline", path) for path in sorted(folder.glob("*int8*/model.onnx"))],
             ("INT8, by hand", folder / "by_hand.onnx"), ("INT8, NNCF", folder / "nncf.onnx"),
             *[(f"TFLite {mode.upper()}", path) for mode in ("fp32", "int8")
               for path in folder.glob(f"*-tflite-{mode}/model.tflite")]]
    return [(label, path) for label, path in found if path.is_file()]


def _variants(files) -> list[tuple[str, Path, str, str]]:
    """(file label, file, engine, precision): every engine that opens the file; OpenVINO
    also in bf16 for the FP32 file."""
    rows = []
    for label, path in files:
        for engine in engines.for_path(str(path)):
            if not engines.installed(engine):
                continue
            rows.append((label, path, engine.name, "f32"))
            if engine.name == "openvino" and label == "FP32":
                rows.append((label, path, engine.name, "bf16"))
    return rows


def _runner(path: Path, engine: str, args, inputs: Path, *extra: str) -> dict:
    cmd = [sys.executable, "-m", "runtimes", "bench", str(path), "--json", "--meter", "none",
           "--threads", str(args.threads), "--engine", engine, "--inputs", str(inputs), *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _p50(path: Path, engine: str, precision: str, args, inputs: Path) -> float:
    extra = ["--precision", precision] if engine == "openvino" else []
    return _runner(path, engine, args, inputs, "--runs", str(args.runs),
                   *extra)["latency_ms"]["p50"]


def _auto_choice(path: Path, args, inputs: Path) -> str:
    """The engine `--engine auto` chooses for the file (its probe; one timed call after)."""
    return _runner(path, "auto", args, inputs, "--runs", "1",
                   "--warmup", "0")["engine_choice"]["chosen"]


def _macs(fp32: Path, feed: dict) -> float:
    """Multiply-adds of Conv, Gemm and MatMul nodes, from ONNX shape inference with the
    inputs' dimensions set to the feed's."""
    import onnx
    from onnx import numpy_helper
    model = onnx.load(str(fp32))
    for value in model.graph.input:
        if value.name in feed:
            for dim, size in zip(value.type.tensor_type.shape.dim, feed[value.name].shape):
                dim.ClearField("dim_param")
                dim.dim_value = size
    graph = onnx.shape_inference.infer_shapes(model).graph
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in (*graph.value_info, *graph.output, *graph.input)}
    shapes.update({i.name: list(numpy_helper.to_array(i).shape) for i in graph.initializer})
    flops = [node_flops(node.op_type, [shapes.get(name) for name in node.input],
                        [shapes.get(name) for name in node.output])
             for node in graph.node if node.op_type in ("Conv", "Gemm", "MatMul")]
    return sum(f or 0 for f in flops) / 2   # node_flops counts a multiply-add as two


def compare(anchor, args) -> list[str]:
    entry = anchor.corpus
    files = _files(anchor)
    variants = _variants(files)
    pipeline = compress.pipeline(
        name="engines", output="/tmp/engines", model={"onnx": str(files[0][1])},
        data=entry.data(), stages=[{"type": "quantize", "scheme": "fp16"}])
    resolved = resolve_inputs(pipeline)
    feeds = list(load_dataset(resolved, "evaluation", resolved.model.inputs).feeds)
    reference = run_feeds(files[0][1], None, feeds)
    inputs = Path(tempfile.mkdtemp()) / "feed.npz"   # the first evaluation feed is timed
    np.savez(inputs, **feeds[0])
    times = {v: [] for v in variants}
    # the files more than one engine opens: what host-cpu's `engines: auto` picks for each
    choices = {path: [] for _, path, _, _ in variants
               if sum(v[1] == path and v[3] == "f32" for v in variants) > 1}
    for _ in range(args.rounds):
        for variant in variants:
            times[variant].append(_p50(*variant[1:], args, inputs))
        for path, picked in choices.items():
            picked.append(_auto_choice(path, args, inputs))
    base = statistics.median(times[variants[0]])
    macs = _macs(files[0][1], feeds[0])
    lines = [f"### {entry.name} ({macs / 1e9:.2f} GMAC per inference, estimated)", "",
             "| file | engine | p50 ms | vs ORT FP32 | GMAC/s | SQNR dB | top-1 | auto chose |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for label, path, engine, precision in variants:
        p50 = statistics.median(times[(label, path, engine, precision)])
        outputs = run_feeds(path, None, feeds, engine=engine,
                            **({"precision": precision} if engine == "openvino" else {}))
        judged = feed_fidelity(outputs, reference)
        top1 = f"{judged['top1_agreement']:.3f}" if anchor.classifier else "—"
        shown = engine + (f" {precision}" if engine == "openvino" else "")
        picked = choices.get(path, []) if precision == "f32" else []
        auto = f"{picked.count(engine)}/{len(picked)}" if picked else "—"
        lines.append(f"| {label} | {shown} | {p50:.3f} | {base / p50:.2f}x | "
                     f"{macs / p50 / 1e6:.1f} | {judged['sqnr_db']:.1f} | {top1} | {auto} |")
    return lines + ["", _auto_summary(times, choices), ""]


def _auto_summary(times: dict, choices: dict) -> str:
    """How often auto's probe chose the engine this table measured fastest (f32 runs)."""
    right = total = 0
    for path, picked in choices.items():
        f32 = {v[2]: statistics.median(t) for v, t in times.items()
               if v[1] == path and v[3] == "f32"}
        fastest = min(f32, key=f32.get)
        right += picked.count(fastest)
        total += len(picked)
        if picked.count(fastest) < len(picked):   # a miss: by how much it cost
            slower = max(f32[e] for e in picked) / f32[fastest]
            print(f"  {path.parent.name}/{path.name}: auto chose {picked}, fastest {fastest} "
                  f"(worst pick {slower:.2f}x its p50)", file=sys.stderr)
    return (f"`engines: auto` chose the engine measured fastest here for {right} of {total} "
            "probes (one per file with two engines, per round).")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="anchors whose name contains one of these")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    for anchor in chosen(args.names):
        print("\n".join(compare(anchor, args)), flush=True)


if __name__ == "__main__":
    main()
