"""torch -> ONNX, written as one self-contained file, then checked against torch."""
from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np


class ExportFailed(Exception):
    """The exporter could not convert the model; the message names what failed."""


def _quiet():
    """The exporters print pages of diagnostics on success; keep stdout readable."""
    stack = contextlib.ExitStack()
    stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    # torch.onnx: e.g. "torchvision is not installed" on every export; onnxscript: constant
    # folding reports nodes it could not fold ("Evaluation failed: cannot reshape ..."),
    # which leaves them in the graph and changes nothing else.
    for name in ("torch.onnx", "onnxscript"):
        logger = logging.getLogger(name)
        stack.callback(logger.setLevel, logger.level)
        logger.setLevel(logging.ERROR)
    return stack


@dataclass(frozen=True)
class OnnxExport:
    """How to export: the opset, a batch axis left free, and which torch exporter
    ("dynamo", or "legacy" for TorchScript)."""
    opset: int
    dynamic_batch: bool = False
    exporter: str = "dynamo"


def export_onnx(model, example_inputs: Sequence, input_names: Sequence[str], path: Path,
                how: OnnxExport) -> dict:
    """Export `model` to `path` (single file, weights inline). Returns what was written."""
    import onnx
    import torch

    opset, dynamic_batch, exporter = how.opset, how.dynamic_batch, how.exporter

    try:
        with torch.no_grad():
            sample = model(*example_inputs)
    except Exception as exc:
        raise ExportFailed(f"the model fails on the example inputs: {type(exc).__name__}: "
                           f"{' '.join(str(exc).split())[:400]}") from exc
    n_out = len(sample) if isinstance(sample, (tuple, list)) else 1
    output_names = ["output"] if n_out == 1 else [f"output_{i}" for i in range(n_out)]
    dynamic_axes = None
    if dynamic_batch:
        dynamic_axes = {name: {0: "batch"} for name in [*input_names, *output_names]}
    kwargs = dict(input_names=list(input_names), output_names=output_names,
                  opset_version=opset, dynamic_axes=dynamic_axes)
    if exporter == "dynamo":
        kwargs.update(dynamo=True, external_data=False, optimize=True)
    else:
        kwargs.update(dynamo=False)
    try:
        with _quiet():
            torch.onnx.export(model, tuple(example_inputs), str(path), **kwargs)
    except Exception as exc:
        message = " ".join(str(exc).split())[:800]
        raise ExportFailed(f"torch.onnx.export ({exporter} exporter) failed: "
                           f"{type(exc).__name__}: {message}") from exc
    if os.path.exists(str(path) + ".data"):  # never leave weights outside the file
        proto = onnx.load(str(path))
        onnx.save_model(proto, str(path), save_as_external_data=False)
        os.remove(str(path) + ".data")
    proto = onnx.load(str(path), load_external_data=False)
    written = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    return {"opset": written, "exporter": exporter, "outputs": output_names}


def parity(onnx_path: Path, feeds: Sequence[dict], reference: Sequence[Sequence]) -> dict:
    """Run the ONNX file with onnxruntime on every feed and compare every output with
    `reference` (per feed, the outputs in order)."""
    from runtimes.feeds import select_inputs
    from runtimes.loader import load
    from runtimes.metrics import output_fidelity

    with load(str(onnx_path)) as session:
        outputs = [session.run(select_inputs(feed, session.inputs)) for feed in feeds]
        names = list(session.outputs)
    report = []
    for index, name in enumerate(names):
        got = [feed[index] for feed in outputs]
        want = [np.asarray(feed[index]) for feed in reference if index < len(feed)]
        entry = {"output": name, "max_abs_error": float("inf"),
                 "max_abs_reference": max((float(np.abs(w).max()) for w in want if w.size),
                                          default=0.0),
                 "shape": list(got[0].shape),
                 "expected_shape": list(want[0].shape) if want else None}
        if len(want) == len(got) and all(g.shape == w.shape for g, w in zip(got, want)):
            agreement = output_fidelity(got, want)  # max abs error, cosine, top-1 agreement
            entry.update(max_abs_error=agreement["max_abs_error"], cosine=agreement["cosine"],
                         top1_agreement=agreement["top1_agreement"])
        report.append(entry)
    worst = max(report, key=lambda r: r["max_abs_error"])
    return {"outputs": report, "worst": worst, "samples": len(feeds)}
