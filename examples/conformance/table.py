"""The conformance table (docs/conformance.md) from run.py's rows."""
from __future__ import annotations

HEADER = ("| model | package | exporter, opset | inputs (one call) | what ran | INT8 fidelity "
          "to FP32: cosine / SQNR | speed-up p50 vs FP32 | time to compress | fidelity floor "
          "(calibration SQNR; recovery) | recommended on host-cpu | quantize_static by hand: "
          "cosine / SQNR, speed-up, time |",
          "|---|---|---|---|---|---|---:|---:|---|---|---|")


def _inputs(row: dict) -> str:
    return "; ".join(f"`{d['name']}` [{','.join('?' if s is None else str(s) for s in d['shape'])}]"
                     f" {d['dtype']}" for d in row["inputs"])


def _exporter(row: dict) -> str:
    source = row["artifacts"][0]
    meta = source["meta"]
    if source["format"] == "tflite":
        return "TFLite converter"
    if source["format"] == "torch":
        fp32 = next(a for a in row["artifacts"] if a["format"] == "onnx")
        return f"torch ({fp32['meta'].get('exporter')} exporter) → ONNX opset {fp32['meta'].get('opset')}"
    return f"{meta.get('producer') or 'unnamed'}, opset {meta.get('opset')}"


def _measured(row: dict, artifact: str) -> str:
    """The pipeline's own benchmark of an artifact that has no column of its own (a
    TFLite variant): fidelity to the source, speed-up against its baseline."""
    bench = next((b for b in row["benchmarks"] if b["artifact"] == artifact), None)
    gain = next((g for g in row["gains"] if g["artifact"] == artifact), None)
    if bench is None or not bench.get("metric"):
        return ""
    details = bench["metric"]["details"]
    speed = f", {gain['speedup_p50']:.2f}x vs {gain['baseline']}" if gain else ""
    return f" ({details['cosine']:.4f} / {details['sqnr_db']:.1f} dB{speed})"


def _what_ran(row: dict) -> str:
    steps = []
    for artifact in row["artifacts"][1:]:
        if artifact["id"].startswith("baseline"):
            continue
        meta = artifact["meta"]
        upgraded = meta.get("opset_upgraded")
        step = f"{artifact['stage']} → {artifact['format']} {artifact['precision']}"
        if meta.get("scheme"):
            step = f"quantize {meta['scheme']} → {artifact['format']}"
        if upgraded:
            step += f" (opset {upgraded['from']}→{upgraded['to']})"
        if artifact["format"] == "tflite":
            step += _measured(row, artifact["id"])
        steps.append(step)
    return "; ".join(steps + ["benchmark"]) if steps else "benchmark (already int8)"


def _fidelity(f: dict | None) -> str:
    if not f:
        return "—"
    text = f"{f['cosine']:.4f} / {f['sqnr_db']:.1f} dB"
    return text + (f", accuracy {f['accuracy']:.3f}" if "accuracy" in f else "")


def _seconds(row: dict) -> str:
    """The stages from the source to the INT8 model (export included), as they ran."""
    by_id = {a["id"]: a for a in row["artifacts"]}
    artifact, total = by_id.get("int8"), 0.0
    if artifact is None:
        return "—"
    while artifact is not None and artifact["stage"] != "source":
        total += artifact["meta"].get("seconds", 0.0)
        artifact = by_id.get(artifact["parent"])
    return f"{total:.1f} s"


def _by_hand(row: dict) -> str:
    if "fidelity" not in row:
        return "n/a"
    p50 = row["p50_ms"]
    text = (f"{_fidelity(row['fidelity']['by_hand'])}, {p50['fp32'] / p50['by_hand']:.2f}x, "
            f"{row['by_hand_seconds']:.1f} s")
    if row.get("by_hand_identical"):
        text = f"the same file, byte for byte; {row['by_hand_seconds']:.1f} s"
    if row.get("by_hand_load_error"):
        up = row["by_hand_opset_upgraded"]
        text = (f"**does not load** (opset {up['from']}); after upgrading to {up['to']} by "
                f"hand: {text}")
    return text


def _speedup(row: dict) -> str:
    if "p50_ms" in row:
        p50 = row["p50_ms"]
        return f"{p50['fp32'] / p50['pipeline']:.2f}x"
    gains = [g for g in row["gains"] if g["target"] == "host-cpu"]
    if gains:
        return ", ".join(f"{g['speedup_p50']:.2f}x" for g in gains)
    return "; ".join(f"p50 {b['latency_ms']['p50']:.3f} ms" for b in row["benchmarks"])


