"""Power meters: the public entry point (`detect`); the meters live in runtimes.power.

`detect()` returns (meter, None) or (None, reason). No meter means the energy figure is
reported as unmeasured with that reason, never as a number.
"""
from __future__ import annotations

from runtimes.power import AUTO_ORDER, METER_NAMES, METERS, Meter, detect

__all__ = ["detect", "Meter", "METERS", "METER_NAMES", "AUTO_ORDER"]
