"""gguf: one of llama.cpp's own types (Q8_0, Q4_K_M, Q4_0 ...) made by its quantizer
(`llama_model_quantize`, what `llama-quantize` runs) from an export.gguf float file, run
by llama.cpp, or a measured mix of two of them (`mix:`). Its settings and its
registration."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from compress.quant.schemes.lm_weight_only import LMMix, WithMix
from compress.quant.schemes.registry import register_scheme


class GgufType(WithMix):
    scheme: Literal["gguf"] = Field(
        "gguf", description="gguf: one of llama.cpp's types made by its quantizer from the "
        "export.gguf float file (llama.cpp runs it)")
    gguf_type: str = Field(
        "Q4_K_M", pattern=r"^[A-Za-z0-9_]+$", description="llama.cpp's type by its name: "
        "Q8_0, Q6_K, Q5_K_M, Q4_K_M, Q4_0 ... (every LLAMA_FTYPE_MOSTLY_* of the installed "
        "llama.cpp; an unknown one is named with the list); with `mix:`, the low type")
    high_type: str = Field("Q8_0", pattern=r"^[A-Za-z0-9_]+$", description="with `mix:`, "
                           "the type of the layers kept wider")
    mix: Optional[LMMix] = Field(None, description="a measured mix of gguf_type and "
                                 "high_type (limits: kl, perplexity, or targets)")

    def formats(self) -> dict[str, str]:
        return {"gguf": "gguf"}

    def format_hint(self, given: str) -> str:
        return "scheme gguf takes the export.gguf stage's float file"


def _gguf(artifact, config, ctx):
    from compress.core.lazy import require
    from compress.quant.lm.gguf_stage import quantize_gguf
    require("llama_cpp", "quantize scheme gguf (llama.cpp's quantizer: make llama-cpp)")
    return quantize_gguf(artifact, config, ctx)


register_scheme(GgufType, "int4", 8, lm=_gguf)(None)
