"""The run conditions a latency or energy figure depends on, and warnings about them.

`snapshot(root)` records what the host shows, each source only when present (a missing
file or command is left out, never an error):
- cpufreq, per CPU (/sys/devices/system/cpu/cpu*/cpufreq/): scaling_governor and
  scaling_cur_freq / scaling_min_freq / scaling_max_freq / cpuinfo_max_freq, in kHz;
- thermal zones (/sys/class/thermal/thermal_zone*/): type, temp (millidegrees Celsius)
  and the trip points (trip_point_N_temp / trip_point_N_type: passive, hot, critical, ...);
- x86 thermal throttle counters (/sys/devices/system/cpu/cpu*/thermal_throttle/
  *_throttle_count: core_throttle_count, package_throttle_count);
- Jetson: `nvpmodel -q` (a line "NV Power Mode: MAXN", the mode number on a line of its
  own after it), and whether jetson_clocks looks on. That is an inference, not a reading:
  jetson_clocks pins every CPU's scaling_min_freq to its scaling_max_freq, so it is taken
  as on when that holds for every CPU;
- Raspberry Pi: `vcgencmd get_throttled` ("throttled=0x50005"; bits 0-3 now:
  under-voltage, arm frequency capped, currently throttled, soft temperature limit; bits
  16-19: the same has occurred since boot).

`compare(before, after)` lists what may have distorted a run between the two snapshots.
"""
from __future__ import annotations

import glob
import os
import re

from runtimes import sysread
from runtimes.cpus import format_cpus

PI_FLAGS = {0: "under-voltage", 1: "arm frequency capped", 2: "currently throttled",
            3: "soft temperature limit active", 16: "under-voltage has occurred",
            17: "arm frequency capping has occurred", 18: "throttling has occurred",
            19: "soft temperature limit has occurred"}
PI_NOW_MASK, PI_OCCURRED_MASK = 0xF, 0xF0000
THROTTLING_TRIPS = ("passive", "hot", "critical")  # "active" trips start fans, not throttling
FREQ_DROP = 0.75            # end frequency below this share of the start maximum: warn
UNSCALED_GOVERNORS = ("powersave", "userspace")    # low frequency is chosen, not imposed
JETSON_CLOCKS_BASIS = ("inferred, not read: every CPU's scaling_min_freq equals its "
                       "scaling_max_freq, which is what jetson_clocks sets")
_CPU_DIR = re.compile(r"cpu(\d+)$")


def _cpu_dirs(root: str) -> list[tuple[int, str]]:
    found = [(_CPU_DIR.search(p), p) for p in sysread.paths(root, "/sys/devices/system/cpu/cpu*")]
    return sorted((int(m.group(1)), p) for m, p in found if m)


def _cpufreq(root: str) -> dict:
    fields = {"cur_khz": "scaling_cur_freq", "min_khz": "scaling_min_freq",
              "max_khz": "scaling_max_freq", "hw_max_khz": "cpuinfo_max_freq"}
    cpus = {}
    for number, path in _cpu_dirs(root):
        folder = os.path.join(path, "cpufreq")
        governor = sysread.read_text(os.path.join(folder, "scaling_governor"))
        values = {k: sysread.read_int(os.path.join(folder, f)) for k, f in fields.items()}
        if governor is None and all(v is None for v in values.values()):
            continue
        cpus[str(number)] = {"governor": governor,
                             **{k: v for k, v in values.items() if v is not None}}
    return cpus


def _thermal(root: str) -> dict:
    zones = {}
    for path in sysread.paths(root, "/sys/class/thermal/thermal_zone*"):
        temp = sysread.read_number(os.path.join(path, "temp"))
        if temp is None:
            continue
        trips = []
        for trip_temp in sorted(glob.glob(os.path.join(path, "trip_point_*_temp"))):
            value = sysread.read_number(trip_temp)
            kind = sysread.read_text(trip_temp[:-len("temp")] + "type")
            if value is not None and value > 0:
                trips.append({"type": kind, "temp_c": value / 1000})
        zones[os.path.basename(path)] = {"type": sysread.read_text(os.path.join(path, "type")),
                                         "temp_c": temp / 1000, "trips": trips}
    return zones


def _throttle_counts(root: str) -> dict:
    counts = {}
    for number, path in _cpu_dirs(root):
        files = sorted(glob.glob(os.path.join(path, "thermal_throttle", "*_throttle_count")))
        values = {os.path.basename(f): sysread.read_int(f) for f in files}
        values = {k: v for k, v in values.items() if v is not None}
        if values:
            counts[str(number)] = values
    return counts


def parse_nvpmodel(text: str) -> dict | None:
    """`nvpmodel -q` output -> {"mode": "MAXN", "id": 0}; None without the mode line."""
    lines = [line.strip() for line in text.splitlines()]
    for i, line in enumerate(lines):
        if line.startswith("NV Power Mode:"):
            mode = {"mode": line.partition(":")[2].strip()}
            following = next((x for x in lines[i + 1:] if x), "")
            if following.isdigit():
                mode["id"] = int(following)
            return mode
    return None


def parse_throttled(text: str) -> dict | None:
    """`vcgencmd get_throttled` output -> {"value": "0x50005", "flags": [...]}."""
    match = re.search(r"throttled=(0x[0-9a-fA-F]+|\d+)", text)
    if not match:
        return None
    value = int(match.group(1), 0)
    return {"value": hex(value), "flags": [name for bit, name in PI_FLAGS.items()
                                           if value & (1 << bit)]}


