"""The units a language model's bits are chosen for: its MatMul nodes grouped by the
transformer layer they belong to (every projection of `layers.N`), or one unit per node.

Node names are the ones onnxruntime-genai's builder writes (`/model/layers.12/mlp/
down_proj/MatMul`, `/lm_head/MatMul`) or a GGUF's tensor names (`blk.12.ffn_down.weight`,
`token_embd.weight`); a node outside any layer is a unit of its own.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

LAYER = re.compile(r"(?:/layers\.|^blk\.)(\d+)[./]")
GRANULARITIES = ("layer", "matmul")


@dataclass(frozen=True)
class Unit:
    """Nodes that get the same width: `name` is what the report shows ("layers.12",
    "lm_head", or the node's name)."""
    name: str
    nodes: tuple[str, ...]
    parameters: int


def units_of(matmuls: list[tuple[str, int]], granularity: str = "layer") -> list[Unit]:
    """`matmuls` ((node, parameters), in graph order) grouped into units, in graph order."""
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity {granularity!r}: one of {', '.join(GRANULARITIES)}")
    groups: dict[str, list[tuple[str, int]]] = {}
    for node, parameters in matmuls:
        groups.setdefault(_unit_name(node, granularity), []).append((node, parameters))
    return [Unit(name, tuple(n for n, _ in members), sum(p for _, p in members))
            for name, members in groups.items()]


def _unit_name(node: str, granularity: str) -> str:
    layer = LAYER.search(node)
    if granularity == "layer" and layer:
        return f"layers.{layer.group(1)}"
    if granularity == "layer" and node.endswith("/MatMul"):
        return node.strip("/").removesuffix("/MatMul")   # "/lm_head/MatMul" -> "lm_head"
    if granularity == "layer" and node.endswith(".weight"):
        return node.removesuffix(".weight")              # "token_embd.weight" -> "token_embd"
    return node

