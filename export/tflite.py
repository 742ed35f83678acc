"""torch -> TFLite with litert-torch, then post-conversion quantization with
ai-edge-quantizer. No TensorFlow is needed.

Full-integer int8 goes through ai-edge-quantizer's `static_wi8_ai8` recipe: on
EfficientNet-Lite0 it left no float32 tensor, while litert-torch's PT2E route kept some
residual additions in float (dequantize - add - quantize). Both quantize the model's
inputs and outputs to int8 as well.
"""
from __future__ import annotations

import contextlib
import copy
import io
import os
import re
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np

from export.quiet import native_output_hidden as converter_logs_hidden  # noqa: F401 (used by the stage)

LOWERING = re.compile(r"Lowering not found: (\S+)")


class ConversionFailed(Exception):
    """litert-torch could not convert the model; the message names what failed."""


def _explain(exc: Exception) -> str:
    text = str(exc)
    missing = LOWERING.search(text)
    if missing:
        source = next((line.strip() for line in text.splitlines()
                       if line.strip().startswith("File ")), "")
        where = f" ({source})" if source else ""
        return (f"TFLite has no lowering for operator {missing.group(1)}{where}. Replace that "
                "operation in the model, or deploy the ONNX export instead")
    return f"{type(exc).__name__}: {' '.join(text.split())[:600]}"


def convert_fp32(model, example_inputs: Sequence, path: Path, channels_last: bool) -> None:
    os.environ.setdefault("LITERT_TORCH_SHOW_PROGRESS", "n")  # its log lines break the display
    import litert_torch

    if channels_last:  # NHWC at the boundary; litert-torch folds the transposes away
        four_d = [i for i, x in enumerate(example_inputs) if x.dim() == 4]
        model = litert_torch.to_channel_last_io(model, args=four_d)
        example_inputs = [x.permute(0, 2, 3, 1).contiguous() if x.dim() == 4 else x
                          for x in example_inputs]
    try:
        litert_torch.convert(model.eval(), tuple(example_inputs)).export(str(path))
    except Exception as exc:  # the converter raises RuntimeError and torch.export errors
        raise ConversionFailed(_explain(exc)) from exc


def signature(path: Path) -> tuple[str | None, list[str]]:
    """The key and input names of the signature ai-edge-quantizer calibrates through
    (serving_default, else the file's first); a file without any SignatureDef (TF 1.x
    converters, MediaPipe) gives (None, its subgraph's input tensor names): the quantize
    stage adds one first (compress/quant/tflite/normalise.py)."""
    from ai_edge_litert.interpreter import Interpreter
    interpreter = Interpreter(model_path=str(path))
    signatures = interpreter.get_signature_list()
    if not signatures:
        return None, [d["name"] for d in interpreter.get_input_details()]
    key = "serving_default" if "serving_default" in signatures else next(iter(signatures))
    return key, signatures[key]["inputs"]


def signature_inputs(path: Path) -> list[str]:
    """The input names calibration samples are keyed by (signature)."""
    return signature(path)[1]


# How an int8 tensor's range is taken from the calibration feeds. Which is better depends
# on the model (docs/tflite.md): on EfficientNet-Lite0 minmax gave +1.3 dB, on CREPE
# average gave +2.2 dB; the stage's default quantizes with both and keeps the better.
RANGES = {
    # ai-edge-quantizer's own: a moving average (factor 0.95) of each feed's min and max
    "average": ("min", "max"),
    # the lowest and highest value over all feeds (onnxruntime's MinMax)
    "minmax": ("lowest", "highest"),
}


def quantize(fp32: Path, target: Path, mode: str) -> None:
    """fp16 weights or dynamic int8 (int8 weights, float activations); full int8 is
    quantize_int8."""
    with _quiet():
        from ai_edge_quantizer import qtyping, quantizer as aeq, recipe
        if mode == "fp16":
            qt = aeq.Quantizer(str(fp32))
            qt.add_weight_only_config(
                regex=".*", operation_name=qtyping.TFLOperationName.ALL_SUPPORTED,
                num_bits=16, algorithm_key=aeq.AlgorithmName.FLOAT_CASTING)
            result = qt.quantize()
        else:
            result = aeq.Quantizer(str(fp32), recipe.dynamic_wi8_afp32()).quantize()
        result.export_model(str(target), overwrite=True)


def quantize_int8(fp32: Path, targets: dict[str, Path], calibration: list[dict]) -> dict:
    """Full int8 with ai-edge-quantizer's static_wi8_ai8 recipe, calibrated once on
    `calibration`: one file per range estimator named in `targets` (RANGES). Returns
    each file's activation ranges, by estimator: what quantize_mixed quantizes again
    with other bits for some ops, without calibrating again."""
    with _quiet():
        from ai_edge_quantizer import calibrator, quantizer as aeq, recipe
        qt = aeq.Quantizer(str(fp32), recipe.static_wi8_ai8())
        signature_key, names = signature(fp32)
        samples = [{name: feed[key] for name, key in zip(names, feed)} for feed in calibration]
        tracked = _calibrated(qt, calibrator, fp32, samples, signature_key or "serving_default")
        extremes = output_extremes(fp32, calibration, tracked)
        ranges = {}
        for name, target in targets.items():
            low, high = RANGES[name]
            stats = {tensor: {**qsv, "min": qsv[low], "max": qsv[high]} if low in qsv
                     else dict(qsv) for tensor, qsv in tracked.items()}
            widen_output_ranges(stats, extremes)
            qt.quantize(copy.deepcopy(stats), enable_progress_report=False).export_model(
                str(target), overwrite=True)
            ranges[name] = stats
    return ranges


