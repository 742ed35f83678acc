"""An onnxruntime-genai model folder (model.onnx + genai_config.json, as its model builder
writes it) run on its KV cache: the next-token logits of a window of token ids, and greedy
generation. Torch-free: a device installs onnxruntime-genai beside onnxruntime.

    model = GenaiModel("out/fp32", threads=1)
    logits = model.logits([1, 2, 3])          # [3, vocab], float32
    model.greedy([1, 2, 3], new_tokens=16)    # the 16 ids it picks
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from runtimes.errors import ProviderUnavailable, RuntimeInputError
from runtimes.lm.provider import GENAI_NAMES, LMProvider
from runtimes.lm.stream import LMEngine, StreamModel


def import_genai():
    """onnxruntime_genai, with onnxruntime loaded first: the genai library finds its
    onnxruntime through the module already loaded (without it, it aborts the process)."""
    try:
        import onnxruntime  # noqa: F401
        import onnxruntime_genai
    except ImportError as exc:
        raise RuntimeInputError(
            "an onnxruntime-genai model needs the onnxruntime-genai package: pip install "
            "\"edge-compress[device]\" on a device, \"edge-compress[llm]\" where you "
            f"compress ({exc})") from exc
    return onnxruntime_genai


def accepts(path: Path) -> bool:
    return path.is_dir() and (path / "genai_config.json").is_file()


def folder_bytes(folder: str | Path) -> int:
    """The model's size on disk: model.onnx and its weights file (the tokenizer and the
    config are not the model)."""
    return sum(p.stat().st_size for p in Path(folder).glob("model.onnx*"))


def cache_capacity(decoder: dict, tokens: int) -> int:
    """The positions a cache for `tokens` holds: a model with sliding-window layers
    (Gemma 3's 512) needs room for at least one window (onnxruntime-genai refuses less)."""
    return max(tokens, (decoder.get("sliding_window") or {}).get("window_size", 0))


def kv_cache_bytes(folder: Path, tokens: int) -> int:
    """Keys and values of every layer for `tokens` positions (at least a sliding window),
    as genai_config.json declares them (float32 on the CPU)."""
    decoder = json.loads((folder / "genai_config.json").read_text())["model"]["decoder"]
    per_token = 2 * decoder["num_hidden_layers"] * decoder["num_key_value_heads"] * decoder["head_size"]
    return per_token * cache_capacity(decoder, tokens) * 4


def require_folder(folder: Path) -> Path:
    if not (folder / "genai_config.json").is_file():
        raise RuntimeInputError(f"{folder} is not an onnxruntime-genai model folder: it "
                                "has no genai_config.json (the model builder writes one)")
    return folder


def _use_provider(og, config, provider: LMProvider | None) -> None:
    """The CPU (the folder's providers are the builder's choice, not the target's), or
    the target's accelerator; ProviderUnavailable where this build lacks it."""
    config.clear_providers()
    if provider is None:
        return
    name = GENAI_NAMES.get(provider.name)
    if name is None:
        raise ProviderUnavailable(
            f"onnxruntime-genai runs language models on the CPU or on "
            f"{', '.join(GENAI_NAMES)} here, not on {provider.name}")
    if name == "cuda":
        import onnxruntime

        from runtimes.onnx_session import load_nvidia_libraries
        load_nvidia_libraries(onnxruntime, [provider.name])   # pip's CUDA, else the system's
    if name == "cuda" and not og.is_cuda_available():
        raise ProviderUnavailable(
            "this onnxruntime-genai is the CPU build: install onnxruntime-genai-cuda "
            "beside onnxruntime-gpu in the target's Python (make gpu-env)")
    config.append_provider(name)
    for key, value in provider.options:
        config.set_provider_option(name, key, value)


class GenaiModel(StreamModel):
    """One loaded model folder; each call starts from an empty KV cache. `provider`: the
    accelerator it runs on (runtimes/lm/provider.py), the CPU without one."""

    def __init__(self, folder: str | Path, threads: int | None = None,
                 provider: LMProvider | None = None):
        folder = require_folder(Path(folder))
        og = import_genai()
        config = og.Config(str(folder))
        _use_provider(og, config, provider)
        if threads:
            options = {"intra_op_num_threads": threads, "inter_op_num_threads": 1}
            config.overlay(json.dumps({"model": {"decoder": {"session_options": options}}}))
        self._og, self.folder = og, folder
        try:
            self.model = og.Model(config)
        except RuntimeError as exc:
            if provider is None:
                raise
            # a GPU build on a machine whose GPU or driver it cannot start
            raise ProviderUnavailable(f"onnxruntime-genai could not start {provider.name}: "
                                      f"{' '.join(str(exc).split())[:300]}") from exc
        declared = json.loads((folder / "genai_config.json").read_text())["model"]
        self.context, self._decoder = declared["context_length"], declared["decoder"]

    def tokenizer(self):
        """The folder's tokenizer, as onnxruntime-genai reads it (no transformers)."""
        return self._og.Tokenizer(self.model)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer().encode(text))

    def generator(self, length: int):
        if length > self.context:
            raise RuntimeInputError(f"{length} tokens do not fit the model's context of "
                                    f"{self.context}: use a shorter window")
        params = self._og.GeneratorParams(self.model)
        capacity = min(cache_capacity(self._decoder, length), self.context)
        params.set_search_options(max_length=capacity, do_sample=False)
        return self._og.Generator(self.model, params)

    def logits(self, ids: list[int]) -> np.ndarray:
        """The next-token logits after each of `ids` ([len(ids), vocab]), one prefill."""
        generator = self.generator(len(ids) + 1)
        generator.append_tokens(np.asarray(ids, dtype=np.int32))
        out = generator.get_output("logits")
        return out.reshape(-1, out.shape[-1])[-len(ids):]

    # the stream (runtimes/lm/stream.py): a prompt in one call, then one pick at a time

    def feed(self, ids: list[int], new_tokens: int = 0) -> None:
        """A prompt from an empty cache, in one call, with room for `new_tokens` more."""
        self._stream = self.generator(len(ids) + new_tokens)
        self._stream.append_tokens(np.asarray(ids, dtype=np.int32))
        self._left = new_tokens   # counted here: the cache may have room for more

    def next_token(self) -> int:
        """The greedy pick: the first from the prompt's logits, each later one after a
        model call on the previous pick."""
        self._stream.generate_next_token()
        self._left -= 1
        return int(self._stream.get_next_tokens()[0])

    def done(self) -> bool:
        return self._left <= 0 or self._stream.is_done()


ENGINE = LMEngine("onnxruntime-genai", ("onnxruntime-genai", "onnxruntime-genai-cuda"),
                  ("onnxruntime_genai",), import_genai,
                  lambda path, threads, provider=None, **_: GenaiModel(path, threads, provider),
                  kv_cache_bytes)
