"""`python -m runtimes bench MODEL`: measure a model with numpy and a runtime only.

The pipeline runs exactly this in a fresh subprocess for every artifact x target, so a
number measured on the host and one measured on a Raspberry Pi come from the same code,
and torch in the pipeline's own process never pollutes memory or timing.

Energy comes from a power meter (runtimes.power: --meter auto picks the first one the
host has) sampled over the timed window, net of the idle power measured before it. The
run conditions (CPU governors and frequencies, temperatures, throttling) are recorded
right before and right after the timed window, with warnings when they changed in a way
that distorts the figures. The environment variable EDGE_COMPRESS_SYSFS_ROOT, for tests
and emulators, makes the meters and the conditions read /sys below another folder.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field

from runtimes import conditions
from runtimes import feeds as feeds_mod
from runtimes import sysread
from runtimes.cpus import available_cpus, parse_cpus, pin
from runtimes.errors import RuntimeInputError
from runtimes.hostinfo import describe_host
from runtimes.loader import engine_for, load
from runtimes.measure import measure
from runtimes.memory import current_rss_mb
from runtimes.metrics import evaluate
from runtimes.power import AUTO_ORDER, METER_NAMES

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
    delegate: str | None = None        # LiteRT: "gpu" or an external delegate library
    delegate_options: dict = field(default_factory=dict)   # LiteRT: the delegate's options
    providers: tuple = ()              # onnxruntime: (name, {option: value}) in priority order
    cpus: tuple[int, ...] | None = None  # pin the process to these CPUs before loading
    sysfs_root: str = "/"              # where /sys is read from (tests, emulators)
    placement: bool = False            # also report where each node ran (own session)
    save_outputs: str | None = None    # write every evaluation feed's outputs to this .npz


def parse_providers(names: list[str], options: list[str]) -> tuple:
    """--provider NAME and --provider-option NAME:KEY=VALUE -> ((name, {key: value}), ...)."""
    chosen = {name: {} for name in names}
    for text in options:
        name, _, pair = text.partition(":")
        key, equals, value = pair.partition("=")
        if not equals or not key or name not in chosen:
            raise RuntimeInputError(f"--provider-option '{text}': write NAME:KEY=VALUE for a "
                                    f"NAME given with --provider ({', '.join(chosen) or 'none'})")
        chosen[name][key] = value
    return tuple(chosen.items())


def parse_delegate_options(delegate: str | None, options: list[str]) -> dict:
    """--delegate-option KEY=VALUE (repeated) -> {key: value}."""
    parsed = {}
    for text in options:
        key, equals, value = text.partition("=")
        if not equals or not key:
            raise RuntimeInputError(f"--delegate-option '{text}': write KEY=VALUE")
        parsed[key] = value
    if parsed and not delegate:
        raise RuntimeInputError("--delegate-option needs a --delegate to give it to")
    return parsed


def _measured_on(engine_info: dict) -> dict:
    """The host, marked emulated when the accelerator itself was simulated."""
    host = describe_host()
    if engine_info.get("simulated") and not host.get("emulated"):
        host["emulated"] = engine_info["simulated"]
    return host


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


def _run_feeds(session, feeds: list) -> list:
    """The outputs of every feed, run one model call each; a feed the model refuses is
    named (the runtimes raise their own untyped errors)."""
    outputs = []
    for index, feed in enumerate(feeds):
        try:
            outputs.append(session.run(feeds_mod.select_inputs(feed, session.inputs)))
        except RuntimeInputError:
            raise
        except Exception as exc:  # noqa: BLE001 - onnxruntime and LiteRT errors
            shapes = {k: list(v.shape) for k, v in feed.items()}
            raise RuntimeInputError(f"evaluation feed {index} {shapes}: the model fails on "
                                    f"it: {' '.join(str(exc).split())[:300]}") from None
    return outputs


def _evaluate(session, data: feeds_mod.FeedFile, opts: BenchOptions) -> dict | None:
    metric = opts.metric or ("accuracy" if data.labels is not None else
                             "fidelity" if data.references is not None else None)
    if metric is None and not opts.save_outputs:
        return None
    if metric == "accuracy" and data.labels is None or \
            metric == "fidelity" and data.references is None:
        need = "labels" if metric == "accuracy" else "reference outputs"
        raise RuntimeInputError(f"metric '{metric}' needs {need} in the evaluation file")
    outputs = _run_feeds(session, data.feeds)
    if opts.save_outputs:
        feeds_mod.write_outputs(opts.save_outputs, outputs, session.outputs)
    if metric is None:
        return None
    try:
        result = evaluate(outputs, metric=metric, labels=data.labels, reference=data.references,
                          primary=opts.primary, names=list(session.outputs),
                          pairs=opts.pairs or opts.primary == "pair_spearman")
    except ValueError as exc:
        raise RuntimeInputError(f"metric '{metric}': {exc}") from None
    result["samples"] = len(data.feeds)
    return result


def _layout(data: feeds_mod.FeedFile, opts: BenchOptions) -> feeds_mod.FeedFile:
    if not opts.nhwc:
        return data
    data.feeds = [{k: (v.transpose(0, 2, 3, 1) if v.ndim == 4 else v) for k, v in feed.items()}
                  for feed in data.feeds]
    return data


def _energy_fields(energy: dict | None, meter_note: str | None) -> dict:
    """"energy_mj" (per inference, net of idle, or None), "energy_note" (why None) and
    "power" (the meter's figures for the window, or None without a meter)."""
    if energy is None:
        return {"energy_mj": None, "energy_note": meter_note or "no power meter was used",
                "power": None}
    power = {k: v for k, v in energy.items() if k != "mj_per_inference"}
    mj = energy["mj_per_inference"]
    note = None if mj is not None else (power.get("note") or "the meter gave no energy")
    return {"energy_mj": mj, "energy_note": note, "power": power}


def _open(model: str, engine: str, opts: BenchOptions):
    return load(model, engine=engine, threads=opts.threads, xnnpack=opts.xnnpack,
                delegate=opts.delegate, delegate_options=opts.delegate_options,
                providers=list(opts.providers) or None)


def _size(model: str) -> int:
    """The model's bytes, with its weights file beside it (<name>.data, as the pipeline
    writes an ONNX model of 2 GiB or more)."""
    data = model + ".data"
    return os.path.getsize(model) + (os.path.getsize(data) if os.path.isfile(data) else 0)


def _timed(model: str, engine: str, raw: dict | None, opts: BenchOptions, meter):
    """(timing, engine description) of the first feed (random inputs without a file)."""
    session = _open(model, engine, opts)
    try:
        data = _layout(feeds_mod.read_feeds(raw, session.inputs), opts) if raw else None
        if data is not None and data.feeds:  # the first feed is what is timed
            feeds = feeds_mod.select_inputs(data.feeds[0], session.inputs)
            feeds_mod.check_feeds(feeds, session.inputs)
        else:
            feeds = feeds_mod.synthetic_feeds(session.inputs)
        timing = measure(session, feeds, warmup=opts.warmup, runs=opts.runs,
                         min_seconds=opts.seconds, meter=meter,
                         on_progress=_progress_printer(opts.progress),
                         snapshot=lambda: conditions.snapshot(opts.sysfs_root))
        return timing, session.describe()
    finally:
        session.close()


def _fresh_metric(model: str, engine: str, raw: dict, opts: BenchOptions, eval_batch: int):
    """The metric from a fresh session: a stateful model (variables, ring buffers) starts
    its evaluation stream from its initial state, not where the timed runs left it."""
    with _open(model, engine, opts) as fresh:
        return _evaluate(fresh, _layout(feeds_mod.read_feeds(raw, fresh.inputs, eval_batch),
                                        opts), opts)


def bench(model: str, inputs: str | None, opts: BenchOptions, eval_inputs: str | None = None,
          meter=None, meter_note: str | None = None) -> dict:
    if opts.cpus:
        pin(list(opts.cpus))
    engine = engine_for(model)
    _import_engine(engine)
    # read before the idle reading, so the model's memory share excludes the data
    raw = feeds_mod.read_npz(inputs) if inputs else None
    raw_eval = feeds_mod.read_npz(eval_inputs) if eval_inputs else None
    idle_rss = current_rss_mb()
    timing, engine_info = _timed(model, engine, raw, opts, meter)
    metric = None
    if raw_eval is not None or (raw is not None and feeds_mod.holds_metric_data(raw)):
        metric = _fresh_metric(model, engine, raw_eval if raw_eval is not None else raw,
                               opts, eval_batch=opts.eval_batch if raw_eval is not None else 1)
    energy = timing.pop("energy")
    window = timing.pop("conditions")
    affinity = available_cpus()
    if not opts.samples:
        timing.pop("latency_samples_ms")
    return {
        "model": model, "size_bytes": _size(model), "runtime": engine_info,
        "measured_on": _measured_on(engine_info), **timing,
        "idle_rss_mb": idle_rss, "model_rss_mb": timing["peak_rss_mb"] - idle_rss,
        **_energy_fields(energy, meter_note),
        "conditions": {**window, "cpu_affinity": affinity,
                       "warnings": conditions.compare(window["before"], window["after"],
                                                      cpus=affinity)},
        "metric": metric, "torch_loaded": "torch" in sys.modules,
        **_placement(model, engine, opts, engine_info),
    }


def _placement(model: str, engine: str, opts: BenchOptions, engine_info: dict) -> dict:
    """{"placement": ...} when asked for, from a session of its own built after the timed
    one is closed, so the timing and memory figures never include it (LiteRT's GPU says
    only whether it took the whole model, which the timed session has told already)."""
    if not opts.placement:
        return {}
    from runtimes.placement import placement
    return {"placement": placement(model, engine, providers=list(opts.providers),
                                   xnnpack=opts.xnnpack, delegate=opts.delegate,
                                   delegate_options=opts.delegate_options,
                                   threads=opts.threads,
                                   fully_accelerated=engine_info.get("fully_accelerated"))}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m runtimes bench",
                                description="Measure latency, memory, energy and quality of "
                                "a model.", epilog=f"{sysread.SYSFS_ROOT_ENV}, for tests and "
                                "emulators: read /sys (power meters, run conditions) below "
                                "this folder instead of /.")
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
    p.add_argument("--delegate", help="LiteRT: 'gpu' for LiteRT's GPU accelerator, or an "
                   "external delegate library to load (e.g. libedgetpu.so.1). Exit code 3 "
                   "when it cannot be used here")
    p.add_argument("--delegate-option", action="append", default=[], metavar="KEY=VALUE",
                   help="an option of the --delegate (gpu: enforce_f32=true, ...; Edge TPU: "
                   "device=usb:0)")
    p.add_argument("--provider", action="append", default=[], metavar="NAME",
                   help="onnxruntime: an execution provider, in priority order (repeat it; "
                   "the CPU provider is always last). Exit code 3 when it is not available")
    p.add_argument("--provider-option", action="append", default=[],
                   metavar="NAME:KEY=VALUE", help="an option of a --provider")
    p.add_argument("--meter", default="auto", choices=METER_NAMES,
                   help="power meter for energy (default auto: the first of "
                   f"{', '.join(AUTO_ORDER)} this host has; none: no energy)")
    p.add_argument("--meter-command", help="meter 'command': a shell command printing "
                   "watts (the last number on stdout), run once per sample")
    p.add_argument("--meter-rail", help="ina3221/tegrastats/pi5-pmic: the rail to read "
                   "by label (default: the board's input rail, else the sum of all); "
                   "nvml: the GPU index")
    p.add_argument("--meter-interval-ms", type=float,
                   help="sampling interval (default per meter: 50-200 ms)")
    p.add_argument("--idle-seconds", type=float, default=1.0,
                   help="idle baseline measured before the timed window and subtracted "
                   "(0: none)")
    p.add_argument("--cpus", help="pin the process to these CPUs before loading the "
                   "model, e.g. 2,3 or 0-3")
    p.add_argument("--placement", action="store_true", help="also report where each node "
                   "ran (provider or delegate, CPU fallback, estimated share of FLOPs), from "
                   "a separate session after the timed runs")
    p.add_argument("--save-outputs", metavar="FILE.npz", help="write the outputs of every "
                   "evaluation feed to this file (for a metric computed elsewhere)")
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
    _print_energy(result)
    for warning in result["conditions"]["warnings"]:
        print(f"  warning     {warning}")
    if result["metric"]:
        m = result["metric"]
        print(f"  {m['name']:<11} {m['value']:.4f} on {m['samples']} feeds")
    if result.get("placement"):
        from runtimes.placement import describe
        print(f"  placement   {describe(result['placement'])}")