def quantize_mixed(fp32: Path, ranges: dict, target: Path, ops: dict[str, tuple]) -> None:
    """static_wi8_ai8 on `fp32` with the `ranges` quantize_int8 returned for one
    estimator, save the ops named in `ops` (ai-edge-quantizer's scope of an op, the
    regex its recipe matches -> (TFLite op name, activation bits: 16, or None: float)).
    ai-edge-quantizer puts a QUANTIZE op wherever an int8 tensor meets an int16 one and
    DEQUANTIZE / QUANTIZE ops around a float op; weights stay int8."""
    with _quiet():
        from ai_edge_quantizer import quantizer as aeq, recipe
        from ai_edge_quantizer.algorithm_manager import AlgorithmName
        from ai_edge_quantizer.qtyping import TFLOperationName
        qt = aeq.Quantizer(str(fp32), recipe.static_wi8_ai8())
        for scope, (op, bits) in ops.items():
            if bits is None:
                qt.update_quantization_recipe(scope, TFLOperationName[op],
                                              algorithm_key=AlgorithmName.NO_QUANTIZE)
            else:
                qt.add_static_config(scope, TFLOperationName[op], activation_num_bits=bits,
                                     weight_num_bits=8)
        qt.quantize(copy.deepcopy(ranges), enable_progress_report=False).export_model(
            str(target), overwrite=True)


def _calibrated(qt, calibrator, fp32: Path, samples: list[dict],
                key: str = "serving_default") -> dict:
    """Each tensor's ranges, both kinds (_both_ranges), from one pass over `samples`
    (through the signature `key`).
    The quantizer's own calibrate() takes no update function, so its Calibrator is built
    here; should a later version change that class, its calibrate() is used, and the
    "minmax" file is then the "average" one."""
    threads, data = os.cpu_count() or 1, {key: samples}
    try:
        run = calibrator.Calibrator(str(fp32), num_threads=threads, qsv_update_func=_both_ranges)
        run.calibrate(data, qt._recipe_manager)
        return run.get_model_qsvs()
    except (AttributeError, TypeError):
        return qt.calibrate(data, num_threads=threads)


def _both_ranges(qsv: dict, new: dict) -> dict:
    """ai-edge-quantizer's moving average of each feed's min and max ("min", "max", what
    it would compute itself) and the extremes over all feeds ("lowest", "highest"). The
    Calibrator stores a tensor's first values as they come, without calling this: the
    extremes start from that first feed's "min" and "max"."""
    from ai_edge_quantizer.utils import qsv_utils
    if "min" not in new or "min" not in qsv:
        return qsv_utils.moving_average_update(qsv, new)
    return {**qsv_utils.moving_average_update(qsv, new),
            "lowest": np.minimum(qsv.get("lowest", qsv["min"]), new["min"]),
            "highest": np.maximum(qsv.get("highest", qsv["max"]), new["max"])}


@contextlib.contextmanager
def _quiet():
    """The quantizer draws its own tqdm bar and warns about debug options it turns on
    itself."""
    with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def widen_output_ranges(stats: dict, extremes: dict[str, tuple]) -> None:
    """Make the model outputs' ranges cover what the float model really produces
    (`extremes`: output_extremes).

    ai-edge-quantizer averages each tensor's min/max over the calibration samples (a
    moving average), which suits activations but clips the outputs: on EfficientNet-Lite0
    the logits reached 12.1 while the int8 output range ended at 6.7, so 88 of 105 photo
    crops saturated and their top-1 became a tie."""
    for name, (low, high) in extremes.items():
        if name in stats and "min" in stats[name]:
            qsv = stats[name]
            qsv["min"] = np.minimum(qsv["min"], np.float32(low))
            qsv["max"] = np.maximum(qsv["max"], np.float32(high))


def output_extremes(fp32: Path, calibration: list[dict], tracked: dict) -> dict[str, tuple]:
    """The lowest and highest value of each model output over the calibration feeds:
    what the calibration pass recorded ("lowest", "highest"; _both_ranges), or, where it
    could not, measured by running the float model."""
    from runtimes.feeds import select_inputs
    from runtimes.loader import load

    with load(str(fp32), engine="litert") as session:
        if all("lowest" in tracked.get(name, {}) for name in session.outputs):
            return {name: (float(np.min(tracked[name]["lowest"])),
                           float(np.max(tracked[name]["highest"]))) for name in session.outputs}
        low = {name: np.inf for name in session.outputs}
        high = {name: -np.inf for name in session.outputs}
        for feed in calibration:
            for name, value in zip(session.outputs, session.run(select_inputs(feed, session.inputs))):
                low[name] = min(low[name], float(value.min()))
                high[name] = max(high[name], float(value.max()))
    return {name: (low[name], high[name]) for name in low}


def tensor_report(path: Path) -> dict:
    """Tensor dtypes, float32 tensor names and the I/O quantization of a .tflite file."""
    from ai_edge_litert.interpreter import Interpreter
    interpreter = Interpreter(model_path=str(path))
    tensors = interpreter.get_tensor_details()
    dtypes: dict = {}
    for t in tensors:
        dtypes[np.dtype(t["dtype"]).name] = dtypes.get(np.dtype(t["dtype"]).name, 0) + 1
    io = [{"name": d["name"], "dtype": np.dtype(d["dtype"]).name, "shape": d["shape"].tolist(),
           "scale": float(d["quantization"][0]), "zero_point": int(d["quantization"][1])}
          for d in [*interpreter.get_input_details(), *interpreter.get_output_details()]]
    floats = [t["name"] for t in tensors if t["dtype"] == np.float32]
    return {"dtypes": dtypes, "float32_tensors": floats, "io": io}
