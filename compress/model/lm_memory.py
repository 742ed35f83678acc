"""Will a language model fit a device at all? Checked once the model as given is a float
folder and before anything is exported: its weights at the narrowest width the pipeline
makes (4 bits in blocks of 32 with a scale each: about 5 bits a weight) plus the KV cache
at a profile's `language_model.context_tokens` (float32, every layer: an upper bound for
sliding-window layers), against the profile's `device.memory_mb`. Estimates, said as such;
the benchmark's memory-fit verdict computes the same from each file it made."""
from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

from compress.errors import ModelError

BITS_AT_4 = 5.0    # 4-bit weights, a 16-bit scale per 32 and a 4-bit zero point per 32


@dataclass(frozen=True)
class Footprint:
    parameters: int
    kv_bytes_per_token: int

    def megabytes(self, tokens: int, bits: float = BITS_AT_4) -> float:
        return (self.parameters * bits / 8 + self.kv_bytes_per_token * tokens) / 2**20


def _parameters(folder: Path) -> int:
    """Every tensor's elements, from the safetensors headers (no weight is read)."""
    total = 0
    for path in sorted(folder.glob("*.safetensors")):
        with open(path, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        total += sum(math.prod(t["shape"]) for name, t in header.items()
                     if name != "__metadata__")
    return total


def footprint(folder: Path) -> Footprint:
    """The Hugging Face folder's parameters and its KV cache's bytes per token."""
    config = json.loads((folder / "config.json").read_text())
    config = config.get("text_config", config)   # a multimodal model's language part
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    kv_heads = config.get("num_key_value_heads") or heads
    return Footprint(_parameters(folder),
                     2 * config["num_hidden_layers"] * kv_heads * head_dim * 4)


def check_fits(folder: Path, targets: list, note) -> None:
    """Each target whose memory cannot hold even the 4-bit model and its KV cache is
    named (`note`); when no target can, ModelError before any export."""
    found = footprint(folder)
    sized = [(name, p) for name, p in targets if p.device.memory_mb]
    missing = []
    for name, profile in sized:
        tokens = profile.language_model.context_tokens
        need = found.megabytes(tokens)
        if need > profile.device.memory_mb:
            missing.append(f"{name}: about {need:,.0f} MB (estimate: {found.parameters:,} "
                           f"weights at 4 bits and the KV cache at {tokens} tokens) for its "
                           f"{profile.device.memory_mb:,} MB")
    for line in missing:
        note(f"will not fit {line}")
    if sized and len(missing) == len(sized):
        raise ModelError("the model cannot fit any target even at 4 bits: "
                         + "; ".join(missing) + ". Choose a smaller model, a device with "
                         "more memory, or a shorter language_model.context_tokens")
