"""The quantize stage's gguf scheme: llama.cpp's quantizer makes its type from the
export.gguf float file, or the measured mix of two types (each transformer layer alone at
the scheme's type, every other tensor at `high_type`, scored on the calibration ids; the
costliest per weight kept at `high_type` until every limit holds: measured.py)."""
from __future__ import annotations

import re
from pathlib import Path

from compress.core.artifacts import Output
from compress.errors import ModelError


def tensor_type(file_type: str) -> str:
    """The tensor type a pure file of llama.cpp's `file_type` holds (Q4_K_S: every tensor
    Q4_K): a per-tensor override names tensor types, the quantizer file types."""
    return re.sub(r"(_K)_(S|M|L)$", r"\1", file_type.upper())


def _plan(route, config, f32: Path):
    from compress.quant.lm.measured import MixPlan
    from compress.quant.lm.units import units_of
    from runtimes.lm.llamacpp import LlamaCppModel
    from runtimes.lm.quality import Reference
    low, high = config.gguf_type.upper(), config.high_type.upper()
    units = units_of(route.tensors(), config.mix.granularity)
    nodes = {u.name: u.nodes for u in units}

    def probe(unit, where: Path) -> Path:
        return route.build(high, where.with_suffix(".gguf"),
                           {n: tensor_type(low) for n in unit.nodes}, pure=True)

    def build(kept, path: Path) -> int:
        route.build(low, path, {n: tensor_type(high) for name in kept for n in nodes[name]},
                    pure=True)
        return path.stat().st_size

    def reference(ids, window):
        return Reference(LlamaCppModel(f32, 2, all_logits=True, context=window + 1).logits,
                         ids, window)
    return MixPlan(units, probe, build, reference, route.score, (low, high))


def quantize_gguf(artifact, config, ctx) -> list[Output]:
    from compress.quant.lm.gguf_route import GGUFRoute
    from compress.quant.lm.measured import measured_mix
    if artifact.format != "gguf" or artifact.precision != "fp32":
        raise ModelError(f"scheme gguf quantizes the export.gguf float file, not "
                         f"{artifact.id} ({artifact.format} {artifact.precision})")
    f32, out = ctx.path(artifact), ctx.out_dir / "model.gguf"
    route = GGUFRoute(f32, ctx.out_dir, threads=2, float_path=f32)
    kind = config.gguf_type.upper()
    meta = {"scheme": "gguf", "gguf_type": kind}
    try:
        if config.mix is None:
            ctx.progress.note(f"making llama.cpp's {kind} with its quantizer")
            route.build(kind, out)
            return [Output(out, "gguf", kind, meta)]
        mix = measured_mix(_plan(route, config, f32), config.mix.limits(), ctx, out)
    except (ValueError, RuntimeError) as exc:
        raise ModelError(str(exc)) from None
    return [Output(out, "gguf", f"{kind}+{config.high_type.upper()}", {**meta, "mix": mix})]
