"""An OpenVINO GenAI model folder (openvino_model.xml + .bin, a stateful IR whose KV cache is
the model's own state, beside openvino_tokenizer.xml and openvino_detokenizer.xml), as
`openvino_genai.LLMPipeline(folder, "CPU")` opens it. Torch-free: a device installs
openvino and openvino-genai (x86-64 and manylinux_2_31 aarch64 wheels).

The model runs on its own infer request, one call per step as LLMPipeline runs it: the
prompt in one call, then one call per picked token, so each decode step is timed like
the other engines' (runtimes/lm/stream.py), and the same request gives the logits that
score it. The tokenizer is openvino-genai's, read from the folder. Compiled with float32
inference and a float32 KV cache (OpenVINO's CPU default on bf16-capable machines is
bf16 and an 8-bit cache: a different model from the one scored); weights compressed by
NNCF run with OpenVINO's own dynamic activation quantization, as they ship.

    model = OVGenaiModel("out/ovgenai", threads=1)
    logits = model.logits([1, 2, 3])          # [3, vocab], float32
    model.greedy([1, 2, 3], new_tokens=16)
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from runtimes.errors import ProviderUnavailable, RuntimeInputError
from runtimes.lm.stream import LMEngine, StreamModel

MODEL = "openvino_model.xml"


def import_openvino():
    """openvino and openvino_genai (which registers openvino-tokenizers' ops)."""
    try:
        import openvino
        import openvino_genai
    except ImportError as exc:
        raise RuntimeInputError(
            "an OpenVINO GenAI model needs the openvino-genai package: pip install "
            "\"edge-compress[device]\" on a device, \"edge-compress[llm]\" where you "
            f"compress ({exc})") from exc
    return openvino, openvino_genai


def accepts(path: Path) -> bool:
    return (Path(path).is_dir() and (Path(path) / MODEL).is_file()
            and (Path(path) / "openvino_tokenizer.xml").is_file())


def folder_bytes(folder: str | Path) -> int:
    """The model's size on disk: its IR and weights (not the tokenizer's IRs)."""
    return sum(p.stat().st_size for p in Path(folder).glob("openvino_model.*"))


def _config(folder: Path) -> dict:
    return json.loads((Path(folder) / "config.json").read_text())


def kv_cache_bytes(folder: Path, tokens: int) -> int:
    """Keys and values of every layer for `tokens` positions, float32 (as compiled here)."""
    config = _config(folder)
    head = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or config["num_attention_heads"]
    return 2 * config["num_hidden_layers"] * kv_heads * head * tokens * 4


def _end_ids(folder: Path) -> set[int]:
    """The ids that end a generation (generation_config.json, else config.json)."""
    for name in ("generation_config.json", "config.json"):
        path = Path(folder) / name
        if path.is_file():
            found = json.loads(path.read_text()).get("eos_token_id")
            if found is not None:
                return set(found) if isinstance(found, list) else {found}
    return set()


class OVGenaiModel(StreamModel):
    """One compiled model folder; each call starts from an empty state (KV cache)."""

    def __init__(self, folder: str | Path, threads: int | None = None, provider=None,
                 context: int | None = None, **_):
        folder = Path(folder)
        if not accepts(folder):
            raise RuntimeInputError(f"{folder} is not an OpenVINO GenAI model folder: it "
                                    f"needs {MODEL} and openvino_tokenizer.xml")
        if provider is not None:
            raise ProviderUnavailable(f"OpenVINO GenAI runs language models on the CPU "
                                      f"here, not on {provider.name}")
        ov, self._genai = import_openvino()
        options = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32",
                   "PERFORMANCE_HINT": "LATENCY"}
        if threads:
            options["INFERENCE_NUM_THREADS"] = threads
        self.folder, self._ov = folder, ov
        self._request = ov.Core().compile_model(str(folder / MODEL), "CPU",
                                                options).create_infer_request()
        self.context = _config(folder).get("max_position_embeddings") or context or 2048
        self._ends = _end_ids(folder)

    def encode(self, text: str) -> list[int]:
        tokenizer = self._genai.Tokenizer(str(self.folder))
        return [int(i) for i in tokenizer.encode(text, add_special_tokens=False)
                .input_ids.data[0]]

    def _call(self, ids: list[int]) -> np.ndarray:
        """The logits after each of `ids`, fed after the `self._past` ids in the state."""
        past, count = self._past, len(ids)
        self._request.infer({
            "input_ids": np.asarray([ids], dtype=np.int64),
            "attention_mask": np.ones((1, past + count), dtype=np.int64),
            "position_ids": np.arange(past, past + count, dtype=np.int64)[None],
            "beam_idx": np.zeros(1, dtype=np.int32)})
        self._past += count
        logits = self._request.get_tensor("logits").data
        return np.asarray(logits).reshape(-1, logits.shape[-1])[-count:]

    def _start(self, length: int) -> None:
        if length > self.context:
            raise RuntimeInputError(f"{length} tokens do not fit the model's context of "
                                    f"{self.context}: use a shorter window")
        self._request.reset_state()
        self._past = 0

    def logits(self, ids: list[int]) -> np.ndarray:
        """The next-token logits after each of `ids` ([len(ids), vocab]), one call."""
        self._start(len(ids))
        return self._call(list(ids)).astype(np.float32, copy=True)

    # the stream (runtimes/lm/stream.py): a prompt in one call, then one pick at a time

    def feed(self, ids: list[int], new_tokens: int = 0) -> None:
        self._start(len(ids) + new_tokens)
        self._last = self._call(list(ids))[-1]
        self._left, self._pending = new_tokens, None

    def next_token(self) -> int:
        """The greedy pick: the first from the prompt's logits, each later one after a
        model call on the previous pick."""
        if self._pending is not None:
            self._last = self._call([self._pending])[-1]
        self._pending = int(np.argmax(self._last))
        self._left -= 1
        return self._pending

    def done(self) -> bool:
        return self._left <= 0 or (self._pending is not None and self._pending in self._ends)


ENGINE = LMEngine("openvino-genai", ("openvino-genai",), ("openvino_genai",), import_openvino,
                  lambda path, threads, **options: OVGenaiModel(path, threads, **options),
                  kv_cache_bytes)
