"""CPU lists as Linux writes them ("0-3,6") and pinning the process to some CPUs."""
from __future__ import annotations

import os

from runtimes.errors import RuntimeInputError


def format_cpus(cpus) -> str:
    """[0, 1, 2, 3, 6] -> "0-3,6"."""
    ordered, parts = sorted(set(cpus)), []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def available_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity, which honours cgroup cpusets)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def parse_cpus(text: str) -> list[int]:
    """"2,3" or "0-3" or "0-3,6" -> sorted CPU numbers; anything else is an input error."""
    cpus: set[int] = set()
    for part in text.replace(" ", "").split(","):
        first, dash, last = part.partition("-")
        try:
            low, high = int(first), int(last if dash else first)
        except ValueError:
            raise RuntimeInputError(f"--cpus '{text}' is not a CPU list like 2,3 or 0-3; "
                                    f"this host's CPUs are {format_cpus(available_cpus())}"
                                    ) from None
        if low < 0 or high < low:
            raise RuntimeInputError(f"--cpus '{text}' has the empty or negative range "
                                    f"'{part}'; this host's CPUs are "
                                    f"{format_cpus(available_cpus())}")
        cpus.update(range(low, high + 1))
    return sorted(cpus)


def pin(cpus: list[int]) -> list[int]:
    """Pin this process (and the threads it starts later) to `cpus`; returns the affinity."""
    if not hasattr(os, "sched_setaffinity"):
        raise RuntimeInputError("--cpus needs Linux (os.sched_setaffinity); leave it out here")
    have = available_cpus()
    missing = sorted(set(cpus) - set(have))
    if missing:
        raise RuntimeInputError(f"--cpus asks for CPU {format_cpus(missing)}, which this host "
                                f"does not have (or this process may not use); the CPUs "
                                f"available are {format_cpus(have)}")
    os.sched_setaffinity(0, cpus)
    return available_cpus()
