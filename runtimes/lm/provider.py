"""The accelerator a language model runs on, as a target's profile names it: onnxruntime's
execution provider (`CUDAExecutionProvider`) and its options. Each engine says what it
calls it (onnxruntime-genai: "cuda"; llama.cpp: its GPU offload) or that it cannot run
there; an engine built without it raises ProviderUnavailable, which the pipeline reports
as "unmeasured" with the reason, never as a number.

    gpu = LMProvider("CUDAExecutionProvider", (("device_id", "0"),))
    gpu.flags()                       # lm-bench's --provider ... --provider-option ...
"""
from __future__ import annotations

from dataclasses import dataclass

CPU = "CPUExecutionProvider"

# onnxruntime's provider name (as profiles write it) -> onnxruntime-genai's name for it
GENAI_NAMES = {"CUDAExecutionProvider": "cuda"}


@dataclass(frozen=True)
class LMProvider:
    name: str                                   # CUDAExecutionProvider
    options: tuple[tuple[str, str], ...] = ()   # (option, value), as strings

    def flags(self) -> list[str]:
        """The same provider as lm-bench's command line says it."""
        flags = ["--provider", self.name]
        for key, value in self.options:
            flags += ["--provider-option", f"{key}={value}"]
        return flags

    @classmethod
    def of_profile(cls, providers: list) -> "LMProvider | None":
        """The accelerator of a profile's runtime.providers (entries with `name` and
        `options`) for a language model: the first a language-model engine runs on (a
        Jetson lists TensorRT, then CUDA: CUDA), else the first; None for the CPU alone."""
        accelerators = [entry for entry in providers or () if entry.name != CPU]
        if not accelerators:
            return None
        known = [entry for entry in accelerators if entry.name in GENAI_NAMES]
        entry = (known or accelerators)[0]
        return cls(entry.name, tuple((str(k), str(v))
                                     for k, v in (entry.options or {}).items()))


def parse_option(text: str) -> tuple[str, str]:
    """`key=value` from the command line."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"--provider-option {text!r}: write it as key=value")
    return key, value
