"""Power meters: one interface (`measure_idle()`, `start()`, `stop() -> dict`, `close()`)
over the sensors an edge device or a host has, one small module per meter.

`detect(name)` returns (meter, None) or (None, reason). "auto" tries the meters in the
order of AUTO_ORDER and takes the first one present; "none" turns metering off; a meter
named explicitly that is not present is an error (RuntimeInputError) saying what was
looked for and how to fix it, so a profile that asks for a meter never silently gets none.

    base.py        What every meter shares: background sampling, the idle baseline, rails
    rapl.py        Intel and AMD RAPL energy counters (Linux powercap)
    ina3221.py     Jetson's INA3221 monitors through hwmon
    tegrastats.py  Jetson's `tegrastats`, run while sampling
    pi5_pmic.py    Raspberry Pi 5's PMIC rails through `vcgencmd pmic_read_adc`
    nvml.py        NVIDIA GPU power through NVML
    command.py     A user's shell command that prints watts
"""
from __future__ import annotations

import math

from runtimes.errors import RuntimeInputError
from runtimes.power.base import Meter, MeterAbsent, MeterError, pick_rails
from runtimes.power.command import CommandMeter
from runtimes.power.ina3221 import Ina3221Meter
from runtimes.power.nvml import NvmlMeter
from runtimes.power.pi5_pmic import Pi5PmicMeter
from runtimes.power.rapl import RaplMeter
from runtimes.power.tegrastats import TegrastatsMeter

METERS = {"ina3221": Ina3221Meter, "tegrastats": TegrastatsMeter, "pi5-pmic": Pi5PmicMeter,
          "rapl": RaplMeter, "nvml": NvmlMeter, "command": CommandMeter}
# NVML is never picked by auto: a GPU's energy says nothing about a model run on the CPU
# (name it for GPU execution providers).
AUTO_ORDER = ("ina3221", "tegrastats", "pi5-pmic", "rapl")
METER_NAMES = ("auto", "none", *METERS)
RAIL_METERS = ("ina3221", "tegrastats", "pi5-pmic")

__all__ = ["detect", "Meter", "MeterAbsent", "MeterError", "pick_rails", "METERS",
           "METER_NAMES", "AUTO_ORDER"]


def _build(name: str, *, rail, command, interval_ms, root, idle_seconds) -> Meter:
    kw = {"interval_ms": interval_ms, "idle_seconds": idle_seconds}
    if name in ("ina3221", "rapl"):
        kw["root"] = root
    gpu_index = name == "nvml" and bool(rail) and rail.isdigit()
    if name in RAIL_METERS:
        kw["rail"] = rail
    elif gpu_index:
        kw["device"] = int(rail)
    elif name == "command":
        kw["command"] = command
    meter = METERS[name](**kw)
    if rail and name not in RAIL_METERS and not gpu_index:
        meter.close()
        raise RuntimeInputError(f"--meter-rail (meter_rail) '{rail}' was given but meter "
                                f"'{name}' has no rails; rails exist for "
                                f"{', '.join(RAIL_METERS)}, and nvml takes a GPU index")
    return meter


def detect(name: str = "auto", *, rail: str | None = None, command: str | None = None,
           interval_ms: float | None = None, root: str = "/",
           idle_seconds: float = 1.0) -> tuple[Meter | None, str | None]:
    """(meter, None) when a meter is used, (None, reason) when none is."""
    if name not in METER_NAMES:
        raise RuntimeInputError(f"unknown meter '{name}'; pick one of {', '.join(METER_NAMES)}")
    # the chained comparisons are false for nan too; inf would sample or idle forever
    if interval_ms is not None and not 0 < interval_ms < math.inf:
        rule = "finite" if interval_ms > 0 else "positive"
        raise RuntimeInputError(f"the meter interval must be {rule}, not {interval_ms:g} ms")
    if not 0 <= idle_seconds < math.inf:
        rule = "finite" if idle_seconds > 0 else "0 or more"
        raise RuntimeInputError(f"the idle seconds must be {rule}, not {idle_seconds:g}")
    if name == "none":
        return None, "power metering turned off"
    options = dict(rail=rail, command=command, interval_ms=interval_ms, root=root,
                   idle_seconds=idle_seconds)
    if name != "auto":
        try:
            return _build(name, **options), None
        except (MeterAbsent, MeterError) as exc:
            fix = getattr(exc, "fix", "")
            raise RuntimeInputError(
                f"meter '{name}' named but {getattr(exc, 'reason', exc)}"
                f"{'; ' + fix if fix else ''}; pick another meter or meter: auto") from None
    looked = []
    for candidate in AUTO_ORDER:
        try:
            return _build(candidate, **options), None
        except (MeterAbsent, MeterError, RuntimeInputError) as exc:  # e.g. a rail it lacks
            looked.append(f"{candidate}: {getattr(exc, 'reason', exc)}")
    return None, (f"no power meter on this host ({'; '.join(looked)}; nvml is used only "
                  "when named)")
