"""docs/memory.md from the results files examples/large_model/memory.py writes: the
tables of each run and the text around them (no figure in the text: every number comes
from a results file)."""
from __future__ import annotations

import json
from pathlib import Path


def table(results: dict) -> list[str]:
    size = results["model_bytes"]
    rows = ["| scheme | pipeline peak (VmHWM) | /usr/bin/time max RSS | runner peak, "
            "quantized / FP32 | stage time | quantized size | cosine vs FP32 | outputs: "
            "largest difference from before's |", "|---|---|---|---|---|---|---|---|"]
    for r in results["runs"]:
        diff = r.get("max_diff_vs_before")
        rows.append(
            f"| {r['scheme']} | {r['peak_rss_bytes'] / 2**30:.2f} GiB = "
            f"**{r['peak_rss_bytes'] / size:.2f}x** | {r['time_max_rss_bytes'] / size:.2f}x | "
            f"{r['runner_peak_mb'] * 2**20 / size:.2f}x / {r['runner_peak_fp32_mb'] * 2**20 / size:.2f}x"
            f" | {r['stage_seconds']:.1f} s | {r['size_bytes'] / 1e6:.0f} MB | {r['cosine']:.6f} | "
            f"{'' if diff is None else f'{diff:.3g}'} |")
    return rows


def steps_table(results: dict) -> list[str]:
    """The highest RSS sampled while each pipeline step ran, per scheme."""
    size, runs = results["model_bytes"], results["runs"]
    names = list(dict.fromkeys(name for r in runs for name in r["steps"]))
    rows = ["| step | " + " | ".join(r["scheme"] for r in runs) + " |",
            "|---|" + "---|" * len(runs)]
    for name in names:
        cells = [f"{r['steps'][name] / size:.2f}x" if name in r["steps"] else "" for r in runs]
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return rows


def summary(found: list[dict]) -> list[str]:
    """Pipeline peak per scheme, one column per results file."""
    size = found[0]["model_bytes"] if found else 1
    schemes = list(dict.fromkeys(r["scheme"] for results in found for r in results["runs"]))
    peaks = {(res["label"], r["scheme"]): r["peak_rss_bytes"] / size
             for res in found for r in res["runs"]}
    rows = ["", "Peak memory of the `compress run` process, as a multiple of the model:", "",
            "| scheme | " + " | ".join(res["label"] for res in found) + " |",
            "|---|" + "---|" * len(found)]
    for scheme in schemes:
        cells = [f"{peaks[res['label'], scheme]:.2f}x" if (res["label"], scheme) in peaks
                 else "" for res in found]
        rows.append(f"| {scheme} | " + " | ".join(cells) + " |")
    return rows


def write_docs(folder: Path, target: Path) -> None:
    found = [json.loads(p.read_text()) for p in sorted(folder.glob("results-*.json"))]
    found.sort(key=lambda r: r["label"] != "before")
    lines = [line.rstrip() for line in DOC_HEAD.splitlines()] + summary(found)
    for results in found:
        m = results["machine"]
        digests = sorted({r["source_sha256"] for r in results["runs"]})
        lines += ["", f"## {results['label']}", "", "Command:", "",
                  f"    {results['command']}", "", *([results["note"], ""]
                                                     if results.get("note") else []),
                  f"compress from {results['runs'][0]['compress_from']}; model "
                  f"{results['model_bytes']:,} bytes ({results['parameters']:,} float32 "
                  f"parameters); machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, "
                  f"{m['os']}, Python {m['python']}, onnx {m['onnx']}, onnxruntime "
                  f"{m['onnxruntime']}. The source copy (00-source) had sha256 "
                  f"{', '.join(d[:16] for d in digests)}… in "
                  f"{'every run' if len(digests) == 1 else 'the runs'}.", "",
                  *table(results), "",
                  "Highest RSS sampled (every 5 ms) while each step ran, as a multiple of "
                  "the model:", "", *steps_table(results)]
    target.write_text("\n".join(lines + DOC_TAIL.splitlines()) + "\n")


