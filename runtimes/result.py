"""`Measurement`: the runner's answer (`python -m runtimes bench --json`) as the pipeline
reads it, one round of one model on one device.

It crosses packages: the runner writes it here or on a device, compress pools and
judges it. Torch-free, like the rest of runtimes. The nested figures (runtime, power,
conditions, placement, metric) stay the plain JSON objects the runner wrote: they are
reported as they are; the fields the pipeline computes with are typed here.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

# the runner's JSON keys a measurement cannot do without (an older runner on a device
# may lack the optional ones: load_ms, first_run_ms, power, conditions, placement)
REQUIRED = ("runtime", "measured_on", "latency_ms", "latency_samples_ms", "window_s",
            "runs", "batch_size", "peak_rss_mb", "idle_rss_mb", "model_rss_mb",
            "size_bytes", "energy_mj", "energy_note", "torch_loaded")
OPTIONAL = ("engine_choice", "throughput_per_s", "power", "conditions", "placement",
            "metric", "load_ms", "first_run_ms")


@dataclass(frozen=True)
class Measurement:
    runtime: dict                       # engine, threads, precision, ... as the runner says
    measured_on: dict                   # the machine: arch, cpu, emulated, ...
    latency_ms: dict                    # p50, p90, p99, mean, std
    latency_samples_ms: tuple           # every timed call, for pooling rounds
    window_s: float                     # the timed window's length
    runs: int
    batch_size: int
    peak_rss_mb: float
    idle_rss_mb: float
    model_rss_mb: float
    size_bytes: int
    energy_mj: Optional[float]
    energy_note: Optional[str]
    torch_loaded: bool
    engine_choice: Optional[dict] = None
    throughput_per_s: Optional[float] = None
    power: Optional[dict] = None
    conditions: Optional[dict] = None
    placement: Optional[dict] = None
    metric: Optional[dict] = None
    load_ms: Optional[float] = None
    first_run_ms: Optional[float] = None
    wall_s: float = 0.0                 # the runner's whole wall time, start-up included
    device: str = "here"                # which device measured it (a fleet has several)

    @property
    def engine(self) -> str:
        return self.runtime["engine"]

    @classmethod
    def from_json(cls, answer: dict, device: str = "here", wall_s: float = 0.0) -> Measurement:
        """The runner's JSON; a ValueError names the keys an incompatible runner left out."""
        missing = [key for key in REQUIRED if key not in answer]
        if missing:
            raise ValueError(f"the runner's answer lacks {', '.join(missing)}: it is not "
                             "this version's runtimes/ (the pipeline copies its own to a "
                             "device; a local `python:` target must import this checkout's)")
        fields = {key: answer[key] for key in REQUIRED}
        fields.update({key: answer.get(key) for key in OPTIONAL})
        fields["latency_samples_ms"] = tuple(fields["latency_samples_ms"])
        return cls(**fields, wall_s=wall_s, device=device)

    def replace(self, **changes) -> Measurement:
        return dataclasses.replace(self, **changes)
