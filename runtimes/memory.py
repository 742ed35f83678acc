"""Resident memory of this process, without psutil if need be (small devices)."""
from __future__ import annotations

import sys


def _status_field_mb(field: str) -> float | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def current_rss_mb() -> float:
    value = _status_field_mb("VmRSS")
    if value is not None:
        return value
    import psutil
    return psutil.Process().memory_info().rss / 2**20


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far.

    Linux: VmHWM, the high-water mark of this address space. Not getrusage's ru_maxrss:
    that survives execve, so a benchmark started from a large parent (torch loaded) would
    report the parent's size as its own peak.
    """
    value = _status_field_mb("VmHWM")
    if value is not None:
        return value
    import resource
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # macOS bytes, else KiB
