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

import dataclasses
import json
import sys
import time

from runtimes import conditions, engines
from runtimes import feeds as feeds_mod
from runtimes import sysread
from runtimes.bench.metric import evaluate_feeds, layout
from runtimes.bench.options import BenchOptions, options_from, parser
from runtimes.bench.report import print_human
from runtimes.cpus import available_cpus, pin
from runtimes.bench.auto import bench_auto
from runtimes.engine_choice import AUTO
from runtimes.errors import RuntimeInputError
from runtimes.hostinfo import describe_host
from runtimes.formats import file_bytes
from runtimes.measure import Timing, measure
from runtimes.memory import current_rss_mb

PROGRESS_PREFIX = "@progress"


def _measured_on(engine_info: dict) -> dict:
    """The host, marked emulated when the accelerator itself was simulated."""
    host = describe_host()
    if engine_info.get("simulated") and not host.get("emulated"):
        host["emulated"] = engine_info["simulated"]
    return host


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


def _open(model: str, engine: engines.Engine, opts: BenchOptions):
    return engine.open(model, opts.settings)


def _timed_feeds(session, raw: dict | None, opts: BenchOptions) -> tuple[dict, float]:
    """(the inputs timed, the first inference's milliseconds): the first feed of the
    inputs file, else random ones; run once here, so that a model that fails on them says
    so in one line, and that first call is the first-inference latency."""
    data = layout(feeds_mod.read_feeds(raw, session.inputs), opts) if raw is not None else None
    if data is not None and data.feeds:
        feeds = feeds_mod.select_inputs(data.feeds[0], session.inputs)
        feeds_mod.check_feeds(feeds, session.inputs)
        what, fix = "the first feed of the inputs file", "check the inputs file"
    else:
        feeds = feeds_mod.synthetic_feeds(session.inputs)
        what = "random inputs (dynamic dimensions set to 1)"
        fix = "give inputs of the sizes it takes with --inputs FILE.npz"
    try:
        start = time.perf_counter()
        session.run(feeds)
        first_ms = (time.perf_counter() - start) * 1e3
    except RuntimeInputError:
        raise
    except Exception as exc:  # noqa: BLE001 - each engine raises its own untyped errors
        shapes = {k: list(v.shape) for k, v in feeds.items()}
        raise RuntimeInputError(f"the model fails on {what} {shapes}: "
                                f"{' '.join(str(exc).split())[:300]}; {fix}") from None
    return feeds, first_ms


def _timed(model: str, engine: engines.Engine, raw: dict | None, opts: BenchOptions, meter):
    """(timing, engine description, the feeds timed) of the first feed (random inputs
    without a file). The timing holds how long the session took to open (`load_ms`) and
    its first inference (`first_run_ms`), what a process that loads a model per request
    waits for."""
    start = time.perf_counter()
    session = _open(model, engine, opts)
    load_ms = (time.perf_counter() - start) * 1e3
    try:
        feeds, first_ms = _timed_feeds(session, raw, opts)
        timing = measure(session, feeds, Timing(opts.warmup, opts.runs, opts.seconds),
                         meter=meter,
                         on_progress=_progress_printer(opts.progress),
                         snapshot=lambda: conditions.snapshot(opts.sysfs_root))
        return {"load_ms": load_ms, "first_run_ms": first_ms, **timing}, session.describe(), feeds
    finally:
        session.close()


def _fresh_metric(model: str, engine: engines.Engine, raw: dict, opts: BenchOptions,
                  eval_batch: int):
    """The metric from a fresh session: a stateful model (variables, ring buffers) starts
    its evaluation stream from its initial state, not where the timed runs left it."""
    with _open(model, engine, opts) as fresh:
        data = layout(feeds_mod.read_feeds(raw, fresh.inputs, eval_batch), opts)
        return evaluate_feeds(fresh, data, opts)


def _read_inputs(path: str | None) -> dict | None:
    """The arrays of an --inputs or --eval file (None without one)."""
    if path is None:
        return None
    arrays = feeds_mod.read_npz(path)
    feeds_mod.check_has_samples(arrays, path)
    return arrays


