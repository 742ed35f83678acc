"""By-hand experiment: onnxruntime static INT8 (QDQ) on the stateful GRU step, outside the
pipeline, to see whether the ONNX quantizer copes with a 0-d int64 input and a state input
whose batch is on axis 1.

    python examples/conformance/stateful/by_hand_quantize.py [--keep OUT.onnx]  # after train.py

Calibration: data.calibration() (94 feeds, realistic float states, training split).
Comparison: data.evaluation() (280 feeds of 10 held-out sequences), each feed run once by
FP32 and INT8 with the same float state ("open loop"); then, because a deployed INT8
model feeds itself its own states, every held-out sequence of the split run end to end by
each model ("closed loop"), comparing last-step accuracy.
onnxruntime's QDQ quantizer has no rule for GRU: it quantizes the step embedding, the Add
and the classifier head and leaves the GRU (about 90% of the weights, and the state) in
FP32, so the file barely shrinks. The INT8 model goes to a temporary folder (kept only with --keep), so the experiment
leaves no stray artifact beside the corpus files.
"""
import argparse
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat,
                                      QuantType, quantize_static)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import data  # noqa: E402

FP32 = HERE / "gru_step.onnx"
INPUTS = ("x", "h", "t")


class FeedReader(CalibrationDataReader):
    """Hands the calibration feeds to the calibrator one model call at a time."""

    def __init__(self, feeds: list):
        self._feeds = iter([{k: f[k] for k in INPUTS} for f in feeds])

    def get_next(self):
        return next(self._feeds, None)


def quantize(out: Path) -> float:
    start = time.perf_counter()
    quantize_static(str(FP32), str(out), FeedReader(data.calibration()),
                    quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8, per_channel=True,
                    calibrate_method=CalibrationMethod.MinMax)
    return time.perf_counter() - start


def session(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def open_loop(fp32, int8) -> dict:
    """Both models on the same evaluation feeds (same float state in each)."""
    feeds = data.evaluation()
    agree, cosines, state_err, steps = [], [], [], []
    for feed in feeds:
        inputs = {k: feed[k] for k in INPUTS}
        (ref, ref_h), (out, out_h) = fp32.run(None, inputs), int8.run(None, inputs)
        agree.append(ref.argmax() == out.argmax())
        if not agree[-1]:
            steps.append(int(feed["t"]))
        cosines.append(float(ref.ravel() @ out.ravel()
                             / (np.linalg.norm(ref) * np.linalg.norm(out))))
        state_err.append(float(np.abs(ref_h - out_h).max()))
    return {"feeds": len(feeds), "top1_agreement": float(np.mean(agree)),
            "mean_cosine": float(np.mean(cosines)), "min_cosine": float(np.min(cosines)),
            "max_abs_h_next": float(np.max(state_err)), "steps_that_disagree": steps}


def closed_loop(model) -> float:
    """Last-step accuracy over all held-out sequences, each model feeding itself its
    own state from the zero state, as a device would."""
    pixels, labels = data.images()
    test = data.split()[1]
    correct = 0
    for index in test:
        h = np.zeros(model.get_inputs()[1].shape, np.float32)
        for t in range(28):
            logits, h = model.run(None, {"x": pixels[index][t:t + 1], "h": h,
                                         "t": np.array(t, dtype=np.int64)})
        correct += int(logits.argmax() == labels[index])
    return correct / len(test)


def describe(path: Path) -> str:
    ops = Counter(node.op_type for node in onnx.load(str(path)).graph.node)
    return ", ".join(f"{op} x{n}" for op, n in sorted(ops.items()))


def report(int8_path: Path) -> None:
    seconds = quantize(int8_path)
    print(f"quantize_static (QDQ, QUInt8 activations, QInt8 per-channel weights) took "
          f"{seconds:.1f}s; INT8 {int8_path.stat().st_size / 1024:.0f} KB "
          f"(FP32 {FP32.stat().st_size / 1024:.0f} KB)")
    print(f"INT8 ops: {describe(int8_path)}")
    fp32, int8 = session(FP32), session(int8_path)
    print("INT8 inputs:", [(i.name, i.shape, i.type) for i in int8.get_inputs()])
    for key, value in open_loop(fp32, int8).items():
        print(f"  open loop {key}: {value}")
    print(f"  closed loop last-step accuracy on {len(data.split()[1])} test sequences: "
          f"FP32 {closed_loop(fp32):.4f}, INT8 {closed_loop(int8):.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", help="also copy the INT8 model here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        int8_path = Path(tmp) / "gru_step.int8.onnx"
        report(int8_path)
        if args.keep:
            shutil.copyfile(int8_path, args.keep)


if __name__ == "__main__":
    main()
