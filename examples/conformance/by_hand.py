"""What a user gets without this pipeline: onnxruntime's `quantize_static` by hand, as its
documentation shows it (quant_pre_process, then QDQ with uint8 activations and int8
per-channel weights, MinMax calibration), on the same FP32 ONNX file and the same
calibration feeds the pipeline used, judged on the same evaluation feeds.

When the by-hand model does not load (per-channel QDQ needs opset 13 and the quantizer
does not raise it), that is what the user meets, and it is recorded; the fidelity is then
taken after the fix a user would try next (onnx's version converter to opset 13).
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import onnx


class _Reader:
    def __init__(self, feeds: list[dict]):
        self._feeds = iter(feeds)

    def get_next(self):
        return next(self._feeds, None)


def _pre_process(source: Path, folder: Path) -> Path:
    import os
    from onnxruntime.quantization.shape_inference import quant_pre_process
    target, here = folder / "pre.onnx", os.getcwd()
    os.chdir(folder)  # its shape inference leaves temporary files in "." when it fails
    try:
        quant_pre_process(str(source), str(target))
    except Exception:  # noqa: BLE001 - a user would skip the optional step that failed
        return source
    finally:
        os.chdir(here)
    return target


def _quantize(source: Path, target: Path, feeds: list[dict]) -> None:
    from onnxruntime.quantization import (CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)
    quantize_static(str(source), str(target), _Reader(feeds), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax)


def _load_error(path: Path) -> str | None:
    import onnxruntime as ort
    try:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - what the user would see
        return " ".join(str(exc).split())[:300]
    return None


def quantize_by_hand(fp32: Path, feeds: list[dict], target: Path) -> dict:
    """Write the by-hand INT8 model to `target`; {seconds, load_error, opset_upgraded}."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        _quantize(_pre_process(fp32, Path(scratch)), target, feeds)
        seconds = time.perf_counter() - started
        error = _load_error(target)
        record = {"seconds": seconds, "load_error": error, "opset_upgraded": None}
        if error is None:
            return record
        model = onnx.load(str(fp32))
        old = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
        upgraded = Path(scratch) / "opset13.onnx"
        onnx.save(onnx.version_converter.convert_version(model, 13), str(upgraded))
        _quantize(_pre_process(upgraded, Path(scratch)), target, feeds)
        record["opset_upgraded"] = {"from": old, "to": 13}
    return record


def outputs_of(path: Path, feeds: list[dict]) -> list[list[np.ndarray]]:
    import onnxruntime as ort
    from runtimes.onnx_session import session_options
    options = session_options()   # INT8 run as the file says on every CPU
    options.log_severity_level = 3  # ddddocr's recognizer warns on every call
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    keys = list(feeds[0])
    return [session.run(None, {n: feed[n] if n in feed else feed[k]
                               for n, k in zip(names, keys)}) for feed in feeds]
