"""A causal language model as the user has it (`model: {causal_lm: PATH}`): a Hugging Face
folder, a GGUF file, or an onnxruntime-genai folder; its tokenizer; text made into token
ids once, with the tokenizer's hash recorded so every format is scored on the same ids.

A GGUF file's weights are quantized (Q4_1, Q4_K_M ...): transformers (with `gguf`)
dequantizes them into a float checkpoint, which is then the model as given, and the
record says it came from a quantized file (`dequantized_from`), since its float
perplexity is that of the 4-bit weights, not of the original training.
"""
from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from compress.errors import ModelError
from runtimes.native_log import native_output_captured as native_output_hidden

KINDS = ("hf", "gguf", "genai")


@dataclass(frozen=True)
class CausalLM:
    """Where the model is and what it is. `hf_folder`: a Hugging Face folder holding it
    in float (the GGUF's dequantized copy; None for an onnxruntime-genai folder, which is
    already an export)."""
    path: Path
    kind: str                              # one of KINDS
    hf_folder: Optional[Path]
    dequantized_from: Optional[str] = None  # the GGUF file's weight types, e.g. "Q4_1"


def kind_of(path: Path) -> str:
    """What `path` holds, from its files; a clear error naming the three it may be."""
    if path.is_file() and path.suffix == ".gguf":
        return "gguf"
    if path.is_dir() and (path / "genai_config.json").is_file():
        return "genai"
    if path.is_dir() and (path / "config.json").is_file():
        return "hf"
    raise ModelError(f"model.causal_lm {path} is neither a Hugging Face folder (config.json), "
                     "a .gguf file, nor an onnxruntime-genai folder (genai_config.json)")


def gguf_weight_types(path: Path) -> str:
    """The GGUF file's quantized weight types, most common first (e.g. "Q4_1, Q6_K")."""
    from collections import Counter

    from gguf import GGUFReader
    counts = Counter(t.tensor_type.name for t in GGUFReader(str(path)).tensors)
    kept = [name for name, _ in counts.most_common() if name not in ("F32", "F16", "BF16")]
    return ", ".join(kept) or "F32"


