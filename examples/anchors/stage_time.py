"""The int8-static stage beside quant_pre_process + quantize_static by hand, on the same
FP32 ONNX file and the same 256 calibration feeds, one anchor at a time: the wall time
of each (medians of --repeat runs, side by side), and the fidelity of each file to FP32
on the evaluation feeds (output SQNR, top-1 agreement for the classifiers). Run
`make anchors` first: the torch models' FP32 files come from its run folders.

    python examples/anchors/stage_time.py efficientnet yolov8n ...
    python examples/anchors/stage_time.py --set bias_correction_samples=128 efficientnet
    python examples/anchors/stage_time.py --weights-only efficientnet
    python examples/anchors/stage_time.py mobilenetv2   # timing only: mobilenet_v2.py
    python examples/anchors/stage_time.py mobilenetv3   # timing only: mobilenet_v3.py

`--weights-only`: instead, the FP32 model with only its Conv/Gemm weights rounded to
nearest int8 per output channel (symmetric, as quantize_static rounds them) and its
activations left in float: how much of the INT8 error is the weights' rounding alone.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from run import OUT, SAMPLES, conformance  # noqa: E402  (puts the corpus on the path)

import compress  # noqa: E402
from anchors import ANCHORS  # noqa: E402
from by_hand import quantize_by_hand  # noqa: E402
from compress.runner.checks import resolve_inputs  # noqa: E402
from compress.data.feeds import load_dataset  # noqa: E402
from compress.model.run import run_feeds  # noqa: E402
from runtimes.metrics import feed_fidelity  # noqa: E402


@dataclass(frozen=True)
class Subject:
    name: str           # the table's row
    data: dict          # the pipeline's data section
    classifier: bool    # top-1 agreement means something
    fp32: Path


# networks of published layouts with random weights, for timing (their modules here)
RANDOM = {"mobilenetv2": ("mobilenet_v2", "MobileNetV2"),
          "mobilenetv3": ("mobilenet_v3", "MobileNetV3-Large")}


def _subject(name: str) -> Subject:
    """The anchor whose name contains `name` and its FP32 ONNX file; or, for `mobilenetv2`
    and `mobilenetv3`, that network for timing only (random weights: mobilenet_v2.py,
    mobilenet_v3.py) on EfficientNet-Lite0's photos."""
    if name.lower().replace("-", "") in RANDOM:
        import importlib
        module, label = RANDOM[name.lower().replace("-", "")]
        data = _subject("efficientnet").data
        fp32 = importlib.import_module(module).fp32_onnx(
            data["calibration"]()["images"], OUT.parent / "anchors" / module.replace("_", "-"))
        return Subject(f"{label}, random weights (time only)", data, True, fp32)
    anchor = next(a for a in ANCHORS if name.lower() in a.entry.lower())
    entry = anchor.corpus
    return Subject(entry.name, entry.data(), anchor.classifier,
                   OUT / conformance.slug(entry.name) / "01-fp32" / "model.onnx"
                   if entry.fp32 == "fp32" else Path(entry.model()["onnx"]))


