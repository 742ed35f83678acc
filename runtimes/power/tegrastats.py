"""Jetson `tegrastats --interval MS`, run as a subprocess while sampling.

Each output line is one sample. Its power fields are `NAME cur/avg` pairs: newer L4T
prints milliwatts with units (`VDD_IN 4123mW/4100mW VDD_CPU_GPU_CV 495mW/400mW ...`,
some releases add a third `/max` value), the original Nano's L4T 32 prints bare numbers
(`POM_5V_IN 2451/2451 POM_5V_GPU 0/0 POM_5V_CPU 549/529`). The first (current) value is
the sample; RAM/SWAP/IRAM fields (`5739/7546MB`) are not rails because a unit other than
mW follows. Rail choice as for the INA3221 meter: VDD_IN or POM_5V_IN, else the sum.
The process is started in its own process group and killed (the group) when sampling
stops, so no tegrastats is left behind.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time

from runtimes.power.base import (Meter, MeterAbsent, MeterError, Sample, end_group,
                                  pick_rails)
from runtimes.power.ina3221 import TOTAL_RAILS

RAIL_FIELD = re.compile(r"(?<!\S)([A-Za-z][A-Za-z0-9_]*) (\d+)(?:mW)?/(\d+)(?:mW)?"
                        r"(?:/\d+(?:mW)?)?(?=\s|$)")


def parse_rails(line: str) -> dict[str, float]:
    """rail -> current power in watts, for every power field of one tegrastats line."""
    return {name: int(current) / 1000 for name, current, _ in
            ((m.group(1), m.group(2), m.group(3)) for m in RAIL_FIELD.finditer(line))}


class TegrastatsMeter(Meter):
    name = "tegrastats"
    default_interval_ms = 200.0

    def __init__(self, *, rail: str | None = None, probe_timeout: float = 5.0, **kw):
        super().__init__(**kw)
        self._exe = shutil.which("tegrastats")
        if self._exe is None:
            raise MeterAbsent("the command tegrastats is not on PATH",
                              "it ships with L4T on a Jetson (/usr/bin/tegrastats)")
        self._proc: subprocess.Popen | None = None
        line = self._first_line(probe_timeout)
        rails = parse_rails(line or "")
        if not rails:
            raise MeterAbsent("tegrastats printed no power rails "
                              f"({'its first line: ' + line.strip() if line else 'no output'})",
                              "some boards show rails only to root: run the benchmark with sudo")
        self._labels, what = pick_rails(list(rails), rail, "tegrastats", TOTAL_RAILS)
        self.detail = f"tegrastats {what} (every {self.interval_ms} ms)"

    @property
    def interval_ms(self) -> int:
        return max(1, round(self.interval_s * 1000))

    def _spawn(self) -> subprocess.Popen:
        return subprocess.Popen([self._exe, "--interval", str(self.interval_ms)],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                bufsize=1, start_new_session=True)

    def _first_line(self, timeout: float) -> str | None:
        proc = self._spawn()
        got: list[str] = []
        reader = threading.Thread(target=lambda: got.append(proc.stdout.readline()),
                                  daemon=True)
        reader.start()
        reader.join(timeout)
        end_group(proc)
        reader.join(2.0)
        if not reader.is_alive():
            proc.stdout.close()
        return got[0] if got else None

    def read(self) -> float:
        raise MeterError("tegrastats is read from its output, not polled")

    def _watts(self, line: str) -> float | None:
        rails = parse_rails(line)
        if not all(label in rails for label in self._labels):
            return None
        return sum(rails[label] for label in self._labels)

    def _begin(self) -> None:
        self._proc = self._spawn()  # here, not in the thread: _halt() must always find it
        super()._begin()

    def _sample_loop(self, stop: threading.Event, out: list[Sample]) -> None:
        proc = self._proc
        if proc is None:  # stopped before this thread got to run
            return
        with proc.stdout:
            for line in proc.stdout:
                if stop.is_set():
                    return
                watts = self._watts(line)
                if watts is not None:
                    out.append((time.perf_counter(), watts))
        if not stop.is_set():
            raise MeterError(f"tegrastats exited ({proc.wait()}) while sampling")

    def _halt(self) -> None:
        if self._proc is not None:
            end_group(self._proc)
            self._proc = None

