"""How techniques.py judges a quantized model, against the FP32 model's outputs on the
evaluation feeds (output SQNR; top-1 agreement for a classifier; anchor SQNR and box F1
for a detector: docs/int8.md says what each is), and the document it writes.
"""
from __future__ import annotations

import numpy as np

import ddddocr_det
from runtimes.metrics import feed_fidelity

ANCHOR_SCORE = 0.1
ESTIMATORS = ("minmax", "mean_minmax", "mse", "percentile")
# the columns of a model's table: (key, heading, format)
FIGURES = {"classifier": (("top1", "top-1 agreement", "{:.3f}"),
                          ("sqnr_db", "output SQNR (dB)", "{:.2f}")),
           "detector": (("anchor_sqnr_db", "anchor SQNR (dB)", "{:.2f}"),
                        ("box_f1", "box F1", "{:.3f}"), ("sqnr_db", "output SQNR (dB)", "{:.2f}"))}


def anchors(kind: str, output: list) -> tuple[np.ndarray, np.ndarray]:
    """(anchor rows [n, values], their scores [n]) of one feed's outputs."""
    if kind == "yolov8":          # [1, 4 + classes, anchors]: cx, cy, w, h, class scores
        rows = output[0][0].T
        return rows, rows[:, 4:].max(axis=1)
    rows = output[0][0]           # yolox: [1, anchors, 6]: box, objectness, class score
    return rows, rows[:, 4] * rows[:, 5]


def anchor_sqnr(kind: str, outputs: list, reference: list) -> float:
    signal = noise = 0.0
    for out, ref in zip(outputs, reference):
        (got, _), (want, score) = anchors(kind, out), anchors(kind, ref)
        keep = score > ANCHOR_SCORE
        signal += float((want[keep] ** 2).sum())
        noise += float(((got[keep] - want[keep]) ** 2).sum())
    return 10 * np.log10(signal / noise) if noise else float("inf")


def boxes(kind: str, output: list) -> list[tuple]:
    """[(x0, y0, x1, y1), class] of one feed, as the model's package decodes them:
    ddddocr's own steps; NudeNet's: class score >= 0.25, class-agnostic NMS at 0.45."""
    if kind == "yolox":
        return [(box, 0) for box in ddddocr_det.detect(output[0], 1.0)]
    rows = output[0][0].T
    scores, classes = rows[:, 4:].max(axis=1), rows[:, 4:].argmax(axis=1)
    corners = np.concatenate([rows[:, :2] - rows[:, 2:4] / 2, rows[:, :2] + rows[:, 2:4] / 2], 1)
    keep = np.flatnonzero(scores >= 0.25)
    kept = ddddocr_det._nms(corners[keep], scores[keep], 0.45, keep)  # plain greedy NMS
    return [(tuple(corners[i]), int(classes[i])) for i in kept]


def box_f1(kind: str, outputs: list, reference: list) -> tuple[float, int]:
    """(F1 of the boxes against the FP32 model's, how many boxes the FP32 model found)."""
    hits = found = wanted = 0
    for out, ref in zip(outputs, reference):
        got, want = boxes(kind, out), boxes(kind, ref)
        found, wanted, used = found + len(got), wanted + len(want), set()
        for box, label in want:
            match = next((i for i, (other, cls) in enumerate(got) if i not in used
                          and cls == label and ddddocr_det.box_iou(box, other) >= 0.5), None)
            if match is not None:
                used.add(match)
                hits += 1
    return 2 * hits / max(found + wanted, 1), wanted


def scores(kind: str, outputs: list, reference: list) -> dict:
    """The figures of one variant: sqnr_db, and top1 or anchor_sqnr_db + box_f1."""
    fidelity = feed_fidelity(outputs, reference)
    row = {"sqnr_db": fidelity["sqnr_db"]}
    if kind == "classifier":
        row["top1"] = fidelity["top1_agreement"]
    else:
        row["anchor_sqnr_db"] = anchor_sqnr(kind, outputs, reference)
        row["box_f1"], row["fp32_boxes"] = box_f1(kind, outputs, reference)
    return row


def _seconds(steps: dict) -> str:
    return " + ".join(f"{seconds:.2f} {step}" for step, seconds in steps.items())


