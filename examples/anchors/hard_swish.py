"""Hard-swish equalization (compress/quant/swish/equalize.py) on the text orientation
classifier, the corpus' one network with hard-swish into depthwise convolutions: by
hand's quantize_static file equalized with several HEADROOMs, beside by hand's and
NNCF's files (from `make anchors`), judged on the corpus' 64 evaluation feeds and on a
larger set of 288 (70 paragraphs of other prose per turn: at 64 feeds four photos of
handwriting the model hesitates on weigh on the output SQNR), the logits (the softmax's
input) as well as the probabilities; then by hand's file and the default's timed in
turns as the anchors time them (fresh processes, 8 rounds; batch 1, 2 threads).

    python examples/anchors/hard_swish.py [--headroom 1 1.5 2 3 4 8]
    python examples/anchors/hard_swish.py --mobilenetv3

`--mobilenetv3`: MobileNetV3-Large's layout with random weights (mobilenet_v3.py; its
channels are much alike, so `equalize_hard_swish: true` keeps it without the check)
quantized by hand and by the stage, both timed in turns with FP32: whether the
equalized layout runs at by hand's speed on the network it is for.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from run import OUT, SAMPLES, conformance  # noqa: E402,F401  (puts the corpus on the path)
from stage_time import _subject  # noqa: E402

import compress  # noqa: E402
from by_hand import quantize_by_hand  # noqa: E402
from compress.runner.checks import resolve_inputs  # noqa: E402
from compress.data.feeds import load_dataset  # noqa: E402
from compress.quant.swish import equalize as swish_equalize
from compress.quant.swish import sites as swish_sites  # noqa: E402
from compress.quant.passes.hard_swish import channel_ranges  # noqa: E402

LARGER_PROSE = ("argparse", "csv", "heapq", "collections", "functools", "itertools", "os",
                "re", "typing", "logging", "subprocess", "pathlib", "inspect", "asyncio",
                "email", "http.client")


def _larger_evaluation() -> list[dict]:
    import text_orientation as t
    saved = t.PARAGRAPHS, t.EVAL_PROSE
    t.PARAGRAPHS, t.EVAL_PROSE = 70, LARGER_PROSE
    try:
        return t.evaluation()
    finally:
        t.PARAGRAPHS, t.EVAL_PROSE = saved


def _outputs(path, feeds: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """(logits, probabilities) of the first row of every feed (its rows are copies)."""
    import onnx

    from compress.quant.float_probe import tensor_values
    model = onnx.load(str(path))
    softmax = next(n for n in model.graph.node if n.op_type == "Softmax")
    logits, probabilities = softmax.input[0], model.graph.output[0].name
    rows = list(tensor_values(model, [logits, probabilities], feeds))
    return tuple(np.concatenate([r[name][:1] for r in rows]) for name in (logits, probabilities))


def _sqnr(got: np.ndarray, want: np.ndarray) -> float:
    return float(10 * np.log10((want ** 2).sum() / ((got - want) ** 2).sum()))


def _row(label: str, path, sets: dict, references: dict) -> str:
    cells = []
    for name, feeds in sets.items():
        logits, probabilities = _outputs(path, feeds)
        want_logits, want_probabilities = references[name]
        agree = (probabilities.argmax(1) == want_probabilities.argmax(1)).mean()
        cells += [f"{_sqnr(logits, want_logits):.1f}", f"{_sqnr(probabilities, want_probabilities):.1f}",
                  f"{agree:.3f}"]
    return f"| {label} | " + " | ".join(cells) + " |"


def _p50s(paths: dict, feed: dict) -> dict:
    """p50 ms of each file, timed as the anchors time them: in turns, 8 rounds of 60
    runs of `python -m runtimes bench` (2 threads), each a fresh process."""
    return conformance.time_side_by_side(paths, feed, list(feed), rounds=8, runs=60)


def mobilenet_v3() -> None:
    subject = _subject("mobilenetv3")
    with tempfile.TemporaryDirectory() as folder:
        pipeline = compress.pipeline(
            name="mobilenet-v3-int8", output=folder, model={"onnx": str(subject.fp32)},
            data=subject.data, stages=[{"type": "quantize", "scheme": "int8-static",
                                        "equalize_hard_swish": True}])
        resolved = resolve_inputs(pipeline)
        calibration = load_dataset(resolved, "calibration", resolved.model.inputs).take(SAMPLES)
        quantize_by_hand(subject.fp32, calibration, Path(folder) / "by_hand.onnx")
        result = compress.run(pipeline, quiet=True)
        artifact = result.artifacts[-1]
        print("equalization:", artifact.meta["hard_swish_equalization"])
        p50 = _p50s({"FP32": subject.fp32, "by hand": Path(folder) / "by_hand.onnx",
                     "the stage": result.run_dir / artifact.path}, calibration[0])
    print("p50, batch 1, 2 threads, 8 rounds in turns: " + ", ".join(
        f"{label} {ms:.2f} ms" for label, ms in p50.items())
        + f"; the stage's over by hand's: {p50['the stage'] / p50['by hand']:.3f}x")


def _equalized_files(by_hand: Path, ranges: dict, headrooms: list[float], folder) -> dict:
    """{label: the by-hand file equalized with each HEADROOM}; the default's restored."""
    import onnx
    files, default = {}, swish_equalize.HEADROOM
    try:
        for headroom in sorted({*headrooms, default}):
            swish_equalize.HEADROOM, model = headroom, onnx.load(str(by_hand))
            report = swish_equalize.equalize(model, ranges)
            path = Path(folder) / f"h{headroom:g}.onnx"
            onnx.save(model, str(path))
            files[f"equalized, HEADROOM {headroom:g}{' (the default)' * (headroom == default)}"
                  f" (s median {report['scale_median']}, max {report['scale_max']})"] = path
    finally:
        swish_equalize.HEADROOM = default
    return files


