"""Where each node of a model ran: which onnxruntime execution provider or LiteRT delegate
took it, which fell back to the CPU, and the share of the model's FLOPs each part carries.

onnxruntime: a session with the providers asked for and profiling on runs the model twice
(random inputs); every node event of the profile names its `op_name` and `provider` and
carries its input and output shapes. The nodes are those of the graph onnxruntime
executes (after its graph optimizations: fused nodes, layout reorders). A compiling
provider (TensorRT, OpenVINO, QNN) runs each partition it took as one node whose op type
is no ONNX operator: its FLOPs are the model's total, from a CPU-only profile, less those
of the nodes outside the partitions.

LiteRT: the interpreter's node list keeps the model's own nodes and appends one DELEGATE
node per partition a delegate took, whose inputs and outputs are the partition's
boundary tensors; walking back from its outputs to its inputs finds the nodes it
replaced. An external delegate is applied when the interpreter is built, XNNPACK (the
default delegate) at the first allocate_tensors, so DELEGATE nodes present before that
belong to the external delegate and the later ones to XNNPACK. Nodes no delegate took
run on LiteRT's built-in CPU kernels.

FLOPs are estimates from the shapes (runtimes.flops).
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections import Counter
from typing import Sequence

import numpy as np

from runtimes.feeds import synthetic_feeds
from runtimes.flops import FLOPS_NOTE, Shape, node_flops

CPU_EP = "CPUExecutionProvider"
XNNPACK = "XNNPACK"
BUILTIN = "builtin"          # LiteRT's own CPU kernels
COPY_OPS = ("MemcpyToHost", "MemcpyFromHost")   # transfers onnxruntime inserts
# --- grouping ---------------------------------------------------------------------------

def _group(nodes: list[dict], total_flops: float) -> dict:
    """{"nodes", "op_types", "flops", "flops_share"} of some placed nodes."""
    flops = sum(n["flops"] or 0 for n in nodes)
    return {"nodes": len(nodes),
            "op_types": dict(Counter(n["op"] for n in nodes).most_common()),
            "flops": int(flops),
            "flops_share": round(flops / total_flops, 6) if total_flops else None}


def summarise(nodes: list[dict], engine: str, requested: list[str], accelerated: set[str],
               method: str, **extra) -> dict:
    """The placement dict; `accelerated`: where nodes were asked to go (empty: nowhere
    but the CPU, so nothing falls back)."""
    total = sum(n["flops"] or 0 for n in nodes)
    by_where: dict[str, list] = {}
    rank = {where: i for i, where in enumerate(requested)}   # accelerators first
    for node in sorted(nodes, key=lambda n: rank.get(n["where"], len(rank))):
        by_where.setdefault(node["where"], []).append(node)
    fallback = None
    if accelerated:
        fallback = _group([n for n in nodes if n["where"] not in accelerated], total)
    return {"engine": engine, "providers_requested": requested, "nodes": len(nodes),
            "by_provider": {where: _group(group, total) for where, group in by_where.items()},
            "fallback": fallback, "flops_total": int(total), "flops_note": FLOPS_NOTE,
            **extra, "method": method}


# --- onnxruntime ------------------------------------------------------------------------

def _compiled(op: str, where: str, known: set[str] | None) -> bool:
    """Whether a node is a partition a compiling provider built: its op type is none of
    the operator schemas this onnxruntime knows (ONNX, contrib, internal layouts). A build
    that cannot list them: the names TensorRT, OpenVINO and QNN give their partitions."""
    if known is not None:
        return op not in known
    return op.startswith((where, "TRTKernel_graph")) or "-EP-subgraph_" in op


def _known_op_types() -> set[str] | None:
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as C
        return {schema.name for schema in C.get_all_operator_schema()}
    except (ImportError, AttributeError):
        return None


def _shapes(entries: list) -> list[Shape]:
    """[{"float": [1, 3, 8, 8]}, ...] (a profile's type-shape list) -> shapes."""
    return [next(iter(entry.values()), None) if isinstance(entry, dict) else None
            for entry in entries or []]


def _profile(path: str, providers: list, threads: int | None, runs: int,
             feeds: dict | None = None) -> tuple[list, list]:
    """Node events of `runs` inferences (one per node) and the providers the session kept,
    from a session built as the benchmark builds it, with profiling on, on `feeds` (the
    benchmark's timed inputs; random ones without: a model whose dynamic dimensions must
    take certain sizes needs the real ones)."""
    from runtimes.onnx_session import OnnxRuntimeSession

    folder = tempfile.mkdtemp(prefix="placement-")

    def profiling(options) -> None:
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(folder, "profile")
        # Prepacked weights drop out of the profile's input shapes (a quantized conv's
        # weights among them); without prepacking every weight shape is listed.
        options.add_session_config_entry("session.disable_prepacking", "1")

    try:
        session = OnnxRuntimeSession(path, threads=threads, providers=providers,
                                     configure=profiling)
        feeds = feeds if feeds is not None else synthetic_feeds(session.inputs)
        for _ in range(max(runs, 1)):
            session.run(feeds)
        with open(session._session.end_profiling()) as fh:
            events = json.load(fh)
        kept = session._session.get_providers()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    nodes = {}
    for event in events:
        args = event.get("args") or {}
        if event.get("cat") != "Node" or not event.get("name", "").endswith("_kernel_time"):
            continue
        key = (event["name"], args.get("node_index"))
        nodes.setdefault(key, {"name": event["name"][:-len("_kernel_time")],
                               "op": args.get("op_name", "?"),
                               "where": args.get("provider", "?"),
                               "inputs": _shapes(args.get("input_type_shape")),
                               "outputs": _shapes(args.get("output_type_shape"))})
    return list(nodes.values()), kept


def onnx_placement(path: str, providers: Sequence | None = None, threads: int | None = None,
                   runs: int = 2, feeds: dict | None = None) -> dict:
    """Placement of an ONNX model's nodes with `providers` (names or (name, options) in
    priority order; the CPU provider is always last), run on `feeds` (random without)."""
    from runtimes.onnx_session import _provider_lists

    providers = list(providers or [])
    names, _ = _provider_lists(providers)
    events, kept = _profile(path, providers, threads, runs, feeds)
    known = _known_op_types()
    nodes, copies = [], 0
    for event in events:
        if event["op"] in COPY_OPS:
            copies += 1
            continue
        compiled = _compiled(event["op"], event["where"], known)
        flops = None if compiled else node_flops(event["op"], event["inputs"], event["outputs"])
        nodes.append({**event, "compiled": compiled, "flops": flops})
    method = ("onnxruntime session profiling (enable_profiling): each executed node's "
              "provider and shapes; nodes are those of the optimized graph")
    compiled = [n for n in nodes if n["compiled"]]
    if compiled:
        reference, _ = _profile(path, [], threads, 1, feeds)
        total = sum(node_flops(e["op"], e["inputs"], e["outputs"]) or 0 for e in reference)
        rest = max(total - sum(n["flops"] or 0 for n in nodes), 0)
        for node in compiled:
            node["flops"] = rest / len(compiled)
        method += ("; compiled partitions (one node each) carry the CPU-only profile's FLOPs "
                   "less those of the other nodes, shared equally between partitions")
    accelerated = {n for n in names if n != CPU_EP}
    return summarise(nodes, "onnxruntime", names, accelerated, method, providers_active=kept,
                      partitions=dict(Counter(n["where"] for n in compiled)), copies=copies)


# --- LiteRT -----------------------------------------------------------------------------

def _delegated(ops: list[dict], external_until: int, external: str) -> dict[int, str]:
    """{original node index: delegate} from the DELEGATE nodes appended to `ops`."""
    first = next((i for i, op in enumerate(ops) if op["op_name"] == "DELEGATE"), len(ops))
    producer = {int(t): i for i in range(first) for t in ops[i]["outputs"]}
    owner: dict[int, str] = {}
    for op in ops[first:]:
        label = external if op["index"] < external_until else XNNPACK
        boundary = {int(t) for t in op["inputs"]}
        stack = [int(t) for t in op["outputs"]]
        while stack:
            tensor = stack.pop()
            node = producer.get(tensor)
            if tensor in boundary or node is None or node in owner:
                continue
            owner[node] = label
            stack.extend(int(t) for t in ops[node]["inputs"] if t >= 0)
    return owner


def _litert_nodes(interpreter, owner) -> list[dict]:
    """The model's own nodes (DELEGATE nodes left out), each placed by `owner(index)`;
    `int8`: its first input is an 8-bit quantized tensor (it computes in int8)."""
    from runtimes.litert_session import is_quantized
    details = interpreter.get_tensor_details()
    shapes = {d["index"]: tuple(int(x) for x in d["shape"]) for d in details}
    eight_bit = {d["index"] for d in details
                 if is_quantized(d) and np.dtype(d["dtype"]).itemsize == 1}
    return [{"name": f"{op['op_name']}:{op['index']}", "op": op["op_name"],
             "where": owner(op["index"]),
             "int8": len(op["inputs"]) > 0 and int(op["inputs"][0]) in eight_bit,
             "flops": node_flops(op["op_name"], [shapes.get(int(t)) for t in op["inputs"]],
                                 [shapes.get(int(t)) for t in op["outputs"]])}
            for op in interpreter._get_ops_details() if op["op_name"] != "DELEGATE"]


def litert_placement(path: str, xnnpack: bool = True, delegate: str | None = None,
                     threads: int | None = None, delegate_options: dict | None = None) -> dict:
    """Placement of a TFLite model's nodes on an external `delegate`, XNNPACK and LiteRT's
    built-in kernels, on an interpreter built as the benchmark builds it."""
    from runtimes.litert_session import load_error, new_interpreter

    _, interpreter = new_interpreter(path, threads, xnnpack, delegate, delegate_options)
    built = len(interpreter._get_ops_details())
    try:
        interpreter.allocate_tensors()
    except (ValueError, RuntimeError) as exc:
        raise load_error(path, exc) from None
    ops = interpreter._get_ops_details()
    owner = _delegated(ops, built, delegate or "")
    partitions = Counter(XNNPACK if op["index"] >= built else delegate
                         for op in ops if op["op_name"] == "DELEGATE")
    nodes = _litert_nodes(interpreter, lambda index: owner.get(index, BUILTIN))
    requested = [delegate] if delegate else []
    requested += [XNNPACK] if xnnpack else []
    accelerated = {delegate} if delegate else {XNNPACK} if xnnpack else set()
    method = ("LiteRT interpreter node list (_get_ops_details): each DELEGATE node replaces "
              "the nodes between its boundary tensors; DELEGATE nodes present before "
              "allocate_tensors belong to the external delegate, later ones to XNNPACK")
    # whether XNNPACK took the int8 ops (its QS8/QU8 paths), not only the float ones
    int8 = dict(Counter(node["where"] for node in nodes if node["int8"]))
    return summarise(nodes, "litert", requested, accelerated, method,
                     partitions=dict(partitions), int8_nodes=int8)


def litert_gpu_placement(path: str, threads: int | None = None, options: dict | None = None,
                         fully_accelerated: bool | None = None) -> dict:
    """Placement on LiteRT's GPU accelerator. Its API says only whether the GPU took the
    whole model (is_fully_accelerated): every node on the GPU, or a split it does not
    report, which this says rather than guessing. `fully_accelerated`: what a session
    of the model already said (the benchmark's), so it is not compiled again."""
    from runtimes.litert_compiled import GPU_LABEL, SPLIT_UNREPORTED, CompiledSession
    from runtimes.litert_session import new_interpreter

    full = fully_accelerated
    if full is None:
        with CompiledSession(path, threads=threads, options=options) as session:
            full = session.fully_accelerated
    _, interpreter = new_interpreter(path, threads, xnnpack=False)   # the node list only
    where = GPU_LABEL if full else SPLIT_UNREPORTED
    nodes = _litert_nodes(interpreter, lambda index: where)
    method = ("LiteRT CompiledModel.is_fully_accelerated on a model compiled for GPU with "
              "CPU fallback; the node list from the LiteRT interpreter")
    return summarise(nodes, "litert", [GPU_LABEL], {GPU_LABEL} if full else set(), method,
                      fully_accelerated=full)


def _where_label(where: str) -> str:
    return "built-in CPU kernels" if where == BUILTIN else where


def _percent(share: float) -> str:
    return "<0.1%" if 0 < share < 0.001 else f"{share:.1%}"


def describe(result: dict) -> str:
    """One line: nodes and FLOP share per provider or delegate, and the fallback."""
    if "error" in result:
        return result["error"]
    parts = []
    for where, group in result["by_provider"].items():
        share = group["flops_share"]
        count = result.get("partitions", {}).get(where)
        nodes = (f"{count} partition{'s' * (count != 1)}" if count and where != XNNPACK
                 and result["engine"] == "onnxruntime" else
                 f"{group['nodes']} node{'s' * (group['nodes'] != 1)}")
        int8 = (result.get("int8_nodes") or {}).get(where)
        parts.append(f"{_where_label(where)} {nodes}" + (f", {int8} in int8" if int8 else "")
                     + (f" ({_percent(share)} of FLOPs)" if share is not None else ""))
    fallback = result["fallback"]
    if result.get("fully_accelerated") is False:
        tail = "some nodes fell back to the CPU, which ones is not reported"
    elif fallback is None:
        tail = "no accelerator requested"
    elif fallback["nodes"] == 0:
        tail = "no fallback"
    else:
        types = ", ".join(fallback["op_types"])
        share = fallback["flops_share"]
        tail = (f"fallback {fallback['nodes']} node{'s' * (fallback['nodes'] != 1)} "
                f"({types})" + (f", {_percent(share)} of FLOPs" if share is not None else ""))
    return "; ".join(parts) + f"; {tail} (FLOPs estimated)"