def bench(model: str, inputs: str | None, opts: BenchOptions, eval_inputs: str | None = None,
          meter=None, meter_note: str | None = None) -> dict:
    if opts.cpus:
        pin(list(opts.cpus))
    engine = engines.chosen(model, opts.engine)
    engine.preload(opts.settings)  # before the idle reading, so the model's share excludes the library
    # read before the idle reading, so the model's memory share excludes the data
    raw, raw_eval = _read_inputs(inputs), _read_inputs(eval_inputs)
    idle_rss = current_rss_mb()
    timing, engine_info, feeds = _timed(model, engine, raw, opts, meter)
    metric = None
    if raw_eval is not None:
        metric = _fresh_metric(model, engine, raw_eval, opts, eval_batch=opts.eval_batch)
    elif raw is not None and (feeds_mod.holds_metric_data(raw) or opts.metric
                              or opts.save_outputs):
        metric = _fresh_metric(model, engine, raw, opts, eval_batch=1)
    energy = timing.pop("energy")
    window = timing.pop("conditions")
    affinity = available_cpus()
    if not opts.samples:
        timing.pop("latency_samples_ms")
    return {
        "model": model, "size_bytes": file_bytes(model), "runtime": engine_info,
        "measured_on": _measured_on(engine_info), **timing,
        "idle_rss_mb": idle_rss, "model_rss_mb": timing["peak_rss_mb"] - idle_rss,
        **_energy_fields(energy, meter_note),
        "conditions": {**window, "cpu_affinity": affinity,
                       "warnings": conditions.compare(window["before"], window["after"],
                                                      cpus=affinity)},
        "metric": metric, "torch_loaded": "torch" in sys.modules,
        **_placement(model, engine, opts, engine_info, feeds),
    }


def _placement(model: str, engine: engines.Engine, opts: BenchOptions,
               engine_info: dict, feeds: dict) -> dict:
    """{"placement": ...} when asked for, from a session of its own built after the timed
    one is closed (so the timing and memory figures never include it), on the feeds the
    timed one ran."""
    if not opts.placement:
        return {}
    try:
        return {"placement": engine.placement(model, opts.settings, engine_info, feeds)}
    # any engine's own error type (onnxruntime's Fail is no RuntimeError): the timing
    # stands, the record says why placement is missing
    except Exception as exc:  # noqa: BLE001
        reason = " ".join(str(exc).split())[:300]
        return {"placement": {"engine": engine.name, "error": f"not reported: {reason}"}}


def _accelerator_first(model: str, opts: BenchOptions) -> None:
    """ProviderUnavailable (exit 3, 'unmeasured') when an engine setting asked for (a
    provider, a delegate, a device) cannot run here: that, not the meter beside it, is
    why nothing can be measured."""
    asked = dataclasses.replace(opts.settings, threads=None) != engines.Settings()
    if asked and opts.engine != AUTO:
        engines.chosen(model, opts.engine).open(model, opts.settings).close()


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from runtimes.meters import detect
    meter = None
    root = sysread.sysfs_root()
    try:
        name = "command" if args.meter == "auto" and args.meter_command else args.meter
        if args.meter_command and name != "command":
            raise RuntimeInputError(f"--meter-command is for meter 'command', not '{name}'")
        opts = options_from(args, root)
        try:
            meter, note = detect(name, rail=args.meter_rail, command=args.meter_command,
                                 interval_ms=args.meter_interval_ms, root=root,
                                 idle_seconds=args.idle_seconds)
        except RuntimeInputError:
            _accelerator_first(args.model, opts)   # a missing GPU explains its missing meter
            raise
        if opts.engine == AUTO:
            if meter is not None:  # the measuring process opens its own
                meter.close()
                meter = None
            raw = _read_inputs(args.inputs)
            return bench_auto(args, opts, sys.argv[1:] if argv is None else argv,
                              lambda session: _timed_feeds(session, raw, opts)[0])
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
        print_human(result)
    return 0