def model_table(result: dict) -> list[str]:
    """One model's heading and rows: figures, each step's seconds, what it reported."""
    classifier = result["kind"] == "classifier"
    figures = FIGURES["classifier" if classifier else "detector"]
    found = "" if classifier else f" The FP32 model finds {result['rows'][0]['fp32_boxes']} boxes."
    lines = [f"### {result['name']}", "",
             f"{'classifier' if classifier else 'detector'}; FP32 `{result['fp32']}`; "
             f"{result['calibration']} calibration feeds, {result['evaluation']} evaluation "
             f"feeds; preparing the float model all but by hand start from: "
             f"{result['prepare_seconds']:.2f} s.{found}", "",
             "| technique | " + " | ".join(f[1] for f in figures) + " | seconds | note |",
             "|---|" + "---:|" * len(figures) + "---|---|"]
    for row in result["rows"]:
        cells = [fmt.format(row[key]) for key, _, fmt in figures]
        lines.append(f"| {row['name']} | " + " | ".join(cells)
                     + f" | {_seconds(row['steps'])} | {row['note']} |")
    return lines + [""]


def _row(result: dict, name: str) -> dict:
    return next(row for row in result["rows"] if row["name"] == name)


def _key(result: dict) -> str:
    """The SQNR compared across techniques: the output's for a classifier, the anchors'
    (those post-processing keeps) for a detector."""
    return "sqnr_db" if result["kind"] == "classifier" else "anchor_sqnr_db"


def _gain(result: dict, name: str) -> float:
    return _row(result, name)[_key(result)] - _row(result, "minmax")[_key(result)]


def _delta(result: dict, name: str) -> str:
    """`name` against minmax alone."""
    if result["kind"] != "classifier":
        return f"{_gain(result, name):+.2f} dB"
    top1 = _row(result, name)["top1"] - _row(result, "minmax")["top1"]
    return f"{_gain(result, name):+.2f} dB (top-1 {top1:+.3f})"


def _spread(result: dict, suffix: str) -> str:
    """max - min of the SQNR that matters over minmax and its jittered copies (+ suffix)."""
    key = _key(result)
    values = [row[key] for row in result["rows"] if row["name"] == "minmax" + suffix or (
        row["name"].startswith("minmax, ranges") and row["name"].endswith(")" + suffix))]
    return f"{max(values) - min(values):.2f} dB"


COMPARED = ("mean_minmax", "mse", "percentile", "CLE + minmax", "minmax + fast BC",
            "percentile + fast BC", "minmax + GPTQ", "minmax + GPTQ + fast BC",
            "minmax + sequential BC", "pipeline default (int8-static)")


def delta_table(results: list) -> list[str]:
    """Each technique against minmax alone, on the SQNR that matters per model (output
    SQNR for the classifiers, anchor SQNR for the detectors), with the noise band."""
    lines = ["| against minmax | " + " | ".join(r["name"] for r in results) + " |",
             "|---|" + "---:|" * len(results)]
    for name in COMPARED:
        lines.append(f"| {name} | " + " | ".join(_delta(r, name) for r in results) + " |")
    for label, suffix in (("noise: minmax, ranges +-0.1% (spread of 3)", ""),
                          ("noise: the same + fast BC (spread of 3)", " + fast BC")):
        lines.append(f"| {label} | " + " | ".join(_spread(r, suffix) for r in results) + " |")
    return lines


def _bullets(results: list, line) -> str:
    return "\n".join(f"- {r['name']}: {line(r)}" for r in results)


def _ranges(result: dict) -> str:
    text = "; ".join(f"{name} {_delta(result, name)}" for name in ESTIMATORS[1:])
    if result["kind"] != "classifier":
        text += "; box F1: " + ", ".join(f"{name} {_row(result, name)['box_f1']:.2f}"
                                         for name in ESTIMATORS)
    return text


def _sequential(result: dict) -> str:
    fast, slow = _row(result, "minmax + fast BC"), _row(result, "minmax + sequential BC")
    return (f"sequential {_gain(result, slow['name']):+.2f} dB in "
            f"{slow['steps']['sequential BC']:.1f} s ({slow['note'].split(', ')[-1]}), fast "
            f"{_gain(result, fast['name']):+.2f} dB in {fast['steps']['fast BC']:.1f} s")


