"""Run `compress <args>` in this very process and write what memory it took to a JSON file:

    python examples/large_model/peak.py OUT.json run pipeline.yaml [--steps]

- peak_rss_bytes: the kernel's high-water mark of this process (VmHWM), read as it ends:
  the pipeline process alone;
- compress: the checkout the compress package was imported from;
- with --steps, the RSS sampled every 5 ms by a thread, and for each pipeline step
  (a function wrapped here) the RSS as it began and the highest sample while it ran.
  A sample can miss a spike shorter than 5 ms; the overall peak is the kernel's own.
The benchmark's runner subprocesses are processes of their own: they report their own
peak (report.json), and getrusage(RUSAGE_CHILDREN) cannot tell them apart from this one
(a child started with vfork inherits the parent's high-water mark until it execs).
"""
from __future__ import annotations

import importlib
import json
import sys
import threading
import time
from pathlib import Path

# (module, attribute) of the steps worth telling apart; a name a module lacks is skipped
STEPS = (
    ("compress.model.source", "onnx_graph"),
    ("compress.model.onnx_errors", "check_runs"),
    ("compress.runner.run", "write_source"),
    ("compress.core.artifacts", "sha256_file"),
    ("compress.stages.quantize", "op_histogram"),
    ("compress.stages.quantize", "opset_for"),
    ("compress.stages.quantize", "preprocess"),
    ("compress.quant.ort_int8", "quantize_dynamic_int8"),
    ("compress.quant.passes.onnx_backend", "quantize_static_qdq"),
    ("compress.stages.quantize", "qdq_summary"),
    ("compress.quant.int4", "quantize_int4"),
    ("compress.quant.int4", "weight_precision"),
    ("compress.quant.streamed.backends", "quantize_streamed"),
    ("compress.quant.streamed.backends", "finish"),
    ("compress.runner.context.RunContext", "reference_outputs"),
    ("compress.measure.client", "measure_in_subprocess"),
)


def status_bytes(field: str) -> int:
    """A `VmRSS`/`VmHWM`-style line of /proc/self/status, in bytes."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


class Sampler:
    """RSS every few milliseconds, and the intervals the wrapped steps ran in."""

    def __init__(self, period: float = 0.005):
        self.samples, self.calls, self._period = [], [], period
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.samples.append((time.perf_counter(), status_bytes("VmRSS")))
            time.sleep(self._period)

    def start(self):
        self._thread.start()

    def stop(self):
        self._stop.set()
        self._thread.join()

    def wrap(self, label: str, function):
        def wrapped(*args, **kwargs):
            began, entry = time.perf_counter(), status_bytes("VmRSS")
            try:
                return function(*args, **kwargs)
            finally:
                self.calls.append((label, began, time.perf_counter(), entry))
        return wrapped

    def report(self) -> list[dict]:
        rows = []
        for label, began, ended, entry in self.calls:
            during = [rss for at, rss in self.samples if began <= at <= ended]
            rows.append({"step": label, "seconds": round(ended - began, 2), "rss_at_start":
                         entry, "peak_rss": max(during + [entry])})
        return rows


def _install(sampler: Sampler) -> None:
    for module_name, attribute in STEPS:
        owner_name, _, cls = module_name.rpartition(".")
        try:
            owner = (getattr(importlib.import_module(owner_name), cls) if cls[0].isupper()
                     else importlib.import_module(module_name))
        except (ImportError, AttributeError):
            continue
        if hasattr(owner, attribute):
            label = f"{cls if cls[0].isupper() else module_name.split('.')[-1]}.{attribute}"
            setattr(owner, attribute, sampler.wrap(label, getattr(owner, attribute)))


def main(argv: list[str]) -> int:
    out, args = argv[0], [a for a in argv[1:] if a != "--steps"]
    sampler = Sampler() if "--steps" in argv else None
    if sampler:
        _install(sampler)
        sampler.start()
    from compress.cli import main as compress_main
    code = compress_main(args)
    import compress
    result = {"exit_code": code, "peak_rss_bytes": status_bytes("VmHWM"),
              "compress": str(Path(compress.__file__).parent.parent)}
    if sampler:
        sampler.stop()
        result["steps"] = sampler.report()
    with open(out, "w") as fh:
        json.dump(result, fh, indent=2)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