def _print_energy(result: dict) -> None:
    power = result["power"]
    if result["energy_mj"] is not None:
        print(f"  energy      {result['energy_mj']:.4g} mJ/inference (net of idle)")
    else:
        print(f"  energy      unmeasured: {result['energy_note']}")
    if power is None:
        return
    watts = "  ".join(f"{label} {power[key]:.3f} W" for label, key in
                      (("mean", "mean_w"), ("idle", "idle_w"), ("active", "active_w"))
                      if power[key] is not None)
    rate = power["sample_rate_hz"]
    print(f"  power       {watts or 'unmeasured'}  over {power['window_s']:.2f} s")
    print(f"  meter       {power['meter']}: {power['detail']}, "
          f"{f'{rate:.1f}' if rate is not None else '?'} samples/s ({power['samples']} samples)")
    if power.get("note") and result["energy_mj"] is not None:
        print(f"  note        {power['note']}")


def _accelerator_first(model: str, opts: BenchOptions) -> None:
    """ProviderUnavailable (exit 3, 'unmeasured') when the provider or delegate asked for
    cannot run here: that, not the meter beside it, is why nothing can be measured."""
    if opts.providers or opts.delegate:
        load(model, threads=opts.threads, xnnpack=opts.xnnpack, delegate=opts.delegate,
             delegate_options=opts.delegate_options, providers=list(opts.providers)).close()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from runtimes.meters import detect
    meter = None
    root = sysread.sysfs_root()
    try:
        name = "command" if args.meter == "auto" and args.meter_command else args.meter
        if args.meter_command and name != "command":
            raise RuntimeInputError(f"--meter-command is for meter 'command', not '{name}'")
        opts = BenchOptions(threads=args.threads, warmup=args.warmup, runs=args.runs,
                            seconds=args.seconds, metric=args.metric, primary=args.primary,
                            eval_batch=args.eval_batch, progress=args.progress,
                            samples=args.samples, xnnpack=args.xnnpack, nhwc=args.nhwc,
                            delegate=args.delegate, pairs=args.pairs, sysfs_root=root,
                            delegate_options=parse_delegate_options(args.delegate,
                                                                    args.delegate_option),
                            providers=parse_providers(args.provider, args.provider_option),
                            cpus=tuple(parse_cpus(args.cpus)) if args.cpus else None,
                            placement=args.placement, save_outputs=args.save_outputs)
        try:
            meter, note = detect(name, rail=args.meter_rail, command=args.meter_command,
                                 interval_ms=args.meter_interval_ms, root=root,
                                 idle_seconds=args.idle_seconds)
        except RuntimeInputError:
            _accelerator_first(args.model, opts)   # a missing GPU explains its missing meter
            raise
        result = bench(args.model, args.inputs, opts, eval_inputs=args.eval_inputs,
                       meter=meter, meter_note=note)
    except RuntimeInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    finally:
        if meter is not None:
            meter.close()
    if args.json:
        print(json.dumps(result))
    else:
        _print_human(result)
    return 0
