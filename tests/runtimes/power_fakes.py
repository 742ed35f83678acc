"""Fake meter tools for the tests: small executables put first on PATH that print what the
real tools print (the formats are in tests/fixtures/power/), and a fake `pynvml` module.

Each fake looks for a file named `busy` in its own folder: present, it reports the power
of a running workload; absent, the idle power. So a test switches from idle to load by
creating that file, and the idle subtraction is checkable.
"""
from __future__ import annotations

import os
import shutil
import sys
import textwrap
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
POWER = FIXTURES / "power"
CONDITIONS = FIXTURES / "conditions"


def install(bin_dir: Path, name: str, body: str, interpreter: str = sys.executable) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text(f"#!{interpreter}\n" + textwrap.dedent(body).lstrip())
    path.chmod(0o755)
    return path


def on_path(monkeypatch, bin_dir: Path) -> None:
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")


def copy_tree(name: str, dest: Path, kind: Path = POWER) -> Path:
    shutil.copytree(kind / name, dest, dirs_exist_ok=True)
    return dest


def set_busy(bin_dir: Path, busy: bool = True) -> None:
    marker = bin_dir / "busy"
    marker.touch() if busy else marker.unlink(missing_ok=True)


# tegrastats: the line format of an Orin Nano (mW units) or an original Nano (bare numbers);
# VDD_IN / POM_5V_IN is 3000 mW idle and 7000 mW busy. Each start is logged with its pid
# and arguments; starts after FAKE_TEGRASTATS_IDLE_STARTS (if set) count as busy. The
# fakes are shell scripts so that they start in milliseconds even on a loaded machine.
TEGRASTATS = r"""
here=$(dirname "$0")
args="$*"
interval=1000
while [ $# -gt 0 ]; do
    if [ "$1" = --interval ]; then interval=$2; shift; fi
    shift
done
echo "$$ $args" >> "$here/tegrastats.log"
start_number=$(wc -l < "$here/tegrastats.log")
pause=$(printf '%d.%03d' $((interval / 1000)) $((interval % 1000)))
idle_starts=${FAKE_TEGRASTATS_IDLE_STARTS:-0}
while :; do
    vin=3000
    if [ -e "$here/busy" ]; then vin=7000; fi
    if [ "$idle_starts" -gt 0 ] && [ "$start_number" -gt "$idle_starts" ]; then vin=7000; fi
    if [ "$FAKE_TEGRASTATS" = nano ]; then
        echo "RAM 1766/3964MB (lfb 197x4MB) SWAP 0/2048MB (cached 0MB) CPU [24%@1224,15%@1224,13%@1224,10%@1224] EMC_FREQ 0% GR3D_FREQ 0% PLL@21C CPU@25C PMIC@100C GPU@23.5C AO@33.5C thermal@24.5C POM_5V_IN $vin/5000 POM_5V_GPU 0/0 POM_5V_CPU 549/529"
    else
        echo "09-21-2025 15:38:17 RAM 3645/7620MB (lfb 63x4MB) SWAP 236/3810MB (cached 0MB) CPU [1%@729,1%@729,4%@729,1%@729,0%@729,0%@729] EMC_FREQ 0%@204 GR3D_FREQ 0%@[305] NVDEC off NVJPG off NVJPG1 off VIC off OFA off APE 200 cpu@44.125C soc2@43.375C soc0@42.125C gpu@44.531C tj@44.531C soc1@43.156C VDD_IN ${vin}mW/5000mW VDD_CPU_GPU_CV 486mW/486mW VDD_SOC 1012mW/1012mW"
    fi
    sleep "$pause"
done
"""


def install_tegrastats(bin_dir: Path) -> Path:
    return install(bin_dir, "tegrastats", TEGRASTATS, interpreter="/bin/sh")


def tegrastats_starts(bin_dir: Path) -> list[tuple[int, str]]:
    """(pid, arguments) of every start of the fake tegrastats."""
    log = bin_dir / "tegrastats.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [(int(pid), args) for pid, _, args in (line.partition(" ") for line in lines)]


