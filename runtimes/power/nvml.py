"""NVIDIA GPU power through NVML, with the `pynvml` module of the nvidia-ml-py package.

`nvmlDeviceGetTotalEnergyConsumption(handle)` (millijoules since the driver loaded, Volta
and newer) is used as an energy counter when the GPU supports it; otherwise
`nvmlDeviceGetPowerUsage(handle)` (milliwatts; on Ampere and newer an average over about
a second) is sampled. Errors arrive as `pynvml.NVMLError` (e.g. NVMLError_NotSupported,
which is what a Jetson's integrated GPU answers). The GPU is picked by index (default 0).
"""
from __future__ import annotations

import importlib

from runtimes.power.base import Meter, MeterAbsent, MeterError


class NvmlMeter(Meter):
    name = "nvml"
    default_interval_ms = 100.0

    def __init__(self, *, device: int = 0, **kw):
        super().__init__(**kw)
        try:
            self._nvml = nvml = importlib.import_module("pynvml")
        except ImportError:
            raise MeterAbsent("the Python module pynvml is not installed",
                              "pip install nvidia-ml-py (needs an NVIDIA driver)") from None
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise MeterAbsent(f"NVML did not start ({exc})",
                              "an NVIDIA driver must be loaded") from None
        self._initialised = True
        try:
            count = nvml.nvmlDeviceGetCount()
            if not 0 <= device < count:
                raise MeterAbsent(f"NVML has no GPU {device} (it sees {count})",
                                  f"pick a GPU index from 0 to {count - 1} with --meter-rail")
            self._handle = nvml.nvmlDeviceGetHandleByIndex(device)
            gpu = nvml.nvmlDeviceGetName(self._handle)
            gpu = gpu.decode() if isinstance(gpu, bytes) else gpu
            self._read_fn, self.kind, what = self._pick_reading(nvml)
        except nvml.NVMLError as exc:
            self.close()
            raise MeterAbsent(f"NVML could not read GPU {device} ({exc})",
                              "check the driver with nvidia-smi") from None
        except BaseException:
            self.close()
            raise
        self.detail = f"NVML GPU {device} ({gpu}) {what}"

    def _pick_reading(self, nvml):
        errors = []
        for fn, kind, scale, what in (
                (nvml.nvmlDeviceGetTotalEnergyConsumption, "energy", 1e-3,
                 "total energy counter (mJ)"),
                (nvml.nvmlDeviceGetPowerUsage, "power", 1e-3, "power usage (mW) sampled")):
            try:
                fn(self._handle)
            except nvml.NVMLError as exc:
                errors.append(f"{fn.__name__}: {exc}")
                continue
            return (lambda: fn(self._handle) * scale), kind, what
        raise MeterAbsent(f"NVML gives no power reading for this GPU ({'; '.join(errors)})")

    def read(self) -> float:
        try:
            return float(self._read_fn())
        except self._nvml.NVMLError as exc:
            raise MeterError(f"NVML reading failed: {exc}") from None

    def close(self) -> None:
        if getattr(self, "_initialised", False):
            self._initialised = False
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass
