"""The weight-only route through llama.cpp: the float model as a GGUF file (export/gguf.py),
quantized by llama.cpp's own `llama_model_quantize` to one of its types (what
`llama-quantize F32.gguf OUT.gguf Q4_K_M` does), each file run by llama.cpp against the
float model's logits on the same token ids as every other route.

    route = GGUFRoute(source_gguf, work=Path("runs/slm/gguf"), threads=2)
    route.build("Q4_K_M", out)              # llama.cpp's Q4_K_M from the float file
    quality = route.score(out, reference)   # TextQuality against float

The type names are llama.cpp's (its `LLAMA_FTYPE_MOSTLY_<name>`), read from the installed
library, so a type llama.cpp adds is one a user can ask for without a change here.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
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
    def __init__(self, source: Path, work: Path, threads: int = 2):
        self.source, self.work, self.threads = Path(source), Path(work), threads
        self._float: Path | None = None

    def float_file(self) -> Path:
        """The float32 GGUF every type is made from (written once into `work`)."""
        if self._float is None:
            path = self.work / "float32.gguf"
            if not path.is_file():
                self.work.mkdir(parents=True, exist_ok=True)
                float_gguf(self.source, path)
            self._float = path
        return self._float

    def build(self, gguf_type: str, out: Path) -> Path:
        """llama.cpp's `gguf_type` of the float file, written to `out`."""
        llama_cpp = import_llama_cpp()
        ftype = getattr(llama_cpp, PREFIX + gguf_type.upper(), None)
        if ftype is None:
            raise ValueError(f"llama.cpp has no GGUF type {gguf_type!r}: it makes "
                             f"{', '.join(gguf_types())}")
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype, params.nthread = ftype, self.threads
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

    def reference(self, ids: list[int], window: int) -> Reference:
        """The float file's logits on `ids`, run by llama.cpp."""
        return Reference(self._model(self.float_file(), window).logits, ids, window)

    def score(self, path: Path, reference: Reference):
        window = max(len(chunk) for chunk in reference.windows)
        return reference.score(self._model(path, window).logits)