def _floor(row: dict) -> str:
    """int8-static's fidelity floor on the pipeline's INT8: held as quantized, or what the
    recovery reached and with which layers."""
    floor = next((a["meta"].get("fidelity_floor") for a in row["artifacts"]
                  if a["meta"].get("fidelity_floor")), None)
    if not floor:
        return "—"
    if floor["sqnr_db"] >= floor["floor_db"]:
        return f"held ({floor['sqnr_db']:.1f} dB)"
    if not floor.get("recovered"):
        return f"**under** ({floor['sqnr_db']:.1f} dB), not recovered"
    layers = ", ".join(f"{layer['layer']}: {layer['precision']}"
                       for layer in floor.get("layers") or []) or "none kept"
    reached = "holds" if floor["held"] else "**still under**"
    return (f"{floor['sqnr_db']:.1f} → {floor['sqnr_db_after']:.1f} dB ({reached}; "
            f"{len(floor.get('layers') or [])} layers: {layers})")


def _recommended(row: dict) -> str:
    pick = next((r for r in row.get("recommendations") or [] if r["target"] == "host-cpu"), None)
    if pick is None or not pick.get("artifact"):
        return "nothing fits" if pick else "—"
    return f"{pick['artifact']} ({pick['precision']}, {pick['status']})"


def render(rows: list[dict]) -> str:
    lines = list(HEADER)
    for row in rows:
        pipeline = (row.get("fidelity") or {}).get("pipeline")
        lines.append(f"| {row['name']} | {row['package']} | {_exporter(row)} | {_inputs(row)} | "
                     f"{_what_ran(row)} | {_fidelity(pipeline)} | {_speedup(row)} | "
                     f"{_seconds(row)} | {_floor(row)} | {_recommended(row)} | "
                     f"{_by_hand(row)} |")
    return "\n".join(lines) + "\n"


PREAMBLE = """# Conformance corpus: models this project did not write

Written by `make conformance` (`examples/conformance/run.py`); do not edit by hand.

Every model comes from a pip package with its weights inside (or, for the GRU, is trained
here on MNIST by `examples/conformance/stateful/train.py`) and is fed real data: photos
from scikit-image and scikit-learn, text rendered in real fonts, speech recorded once with
espeak-ng (`examples/conformance/data/`), MNIST rows (see each loader's docstring). Each
runs through the pipeline that fits it with the pipeline's defaults, built from Python
(`examples/conformance/corpus.py`), and benchmarked on host-cpu (batch as the model takes
one call, 2 threads).

Beside it, **in the same run on the same data**, onnxruntime's `quantize_static` by hand
(`by_hand.py`: `quant_pre_process`, then QDQ, uint8 activations, int8 per-channel
weights, MinMax, the same calibration feeds) quantizes the same FP32 ONNX file. Both INT8
models are judged by the same code against that FP32 file's outputs on the same
evaluation feeds (cosine of rows, and SQNR, of the worst output; accuracy where the data
has labels), and timed side by side in turns by the same runner (`python -m runtimes
bench`, a fresh process each time; p50 pooled over the rounds). `make conformance` fails
when the pipeline's INT8 is less faithful than the by-hand one on any model, or when the
variant recommended for host-cpu is under the fidelity floor (10 dB of its worst output's
SQNR on the evaluation feeds) with no verdict saying so. The floor column is int8-static's
own floor on its calibration check: held as quantized, or what the recovery reached and
which layers kept more bits (docs/int8.md, "The fidelity floor and recovery").

Reading the table:
- "does not load": per-channel QDQ needs opset 13 and `quantize_static` does not raise a
  model's opset, so on the opset 11 and 12 models the by-hand file is refused by
  onnxruntime (`Unrecognized attribute: axis for operator DequantizeLinear`); the pipeline
  upgrades the opset with onnx's version converter first and records it. The by-hand
  figures are then taken after the same upgrade done by hand.
- The pipeline's int8-static is the same quantizer with the same settings, so where it
  ran the same steps it gives the same file ("the same file, byte for byte"; where the
  files differ, in the pre-processing a failed shape inference left out, the figures are
  given); its bias correction of ONNX models is off by default
  because on this corpus it lowered fidelity on two models (it stays a setting; see
  docs/results.md for EfficientNet-Lite0, where it helps).
- MiniLM: the pipeline's INT8 for a transformer is int8-dynamic; static QDQ by hand
  breaks its embeddings.
- A speed-up below 1 means the INT8 model runs slower than FP32 on onnxruntime's CPU
  provider: the orientation classifier's HardSwish and the GRU have no QDQ kernel, so
  they stay float between DequantizeLinear and QuantizeLinear nodes (the pipeline's
  orientation file turns 13 of its 30 hard-sigmoids into integer convolutions:
  docs/rounding.md, "Hard-swish equalization"). The machine is a shared VM: speed-ups of
  the same file vary by up to ~25% from run to run.
- The keyword spotter ships already int8 (with its state in resource variables): it is
  benchmarked as it is; there is nothing to quantize and no FP32 to compare with.
"""


def render_document(rows: list[dict], host: dict, command: str) -> str:
    machine = (f"Measured on {host['cpu']} ({host['arch']}, {host['cores']} cores, "
               f"{' '.join(host['cpu_flags'])}), {command}.")
    return f"{PREAMBLE}\n{machine}\n\n{render(rows)}"
