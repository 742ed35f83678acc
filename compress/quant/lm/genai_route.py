"""The weight-only route through onnxruntime-genai: its model builder makes every file
(the float export, INT8 and INT4 weight-only, a mix with a weight type per node), and
onnxruntime-genai runs each against the float model's logits on fixed token ids.

    route = GenaiRoute(hf_folder, float_folder, threads=2)
    route.build("int4", out)                            # the builder's INT4 defaults
    route.build("int4", out, high_nodes=[...])          # those nodes at INT8
    quality = route.score(out, reference)               # TextQuality against float
"""
from __future__ import annotations

import json
from pathlib import Path

from export.genai import build_genai
from runtimes.lm.genai import GenaiModel
from runtimes.lm.quality import Reference


LM_HEAD = "/lm_head/MatMul"


class GenaiRoute:
    def __init__(self, hf_folder: Path, float_folder: Path, threads: int = 2):
        self.hf_folder, self.float_folder, self.threads = hf_folder, float_folder, threads

    def build(self, precision: str, out: Path, high_nodes: tuple = (),
              method: str = "default", extra_options: dict | None = None) -> Path:
        """The builder's `precision` file with its base `method`; `high_nodes` (MatMul
        node names) at INT8."""
        if method == "default" and LM_HEAD in high_nodes and self._tied():
            # its tied embedding then reads a tensor name the default method does not write
            raise ValueError("onnxruntime-genai's builder (0.18) writes a model onnxruntime "
                             "cannot load when the output layer is at INT8 under its default "
                             "method and the embeddings are tied to it: use method k_quant "
                             "or rtn")
        options = extra_options or {}
        if (method == "default" and options.get("algo_config", "default") == "default"
                and options.get("is_symmetric") is False and self._tied()):
            raise ValueError("onnxruntime-genai's builder (0.18) writes a model onnxruntime "
                             "cannot load for asymmetric INT4 under its default method when "
                             "the embeddings are tied to the output layer: use method "
                             "k_quant (asymmetric blocks), or symmetric: true")
        target = None
        if high_nodes or method != "default":
            # with Gather quantized, a model with tied embeddings reads them from the
            # output layer's quantized weights at either width, as the builder's own INT4
            # does (without it the embedding table stays float: 192 MB instead of 83)
            weights = {"type": precision, "method": method, "op_types": ["MatMul", "Gather"],
                       "overrides": [{"match": {"name": node}, "type": "int8"}
                                     for node in high_nodes]}
            target = {"quant_config": {"weights": weights}}
        return build_genai(self.hf_folder, out, precision, extra_options=extra_options,
                           target_options=target)

    def _tied(self) -> bool:
        config = json.loads((self.hf_folder / "config.json").read_text())
        return bool(config.get("tie_word_embeddings", False))

    def reference(self, ids: list[int], window: int) -> Reference:
        """The float export's logits on `ids` (the builder's FP32 file matches torch to
        1e-11 nats of KL: make slm-parity)."""
        return Reference(GenaiModel(self.float_folder, self.threads).logits, ids, window)

    def score(self, folder: Path, reference: Reference):
        return reference.score(GenaiModel(folder, self.threads).logits)
