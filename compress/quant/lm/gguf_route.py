"""The weight-only route through llama.cpp: the float model as a GGUF file (export/gguf.py),
quantized by llama.cpp's own `llama_model_quantize` to one of its types (what
`llama-quantize F32.gguf OUT.gguf Q4_K_M` does), each file run by llama.cpp against the
float model's logits on the same token ids as every other route.

    route = GGUFRoute(source_gguf, work=Path("runs/slm/gguf"), threads=2)
    route.build("Q4_K_M", out)              # llama.cpp's Q4_K_M from the float file
    route.build("Q4_0", out, {"blk.3.ffn_down.weight": "Q8_0"}, pure=True)   # a mix
    quality = route.score(out, reference)   # TextQuality against float

The type names are llama.cpp's (a file type `LLAMA_FTYPE_MOSTLY_<name>`, a tensor type
`GGML_TYPE_<name>`), read from the installed library, so a type llama.cpp adds is one a
user can ask for without a change here. A mix is llama.cpp's own per-tensor override
(`llama-quantize --tensor-type NAME=TYPE`), with `pure` so that no tensor gets a type by
llama.cpp's fixed recipe (its Q4_K_M widens some tensors by rule): every width in it
is then the measured choice.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import re
import tempfile
from pathlib import Path

from export.gguf import float_gguf
from runtimes.lm.llamacpp import LlamaCppModel, import_llama_cpp
from runtimes.lm.quality import Reference

PREFIX = "LLAMA_FTYPE_MOSTLY_"


def gguf_types() -> tuple[str, ...]:
    """The types llama.cpp's quantizer makes, by its names (Q8_0, Q4_K_M, ...)."""
    llama_cpp = import_llama_cpp()
    return tuple(sorted(name[len(PREFIX):] for name in dir(llama_cpp)
                        if name.startswith(PREFIX) and not name.endswith("GUESSED")))


def _overrides(llama_cpp, types: dict[str, str]):
    """A C array of (pattern, type), ended by a null pattern, as llama.cpp reads it; a
    pattern matches one tensor name exactly."""
    table = (llama_cpp.llama_model_tensor_override * (len(types) + 1))()
    for row, (name, kind) in zip(table, types.items()):
        ggml_type = getattr(llama_cpp, f"GGML_TYPE_{kind.upper()}", None)
        if ggml_type is None:
            raise ValueError(f"llama.cpp has no tensor type {kind!r} (for {name})")
        row.pattern, row.type = f"^{re.escape(name)}$".encode(), ggml_type
    table[len(types)].pattern = None
    return table


@contextlib.contextmanager
def _native_stderr():
    """llama.cpp's quantizer writes a line per tensor to the process's stderr (file
    descriptor 2, below Python): kept in a file instead, which an error quotes."""
    with tempfile.TemporaryDirectory(prefix="llama-quantize-") as folder:
        log = Path(folder) / "stderr.txt"
        saved = os.dup(2)
        try:
            with open(log, "wb") as sink:
                os.dup2(sink.fileno(), 2)
                yield log
        finally:
            os.dup2(saved, 2)
            os.close(saved)


class GGUFRoute:
    def __init__(self, source: Path, work: Path, threads: int = 2,
                 float_path: Path | None = None):
        """`float_path`: the float32 GGUF where one was made already (else written into
        `work` from `source` when first needed)."""
        self.source, self.work, self.threads = Path(source), Path(work), threads
        self._float: Path | None = Path(float_path) if float_path else None

    def float_file(self) -> Path:
        """The float32 GGUF every type is made from (written once into `work`)."""
        if self._float is None:
            path = self.work / "float32.gguf"
            if not path.is_file():
                self.work.mkdir(parents=True, exist_ok=True)
                float_gguf(self.source, path)
            self._float = path
        return self._float

    def tensors(self) -> list[tuple[str, int]]:
        """The weights llama.cpp quantizes (every 2-D `.weight`), (name, parameters), in
        the file's order: what units.py groups into units."""
        from gguf import GGUFReader
        return [(t.name, int(t.n_elements)) for t in GGUFReader(str(self.float_file())).tensors
                if t.name.endswith(".weight") and len(t.shape) >= 2]

    def build(self, gguf_type: str, out: Path, overrides: dict[str, str] | None = None,
              pure: bool = False) -> Path:
        """llama.cpp's `gguf_type` of the float file, written to `out`; `overrides`: a
        type per tensor name; `pure`: every other tensor at `gguf_type` exactly."""
        llama_cpp = import_llama_cpp()
        ftype = getattr(llama_cpp, PREFIX + gguf_type.upper(), None)
        if ftype is None:
            raise ValueError(f"llama.cpp has no GGUF type {gguf_type!r}: it makes "
                             f"{', '.join(gguf_types())}")
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype, params.nthread, params.pure = ftype, self.threads, pure
        table = _overrides(llama_cpp, overrides or {})
        if overrides:
            params.tt_overrides = ctypes.cast(
                table, ctypes.POINTER(llama_cpp.llama_model_tensor_override))
        source = self.float_file()
        partial = out.with_name(out.name + ".partial")
        with _native_stderr() as said:
            code = llama_cpp.llama_model_quantize(str(source).encode(),
                                                  str(partial).encode(), ctypes.byref(params))
        if code != 0 or not partial.is_file():
            partial.unlink(missing_ok=True)
            raise RuntimeError(f"llama.cpp could not quantize {source} to {gguf_type} "
                               f"(llama_model_quantize returned {code}): "
                               f"{said.read_text()[-1500:]}")
        os.replace(partial, out)
        return out

    def _model(self, path: Path, window: int) -> LlamaCppModel:
        return LlamaCppModel(path, self.threads, all_logits=True, context=window)

    def score(self, path: Path, reference: Reference):
        window = max(len(chunk) for chunk in reference.windows)
        return reference.score(self._model(path, window).logits)
