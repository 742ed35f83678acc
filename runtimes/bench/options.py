"""The options of `python -m runtimes bench`: its argument parser and what is checked of
them before any work (a bad option costs no model load, no idle reading, no timed run)."""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field

from runtimes import engines, sysread
from runtimes.cpus import parse_cpus
from runtimes.engines import Settings
from runtimes.errors import RuntimeInputError
from runtimes.metrics import PRIMARY_CHOICES
from runtimes.power import AUTO_ORDER, METER_NAMES


@dataclass(frozen=True)
class BenchOptions:
    threads: int | None = None
    warmup: int = 10
    runs: int = 100
    seconds: float = 0.0
    metric: str | None = None          # accuracy | fidelity | None (latency only)
    primary: str = "auto"              # fidelity value budgets are checked on
    min_metric: float | None = None    # engine auto: the metric an engine must reach
    pairs: bool = False                # fidelity: rows 2i, 2i+1 are pairs (pair_spearman)
    eval_batch: int = 32               # batch for evaluation when the batch dim is dynamic
    progress: bool = False             # "@progress done total" lines on stderr
    samples: bool = False              # include every latency (pooling across rounds)
    engine: str | None = None          # None: the default engine for the file's suffix
    settings: Settings = field(default_factory=Settings)   # how the engine opens the model
    nhwc: bool = False                 # the file holds NCHW images, the model takes NHWC
    cpus: tuple[int, ...] | None = None  # pin the process to these CPUs before loading
    sysfs_root: str = "/"              # where /sys is read from (tests, emulators)
    placement: bool = False            # also report where each node ran (own session)
    save_outputs: str | None = None    # write every evaluation feed's outputs to this .npz


def _at_least(convert, low, rule: str):
    """An argparse type: `convert` (int or float) of the text, finite and >= `low`;
    argparse names the option in front of the message ("argument --runs: ...")."""
    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"invalid {convert.__name__} value: {text!r}") from None
        if not low <= value < float("inf"):  # nan compares false too
            raise argparse.ArgumentTypeError(f"must be {rule}, not {text}")
        return value
    return parse


positive_int = _at_least(int, 1, "1 or more")
non_negative_int = _at_least(int, 0, "0 or more")
non_negative_float = _at_least(float, 0.0, "a finite number, 0 or more")
# None (the option left out) is the runtime's own default, which 0 does not mean
_thread_floor = _at_least(int, 1, "1 or more (leave --threads out for the runtime's default)")
# Threads past a few per core only contend, and each takes a stack and a slot in the
# runtime's pool: 100000 exhausted the machine before the first run. The floor keeps a
# profile written for a larger board usable on a small host.
THREADS_PER_CPU, THREADS_FLOOR = 4, 64


def max_threads() -> int:
    return max(THREADS_PER_CPU * (os.cpu_count() or 1), THREADS_FLOOR)


def thread_count(text: str) -> int:
    """--threads: 1 or more, and at most max_threads() for this machine."""
    value = _thread_floor(text)
    if value > max_threads():
        raise argparse.ArgumentTypeError(
            f"must be at most {max_threads()} on this machine ({os.cpu_count()} CPUs; "
            f"at most {THREADS_PER_CPU} threads a CPU, {THREADS_FLOOR} on any), not {value}")
    return value


def check_outputs_path(path: str) -> None:
    """--save-outputs: a file that can be written, known before the measurement runs."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise RuntimeInputError(f"--save-outputs {path}: the folder {folder} does not exist; "
                                f"create it first or name a file in an existing folder")
    if os.path.isdir(path) or not os.access(folder, os.W_OK):
        raise RuntimeInputError(f"--save-outputs {path}: cannot write a file there "
                                f"({'a folder' if os.path.isdir(path) else 'no permission'}); "
                                f"name a file in a folder you may write to")


class _Parser(argparse.ArgumentParser):
    """A usage error reads like every other error of the runner: `error: ...` first (the
    line the pipeline quotes from the runner's stderr), then the usage."""

    def error(self, message: str):
        self.exit(2, f"error: {message}\n{self.format_usage()}")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m runtimes bench",
                                description="Measure latency, memory, energy and quality of "
                                "a model.", epilog=f"{sysread.SYSFS_ROOT_ENV}, for tests and "
                                "emulators: read /sys (power meters, run conditions) below "
                                "this folder instead of /.")
    p.add_argument("model", help="model file (.onnx or .tflite)")
    p.add_argument("--inputs", help=".npz with one array per model input (+ __labels__ "
                   "or __reference__ for the metric); random inputs when omitted")
    p.add_argument("--eval", dest="eval_inputs", help=".npz for the metric (default: --inputs)")
    p.add_argument("--threads", type=thread_count,
                   help="intra-op threads (default: the runtime's)")
    p.add_argument("--warmup", type=non_negative_int, default=10)
    p.add_argument("--runs", type=positive_int, default=100, help="timed runs (at least)")
    p.add_argument("--seconds", type=non_negative_float, default=0.0,
                   help="keep running at least this long")
    _add_measurement(p)
    _add_runtime(p)
    _add_meter(p)
    return p