def _slower(results: list) -> str:
    """How many times as long the sequential correction took as the fast one: low-high."""
    ratios = [_row(r, "minmax + sequential BC")["steps"]["sequential BC"]
              / _row(r, "minmax + fast BC")["steps"]["fast BC"] for r in results]
    return f"{min(ratios):.0f}-{max(ratios):.0f}"


def render(results: list, command: str, elapsed: float, host: dict, when: str) -> str:
    """docs/int8.md: the techniques, the tables, the defaults and why."""
    tables = [line for result in results for line in model_table(result)]
    return DOCUMENT.format(
        when=when, command=command, minutes=elapsed / 60, cpu=host["cpu"],
        cores=host["cores"], arch=host["arch"], flags=", ".join(host["cpu_flags"]),
        tables="\n".join(tables), deltas="\n".join(delta_table(results)),
        ranges=_bullets(results, _ranges),
        checked=_bullets(results, lambda r: "{}; unconditionally: fast BC {}, GPTQ {}, GPTQ + "
                         "fast BC {}".format(_row(r, "pipeline default (int8-static)")["note"],
                                             *(_delta(r, f"minmax + {t}") for t in (
                                                 "fast BC", "GPTQ", "GPTQ + fast BC")))),
        sequential=_bullets(results, _sequential), slower=_slower(results),
        cle=_bullets(results, lambda r: _row(r, "CLE + minmax")["note"].split(" (")[0]
                     + f", {_delta(r, 'CLE + minmax')}"))


