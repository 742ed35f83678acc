"""What every power meter shares: background sampling, the idle baseline and the result.

A meter reads either instantaneous power in watts (`kind = "power"`: INA3221, tegrastats,
the Pi 5 PMIC, NVML power usage, an external command) or a cumulative energy counter in
joules (`kind = "energy"`: RAPL, NVML's total energy). `measure_idle()` samples with
nothing running; `start()` / `stop()` bracket the timed window, sampling in a background
thread only in between, and `stop()` returns the window's figures net of the idle power.
"""
from __future__ import annotations

import abc
import os
import signal
import statistics
import subprocess
import threading
import time

from runtimes.errors import RuntimeInputError


class MeterAbsent(Exception):
    """The meter cannot work on this host: `reason` says what is missing, `fix` what to do."""

    def __init__(self, reason: str, fix: str = ""):
        super().__init__(reason)
        self.reason, self.fix = reason, fix


class MeterError(Exception):
    """A reading failed while sampling (a command exited non-zero, a file vanished)."""


Sample = tuple[float, float]  # (time.perf_counter(), watts or cumulative joules)


def end_group(proc: subprocess.Popen, grace: float = 2.0) -> None:
    """End a process started with `start_new_session=True` and all it started in its group
    (a shell's `cmd &` too): SIGTERM to the group, SIGKILL to what is left after `grace`
    seconds (or once the leader is gone), then the leader reaped. The leader is reaped
    last: while it is unreaped its group id cannot be taken by another group, so the
    SIGKILL reaches this group and no other."""
    if not hasattr(os, "killpg"):   # no process groups (Windows): the process alone
        proc.kill()
        proc.wait()
        return
    _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and not _has_exited(proc):
        time.sleep(0.02)
    _signal_group(proc, signal.SIGKILL)
    proc.wait()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    if proc.returncode is not None:   # reaped already: its group id may be another's now
        return
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        proc.send_signal(sig)


def _has_exited(proc: subprocess.Popen) -> bool:
    """Whether the process has exited, without reaping it (see end_group)."""
    if proc.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except (AttributeError, ChildProcessError):   # no waitid here; reaped by another wait
        return proc.poll() is not None


def pick_rails(labels: list[str], rail: str | None, meter: str,
               totals: tuple[str, ...] = ()) -> tuple[list[str], str]:
    """The rails to read and how to name them.

    `rail` picks one by its label (case-insensitive); otherwise the first of `totals`
    (the board's whole-input rail) that exists; otherwise the sum of every rail."""
    if rail:
        for label in labels:
            if label.lower() == rail.lower():
                return [label], f"rail {label}"
        raise RuntimeInputError(f"{meter} has no rail '{rail}'; the rails on this host are "
                                f"{', '.join(labels) or 'none'}: pick one of them with "
                                "--meter-rail (meter_rail), or leave it unset for the "
                                "board's input rail or the sum of all rails")
    for total in totals:
        if total in labels:
            return [total], f"rail {total}"
    return list(labels), f"sum of rails {'+'.join(labels)}"


