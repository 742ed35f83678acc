"""Power meters share one small interface: `start()`, then `stop() -> dict`.

`detect()` returns (meter, None) or (None, reason). No meter means the energy figure is
reported as unmeasured with that reason, never as a number.
"""
from __future__ import annotations

import glob


def detect() -> tuple[object | None, str | None]:
    rapl = glob.glob("/sys/class/powercap/intel-rapl:*/energy_uj")
    hwmon_power = glob.glob("/sys/class/hwmon/hwmon*/power*_input")
    if not rapl and not hwmon_power:
        return None, ("no power meter on this host (no RAPL powercap counters and no "
                      "hwmon power sensors were found)")
    return None, ("a power sensor exists on this host but no meter driver for it is "
                  "enabled in this version")