DOCUMENT = """# INT8 techniques on the corpus's image CNNs

What each INT8 technique in `compress/quant/` does to the four image CNNs of the
conformance corpus (docs/conformance.md), all on the same calibration and evaluation
feeds, and why int8-static's defaults are what they are. Every number below comes from
one run of `examples/conformance/techniques.py` ({when}, {minutes:.1f} min):

    make conformance   # the FP32 models, under runs/conformance
    {command}

Machine: {cpu}, {cores} cores ({arch}; {flags}); onnxruntime on the CPU, as many
threads as cores. The machine was shared: the seconds are what each step took here,
not a benchmark.

## The techniques

- **by hand**: onnxruntime's `quantize_static` as its documentation shows it
  (quant_pre_process, QDQ, uint8 activations, int8 per-channel weights, MinMax
  calibration) on the FP32 file (examples/conformance/by_hand.py): what a user gets
  without this pipeline.
- **range estimators** (compress/quant/ranges.py): activation ranges from one pass of
  the float model, handed to quantize_static as its calibration cache. `minmax`: lowest
  and highest value over all feeds (onnxruntime's MinMax). `mean_minmax`: the mean over
  feeds of each feed's lowest and highest value (NNCF's default): an outlier feed no
  longer widens every range, but its extremes are clipped. `percentile`: the 0.01th and
  99.99th percentiles of all values. `mse`: the range that minimises the expected
  squared uint8 error (clipping plus rounding), searched over a grid. The models' own
  outputs keep their full range under all four.
- **CLE**, cross-layer equalization (compress/quant/equalize.py): for Conv -> Conv pairs
  joined by ReLU-like ops, scales the first conv's output channels down and the second's
  input channels up so both have the same per-channel weight range; the float function
  is unchanged. Pairs with a bounded Clip (ReLU6) between are skipped: its bound cannot
  be scaled per channel. Here: CLE, then minmax.
- **fast BC**, fast bias correction (compress/quant/passes/fast_correction/onnx.py): one pass of the float
  model gives the per-channel mean of every Conv/Gemm input; the output mean shift that
  quantizing the weights and the input causes, W_q E[Q(x)] - W E[x], is taken off the
  bias. No quantized model is run. Here kept whatever it does.
- **GPTQ**, error-compensating weight rounding (compress/quant/passes/gptq_rounding/onnx.py): the int8
  weights of each Conv/Gemm rounded one input column at a time, each column's rounding
  error spread over the columns still to round against the layer's input second
  moments H = E[x x^T] (sampled input patches, hessian.py, from the float pass of fast BC);
  quantize_static's scales, zero points and integer range are kept. Here on minmax,
  alone and followed by fast BC, kept whatever they do.
- **sequential BC** (compress/quant/passes/sequential_correction/onnx.py): Nagel et al.'s empirical bias
  correction, layer by layer: the quantized model is run once per layer and each
  layer's output mean moved onto the float model's, earlier layers already corrected.
  That cost limits it here to some of the calibration feeds, spread over them (the
  row's note says how many; `--sequential-feeds`).
- **pipeline default**: int8-static with no options through `compress.run`: the opset
  per-channel QDQ needs, quant_pre_process, onnxruntime's MinMax calibration, then of
  the model as quantized, with fast BC, GPTQ-rounded, and GPTQ-rounded with fast BC, the
  one with the highest output SQNR against the float model on 32 of the calibration
  feeds (compress/quant/passes/onnx_backend.py); then, where hard-swish feeds depthwise
  convolutions, the same model with those channels equalized, kept if it scores higher
  by 0.5 dB (compress/quant/swish/equalize.py, docs/rounding.md). Seconds: the whole
  stage.
- **noise band**: minmax with every range moved by up to 0.1% (2 random draws), with and
  without fast BC. A change this small should not matter: how far it moves a figure is
  how much of any difference in that model's rows is noise.

## How they are judged

Against the FP32 model's outputs on the evaluation feeds
(examples/conformance/techniques_report.py): output SQNR (dB) for all; top-1
agreement for the classifiers; for the detectors the anchor SQNR, over the anchors the
FP32 model scores above 0.1 (what post-processing can keep: most of the output is
background), and box F1, the boxes as the model's package decodes them (ddddocr's own
steps; NudeNet's: class score >= 0.25, NMS at IoU 0.45) against the FP32 model's boxes
(IoU >= 0.5, same class). Every technique except by hand starts
from the same prepared float model (the opset, quant_pre_process: as int8-static
prepares it). The seconds of a row are its steps; a row built on another repeats that
row's steps.

## Results

{tables}
### Against minmax

The SQNR that matters (output SQNR for the classifiers, anchor SQNR for the
detectors) minus minmax's; top-1 agreement too for the classifiers. The noise rows:
how far that SQNR moved over minmax and its two jittered copies.

{deltas}

## Defaults and why

**Ranges: minmax.** No other estimator beats it across the models, and each loses
badly somewhere; on the YOLOv8n detector the clipping ones lose detections outright,
which its anchor SQNR hardly shows. Against minmax:

{ranges}

`calibration: mean_minmax | mse` (ranges.py) stay available for a model where they are
measured to help; `calibration: percentile` is onnxruntime's own calibrator (99.999 by
default), not the ranges.py percentile measured here. The pipeline default and by hand
take onnxruntime's MinMax calibrator, the minmax rows ranges.py's: the same ranges up to
float round-off, which alone moves the orientation classifier's output SQNR visibly
(by hand against minmax).

**Bias correction and weight rounding on ONNX: fast BC and GPTQ, checked on the
calibration feeds.** Each helps some models and costs others, so the pipeline measures:
the output SQNR against the float model on calibration feeds of the model as quantized,
corrected, and rounded (and corrected too where the correction beat the model as
quantized), and keeps the best. What the check kept (with its calibration SQNRs),
and what each gave kept whatever it does (against minmax, on the evaluation feeds):

{checked}

The whole stage with these defaults beside quantize_static by hand, and its time:
[rounding.md](rounding.md). `bias_correction: true` keeps fast BC always, `false` turns
it off; `weight_rounding: nearest` turns GPTQ off. The sequential
correction, which `bias_correction: true` used to run on ONNX, is retired from that
place: it took {slower} times as long as fast BC and came out below it on every model,
below even minmax alone on the SQNR that matters (clearly on YOLOv8n, within the noise
band on the orientation classifier). Against minmax:

{sequential}

`bias_correction: sequential` still runs it.

**CLE: opt-in** (`equalize: true`). With per-channel int8 weights these models give it
little to do; EfficientNet-Lite0's pairs mostly have a ReLU6 between (skipped), and
YOLOv8n and ddddocr's detector use SiLU, which equalization cannot pass:

{cle}

Its case is ReLU networks with very unequal channel ranges, per-tensor weights above
all.

The orientation classifier is the noisy one: moving its ranges by 0.1% moves its output
SQNR by several dB (the noise rows), so only differences well beyond that say anything
there.
"""