# vcgencmd: `pmic_read_adc` prints the Pi 5 output of the fixture (VDD_CORE's current
# doubled when busy), or a Pi 4's error when a file `pi4` is there; `get_throttled`
# prints the value in the file `throttled` (default 0x0).
VCGENCMD = r"""
here=$(dirname "$0")
case "$1" in
    pmic_read_adc)
        if [ -e "$here/pi4" ]; then echo 'error=1 error_msg="Command not registered"'; exit 0; fi
        if [ -e "$here/busy" ]; then
            sed 's/current(7)=1.42880000A/current(7)=2.85760000A/' "$ADC_FIXTURE"
        else
            cat "$ADC_FIXTURE"
        fi ;;
    get_throttled)
        if [ -e "$here/throttled" ]; then echo "throttled=$(cat "$here/throttled")"
        else echo "throttled=0x0"; fi ;;
    *) exit 1 ;;
esac
"""


def install_vcgencmd(bin_dir: Path) -> Path:
    return install(bin_dir, "vcgencmd", f"ADC_FIXTURE='{POWER / 'pmic_read_adc.txt'}'\n"
                   + textwrap.dedent(VCGENCMD), interpreter="/bin/sh")


# nvpmodel -q as a Jetson prints it: the fan mode, the power mode's name, its number.
NVPMODEL = """
import sys
if sys.argv[1:] != ["-q"]:
    sys.exit(1)
print("NV Fan Mode:quiet")
print("NV Power Mode: MAXN")
print("0")
"""

# An external meter: a USB power meter reader printing volts, amps and watts (last).
WATTS_SH = """
here=$(dirname "$0")
if [ -e "$here/busy" ]; then echo "V=5.02 I=0.996 P=5.00"; else echo "V=5.02 I=0.398 P=2.00"; fi
"""

def install_watts(bin_dir: Path) -> Path:
    return install(bin_dir, "usb-meter", WATTS_SH, interpreter="/bin/sh")


# pynvml (package nvidia-ml-py) as far as the meter uses it: the same function names,
# units (power in mW, energy in mJ since the driver loaded) and errors (NVMLError(value)
# turns into its subclass, e.g. NVMLError_NotSupported for value 3).
PYNVML = """
import time

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3


class NVMLError(Exception):
    _valClassMapping = {}
    _errcode_to_string = {1: "Uninitialized", 2: "Invalid Argument", 3: "Not Supported"}

    def __new__(typ, value):
        if typ == NVMLError:
            typ = NVMLError._valClassMapping.get(value, typ)
        obj = Exception.__new__(typ)
        obj.value = value
        return obj

    def __str__(self):
        return self._errcode_to_string.get(self.value, f"NVML Error with code {self.value}")


def _subclass(name, value):
    cls = type(name, (NVMLError,), {"__new__": lambda typ, *a: NVMLError.__new__(typ, value)})
    NVMLError._valClassMapping[value] = cls
    return cls


NVMLError_Uninitialized = _subclass("NVMLError_Uninitialized", 1)
NVMLError_InvalidArgument = _subclass("NVMLError_InvalidArgument", 2)
NVMLError_NotSupported = _subclass("NVMLError_NotSupported", 3)

# What the tests set: one dict per GPU.
DEVICES = [{"name": "NVIDIA A2", "watts": 42.0, "energy": True, "power": True},
           {"name": "NVIDIA L4", "watts": 20.0, "energy": True, "power": True}]
calls = {"init": 0, "shutdown": 0}
_started = time.perf_counter()


def _check():
    if calls["init"] <= calls["shutdown"]:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)


def nvmlInit():
    calls["init"] += 1


def nvmlShutdown():
    _check()
    calls["shutdown"] += 1


def nvmlDeviceGetCount():
    _check()
    return len(DEVICES)


def nvmlDeviceGetHandleByIndex(index):
    _check()
    if not 0 <= index < len(DEVICES):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return ("handle", index)


def nvmlDeviceGetName(handle):
    return DEVICES[handle[1]]["name"]


def nvmlDeviceGetPowerUsage(handle):
    _check()
    gpu = DEVICES[handle[1]]
    if not gpu["power"]:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return int(gpu["watts"] * 1000)


def nvmlDeviceGetTotalEnergyConsumption(handle):
    _check()
    gpu = DEVICES[handle[1]]
    if not gpu["energy"]:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return 123456789 + int(gpu["watts"] * (time.perf_counter() - _started) * 1000)
"""
