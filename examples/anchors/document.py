"""docs/anchors.md from run.py's rows: one table per model, a row per tool."""
from __future__ import annotations

from typing import NamedTuple, Optional


class Tool(NamedTuple):
    label: str
    reference: Optional[str]  # the tool whose outputs and p50 this one is judged against


TOOLS = {
    "fp32": Tool("ONNX FP32 (the reference)", None),
    "pipeline": Tool("this pipeline, ONNX int8-static (defaults)", "fp32"),
    "by_hand": Tool("onnxruntime quantize_static by hand (QDQ U8S8, per-channel, MinMax)",
                    "fp32"),
    "nncf": Tool("NNCF nncf.quantize, defaults (ONNX)", "fp32"),
    "tflite-fp32": Tool("TFLite FP32 (the pipeline's export; the TFLite reference)", "fp32"),
    "tflite-pipeline": Tool("this pipeline, TFLite export.tflite int8 (defaults)",
                            "tflite-fp32"),
    "tflite-aeq": Tool("ai-edge-quantizer static_wi8_ai8, defaults (TFLite)", "tflite-fp32"),
}
DASH = "—"


def _label(key: str, tool: dict) -> str:
    label = TOOLS[key].label
    if tool.get("load_error"):
        upgraded = tool["opset_upgraded"]
        label += (f"; **does not load** (opset {upgraded['from']}), figures after upgrading "
                  f"to opset {upgraded['to']} by hand")
    if tool.get("same_file_as"):
        label += f"; the same file as “{TOOLS[tool['same_file_as']].label}”, byte for byte"
    return label


def _number(value, form: str) -> str:
    return DASH if value is None else format(value, form)


def _speedup(key: str, tool: dict, tools: dict) -> str:
    reference = tools.get(TOOLS[key].reference or "", {})
    if "p50_ms" not in reference:
        return DASH
    return f"{reference['p50_ms'] / tool['p50_ms']:.2f}x"


def _convolutions(tool: dict) -> str:
    counts = tool.get("convolutions")
    if counts is None:
        return DASH
    return f"{counts['integer']} / {counts['integer'] + counts['float']}"


def _seconds(tool: dict) -> str:
    if tool.get("export_seconds") is not None:
        return f"{tool['export_seconds']:.1f} (its export)"
    return _number(tool.get("seconds"), ".1f")


def _cells(key: str, tool: dict, tools: dict, classifier: bool, labelled: bool) -> list[str]:
    fidelity = tool.get("fidelity", {})
    if TOOLS[key].reference is None:
        cells = ["reference"] * 3
    else:
        cells = [_number(fidelity.get("top1_agreement"), ".4f") if classifier else DASH,
                 _number(fidelity.get("cosine"), ".5f"), _number(fidelity.get("sqnr_db"), ".1f")]
    if labelled:
        cells.append(_number(fidelity.get("accuracy"), ".3f"))
    return cells + [_convolutions(tool), _number(tool.get("p50_ms"), ".2f"),
                    _speedup(key, tool, tools), _seconds(tool)]