def dequantize_gguf(path: Path, into: Path) -> Path:
    """The GGUF model as a float32 Hugging Face folder at `into` (written whole, then
    renamed: an interrupted run leaves no folder that looks finished)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    partial = into.with_name(into.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        with native_output_hidden():   # progress bars, torchao's load failures
            tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
            model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                         dtype=torch.float32)
    except (ImportError, ValueError, OSError, KeyError) as exc:
        raise ModelError(f"transformers cannot read {path} ({exc}): it needs the gguf "
                         "package and an architecture transformers knows") from exc
    # the float copy is what is saved: transformers refuses to save a model it still
    # marks as quantized by the GGUF loader
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    with native_output_hidden():
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
    shutil.rmtree(into, ignore_errors=True)
    partial.rename(into)
    return into


def open_causal_lm(path: str | Path, work: Path) -> CausalLM:
    """The model at `path`; a GGUF file is dequantized into `work` (once per file content:
    the folder is named by the file's sha256)."""
    path = Path(path)
    if not path.exists():
        raise ModelError(f"model.causal_lm {path} does not exist")
    kind = kind_of(path)
    if kind == "hf":
        return CausalLM(path, kind, path)
    if kind == "genai":
        return CausalLM(path, kind, None)
    from runtimes.digest import sha256_file
    into = work / f"dequantized-{sha256_file(path)[:16]}"
    if not (into / "config.json").is_file():
        dequantize_gguf(path, into)
    return CausalLM(path, kind, into, dequantized_from=gguf_weight_types(path))


# what a Hugging Face folder's model is made of: copied into the run (linked where the
# file system allows), nothing else (a training checkpoint's optimizer state is not)
HF_FILES = ("config.json", "generation_config.json", "*.safetensors", "*.safetensors.index.json",
            "tokenizer*", "special_tokens_map.json", "vocab.json", "merges.txt",
            "chat_template.*")


def check_pipeline_source(path: Path) -> str:
    """Before any work: `path` is a model the pipeline starts from (its kind)."""
    if not path.exists():
        raise ModelError(f"model.causal_lm {path} does not exist")
    kind = kind_of(path)
    if kind == "genai":
        raise ModelError(f"model.causal_lm {path} is an onnxruntime-genai folder, already "
                         "exported: measure it with `python -m runtimes lm-bench`; the "
                         "pipeline starts from a Hugging Face folder or a .gguf file")
    return kind


def write_lm_source(path: Path, into: Path) -> dict:
    """The model as given, as a float Hugging Face folder at `into` (a GGUF dequantized,
    a folder's model files linked or copied); what the artifact records of it."""
    kind = check_pipeline_source(path)
    if kind == "gguf":
        dequantize_gguf(path, into)
        return {"kind": kind, "given": path.name, "dequantized_from": gguf_weight_types(path)}
    into.mkdir(parents=True)
    for pattern in HF_FILES:
        for found in sorted(path.glob(pattern)):
            try:
                os.link(found, into / found.name)
            except OSError:   # another file system, or links not allowed
                shutil.copyfile(found, into / found.name)
    return {"kind": kind, "given": path.name, "dequantized_from": None}


def model_and_tokenizer(value) -> tuple:
    """A transformers model given from Python, and its tokenizer: the pair's, or the one
    saved where the model was loaded from."""
    model, tokenizer = value if isinstance(value, tuple) else (value, None)
    if tokenizer is None:
        from transformers import AutoTokenizer
        where = getattr(model, "name_or_path", "") or ""
        try:
            tokenizer = AutoTokenizer.from_pretrained(where)
        except (OSError, ValueError) as exc:
            raise ModelError(f"model.causal_lm: no tokenizer where the model was loaded from "
                             f"({where or 'unknown'}): give a (model, tokenizer) pair") from exc
    return model, tokenizer


def write_lm_object(value, into: Path) -> dict:
    """A transformers model given from Python, saved as a Hugging Face folder at `into`."""
    model, tokenizer = model_and_tokenizer(value)
    with native_output_hidden():
        model.save_pretrained(into)
        tokenizer.save_pretrained(into)
    return {"kind": "python", "given": type(model).__name__, "dequantized_from": None}


def object_sha256(value) -> str:
    """What identifies a model given from Python: its weights and its tokenizer's vocabulary."""
    import json

    from compress.core.pyobjects import digest
    model, tokenizer = model_and_tokenizer(value)
    vocabulary = json.dumps(tokenizer.get_vocab(), sort_keys=True).encode()
    return hashlib.sha256(digest(model).encode() + vocabulary).hexdigest()


def source_files(path: Path) -> list[Path]:
    """The files whose content identifies the model as given."""
    if path.is_file():
        return [path]
    return sorted({f for pattern in HF_FILES for f in path.glob(pattern) if f.is_file()})


def tokenizer_sha256(folder: Path) -> str:
    """What the token ids depend on: the tokenizer's files, hashed together."""
    digest = hashlib.sha256()
    for name in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model"):
        if (folder / name).is_file():
            digest.update(name.encode() + b"\0" + (folder / name).read_bytes())
    return digest.hexdigest()


def token_ids(folder: Path, text: str, limit: Optional[int] = None) -> list[int]:
    """`text` as the model's tokenizer makes it (no special tokens added: perplexity is of
    the text itself), the first `limit` ids."""
    from transformers import AutoTokenizer
    ids = AutoTokenizer.from_pretrained(str(folder))(text, add_special_tokens=False).input_ids
    return ids[:limit] if limit else ids


class TorchLM:
    """The float model of a Hugging Face folder, the reference every export is compared
    with: the same two calls as runtimes.lm.genai.GenaiModel."""

    def __init__(self, folder: Path):
        import torch
        from transformers import AutoModelForCausalLM
        self._torch = torch
        with native_output_hidden():
            self.model = AutoModelForCausalLM.from_pretrained(str(folder),
                                                              dtype=torch.float32).eval()

    def logits(self, ids: list[int]):
        """The next-token logits after each of `ids`: [len(ids), vocab], numpy."""
        with self._torch.no_grad():
            return self.model(self._torch.tensor([ids])).logits[0].float().numpy()

    def greedy(self, ids: list[int], new_tokens: int) -> list[int]:
        """The ids greedy decoding picks after `ids` (fewer at an end token)."""
        with self._torch.no_grad():
            out = self.model.generate(self._torch.tensor([ids]), max_new_tokens=new_tokens,
                                      do_sample=False)
        return out[0, len(ids):].tolist()