def _jetson_clocks(cpufreq: dict) -> dict | None:
    limits = [(c.get("min_khz"), c.get("max_khz")) for c in cpufreq.values()]
    if not limits or any(low is None or high is None for low, high in limits):
        return None
    return {"on": all(low == high for low, high in limits), "basis": JETSON_CLOCKS_BASIS}


def snapshot(root: str = "/") -> dict:
    """What the host shows now; sources it lacks are absent from the dict."""
    cpufreq = _cpufreq(root)
    nvpmodel = parse_nvpmodel(sysread.run_command(["nvpmodel", "-q"]) or "")
    on_jetson = nvpmodel or os.path.exists(sysread.under(root, "/etc/nv_tegra_release"))
    found = {
        "cpufreq": cpufreq,
        "governors": sorted({c["governor"] for c in cpufreq.values() if c["governor"]}),
        "thermal": _thermal(root),
        "throttle_counts": _throttle_counts(root),
        "nvpmodel": nvpmodel,
        "jetson_clocks": _jetson_clocks(cpufreq) if on_jetson else None,
        "pi_throttled": parse_throttled(sysread.run_command(["vcgencmd", "get_throttled"])
                                        or ""),
    }
    return {key: value for key, value in found.items() if value}


def _throttle_warnings(before: dict, after: dict) -> list[str]:
    rises: dict[str, list] = {}
    for cpu, counters in after.get("throttle_counts", {}).items():
        for name, value in counters.items():
            start = before.get("throttle_counts", {}).get(cpu, {}).get(name)
            if start is not None and value > start:
                rises.setdefault(name, []).append((int(cpu), value - start))
    return [f"thermal throttling during the run: {name} rose by {sum(d for _, d in got)} "
            f"on CPU {format_cpus(c for c, _ in got)}" for name, got in sorted(rises.items())]


def _pi_warnings(before: dict, after: dict) -> list[str]:
    if "pi_throttled" not in after:
        return []
    end = int(after["pi_throttled"]["value"], 16)
    start = int(before.get("pi_throttled", {}).get("value", "0x0"), 16)
    warnings = []
    now = [PI_FLAGS[b] for b in range(4) if end & PI_NOW_MASK & (1 << b)]
    if now:
        warnings.append(f"the Raspberry Pi firmware reports {', '.join(now)} at the end of "
                        f"the run (throttled={hex(end)})")
    new = end & ~start & PI_OCCURRED_MASK
    occurred = [PI_FLAGS[b] for b in range(16, 20) if new & (1 << b)]
    if occurred:
        warnings.append(f"during the run the Raspberry Pi firmware flagged: "
                        f"{', '.join(occurred)} (throttled={hex(start)} before, {hex(end)} after)")
    return warnings


def _frequency_warnings(before: dict, after: dict, cpus) -> list[str]:
    start, end = before.get("cpufreq", {}), after.get("cpufreq", {})
    chosen = [c for c in end if c in start and (cpus is None or int(c) in cpus)]
    if not chosen or any(end[c].get("governor") in UNSCALED_GOVERNORS for c in chosen):
        return []
    warnings = []
    lowered = [c for c in chosen if end[c].get("max_khz") is not None
               and start[c].get("max_khz") is not None
               and end[c]["max_khz"] < start[c]["max_khz"]]
    if lowered:
        warnings.append(f"the CPU frequency limit (scaling_max_freq) dropped during the run on "
                        f"CPU {format_cpus(int(c) for c in lowered)}: a thermal or power cap "
                        "was applied")
    start_max = max((start[c].get("max_khz") or 0) for c in chosen)
    end_cur = max((end[c].get("cur_khz") or 0) for c in chosen)
    if start_max and end_cur and end_cur < FREQ_DROP * start_max:
        governors = sorted({end[c].get("governor") or "?" for c in chosen})
        warnings.append(f"CPU frequency at the end of the run ({end_cur / 1e6:.2f} GHz, the "
                        f"highest over CPU {format_cpus(int(c) for c in chosen)}) is "
                        f"{1 - end_cur / start_max:.0%} below the maximum at the start "
                        f"({start_max / 1e6:.2f} GHz) with governor {', '.join(governors)}: "
                        "the CPU was likely throttled")
    return warnings


def _thermal_warnings(after: dict) -> list[str]:
    warnings = []
    for name, zone in after.get("thermal", {}).items():
        trips = [t for t in zone["trips"] if t["type"] in THROTTLING_TRIPS]
        if not trips:
            continue
        lowest = min(trips, key=lambda t: t["temp_c"])
        if zone["temp_c"] >= lowest["temp_c"]:
            warnings.append(f"{name} ({zone['type']}) reached {zone['temp_c']:.1f} °C, at or "
                            f"above its {lowest['type']} trip point ({lowest['temp_c']:.1f} °C) "
                            "where the kernel throttles")
    return warnings


def compare(before: dict, after: dict, cpus=None) -> list[str]:
    """Warnings about the run between two snapshots; `cpus`: the CPUs it ran on."""
    cpus = set(cpus) if cpus is not None else None
    return (_throttle_warnings(before, after) + _pi_warnings(before, after)
            + _frequency_warnings(before, after, cpus) + _thermal_warnings(after))
