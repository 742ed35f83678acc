"""Raspberry Pi 5 PMIC rails through `vcgencmd pmic_read_adc`, run once per sample.

The command prints one line per ADC channel: currents as `  VDD_CORE_A current(7)=1.42880000A`
and voltages as `  VDD_CORE_V volt(15)=0.90659250V` (the channel numbers of a rail's two
lines differ, so they are paired by the rail name before `_A` / `_V`). Rails with both a
current and a voltage line (VDD_CORE, 3V3_SYS, 1V8_SYS, DDR_VDD2, ...) give V * I; the
meter reports their sum, or one rail picked by name. `EXT5V_V` (the 5 V input) and
`BATT_V` have no current line, so the sum is what the PMIC's rails deliver: it leaves out
the USB and other peripheral power taken straight from EXT5V and the PMIC's own losses,
and reads below a wall meter.
"""
from __future__ import annotations

import re
import shutil
import subprocess

from runtimes.power.base import Meter, MeterAbsent, MeterError, pick_rails

CURRENT = re.compile(r"^\s*(\S+)_A\s+current\(\d+\)=([-+0-9.eE]+)A\s*$", re.M)
VOLTAGE = re.compile(r"^\s*(\S+)_V\s+volt\(\d+\)=([-+0-9.eE]+)V\s*$", re.M)


def parse_rails(text: str) -> dict[str, float]:
    """rail -> watts, for every rail that has both a current and a voltage line."""
    amps = {name: float(value) for name, value in CURRENT.findall(text)}
    volts = {name: float(value) for name, value in VOLTAGE.findall(text)}
    return {name: volts[name] * amps[name] for name in amps if name in volts}


class Pi5PmicMeter(Meter):
    name = "pi5-pmic"
    default_interval_ms = 100.0

    def __init__(self, *, rail: str | None = None, **kw):
        super().__init__(**kw)
        if shutil.which("vcgencmd") is None:
            raise MeterAbsent("the command vcgencmd is not on PATH",
                              "it ships with Raspberry Pi OS")
        rails = parse_rails(self._query())
        if not rails:
            raise MeterAbsent("`vcgencmd pmic_read_adc` printed no rail currents (only a "
                              "Raspberry Pi 5 has this PMIC ADC)")
        self._labels, what = pick_rails(list(rails), rail, "the Pi 5 PMIC meter")
        what = (f"PMIC rails' sum over {len(self._labels)} rails" if len(self._labels) > 1
                else f"PMIC {what}")
        self.detail = (f"Raspberry Pi 5 {what} (V*I from vcgencmd pmic_read_adc; excludes "
                       "USB/peripheral power drawn from EXT5V)")

    def _query(self) -> str:
        try:
            done = subprocess.run(["vcgencmd", "pmic_read_adc"], capture_output=True,
                                  text=True, timeout=5)
        except (OSError, subprocess.SubprocessError) as exc:
            raise MeterError(f"vcgencmd pmic_read_adc failed: {exc}") from None
        if done.returncode != 0:
            raise MeterError(f"vcgencmd pmic_read_adc exited {done.returncode}: "
                             f"{(done.stderr or done.stdout).strip()[:200]}")
        return done.stdout

    def read(self) -> float:
        rails = parse_rails(self._query())
        missing = [label for label in self._labels if label not in rails]
        if missing:
            raise MeterError(f"vcgencmd pmic_read_adc no longer reports {', '.join(missing)}")
        return sum(rails[label] for label in self._labels)