DOC_HEAD = """# Memory on large models

What `compress run` holds in memory while it quantizes a model of about 1 GB: a stack of
15 Linear layers of 4096 x 4096 float32 (Gemm with transB and MatMul + Add, ReLU between;
random weights with a fixed seed, `examples/large_model/model.py`), its weights in an
external data file; 16 calibration and 16 evaluation feeds of [8, 4096]. One pipeline
per scheme, each run alone: the quantize stage, then a benchmark on the host-cpu target
of 1 warm-up and 3 timed runs and the fidelity metric on the evaluation feeds (the
pipelines are written next to the model by the script).

Every figure is a multiple of the model's size on disk (.onnx + .data) unless it says
otherwise. *Pipeline peak* is the `compress run` process alone (its VmHWM); the
benchmark's runner is a subprocess that reports its own peak (*runner peak*, for the
quantized model and for the FP32 baseline it also measures). */usr/bin/time* reports
the larger of the two. *Cosine* is the mean cosine of the quantized model's outputs with
the FP32 model's on the evaluation feeds, as the benchmark measured it; the last column,
the largest absolute difference between the quantized model's outputs and those of the
model the "before" run made, on the same feeds (0: the very same numbers).

Reproduce (the model, data, pipelines and runs go to `build/large_model/`):

    git archive <commit> | tar -x -C /tmp/head     # "before": the code before the change
    .venv/bin/python examples/large_model/memory.py --label before --pythonpath /tmp/head
    .venv/bin/python examples/large_model/memory.py                 # "after": this checkout
"""
DOC_TAIL = """
## Where the memory went, and what changed

Before, each step that touched the model held it whole, several times over: the
preflight's `onnx_graph` loaded the weights to read the inputs and ran the checker on a
serialised copy; `write_source` loaded the model and serialised it again to inline the
external data; the quantize stage loaded it to check the opset, then onnxruntime's
`quant_pre_process` (symbolic shape inference, an optimised copy written through
onnxruntime, onnx shape inference through temporary files) and the quantizers
themselves (shape inference on a saved copy, float and quantized weights side by side,
the result serialised in memory) held several copies each (the step table above).

Now:
- the preflight reads the graph without the weights, and onnx's checker checks that
  graph with the large weights as graph inputs (their bytes are checked by onnxruntime
  loading the model right after);
- the source copy is written file to file, one tensor at a time
  (`compress/onnx_compat.copy_onnx`, `compress/model/onnx_file.py`), byte for byte the
  file `load_onnx` + `save_onnx` wrote before (the same artifact and digest);
- from `STREAMING_BYTES` (512 MiB) of weights the quantize stage takes the
  tensor-by-tensor path (`compress/quant/streamed*.py`): the graph is read without its
  weights, each MatMul/Gemm weight is read from the file when its node is quantized,
  quantized with onnxruntime's own functions (`quantize_data`,
  `compute_data_quant_params`, `quantize_onnx_initializer`, the MatMulNBits quantizer
  on one node at a time) and written to a scratch file at once; the output is assembled
  file to file. int8-static calibrates by running the source model in onnxruntime,
  reading its weights from the source file, with the wanted tensors as extra outputs.
  On models below the threshold nothing changed: onnxruntime's quantizers as before.

What is left at the peak is onnxruntime itself holding the float model: the preflight's
check that the model runs, the reference outputs the metric compares against, and
int8-static's calibration session.

## Limits of the tensor-by-tensor path

- It makes the graph onnxruntime's quantizers make for MatMul and Gemm layers (and ReLU
  after them for int8-static, Gather embeddings for int4), node for node; the tests
  (`tests/compress/quant/test_large_model.py`) check that its outputs equal the in-memory
  path's, number for number. Other ops those quantizers would touch stay float: Conv,
  Gather and Attention for int8-dynamic; Conv, Add, Reshape and the other QDQ ops for
  int8-static; layers inside subgraphs (If, Loop).
- It does not run `quant_pre_process`: only its MatMul + Add -> Gemm fusion is done (for
  int8-static, where it changes the graph).
- Settings it does not cover use the in-memory quantizers with a note: static_shapes,
  fp16, int4 with hqq, int8-static with qnn, 16-bit activations or bias correction.
- A model of 2 GiB or more is written as model.onnx + model.onnx.data, whose artifact
  digest covers only model.onnx.
"""
