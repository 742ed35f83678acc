"""The tools beside the pipeline that are more than one call: NNCF, run in an environment
of its own (nncf_worker.py under .venv-nncf), and ai-edge-quantizer with its defaults.

Each returns a record: {"seconds": the quantization's wall time, ...} or, when the tool
could not run or failed, {"error": why}, which the table prints instead of numbers.
"""
from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
NNCF_PYTHON = HERE.parents[1] / ".venv-nncf" / "bin" / "python"
NNCF_WORKER = HERE / "nncf_worker.py"


def _last_lines(text: str, count: int = 3) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-count:])[:400]


def quantize_nncf(fp32: Path, feeds: list[dict], target: Path) -> dict:
    """nncf.quantize with its defaults on `fp32`, calibrated on `feeds`, into `target`."""
    if not NNCF_PYTHON.exists():
        return {"error": f"not run: {NNCF_PYTHON.parents[1].name} is missing (make nncf-env)"}
    with tempfile.TemporaryDirectory() as scratch:
        archive = Path(scratch) / "feeds.npz"
        np.savez(archive, **{f"{i}/{name}": array for i, feed in enumerate(feeds)
                             for name, array in feed.items()})
        # its working directory is the scratch folder: NNCF may leave files in "."
        done = subprocess.run([str(NNCF_PYTHON), str(NNCF_WORKER), str(fp32), str(archive),
                               str(target)], capture_output=True, text=True, cwd=scratch)
    if done.returncode != 0:
        return {"error": f"failed: {_last_lines(done.stderr or done.stdout)}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def quantize_aeq_defaults(fp32: Path, feeds: list[dict], target: Path) -> dict:
    """ai-edge-quantizer's full-integer recipe as its documentation shows it:
    static_wi8_ai8 (MinMax), calibrate on `feeds`, quantize, export. Nothing else: no
    widened output ranges and no bias correction, which the pipeline adds."""
    from importlib.metadata import version

    from ai_edge_quantizer import quantizer, recipe

    from export.quiet import native_output_hidden
    from export.tflite import signature_inputs

    names = signature_inputs(fp32)  # the converter's names, e.g. serving_default_args_0
    samples = [{name: feed[key] for name, key in zip(names, feed)} for feed in feeds]
    started = time.perf_counter()
    with native_output_hidden():  # its progress bars and debug-option warnings
        runner = quantizer.Quantizer(str(fp32), recipe.static_wi8_ai8())
        statistics = runner.calibrate({"serving_default": samples})
        runner.quantize(statistics).export_model(str(target), overwrite=True)
    return {"seconds": time.perf_counter() - started, "version": version("ai-edge-quantizer")}


def guarded(quantize, *args) -> dict:
    """A tool's record; an exception it raises becomes the record's error, so that the
    other tools of the model still run and the table says what this one met."""
    try:
        return quantize(*args)
    except Exception as exc:  # noqa: BLE001 - each tool raises its own kinds
        return {"error": f"failed: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"}


def convolutions(path: Path) -> dict:
    """How onnxruntime's CPU provider runs the file's convolutions once its graph
    optimizations have fused what they can: as integer kernels (QLinearConv) or in float
    (Conv, FusedConv), which is where a QDQ file's speed is won or lost."""
    import onnx
    import onnxruntime as ort
    with tempfile.TemporaryDirectory() as scratch:
        options = ort.SessionOptions()
        # extended, not all: the layout (NCHWc) rewrites of "all" cannot be saved
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        options.optimized_model_filepath = str(Path(scratch) / "optimized.onnx")
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        ops = [node.op_type for node in onnx.load(options.optimized_model_filepath).graph.node]
    return {"integer": ops.count("QLinearConv"), "float": ops.count("Conv") + ops.count("FusedConv")}
