"""Intel (and AMD) RAPL energy counters through the Linux powercap interface.

Reads /sys/class/powercap/intel-rapl:N/energy_uj, a cumulative counter in microjoules,
for every package domain: a zone whose `name` file reads `package-N`. The subzones
(`intel-rapl:N:M`, named core, uncore, dram) are parts of their package and the `psys`
zone is a different scope, so neither is added. The counter wraps to 0 after
`max_energy_range_uj`; a reading below the previous one adds that range. Power is the
energy difference over the time between readings. Since Linux 5.10 energy_uj is readable
by root only.
"""
from __future__ import annotations

import os

from runtimes import sysread
from runtimes.power.base import Meter, MeterAbsent, MeterError

ZONE_GLOB = "/sys/class/powercap/intel-rapl:*"


class _Counter:
    """One package's counter, unwrapped into a running total in joules."""

    def __init__(self, zone: str):
        self.name = sysread.read_text(os.path.join(zone, "name"))
        self.path = os.path.join(zone, "energy_uj")
        self.range_uj = sysread.read_int(os.path.join(zone, "max_energy_range_uj"))
        self.last_uj: int | None = None
        self.total_uj = 0

    def read_raw(self) -> int:
        try:
            with open(self.path) as fh:
                return int(fh.read().strip())
        except (OSError, ValueError) as exc:
            raise MeterError(f"cannot read {self.path}: {exc}") from None

    def joules(self) -> float:
        raw = self.read_raw()
        if self.last_uj is not None:
            delta = raw - self.last_uj
            if delta < 0:                      # wrapped around
                delta += self.range_uj or 0
            self.total_uj += max(delta, 0)
        self.last_uj = raw
        return self.total_uj / 1e6


class RaplMeter(Meter):
    name = "rapl"
    kind = "energy"
    default_interval_ms = 100.0

    def __init__(self, *, root: str = "/", **kw):
        super().__init__(**kw)
        zones = [z for z in sysread.paths(root, ZONE_GLOB)
                 if (sysread.read_text(os.path.join(z, "name")) or "").startswith("package-")]
        if not sysread.paths(root, ZONE_GLOB):
            raise MeterAbsent(f"{ZONE_GLOB} does not exist on this host",
                              "RAPL needs an Intel or AMD x86 CPU and the intel_rapl_msr "
                              "module (sudo modprobe intel_rapl_msr)")
        if not zones:
            raise MeterAbsent(f"no package zone (name package-N) under {ZONE_GLOB}")
        self._counters = [_Counter(z) for z in zones]
        unreadable = [c.path for c in self._counters if not os.access(c.path, os.R_OK)]
        if unreadable:
            shown = sysread.host_path(root, unreadable[0])
            raise MeterAbsent(f"{shown} is not readable by this user (root only since "
                              "Linux 5.10)", f"run as root or `sudo chmod a+r "
                              f"{ZONE_GLOB}/energy_uj`")
        missing = [c.name for c in self._counters if not c.range_uj]
        if missing:
            raise MeterAbsent(f"max_energy_range_uj is missing for {', '.join(missing)}")
        self.detail = f"RAPL {'+'.join(c.name for c in self._counters)} energy counters"
        self.read()  # fail now, not mid-run

    def read(self) -> float:
        return sum(counter.joules() for counter in self._counters)