class Meter(abc.ABC):
    name = "meter"
    kind = "power"                 # "power": read() gives watts; "energy": cumulative joules
    default_interval_ms = 100.0

    def __init__(self, *, interval_ms: float | None = None, idle_seconds: float = 1.0):
        self.interval_s = (interval_ms or self.default_interval_ms) / 1000
        self.idle_seconds = idle_seconds
        self.detail = self.name
        self._idle: dict | None = None
        self._thread: threading.Thread | None = None
        self._stop_event = threading.Event()
        self._samples: list[Sample] = []
        self._error: str | None = None
        self._window_start = 0.0

    # --- what each meter provides -------------------------------------------------
    @abc.abstractmethod
    def read(self) -> float:
        """One reading: watts (kind "power") or cumulative joules (kind "energy")."""

    def close(self) -> None:
        """Release what the meter holds (a library handle); the meter is not used after."""

    def _sample_loop(self, stop: threading.Event, out: list[Sample]) -> None:
        """Append samples to `out` until `stop` is set: poll `read()` every interval."""
        next_at = time.perf_counter()
        while True:
            out.append((time.perf_counter(), self.read()))
            next_at += self.interval_s
            if stop.wait(max(0.0, next_at - time.perf_counter())):
                return

    # --- the sampling thread --------------------------------------------------------
    def _run(self, stop: threading.Event, out: list[Sample]) -> None:
        try:
            self._sample_loop(stop, out)
        except Exception as exc:  # noqa: BLE001 -- any failure is the meter's, never the run's
            self._error = str(exc) or type(exc).__name__

    def _begin(self) -> None:
        self._stop_event = threading.Event()
        self._samples, self._error = [], None
        self._thread = threading.Thread(target=self._run, name=f"{self.name}-meter",
                                        args=(self._stop_event, self._samples), daemon=True)
        self._thread.start()

    def _end(self) -> list[Sample]:
        self._stop_event.set()
        self._halt()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        samples = list(self._samples)
        if self.kind == "energy" and len(samples) >= 2 and self._error is None:
            try:  # the counter at the very end of the window
                samples.append((time.perf_counter(), self.read()))
            except (MeterError, OSError, ValueError) as exc:
                self._error = str(exc)
        return samples

    def _halt(self) -> None:
        """Unblock the sampling thread (a meter reading a process's output kills it here)."""

    def _mean_watts(self, samples: list[Sample]) -> float | None:
        if len(samples) < 2:
            return None
        if self.kind == "energy":
            (t0, e0), (t1, e1) = samples[0], samples[-1]
            return (e1 - e0) / (t1 - t0) if t1 > t0 else None
        return statistics.fmean(v for _, v in samples)

    @staticmethod
    def _rate(samples: list[Sample], seconds: float) -> float | None:
        if len(samples) >= 2 and samples[-1][0] > samples[0][0]:
            return (len(samples) - 1) / (samples[-1][0] - samples[0][0])
        return len(samples) / seconds if seconds > 0 else None

    # --- the contract with measure() --------------------------------------------------
    def measure_idle(self) -> dict:
        """Sample for `idle_seconds` with nothing running (blocking): the idle baseline."""
        if self.idle_seconds <= 0:
            self._idle = {"idle_w": 0.0, "note": "no idle baseline (idle seconds 0): "
                          "active_w is the whole power, not the model's share"}
            return self._idle
        self._begin()
        try:
            time.sleep(self.idle_seconds)
        finally:
            samples = self._end()
        periodic = self._samples
        idle_w = self._mean_watts(samples)
        self._idle = {"idle_w": idle_w, "idle_samples": len(periodic),
                      "idle_seconds": self.idle_seconds}
        if idle_w is None:
            self._idle["note"] = (self._error and f"the meter failed while measuring the "
                                  f"idle baseline: {self._error}") or (
                f"the idle baseline of {self.idle_seconds:g} s got {len(periodic)} sample(s) "
                f"at this meter's interval of {self.interval_s * 1000:g} ms; raise "
                "--idle-seconds")
        return self._idle

    def start(self) -> None:
        self._window_start = time.perf_counter()
        self._begin()

    def stop(self) -> dict:
        samples = self._end()
        window_s = time.perf_counter() - self._window_start
        periodic = self._samples
        idle = self._idle or {"idle_w": 0.0, "note": "no idle baseline was measured: "
                              "active_w is the whole power, not the model's share"}
        mean_w = self._mean_watts(samples)
        idle_w = idle["idle_w"]
        result = {
            "meter": self.name, "detail": self.detail, "kind": self.kind,
            "interval_ms": self.interval_s * 1000,
            "sample_rate_hz": self._rate(periodic, window_s), "samples": len(periodic),
            "idle_w": idle_w, "mean_w": mean_w,
            "active_w": mean_w - idle_w if mean_w is not None and idle_w is not None else None,
            "window_s": window_s, "joules": None,
        }
        notes = [idle["note"]] if idle.get("note") else []
        if self._error:
            notes.append(f"the meter failed during the window: {self._error}")
        elif len(periodic) < 2:
            notes.append(f"the timed window of {window_s:.3f} s is too short for this "
                         f"meter's sample rate ({len(periodic)} sample(s) at one per "
                         f"{self.interval_s * 1000:g} ms); run longer (--seconds) to "
                         "measure energy")
        elif result["active_w"] is not None:
            if result["active_w"] > 0:
                result["joules"] = result["active_w"] * window_s
            else:
                notes.append(f"the mean power in the window ({mean_w:.3f} W) was not above "
                             f"the idle baseline ({idle_w:.3f} W): the model's share is "
                             "below this meter's resolution")
        if notes:
            result["note"] = "; ".join(notes)
        return result
