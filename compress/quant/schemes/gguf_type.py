"""gguf: one of llama.cpp's own types (Q8_0, Q4_K_M, Q4_0 ...) made by its quantizer
(`llama_model_quantize`, what `llama-quantize` runs) from an export.gguf float file, run
by llama.cpp. Its settings and its registration."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from compress.quant.schemes.base import FromTorch, QuantizeBase
from compress.quant.schemes.registry import register_scheme


class GgufType(FromTorch, QuantizeBase):
    scheme: Literal["gguf"] = Field(
        "gguf", description="gguf: one of llama.cpp's types made by its quantizer from the "
        "export.gguf float file (llama.cpp runs it)")
    gguf_type: str = Field(
        "Q4_K_M", pattern=r"^[A-Za-z0-9_]+$", description="llama.cpp's type by its name: "
        "Q8_0, Q6_K, Q5_K_M, Q4_K_M, Q4_0 ... (every LLAMA_FTYPE_MOSTLY_* of the installed "
        "llama.cpp; an unknown one is named with the list)")

    def formats(self) -> dict[str, str]:
        return {"gguf": "gguf"}

    def format_hint(self, given: str) -> str:
        return "scheme gguf takes the export.gguf stage's float file"

    def for_targets(self, targets: list):
        return self   # the export presets are for tensor models


def _gguf(artifact, config, ctx):
    from compress.core.artifacts import Output
    from compress.core.lazy import require
    from compress.errors import ModelError
    from compress.quant.lm.gguf_route import GGUFRoute
    require("llama_cpp", "quantize scheme gguf (llama.cpp's quantizer: make llama-cpp)")
    if artifact.format != "gguf" or artifact.precision != "fp32":
        raise ModelError(f"scheme gguf quantizes the export.gguf float file, not "
                         f"{artifact.id} ({artifact.format} {artifact.precision})")
    route = GGUFRoute(ctx.path(artifact), ctx.out_dir, threads=2, float_path=ctx.path(artifact))
    out = ctx.out_dir / "model.gguf"
    ctx.progress.note(f"making llama.cpp's {config.gguf_type.upper()} with its quantizer")
    try:
        route.build(config.gguf_type, out)
    except (ValueError, RuntimeError) as exc:
        raise ModelError(str(exc)) from None
    return [Output(out, "gguf", config.gguf_type.upper(), {"scheme": "gguf",
                                                           "gguf_type": config.gguf_type.upper()})]


register_scheme(GgufType, "int4", 8, lm=_gguf)(None)