def render_model(row: dict) -> str:
    tools, classifier = row["tools"], row["classifier"]
    labelled = any("accuracy" in t.get("fidelity", {}) for t in tools.values())
    header = ["tool", "top-1 agreement", "cosine", "SQNR dB"] + (["accuracy"] if labelled else [])
    header += ["int8 convs (ORT)", "p50 ms", "speed-up vs its FP32", "quantize time s"]
    inputs = "; ".join(f"`{name}` [{','.join(map(str, shape))}]"
                       for name, shape in row["feed"].items())
    lines = [f"### {row['name']} ({row['package']})", "",
             f"One call: {inputs}. {row['calibration_feeds']} calibration feeds, "
             f"{row['evaluation_feeds']} evaluation feeds.", "",
             "| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for key, tool in tools.items():
        if "error" in tool:
            cells = [tool["error"]] + [DASH] * (len(header) - 2)
        else:
            cells = _cells(key, tool, tools, classifier, labelled)
        lines.append(f"| {_label(key, tool)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render(rows: list[dict]) -> str:
    return "\n".join(render_model(row) for row in rows)


PREAMBLE = """# Anchors: this pipeline beside the tools a user would otherwise reach for

Written by `make anchors` (`examples/anchors/run.py`); do not edit by hand.

Every CNN of the conformance corpus (docs/conformance.md: the OCR recognizer, a CNN with a
BiLSTM, the int8 keyword spotter, MiniLM and the GRU are left out) is quantized **in one
run, on the same data**, by four tools, each as its documentation shows it:

- **this pipeline**: the corpus entry's stages with the pipeline's defaults
  (`compress.run`; int8-static for ONNX, `export.tflite` mode int8 for TFLite);
- **quantize_static by hand**: onnxruntime's `quant_pre_process` then `quantize_static`,
  QDQ, uint8 activations, int8 per-channel weights, MinMax
  (`examples/conformance/by_hand.py`);
- **NNCF** 3.4.0: `nncf.quantize(onnx.load(fp32), nncf.Dataset(feeds))` with its defaults
  (preset performance, fast bias correction), in `.venv-nncf` (`make nncf-env`), called
  through `examples/anchors/nncf_worker.py`;
- **ai-edge-quantizer**, for the models the pipeline also exports to TFLite: its
  `static_wi8_ai8` recipe, `calibrate`, `quantize`, on the pipeline's float TFLite file,
  with nothing added (the pipeline widens the int8 output ranges to the float model's
  extremes and corrects biases).

Every ONNX tool starts from the same FP32 ONNX file (the package's own file, or the
pipeline's torch export for CREPE and EfficientNet-Lite0) and gets the same calibration
feeds (the corpus' calibration loader, at most 256 feeds).

What the columns hold:
- fidelity, against the reference's outputs on the same evaluation feeds (the corpus'
  evaluation loader): top-1 agreement of the first output's rows (classifiers only;
  for CREPE a row is a frame and the top class its pitch bin), mean cosine of rows and
  SQNR of the worst output, accuracy where the data has labels. The references: ONNX FP32
  for the ONNX rows and for the TFLite FP32 file; TFLite FP32 for the TFLite int8 rows.
- int8 convs (ORT): how many convolutions onnxruntime's CPU provider runs as QLinearConv
  once its graph optimizations have fused the QDQ nodes, of all of them; the others run in
  float between DequantizeLinear nodes, which is where a QDQ file's speed goes.
- p50: one call as shown above each table, 2 threads, `python -m runtimes bench` in a
  fresh process each time (ONNX on onnxruntime's CPU provider, TFLite on LiteRT with
  XNNPACK); all of a model's files are timed in turns, round after round, and the p50 is
  pooled over the rounds. A file that is byte for byte another tool's is timed once.
  Speed-up is against the same reference as the fidelity (so the TFLite FP32 row compares
  LiteRT with onnxruntime). The machine is a shared VM: ratios measured side by side hold
  better than absolute times, and they still move by up to ~25% from run to run.
- quantize time: the wall time of the quantization as each tool ran it here. Pipeline
  ONNX: the whole quantize stage as its runner timed it (pre-processing, opset upgrade
  where needed, calibration, quantization, checks). By hand: quant_pre_process plus quantize_static. NNCF: the
  nncf.quantize call. ai-edge-quantizer: calibrate plus quantize plus export. Pipeline
  TFLite: the whole export.tflite int8 stage, which converts from torch again, quantizes
  with two range estimators, rounds (GPTQ) and corrects biases, keeps the best of its
  candidates on calibration feeds (docs/tflite.md) and checks the result; the FP32 rows
  show their export.

Reading the tables:
- The pipeline's int8-static is onnxruntime's quantizer with the same settings as by
  hand, so it gives the same file or one that differs only where the pipeline's
  pre-processing differs; what it adds is what the by-hand user meets first: a file
  that does not load on opset 11 and 12 models until its opset is raised.
- NNCF with its defaults writes QDQ files that onnxruntime's CPU provider mostly runs in
  float (the int8 convs column): on this provider they are slower than FP32. NNCF lays
  its QDQ graphs out for OpenVINO, which this table does not time.
- ai-edge-quantizer's defaults take each tensor's range as the average of per-sample
  minima and maxima, which clips the outputs of a classifier (see
  `widen_output_ranges` in export/tflite.py); the pipeline widens the output ranges to
  the float model's extremes, also tries the extremes for every tensor, rounds weights
  with GPTQ and corrects biases, keeping what scores best on the calibration feeds:
  that is what its longer quantize time buys.
- The orientation classifier's hard-swish (x * HardSigmoid(x)) has no QDQ kernel for
  its HardSigmoid, which stays float between DequantizeLinear and QuantizeLinear nodes,
  and makes by hand's int8 barely faster than FP32 (docs/conformance.md). The
  pipeline's file equalizes the 13 hard-swishes that feed depthwise convolutions
  (docs/rounding.md, "Hard-swish equalization"): their HardSigmoid becomes a 1x1
  depthwise QLinearConv, hence its 45 int8 convs, and the file runs as fast as by
  hand's or faster, and closer to FP32 than NNCF's.
"""


def render_document(rows: list[dict], host: dict, command: str) -> str:
    machine = (f"Measured on {host['cpu']} ({host['arch']}, {host['cores']} cores, "
               f"{' '.join(host['cpu_flags'])}), {command}.")
    return f"{PREAMBLE}\n{machine}\n\n{render(rows)}"
