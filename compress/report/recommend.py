"""The report's decision: budgets, a recommendation per target, the Pareto front.

compress.report.decide holds the rules (pure); this module gathers what they need from a run:
each artifact's file, format and how to feed it (read from the file itself: a full-int8
TFLite model takes int8 data with its own scale and zero point, written nowhere else).
"""
from __future__ import annotations

import os
from pathlib import Path

from compress.report import decide
from profiles import budget_limits


def _first_input(path: Path, fmt: str) -> tuple:
    """(name, shape, dtype, scale, zero point) of the file's first input, read without
    building a session where the format allows (ONNX: the graph; TFLite: the tensor's
    details, which alone hold a quantized input's scale and zero point)."""
    if fmt == "onnx":
        import onnx
        from compress.model.inputs import onnx_inputs
        decl = onnx_inputs(onnx.load(str(path), load_external_data=False).graph)[0]
        return decl.name, list(decl.shape), decl.dtype, 0, 0
    if fmt == "tflite":
        from runtimes.litert_session import new_interpreter
        detail = new_interpreter(str(path), threads=1)[1].get_input_details()[0]
        scale, zero = detail["quantization"]
        return (detail["name"], [int(x) for x in detail["shape"]], detail["dtype"].__name__,
                scale, zero)
    from runtimes.loader import load   # OpenVINO IR: its runtime reads it
    session = load(str(path))
    try:
        spec = session.inputs[0]
        return spec.name, list(spec.shape), spec.dtype, 0, 0
    finally:
        session.close()


# the channel counts of an image: grey, RGB, RGBA
_CHANNELS = (1, 3, 4)


def input_layout(shape, channels_last: bool | None = None) -> str | None:
    """'NHWC' or 'NCHW' for a 4-D image input, None for any other input (the report then
    gives its shape). `channels_last`: the artifact's meta where a stage set it (export.tflite
    knows what it made); else read from the shape: channels (1, 3 or 4) last and not
    second is NHWC, second and not last NCHW; both or neither (a 3x3x3 input, a feature
    map) says nothing."""
    if len(shape) != 4:
        return None
    if channels_last is not None:
        return "NHWC" if channels_last else "NCHW"
    last, second = shape[3] in _CHANNELS, shape[1] in _CHANNELS
    if last != second:
        return "NHWC" if last else "NCHW"
    return None


def feeding(path: Path, fmt: str, channels_last: bool | None = None) -> dict | None:
    """How to feed the file's first input: name, layout, dtype, shape, and the scale and
    zero point of a quantized one. None when the file cannot be opened here.
    `channels_last`: the artifact's meta, where set (input_layout)."""
    try:
        name, shape, dtype, scale, zero = _first_input(path, fmt)
    except Exception:  # noqa: BLE001 - an unreadable file only loses its feeding line
        return None
    layout = input_layout(shape, channels_last)
    quantized = bool(scale) and dtype.startswith(("int", "uint"))
    return {"name": name, "layout": layout, "dtype": dtype, "shape": shape,
            "scale": float(scale) if quantized else None,
            "zero_point": int(zero) if quantized else None}


def _files(artifacts, run_dir: Path, baselines: set) -> dict:
    files = {}
    for a in artifacts:
        if a.format in ("torch",):
            continue
        path = (run_dir / a.path).resolve()
        # an "INT8" file that holds no int8 op computes in float: said so where it is picked
        precision = ("fp32 (nothing was quantized)" if (a.meta or {}).get("quantized_nothing")
                     else a.precision)
        files[a.id] = {"path": str(path), "format": a.format, "precision": precision,
                       "baseline": a.id in baselines}
    return files


def _shown(path: str | None) -> str | None:
    """A path as the user would type it from here: relative when under the working
    directory."""
    if not path:
        return None
    try:
        return os.path.relpath(path) if Path(path).is_relative_to(Path.cwd()) else path
    except ValueError:
        return path


def decision(artifacts, benchmarks: list[dict], verdicts: list[dict], targets,
             run_dir: Path, skipped: list[dict] = ()) -> dict:
    """{budgets, recommendations, pareto} for the report. `targets`: [(name, Profile)]."""
    baselines = {b["artifact"] for b in [*benchmarks, *skipped] if b.get("baseline")}
    files = _files(artifacts, run_dir, baselines)
    by_id = {a.id: a for a in artifacts}
    sizes = {a.id: a.size_bytes for a in artifacts}
    variants = decide.variants_of(benchmarks, verdicts, sizes, files)
    language = any(b.get("language_model") for b in benchmarks)
    budgets = {name: budget_limits(profile, language) for name, profile in targets}
    recommendations, pareto, fed = [], {}, {}
    for name, _ in targets:
        rec = decide.recommend(name, variants)
        if rec["artifact"] in by_id and rec["path"]:
            artifact = by_id[rec["artifact"]]   # one file may win on several targets
            if artifact.id not in fed:
                fed[artifact.id] = feeding(Path(rec["path"]), artifact.format,
                                           artifact.meta.get("channels_last"))
            rec["feeding"] = fed[artifact.id]
        rec["summary"] = decide.summary(rec, budgets[name], _shown(rec["path"]))
        recommendations.append(rec)
        pareto[name] = decide.pareto_front([v for v in variants if v.target == name])
    return {"budgets": budgets, "recommendations": recommendations, "pareto": pareto}
