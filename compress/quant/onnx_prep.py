"""What the onnxruntime quantizer is given: the model at the opset its QDQ graph needs,
and with static shapes where a preset asks for them."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from compress.errors import ModelError


def opset_for(source: Path, config, ctx) -> tuple[Path, Optional[dict]]:
    """The model at the opset its QDQ graph needs (per-channel DequantizeLinear needs 13;
    onnxruntime's quantizer does not raise it): `source` as it is, or an upgraded copy in
    the stage's folder, and {from, to} when it was upgraded."""
    from compress.model.onnx_compat import load_onnx, needed_opset, opset_of, save_onnx, upgrade_opset
    from compress.model.onnx_file import header_model
    minimum = needed_opset(config.per_channel, config.activations, config.weights)
    # the graph alone says whether an upgrade is needed; the weights are read only if it is
    if opset_of(header_model(source)) >= minimum:
        return source, None
    model, record = upgrade_opset(load_onnx(source), minimum)
    if record is None:
        return source, None
    target = ctx.out_dir / "upgraded.onnx"
    save_onnx(model, target)
    ctx.progress.note(f"{config.scheme}: ONNX opset {record['from']} raised to {record['to']} "
                      f"with onnx's version converter: {_needing(config)} needs opset {minimum}")
    return target, record


def _needing(config) -> str:
    """The settings that set the least opset (needed_opset), in the stage's words."""
    sixteen = [f"{name} {kind}" for name, kind in (("activations", config.activations),
                                                   ("weights", config.weights)) if "16" in kind]
    if sixteen:
        return " and ".join(sixteen)
    return "per_channel" if config.per_channel else "the int8 graph"


def static_shapes(source: Path, config, ctx) -> tuple[Path, dict]:
    """The model with every dynamic dimension fixed to the declared shapes (a file in the
    stage's folder, or `source` when it is static already), and what was fixed."""
    from export.static_shapes import ShapeConflict, fix_file

    target = ctx.out_dir / "static.onnx"
    open_dims = [d.name for d in ctx.inputs if d.dynamic_dims]
    if open_dims:
        raise ModelError(f"static_shapes fixes every dimension to model.inputs, but input(s) "
                         f"{', '.join(open_dims)} leave some dynamic: declare their sizes")
    shapes = {d.name: list(d.shape) for d in ctx.inputs}
    try:
        report = fix_file(source, target, shapes)
    except ShapeConflict as exc:
        asked = f" (asked for by preset {config.preset})" if config.preset else ""
        raise ModelError(f"static_shapes{asked}: {exc}") from None
    return (source if report["already_static"] else target), report
