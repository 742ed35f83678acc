"""`python -m runtimes bench MODEL`: measure a model with numpy and a runtime only.

The pipeline runs exactly this in a fresh subprocess for every artifact x target, so a
number measured on the host and one measured on a Raspberry Pi come from the same code,
and torch in the pipeline's own process never pollutes memory or timing.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass

import numpy as np

from runtimes import feeds as feeds_mod
from runtimes.errors import RuntimeInputError
from runtimes.hostinfo import describe_host
from runtimes.loader import engine_for, load
from runtimes.measure import measure
from runtimes.memory import current_rss_mb
from runtimes.metrics import evaluate

PROGRESS_PREFIX = "@progress"


@dataclass(frozen=True)
class BenchOptions:
    threads: int | None = None
    warmup: int = 10
    runs: int = 100
    seconds: float = 0.0
    metric: str | None = None          # accuracy | fidelity | None (latency only)
    primary: str = "top1_agreement"    # fidelity value budgets are checked on
    pairs: bool = False                # fidelity: rows 2i, 2i+1 are pairs (pair_spearman)
    eval_batch: int = 32               # batch for evaluation when the batch dim is dynamic
    progress: bool = False             # "@progress done total" lines on stderr
    samples: bool = False              # include every latency (pooling across rounds)
    xnnpack: bool = True               # LiteRT: XNNPACK delegate (off: built-in kernels)
    nhwc: bool = False                 # the file holds NCHW images, the model takes NHWC
    delegate: str | None = None        # LiteRT: external delegate library


def _import_engine(engine: str) -> None:
    # Imported before the idle RSS reading so the model's share excludes the library.
    if engine == "onnxruntime":
        import onnxruntime  # noqa: F401
    elif engine == "litert":
        from runtimes.litert_session import interpreter_module
        interpreter_module()


def _progress_printer(enabled: bool):
    if not enabled:
        return None
    step = {"last": -1}

    def report(done: int, total: int) -> None:
        pct = min(100, done * 100 // max(total, 1))
        if pct // 5 != step["last"]:
            step["last"] = pct // 5
            print(f"{PROGRESS_PREFIX} {min(done, total)} {total}", file=sys.stderr, flush=True)
    return report


def _evaluate(session, data: dict[str, np.ndarray], opts: BenchOptions) -> dict | None:
    model_inputs = feeds_mod.select_inputs(data, session.inputs)
    labels, reference = data.get(feeds_mod.LABELS_KEY), data.get(feeds_mod.REFERENCE_KEY)
    metric = opts.metric or ("accuracy" if labels is not None else
                             "fidelity" if reference is not None else None)
    if metric is None:
        return None
    if metric == "accuracy" and labels is None or metric == "fidelity" and reference is None:
        need = feeds_mod.LABELS_KEY if metric == "accuracy" else feeds_mod.REFERENCE_KEY
        raise RuntimeInputError(f"metric '{metric}' needs the key '{need}' in the inputs file")
    batch = feeds_mod.batch_size_for(session.inputs, opts.eval_batch)
    outputs = [session.run(chunk)[0][:real]
               for chunk, real in feeds_mod.iter_batches(model_inputs, batch)]
    result = evaluate(np.concatenate(outputs), metric=metric, labels=labels,
                      reference=reference, primary=opts.primary,
                      pairs=opts.pairs or opts.primary == "pair_spearman")
    result["samples"] = int(sum(len(o) for o in outputs))
    return result


def _layout(data: dict, opts: BenchOptions) -> dict:
    if not opts.nhwc:
        return data
    return {k: (v.transpose(0, 2, 3, 1) if v.ndim == 4 and k not in feeds_mod.RESERVED else v)
            for k, v in data.items()}


def bench(model: str, inputs: str | None, opts: BenchOptions, eval_inputs: str | None = None,
          meter=None, meter_note: str | None = None) -> dict:
    engine = engine_for(model)
    _import_engine(engine)
    data = _layout(feeds_mod.read_npz(inputs), opts) if inputs else None
    idle_rss = current_rss_mb()
    session = load(model, engine=engine, threads=opts.threads, xnnpack=opts.xnnpack,
                   delegate=opts.delegate)
    try:
        if data is not None:
            batch = feeds_mod.batch_size_for(session.inputs, 1)
            feeds = {name: array[:batch] for name, array in
                     feeds_mod.select_inputs(data, session.inputs).items()}
            feeds_mod.check_feeds(feeds, session.inputs)
        else:
            feeds = feeds_mod.synthetic_feeds(session.inputs)
        timing = measure(session, feeds, warmup=opts.warmup, runs=opts.runs,
                         min_seconds=opts.seconds, meter=meter,
                         on_progress=_progress_printer(opts.progress))
        eval_data = _layout(feeds_mod.read_npz(eval_inputs), opts) if eval_inputs else data
        metric = _evaluate(session, eval_data, opts) if eval_data is not None else None
        engine_info = session.describe()
    finally:
        session.close()
    energy = timing.pop("energy")
    if not opts.samples:
        timing.pop("latency_samples_ms")
    return {
        "model": model, "size_bytes": os.path.getsize(model), "runtime": engine_info,
        "measured_on": describe_host(), **timing,
        "idle_rss_mb": idle_rss, "model_rss_mb": timing["peak_rss_mb"] - idle_rss,
        "energy_mj": energy["mj_per_inference"] if energy else None,
        "energy_note": None if energy else (meter_note or "no power meter was used"),
        "metric": metric, "torch_loaded": "torch" in sys.modules,
    }


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m runtimes bench",
                                description="Measure latency, memory and quality of a model.")
    p.add_argument("model", help="model file (.onnx or .tflite)")
    p.add_argument("--inputs", help=".npz with one array per model input (+ __labels__ "
                   "or __reference__ for the metric); random inputs when omitted")
    p.add_argument("--eval", dest="eval_inputs", help=".npz for the metric (default: --inputs)")
    p.add_argument("--threads", type=int, help="intra-op threads (default: the runtime's)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--runs", type=int, default=100, help="timed runs (at least)")
    p.add_argument("--seconds", type=float, default=0.0, help="keep running at least this long")
    p.add_argument("--metric", choices=["accuracy", "fidelity"])
    p.add_argument("--primary", default="top1_agreement",
                   choices=["top1_agreement", "cosine", "pair_spearman"])
    p.add_argument("--pairs", action="store_true", help="fidelity: rows 2i and 2i+1 are "
                   "pairs; also report pair_spearman (do the pairs keep their order)")
    p.add_argument("--eval-batch", type=int, default=32)
    p.add_argument("--progress", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--samples", action="store_true", help="include every latency in the JSON")
    p.add_argument("--nhwc", action="store_true",
                   help="transpose 4-D inputs from NCHW (as in the file) to NHWC")
    p.add_argument("--no-xnnpack", dest="xnnpack", action="store_false",
                   help="LiteRT: run the built-in kernels instead of the XNNPACK delegate")
    p.add_argument("--delegate", help="LiteRT: external delegate library to load "
                   "(e.g. libedgetpu.so.1)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def _print_human(result: dict) -> None:
    lat = result["latency_ms"]
    print(f"{result['model']}  ({result['size_bytes'] / 2**20:.2f} MiB, "
          f"{result['runtime']['engine']}, threads={result['runtime'].get('threads')})")
    print(f"  latency ms  p50 {lat['p50']:.3f}  p90 {lat['p90']:.3f}  p99 {lat['p99']:.3f}  "
          f"mean {lat['mean']:.3f}  std {lat['std']:.3f}  ({result['runs']} runs)")
    print(f"  throughput  {result['throughput_per_s']:.1f}/s   peak RSS "
          f"{result['peak_rss_mb']:.1f} MB (idle {result['idle_rss_mb']:.1f} MB)")
    print(f"  energy      {result['energy_mj'] if result['energy_mj'] is not None else 'unmeasured: ' + result['energy_note']}")
    if result["metric"]:
        m = result["metric"]
        print(f"  {m['name']:<11} {m['value']:.4f} on {m['samples']} samples")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from runtimes.meters import detect
    meter, note = detect()
    opts = BenchOptions(threads=args.threads, warmup=args.warmup, runs=args.runs,
                        seconds=args.seconds, metric=args.metric, primary=args.primary,
                        eval_batch=args.eval_batch, progress=args.progress,
                        samples=args.samples, xnnpack=args.xnnpack, nhwc=args.nhwc,
                        delegate=args.delegate, pairs=args.pairs)
    try:
        result = bench(args.model, args.inputs, opts, eval_inputs=args.eval_inputs,
                       meter=meter, meter_note=note)
    except RuntimeInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    if args.json:
        print(json.dumps(result))
    else:
        _print_human(result)
    return 0
