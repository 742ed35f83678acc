"""A GGUF file run by llama.cpp (through llama-cpp-python) on its KV cache: the next-token
logits of a window of token ids, greedy generation, and the stream the tokens/s
measurement drives. Torch-free. The same calls as runtimes/lm/genai.py's GenaiModel, so
every format is scored and timed on the same token ids by the same code.

    model = LlamaCppModel("q4_k_m.gguf", threads=1, all_logits=True)
    model.logits([1, 2, 3])                   # [3, vocab], float32
    model.greedy([1, 2, 3], new_tokens=16)    # the 16 ids it picks

llama-cpp-python has no wheel on PyPI (it compiles llama.cpp): `make llama-cpp` builds it
once (pip keeps the built wheel in its cache).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from runtimes.errors import ProviderUnavailable, RuntimeInputError
from runtimes.lm.provider import LMProvider
from runtimes.lm.stream import LMEngine, StreamModel

INSTALL = "make llama-cpp (pip builds llama-cpp-python, and llama.cpp with it, once)"


def import_llama_cpp():
    try:
        import llama_cpp
    except ImportError as exc:
        raise RuntimeInputError(f"a GGUF file runs on llama.cpp, which is not installed here: "
                                f"{INSTALL} ({exc})") from exc
    return llama_cpp


def accepts(path: Path) -> bool:
    return path.is_file() and path.suffix == ".gguf"


def require_gguf(path: Path) -> Path:
    if not accepts(path):
        raise RuntimeInputError(f"{path} is not a .gguf file")
    return path


def file_bytes(path: str | Path) -> int:
    return Path(path).stat().st_size


def gguf_metadata(path: Path) -> dict:
    """The GGUF's key-value metadata that sizes the KV cache, read with the `gguf`
    package (the `llamacpp` extra installs it)."""
    from gguf import GGUFReader
    fields = GGUFReader(str(path)).fields
    arch = fields["general.architecture"].contents()

    def value(key, default=None):
        field = fields.get(f"{arch}.{key}")
        return field.contents() if field is not None else default
    heads = value("attention.head_count")
    return {"layers": value("block_count"), "kv_heads": value("attention.head_count_kv", heads),
            "key_length": value("attention.key_length", value("embedding_length") // heads),
            "value_length": value("attention.value_length",
                                  value("embedding_length") // heads)}


def kv_cache_bytes(path: Path, tokens: int) -> int:
    """Keys and values of every layer for `tokens` positions in llama.cpp's default cache
    type, float16."""
    meta = gguf_metadata(path)
    per_token = meta["layers"] * meta["kv_heads"] * (meta["key_length"] + meta["value_length"])
    return per_token * tokens * 2


def _gpu_layers(lib, provider: LMProvider | None) -> int:
    """Every layer on the GPU for a CUDA target, none on the CPU; ProviderUnavailable
    where this llama-cpp-python is built without GPU offload (the PyPI build is not)."""
    if provider is None:
        return 0
    if provider.name != "CUDAExecutionProvider":
        raise ProviderUnavailable(f"llama.cpp runs here on the CPU or a CUDA GPU, not on "
                                  f"{provider.name}")
    if not lib.llama_supports_gpu_offload():
        raise ProviderUnavailable("this llama-cpp-python is built without GPU offload: "
                                  "reinstall it with CMAKE_ARGS=\"-DGGML_CUDA=on\" in the "
                                  "target's Python")
    return -1


class LlamaCppModel(StreamModel):
    """One loaded GGUF file; each call starts from an empty KV cache. `all_logits`: keep
    every position's logits (scoring text); off, only the last (generation, as llama.cpp's
    own tools run, without a context-sized logits buffer in the measured memory)."""

    def __init__(self, path: str | Path, threads: int | None = None,
                 all_logits: bool = False, context: int = 2048,
                 provider: LMProvider | None = None):
        self.path = require_gguf(Path(path))
        self._lib = import_llama_cpp()
        threads = threads or 1
        try:
            self._llm = self._lib.Llama(
                model_path=str(self.path), n_ctx=context, n_batch=512, n_ubatch=512,
                n_threads=threads, n_threads_batch=threads, logits_all=all_logits,
                n_gpu_layers=_gpu_layers(self._lib, provider), verbose=False)
        except ValueError as exc:    # llama-cpp-python's answer to a file llama.cpp refuses
            raise RuntimeInputError(f"llama.cpp cannot load {self.path}: {exc}") from exc
        self.context, self.vocab, self.all_logits = context, self._llm.n_vocab(), all_logits
        self._eog_vocab = self._lib.llama_model_get_vocab(self._llm.model)
        self._pending: int | None = None

    def encode(self, text: str) -> list[int]:
        """`text` in the GGUF's own tokenizer, as llama.cpp reads it."""
        return self._llm.tokenize(text.encode(), add_bos=False, special=False)

    def logits(self, ids: list[int]) -> np.ndarray:
        """The next-token logits after each of `ids` ([len(ids), vocab]), one prefill."""
        if not self.all_logits:
            raise ValueError("open the model with all_logits=True to score text")
        self.feed(ids)
        return np.array(self._llm.scores[:len(ids)], dtype=np.float32)

    # the stream (runtimes/lm/stream.py): a prompt in one call, then one pick at a time

    def feed(self, ids: list[int], new_tokens: int = 0) -> None:
        """A prompt from an empty cache, in one call (llama.cpp splits it into batches),
        with room for `new_tokens` more."""
        if len(ids) + new_tokens > self.context:
            raise RuntimeInputError(f"{len(ids) + new_tokens} tokens do not fit the context "
                                    f"of {self.context} it was opened with")
        self._llm.reset()
        self._llm.eval(list(ids))
        self._pending = None

    def next_token(self) -> int:
        """The greedy pick from the last logits; from the second pick on, a model call on
        the previous pick first (as genai's generate_next_token)."""
        if self._pending is not None:
            self._llm.eval([self._pending])
        last = self._lib.llama_get_logits_ith(self._llm.ctx, -1)
        self._pending = int(np.ctypeslib.as_array(last, shape=(self.vocab,)).argmax())
        return self._pending

    def done(self) -> bool:
        return self._pending is not None and (
            self._lib.llama_vocab_is_eog(self._eog_vocab, self._pending)
            or self._llm.n_tokens >= self.context)


ENGINE = LMEngine("llama.cpp", ("llama-cpp-python",), ("llama_cpp",), import_llama_cpp,
                  lambda path, threads, **options: LlamaCppModel(path, threads, **options),
                  kv_cache_bytes)