def _add_measurement(p: argparse.ArgumentParser) -> None:
    """The metric and what the report holds."""
    p.add_argument("--metric", choices=["accuracy", "fidelity"])
    p.add_argument("--primary", default="auto",
                   choices=list(PRIMARY_CHOICES))
    p.add_argument("--pairs", action="store_true", help="fidelity: rows 2i and 2i+1 are "
                   "pairs; also report pair_spearman (do the pairs keep their order)")
    p.add_argument("--eval-batch", type=positive_int, default=32)
    p.add_argument("--min-metric", type=float, help="with --engine auto: measure the next "
                   "fastest engine while the metric is under this (the budget's floor)")
    p.add_argument("--progress", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--samples", action="store_true", help="include every latency in the JSON")


def _add_runtime(p: argparse.ArgumentParser) -> None:
    """How the model runs: the layout, the engine and each engine's settings."""
    p.add_argument("--nhwc", action="store_true",
                   help="transpose 4-D inputs from NCHW (as in the file) to NHWC")
    p.add_argument("--engine", choices=(*engines.names(), "auto"), help="the engine that "
                   "runs the model (default: the first that opens its suffix: onnxruntime for "
                   ".onnx, litert for .tflite, openvino for .xml); auto: time every installed "
                   "engine that opens it for a moment, then measure with the fastest")
    engines.add_arguments(p)


def _add_meter(p: argparse.ArgumentParser) -> None:
    """Energy, CPU pinning, placement and the output."""
    p.add_argument("--meter", default="auto", choices=METER_NAMES,
                   help="power meter for energy (default auto: the first of "
                   f"{', '.join(AUTO_ORDER)} this host has; none: no energy)")
    p.add_argument("--meter-command", help="meter 'command': a shell command printing "
                   "watts (the last number on stdout), run once per sample")
    p.add_argument("--meter-rail", help="ina3221/tegrastats/pi5-pmic: the rail to read "
                   "by label (default: the board's input rail, else the sum of all); "
                   "nvml: the GPU index")
    # the meter's two numbers are checked where the pipeline's profile values are too,
    # in runtimes.power.detect
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


def options_from(args: argparse.Namespace, sysfs_root: str) -> BenchOptions:
    """BenchOptions of the parsed arguments, the checks argparse cannot do done."""
    if (args.metric or args.save_outputs) and not (args.inputs or args.eval_inputs):
        wanted = f"--metric {args.metric}" if args.metric else "--save-outputs"
        raise RuntimeInputError(f"{wanted} needs an inputs file to run the model on (with "
                                f"labels or reference outputs for a metric): give --inputs "
                                f"or --eval")
    if args.save_outputs:
        check_outputs_path(args.save_outputs)
    return BenchOptions(
        threads=args.threads, warmup=args.warmup, runs=args.runs, seconds=args.seconds,
        metric=args.metric, primary=args.primary, eval_batch=args.eval_batch,
        progress=args.progress, samples=args.samples, nhwc=args.nhwc,
        engine=args.engine, settings=engines.settings_from(args, args.threads),
        pairs=args.pairs, sysfs_root=sysfs_root, min_metric=args.min_metric,
        # '' is no CPU list either: parse_cpus says so, rather than pinning nothing
        cpus=tuple(parse_cpus(args.cpus)) if args.cpus is not None else None,
        placement=args.placement, save_outputs=args.save_outputs)
