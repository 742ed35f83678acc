"""A language model's MatMul weights quantized to blocks of 4 or 8 bits (onnxruntime's
MatMulNBits), each node at the width a plan gives it, in an onnxruntime-genai folder.

The float folder is the builder's FP32 export (export/genai.py). One pass of onnxruntime's
MatMulNBits quantizer per width, each on the nodes the plan gives that width, as
onnxruntime-genai's builder mixes widths (its DEFAULT quantizer takes one width per
pass): a node's bytes do not depend on what else is quantized. Nodes the plan leaves out
stay float. The result is a folder onnxruntime-genai opens: the quantized model.onnx with
its weights beside it, and the float folder's config and tokenizer files.
"""
from __future__ import annotations

import contextlib
import io
import math
import shutil
from dataclasses import dataclass
from pathlib import Path

MODEL = "model.onnx"


METHODS = ("default", "rtn", "k_quant")


@dataclass(frozen=True)
class NBits:
    """How a width is applied. The defaults are onnxruntime-genai's builder's for the CPU:
    blocks of 32, symmetric, accuracy level 4 (the activations of a MatMulNBits are
    quantized to int8 per block on the CPU, its fast path). `method`: the builder's base
    methods: "default" (MLAS round to nearest), "rtn", "k_quant" (a scale searched per
    block, llama.cpp's k-quants' idea)."""
    block_size: int = 32
    symmetric: bool = True
    accuracy_level: int = 4
    method: str = "default"

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"method {self.method!r}: one of {', '.join(METHODS)}")


class FloatModel:
    """The float folder's model.onnx, loaded once with its weights: each plan quantizes a
    copy of it."""

    def __init__(self, folder: str | Path):
        import onnx
        self.folder = Path(folder)
        self.proto = onnx.load(str(self.folder / MODEL))
        self._matmuls = _matmuls(self.proto.graph)   # every probe's plan is checked on it

    def matmuls(self) -> list[tuple[str, int]]:
        """(node name, parameters) of every MatMul with a constant weight, in graph order."""
        return list(self._matmuls)

    @staticmethod
    def matmuls_of(folder: str | Path) -> list[tuple[str, int]]:
        """The same, read from the file's header (its weights stay on disk)."""
        from compress.model.onnx_file import header_model
        return _matmuls(header_model(Path(folder) / MODEL).graph)

    def quantized(self, bits_of: dict[str, int], nbits: NBits):
        """A copy of the model with each node of `bits_of` at its width."""
        import logging

        from onnx import ModelProto
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
        # it logs a line per node at INFO (several hundred per probe)
        logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(
            logging.WARNING)
        every = [name for name, _ in self._matmuls]
        unknown = sorted(set(bits_of) - set(every))
        if unknown:
            raise ValueError(f"not MatMul nodes with a constant weight: {', '.join(unknown[:5])}")
        model = ModelProto()
        model.CopyFrom(self.proto)
        if nbits.method != "default":
            return _per_node_pass(model, bits_of, every, nbits)
        for bits in sorted(set(bits_of.values())):
            # the quantizer takes every MatMul that is not excluded (its nodes_to_include
            # adds nodes, it does not restrict): the others of this pass are excluded
            others = [name for name in every if bits_of.get(name) != bits]
            quantizer = MatMulNBitsQuantizer(
                model, bits=bits, block_size=nbits.block_size, is_symmetric=nbits.symmetric,
                accuracy_level=nbits.accuracy_level, nodes_to_exclude=others,
                op_types_to_quantize=("MatMul",))
            quantizer.process()
            model = quantizer.model.model
        return model

    def write(self, bits_of: dict[str, int], nbits: NBits, out: str | Path) -> Path:
        """The folder `out` for `bits_of`, written in `out`.partial and renamed at the end
        (a failure leaves nothing that looks finished)."""
        import onnx
        out = Path(out)
        partial = out.with_name(out.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        for item in self.folder.iterdir():   # genai_config.json, the tokenizer's files
            if item.is_file() and not item.name.startswith(MODEL):
                shutil.copy2(item, partial / item.name)
        onnx.save(self.quantized(bits_of, nbits), str(partial / MODEL),
                  save_as_external_data=True, location=MODEL + ".data", size_threshold=1024)
        shutil.rmtree(out, ignore_errors=True)
        partial.rename(out)
        return out


def _per_node_pass(model, bits_of: dict[str, int], every: list[str], nbits: NBits):
    """rtn and k_quant take a width per node in one pass (as the builder calls them)."""
    from onnxruntime.quantization.matmul_nbits_quantizer import (KQuantWeightOnlyQuantConfig,
                                                                 MatMulNBitsQuantizer,
                                                                 RTNWeightOnlyQuantConfig)
    config = {node: {"bits": bits} for node, bits in bits_of.items()}
    algo = (KQuantWeightOnlyQuantConfig if nbits.method == "k_quant"
            else RTNWeightOnlyQuantConfig)(customized_weight_config=config)
    quantizer = MatMulNBitsQuantizer(
        model, bits=4, block_size=nbits.block_size, is_symmetric=nbits.symmetric,
        accuracy_level=nbits.accuracy_level, algo_config=algo,
        nodes_to_exclude=[name for name in every if name not in bits_of])
    with contextlib.redirect_stdout(io.StringIO()):   # a progress bar per node otherwise
        quantizer.process()
    return quantizer.model.model


def _matmuls(graph) -> list[tuple[str, int]]:
    sizes = {i.name: math.prod(int(d) for d in i.dims) for i in graph.initializer}
    return [(n.name, sizes[n.input[1]]) for n in graph.node
            if n.op_type == "MatMul" and len(n.input) > 1 and n.input[1] in sizes]
