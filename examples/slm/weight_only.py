"""`make slm-weight-only`: SmolLM2-135M (`--model gemma3-270m`: Gemma 3 270M, written to
docs/slm_weight_only_gemma3-270m.md) quantized weight-only through onnxruntime-genai,
side by side in one run on the same token ids: the builder's INT8 and INT4 defaults, its
fixed mixed recipe (k_quant_mixed), the mix this project measures (each transformer
layer alone at INT4 scored against the float model on calibration text, the costliest
layers per weight kept at INT8 until the perplexity budget holds on evaluation text),
OpenVINO GenAI's float IR and NNCF's INT8 and INT4 (with and without data) made by the
pipeline's export.ovgenai (openvino_rows.py), and llama.cpp's own types (Q8_0, Q4_K_M,
Q4_0) made by its quantizer from the same float weights, run by llama.cpp (left out, with
a line saying so, where llama-cpp-python is not installed: `make llama-cpp`). Quality against the float export (perplexity, mean KL,
top-1 agreement), file size, quantize time, and tokens/s in fresh processes on the same
prompt ids. Writes docs/slm_weight_only.md and runs/slm/weight_only.json.

    python examples/slm/weight_only.py [--budget 0.05] [--tokens 2048] [--threads 1 2]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / ".."))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from openvino_rows import openvino_rows  # noqa: E402
from parity import DEFAULT_MODEL, lm_export, out_folder  # noqa: E402
from slm_models import MODELS  # noqa: E402
from table import render_document  # noqa: E402

from compress.data.text import python_docs_text  # noqa: E402
from compress.model.causal_lm import token_ids  # noqa: E402
from compress.quant.lm.genai_route import GenaiRoute  # noqa: E402
from compress.quant.lm.gguf_route import GGUFRoute  # noqa: E402
from compress.quant.lm.mix import QualityBudget, choose_mix  # noqa: E402
from compress.quant.lm.nbits import FloatModel, NBits  # noqa: E402
from compress.quant.lm.sensitivity import measure_sensitivity, rank  # noqa: E402
from compress.quant.lm.units import units_of  # noqa: E402
from runtimes.errors import RuntimeInputError  # noqa: E402
from runtimes.lm.bench import Workload, measure_in_processes  # noqa: E402
from runtimes.lm.engines import for_path  # noqa: E402
from runtimes.lm.genai import folder_bytes  # noqa: E402
from runtimes.lm.llamacpp import import_llama_cpp  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
# the builder's own routes, as a user would call them: (label, precision, extra options)
BUILDER_ROUTES = (("builder INT8 weight-only", "int8", None),
                  ("builder INT4 (defaults: round to nearest, block 32)", "int4", None),
                  ("builder INT4 k_quant", "int4", {"algo_config": "k_quant"}),
                  ("builder INT4 k_quant_mixed (its fixed recipe)", "int4",
                   {"algo_config": "k_quant_mixed"}))
# llama.cpp's types a user would pick for a small device: (label, type; None: the float file)
LLAMA_CPP_ROUTES = (("llama.cpp F32 (the same float weights)", None),
                    ("llama.cpp Q8_0", "Q8_0"), ("llama.cpp Q4_K_M", "Q4_K_M"),
                    ("llama.cpp Q4_0", "Q4_0"))


# --budget-on: the quality measure a mix's budget holds (compress/quant/lm/mix.py MEASURES)
BUDGET_ON = {"perplexity": "perplexity_increase", "kl": "kl_mean"}


def _budget(args) -> QualityBudget:
    return QualityBudget(args.budget, BUDGET_ON[args.budget_on])


def budget_label(args) -> str:
    return (f"perplexity budget +{args.budget:.0%}" if args.budget_on == "perplexity"
            else f"mean KL budget {args.budget:g}")


def say(line: str) -> None:
    print(line, flush=True)


def timed(make):
    started = time.perf_counter()
    result = make()
    return result, time.perf_counter() - started


def measured_mix(route, fp32: Path, units, calibration, reference, args, out: Path):
    """Rank the layers on calibration text, then the smallest mix meeting the budget."""
    model, nbits = FloatModel(fp32), NBits(method=args.method)
    costs = measure_sensitivity(
        units, lambda unit, where: model.write({n: 4 for n in unit.nodes}, nbits, where),
        lambda f: route.score(f, calibration), "INT4", say)
    del model
    ranking = rank(costs)
    nodes = {u.name: u.nodes for u in units}

    def build(high, folder):
        route.build("int4", folder, tuple(n for name in high for n in nodes[name]),
                    method=args.method)
        return folder_bytes(folder)
    return choose_mix(ranking, build, lambda f: route.score(f, reference), _budget(args),
                      out, say)


def gguf_measured_mix(route: GGUFRoute, calibration, reference, args, out: Path):
    """The same search on llama.cpp: each layer alone at the low type (every other
    tensor at Q8_0) ranked on calibration text, the costliest per weight at the high
    type until the budget holds; every width measured (pure: no fixed recipe)."""
    units = units_of(route.tensors(), "layer")
    costs = measure_sensitivity(
        units, lambda unit, where: route.build(
            "Q8_0", where.with_suffix(".gguf"), {n: args.gguf_low for n in unit.nodes}, True),
        lambda f: route.score(f, calibration), args.gguf_low, say)
    nodes = {u.name: u.nodes for u in units}

    def build(high, path):
        route.build(args.gguf_low, path,
                    {n: args.gguf_high for name in high for n in nodes[name]}, pure=True)
        return path.stat().st_size
    return choose_mix(rank(costs), build, lambda f: route.score(f, reference), _budget(args),
                      out, say)


def llama_cpp_rows(source: Path, out: Path, calibration, reference, args):
    """llama.cpp's files from the float weights of `source` (the GGUF as given), its
    measured mix, and the llama-cpp-python version; or none and the reason where it is
    not installed."""
    try:
        version = f"llama-cpp-python {import_llama_cpp().__version__}"
    except RuntimeInputError as exc:
        return [], f"left out: {exc}", None
    route = GGUFRoute(source, out / "gguf", threads=2)
    rows = []
    for label, kind in LLAMA_CPP_ROUTES:
        path = out / "gguf" / f"{(kind or 'F32').lower()}.gguf"
        if kind is None:
            _, seconds = timed(route.float_file)
        else:
            _, seconds = timed(lambda: route.build(kind, path))
        rows.append({"label": label, "folder": route.float_file() if kind is None else path,
                     "seconds": None if kind is None else seconds, "route": route})
        say(f"{label}: made in {seconds:.0f} s")
    mix, seconds = timed(lambda: gguf_measured_mix(route, calibration, reference, args,
                                                   out / "gguf" / "measured-mix.gguf"))
    if mix.folder:
        rows.append({"label": f"measured mix on llama.cpp ({args.gguf_low}, {args.gguf_high} "
                              f"where measured, {budget_label(args)})",
                     "folder": mix.folder, "seconds": seconds, "quality": mix.chosen.quality})
    return rows, version, mix.as_dict()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=float, default=0.05,
                        help="the mix's quality budget against float: the perplexity "
                        "increase (0.05: +5%%) or, with --budget-on kl, the mean KL in nats")
    parser.add_argument("--budget-on", default="perplexity", choices=sorted(BUDGET_ON),
                        help="what the budget holds: perplexity, or kl (steadier where "
                        "perplexity falls while KL rises, as on Gemma 3)")
    parser.add_argument("--tokens", type=int, default=2048, help="evaluation tokens")
    parser.add_argument("--calibration", type=int, default=256, help="calibration tokens")
    parser.add_argument("--window", type=int, default=512)
    parser.add_argument("--granularity", default="layer", choices=("layer", "matmul"),
                        help="a unit of the mix: a transformer layer, or each MatMul")
    parser.add_argument("--method", default="k_quant", choices=("default", "rtn", "k_quant"),
                        help="the builder's base method for the mix's INT4 and INT8 weights "
                        "(k_quant: under `default` the builder cannot keep the output layer at "
                        "INT8 with tied embeddings; not a choice tuned on this model)")
    parser.add_argument("--gguf-low", default="Q4_0",
                        help="llama.cpp's mix: the type of every tensor not kept wider (the "
                        "same 4 bits in blocks of 32 as the builder's INT4)")
    parser.add_argument("--gguf-high", default="Q8_0", help="llama.cpp's mix: the wider type")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                        help="threads of the tokens/s runs (each count its own runs)")
    parser.add_argument("--nncf-calibration", type=int, default=4096,
                        help="calibration tokens of NNCF's data-aware INT4 (32 windows of 128)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds of tokens/s runs, every file once per round, each in a "
                        "fresh process")
    parser.add_argument("--new-tokens", type=int, default=128, help="decoded per run")
    parser.add_argument("--model", default=DEFAULT_MODEL, choices=sorted(MODELS))
    parser.add_argument("--out", default="runs/slm")
    args = parser.parse_args()
    out = out_folder(args.model, args.out)
    lm, fp32 = lm_export(args.model, out, say)
    ids = token_ids(lm.hf_folder, python_docs_text())
    route = GenaiRoute(lm.hf_folder, fp32, threads=2)
    # evaluation: the text's first tokens; calibration: its last, apart from them
    reference = route.reference(ids[:args.tokens + 1], args.window)
    calibration = route.reference(ids[-(args.calibration + 1):], args.calibration)
    say(f"float reference on {args.tokens} + {args.calibration} tokens of pydoc_data.topics")
    rows = [{"label": "float (builder FP32)", "folder": fp32, "seconds": None}]
    for label, precision, extra in BUILDER_ROUTES:
        folder = out / f"genai-{precision}-{(extra or {}).get('algo_config', 'default')}"
        _, seconds = timed(lambda: route.build(precision, folder, extra_options=extra))
        rows.append({"label": label, "folder": folder, "seconds": seconds})
    units = units_of(FloatModel.matmuls_of(fp32), args.granularity)
    mix, seconds = timed(lambda: measured_mix(route, fp32, units, calibration, reference,
                                              args, out / "genai-measured-mix"))
    if mix.folder:   # judged on the same evaluation ids during the search
        rows.append({"label": f"measured mix ({args.method}, {budget_label(args)})",
                     "folder": mix.folder, "seconds": seconds, "quality": mix.chosen.quality})
    ov_rows, openvino = openvino_rows(lm.hf_folder, out, ids[-args.nncf_calibration:], say)
    rows += ov_rows
    gguf_rows, llama_cpp, gguf_mix = llama_cpp_rows(lm.path, out, calibration, reference, args)
    rows += gguf_rows
    by_threads = {threads: measure_in_processes(
        [row["folder"] for row in rows], Workload(128, args.new_tokens, threads, ids[:128]),
        args.rounds) for threads in args.threads}
    speeds = by_threads[args.threads[0]]
    for n, row in enumerate(rows):
        row["decode_by_threads"] = {t: found[n]["decode_tok_s"] for t, found in by_threads.items()}
    for row, speed in zip(rows, speeds):
        row["bytes"] = for_path(row["folder"])[0].size(Path(row["folder"]))
        if "quality" not in row:
            scorer = row.pop("route", route)
            row["quality"] = scorer.score(Path(row["folder"]), reference).as_dict()
        row["speed"] = speed
        say(f"{row['label']}: {row['bytes'] / 2**20:.1f} MiB, perplexity "
            f"{row['quality']['perplexity_increase']:+.2%}, decode "
            f"{row['speed']['decode_tok_s']:.1f} tok/s")
    default = args.model == DEFAULT_MODEL
    record = {"model": lm.path.name, "title": MODELS[args.model].title,
              "make_args": "" if default else f' SLM_ARGS="--model {args.model}"',
              "dequantized_from": lm.dequantized_from, "args": vars(args),
              "rows": rows, "mix": mix.as_dict(), "llama_cpp": llama_cpp, "openvino": openvino,
              "gguf_mix": gguf_mix}
    (out / "weight_only.json").write_text(json.dumps(record, indent=1, default=str))
    doc = "slm_weight_only.md" if default else f"slm_weight_only_{args.model}.md"
    (REPO / "docs" / doc).write_text(render_document(record))
    say(f"wrote docs/{doc} and {out / 'weight_only.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