def orientation(headrooms: list[float]) -> None:
    import onnx
    subject = _subject("orientation")
    pipeline = compress.pipeline(name="hard-swish", output=tempfile.gettempdir(),
                                 model={"onnx": str(subject.fp32)}, data=subject.data,
                                 stages=[{"type": "quantize", "scheme": "int8-static"}])
    resolved = resolve_inputs(pipeline)
    calibration = load_dataset(resolved, "calibration", resolved.model.inputs).take(SAMPLES)
    sets = {"64": list(load_dataset(resolved, "evaluation", resolved.model.inputs).feeds),
            "288": _larger_evaluation()}
    references = {name: _outputs(subject.fp32, feeds) for name, feeds in sets.items()}
    with tempfile.TemporaryDirectory() as folder:
        by_hand = Path(folder) / "by_hand.onnx"
        quantize_by_hand(subject.fp32, calibration, by_hand)
        sites = swish_sites.find_sites(onnx.load(str(by_hand)))
        # the pre-processed float model keeps the float file's tensor names
        ranges, _ = channel_ranges(onnx.load(str(subject.fp32)),
                                    [n for s in sites for n in (s.x, s.y)], calibration)
        files = {"by hand (quantize_static)": by_hand}
        nncf = OUT / conformance.slug(subject.name) / "nncf.onnx"
        files.update({"NNCF (make anchors)": nncf} if nncf.is_file() else {})
        files.update(_equalized_files(by_hand, ranges, headrooms, folder))
        print(f"{len(sites)} sites\n\n| file | logits dB (64) | probabilities dB (64) | top-1 (64) "
              "| logits dB (288) | probabilities dB (288) | top-1 (288) |\n|---|" + "---:|" * 6)
        for label, path in files.items():
            print(_row(label, path, sets, references), flush=True)
        default = Path(folder) / f"h{swish_equalize.HEADROOM:g}.onnx"
        p50 = _p50s({"by hand": by_hand, "equalized": default},
                    {k: v[:1] for k, v in sets["64"][0].items()})
    print(f"\np50, batch 1, 2 threads, 8 rounds in turns: by hand {p50['by hand']:.2f} ms, equalized "
          f"(the default) {p50['equalized']:.2f} ms: {p50['equalized'] / p50['by hand']:.3f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--headroom", nargs="+", type=float, default=[1, 1.5, 2, 3, 4, 8])
    parser.add_argument("--mobilenetv3", action="store_true",
                        help="time the equalized layout on MobileNetV3-Large instead")
    args = parser.parse_args()
    mobilenet_v3() if args.mobilenetv3 else orientation(args.headroom)


if __name__ == "__main__":
    main()
