"""A causal LM as a float GGUF file for llama.cpp, written with the `gguf` package: the
starting point of llama.cpp's own quantization (Q8_0, Q4_K_M ...), as llama.cpp's
`convert_hf_to_gguf.py --outtype f32` is for its users.

From a GGUF file (the model as given is often one: a Q4_1 or Q4_K_M download): every
tensor dequantized to float32 by the `gguf` package, the metadata (architecture,
hyperparameters, tokenizer, chat template) copied as it is, the file type set to F32.
These are the same float weights transformers reads from that file (it dequantizes with
the same package), so the llama.cpp route and the onnxruntime-genai route start from one
float model. A Hugging Face folder has no GGUF metadata to copy: converting one needs
llama.cpp's converter, which this project does not vendor (an error says so).

Written to `<out>.partial`, renamed at the end: a failed write leaves nothing that looks
finished.
"""
from __future__ import annotations

import os
from pathlib import Path


class GGUFExportError(Exception):
    """The source cannot become a float GGUF; the message says why and what to give."""


def float_gguf(source: str | Path, out: str | Path) -> Path:
    """`source` (a .gguf file) written as float32 GGUF at `out`."""
    source, out = Path(source), Path(out)
    if source.suffix != ".gguf" or not source.is_file():
        raise GGUFExportError(
            f"{source}: the GGUF route starts from a .gguf file (its tokenizer and "
            "hyperparameters are copied from it); for a Hugging Face folder, convert it "
            "once with llama.cpp's convert_hf_to_gguf.py and give that file")
    import numpy as np
    from gguf import GGUFReader, GGUFValueType, GGUFWriter, LlamaFileType, quants
    try:
        reader = GGUFReader(str(source))
    except Exception as exc:   # the reader's errors for a damaged file are of many kinds
        raise GGUFExportError(f"{source} cannot be read as a GGUF file ({exc})") from exc
    partial = out.with_name(out.name + ".partial")
    writer = GGUFWriter(str(partial), reader.fields["general.architecture"].contents())
    try:
        for field in reader.fields.values():
            # the architecture and the GGUF.* fields are the writer's own
            if field.name == "general.architecture" or field.name.startswith("GGUF."):
                continue
            kind = field.types[0]
            value = (int(LlamaFileType.ALL_F32) if field.name == "general.file_type"
                     else field.contents())
            writer.add_key_value(field.name, value, kind,
                                 sub_type=field.types[-1] if kind == GGUFValueType.ARRAY else None)
        for tensor in reader.tensors:
            writer.add_tensor(tensor.name, quants.dequantize(tensor.data, tensor.tensor_type)
                              .astype(np.float32))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    except BaseException:
        writer.close()
        partial.unlink(missing_ok=True)
        raise
    writer.close()
    os.replace(partial, out)
    return out
