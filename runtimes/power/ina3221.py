"""Jetson on-module INA3221 power monitors through the kernel's hwmon interface.

Reads /sys/bus/i2c/drivers/ina3221/<bus>-<addr>/hwmon/hwmon*/ as the mainline `ina3221`
hwmon driver lays it out: `in{N}_label` names channel N's rail (VDD_IN, VDD_CPU_GPU_CV,
VDD_SOC on an Orin Nano/NX), `in{N}_input` is its bus voltage in mV and `curr{N}_input`
its current in mA, for N = 1..3. A rail's power is V * I. `in7_label` ("sum of shunt
voltages") and the shunt-voltage channels in4..in7 have no current file and are not rails.
The default rail is the board's whole input (VDD_IN on Orin/Xavier NX, POM_5V_IN on a
Nano); a board without one (AGX Orin) reports the sum of all its rails.
"""
from __future__ import annotations

import os

from runtimes import sysread
from runtimes.power.base import Meter, MeterAbsent, MeterError, pick_rails

HWMON_GLOB = "/sys/bus/i2c/drivers/ina3221/*/hwmon/hwmon*"
TOTAL_RAILS = ("VDD_IN", "POM_5V_IN")


def find_rails(root: str) -> dict[str, tuple[str, str, str]]:
    """label -> (voltage file, current file, i2c device) for every labelled channel."""
    rails = {}
    for hwmon in sysread.paths(root, HWMON_GLOB):
        device = os.path.basename(os.path.dirname(os.path.dirname(hwmon)))
        for channel in (1, 2, 3):
            label = sysread.read_text(os.path.join(hwmon, f"in{channel}_label"))
            volts = os.path.join(hwmon, f"in{channel}_input")
            amps = os.path.join(hwmon, f"curr{channel}_input")
            if label and os.path.exists(volts) and os.path.exists(amps):
                rails.setdefault(label, (volts, amps, device))
    return rails


class Ina3221Meter(Meter):
    name = "ina3221"
    default_interval_ms = 50.0

    def __init__(self, *, root: str = "/", rail: str | None = None, **kw):
        super().__init__(**kw)
        rails = find_rails(root)
        if not rails:
            raise MeterAbsent(f"{HWMON_GLOB}/in*_label does not exist on this host",
                              "on a Jetson the ina3221 hwmon driver must be loaded (older "
                              "L4T releases expose ina3221x instead: use meter tegrastats)")
        labels, what = pick_rails(list(rails), rail, "the INA3221 meter", TOTAL_RAILS)
        self._files = [rails[label][:2] for label in labels]
        devices = sorted({rails[label][2] for label in labels})
        self.detail = f"INA3221 {what} ({', '.join(devices)})"
        self.read()  # fail now, not mid-run, when the files cannot be read

    def read(self) -> float:
        watts = 0.0
        for volts, amps in self._files:
            mv, ma = sysread.read_number(volts), sysread.read_number(amps)
            if mv is None or ma is None:
                raise MeterError(f"cannot read {volts} / {amps}")
            watts += mv * ma / 1e6
        return watts