def measure(name: str, settings: dict, repeat: int) -> str:
    subject = _subject(name)
    fp32 = subject.fp32
    stage = {"type": "quantize", "scheme": "int8-static", **settings}
    with tempfile.TemporaryDirectory() as folder:
        pipeline = compress.pipeline(name="stage-time", output=folder, model={"onnx": str(fp32)},
                                     data=subject.data, stages=[stage])
        resolved = resolve_inputs(pipeline)
        feeds = load_dataset(resolved, "calibration", resolved.model.inputs).take(SAMPLES)
        by_hand, runs = Path(folder) / "by_hand.onnx", []
        for _ in range(repeat):  # side by side, by hand first (it pays the first imports)
            started = time.perf_counter()
            quantize_by_hand(fp32, feeds, by_hand)
            seconds = time.perf_counter() - started
            result = compress.run(pipeline, force=True, quiet=True)
            checked = result.artifacts[-1].meta.get("bias_correction") or {}
            runs.append((result.artifacts[-1].meta["seconds"], checked.get("rounding_seconds", 0),
                         seconds))
        artifact = result.artifacts[-1]
        stage, rounding, seconds = (statistics.median(column) for column in zip(*runs))
        evaluation = list(load_dataset(resolved, "evaluation", resolved.model.inputs).feeds)
        reference = run_feeds(fp32, None, evaluation)
        judged = [feed_fidelity(run_feeds(path, None, evaluation), reference)
                  for path in (result.run_dir / artifact.path, by_hand)]
    top1 = [f" (top-1 {j['top1_agreement']:.3f})" if subject.classifier else "" for j in judged]
    return (f"| {subject.name} | {judged[0]['sqnr_db']:.1f} dB{top1[0]} | {judged[1]['sqnr_db']:.1f}"
            f" dB{top1[1]} | {checked.get('kept')} | {stage:.1f} | {rounding:.1f} | {seconds:.1f} | "
            f"{stage / seconds:.2f}x |")


def weights_only(name: str) -> str:
    import numpy as np
    import onnx
    from onnx import numpy_helper

    subject = _subject(name)
    fp32 = subject.fp32
    model = onnx.load(str(fp32))
    weights = {n.input[1] for n in model.graph.node if n.op_type in ("Conv", "Gemm")}
    for init in (i for i in model.graph.initializer if i.name in weights):
        w = numpy_helper.to_array(init)
        rows = w.reshape(w.shape[0], -1)  # per output channel (a Gemm's transB layout)
        step = np.abs(rows).max(axis=1, keepdims=True) / 127.5
        step[step == 0] = 1.0
        rounded = (np.clip(np.round(rows / step), -128, 127) * step).reshape(w.shape)
        init.CopyFrom(numpy_helper.from_array(rounded.astype(w.dtype), init.name))
    pipeline = compress.pipeline(name="weights-only", output=tempfile.gettempdir(),
                                 model={"onnx": str(fp32)}, data=subject.data,
                                 stages=[{"type": "quantize", "scheme": "int8-static"}])
    resolved = resolve_inputs(pipeline)
    evaluation = list(load_dataset(resolved, "evaluation", resolved.model.inputs).feeds)
    with tempfile.TemporaryDirectory() as folder:
        onnx.save(model, f"{folder}/weights.onnx")
        judged = feed_fidelity(run_feeds(f"{folder}/weights.onnx", None, evaluation),
                               run_feeds(fp32, None, evaluation))
    top1 = f" (top-1 {judged['top1_agreement']:.3f})" if subject.classifier else ""
    return f"| {subject.name} | {judged['sqnr_db']:.1f} dB{top1} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="anchors whose name contains this")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="an int8-static setting (a JSON value), e.g. weight_rounding=\"nearest\"")
    parser.add_argument("--repeat", type=int, default=3, metavar="N",
                        help="time each side N times, alternating; the medians (default 3)")
    parser.add_argument("--weights-only", action="store_true",
                        help="the FP32 model with only its weights rounded to int8")
    args = parser.parse_args()
    if args.weights_only:
        print("| model | weights int8 (nearest, per channel), activations float |\n|---|---:|")
        for model in args.models:
            print(weights_only(model), flush=True)
        return
    settings = {}
    for item in args.set:
        key, _, value = item.partition("=")
        try:
            settings[key] = json.loads(value)
        except json.JSONDecodeError:
            settings[key] = value
    print(f"settings: {settings or 'defaults'}; seconds: medians of {args.repeat} runs each\n\n"
          "| model | pipeline | by hand | kept by the check "
          "| stage s | of it, GPTQ s | by hand s | ratio |\n|---|---:|---:|---|---:|---:|---:|---:|")
    for model in args.models:
        print(measure(model, settings, args.repeat), flush=True)


if __name__ == "__main__":
    main()
