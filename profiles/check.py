"""`check(measurement, profile)`: turn one measurement into verdicts. Pure: no I/O."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Optional

from profiles.schema import Profile

PASS, FAIL, UNMEASURED, OFF_TARGET = "pass", "fail", "unmeasured", "off-target"
# An energy or power budget of a profile whose meter is optional (power.required: false),
# on a machine with no meter at all: not judged, and not a failure even with --strict.
NO_METER = "no-meter"
METERED = ("energy_mj", "power_w")
# the unit each budget is written in (the report prints it after the number)
UNITS = {"latency_p90_ms": "ms", "peak_memory_mb": "MB", "model_size_mb": "MB",
         "energy_mj": "mJ", "power_w": "W", "accuracy_drop": ""}
NO_METER_REASON = ("the budget applies where a meter is (RAPL, an external meter: "
                   "docs/reference.md, Power and energy)")


@dataclass(frozen=True)
class Verdict:
    artifact: str
    target: str
    metric: str
    budget: float
    value: Optional[float]
    status: str
    reason: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def _metric_drop(m: dict) -> Optional[float]:
    return (m.get("metric") or {}).get("drop")


# budget key -> (how to read the value from a measurement, does the value depend on
# the machine it was measured on). A file's size is the same everywhere, so a size
# verdict is real even off the device; everything else is only real on the device.
_READERS: dict[str, tuple[Callable[[dict], Optional[float]], bool]] = {
    "latency_p90_ms": (lambda m: m["latency_ms"]["p90"], True),
    "peak_memory_mb": (lambda m: m.get("peak_memory_mb"), True),
    "model_size_mb": (lambda m: m["size_bytes"] / 2**20, False),
    "energy_mj": (lambda m: m.get("energy_mj"), True),
    "power_w": (lambda m: (m.get("power") or {}).get("mean_w"), True),
    "accuracy_drop": (_metric_drop, True),
}


def _unmeasured(key: str, m: dict, profile: Profile) -> tuple[str, str]:
    """The status and reason of a budget with no number."""
    # no `power` record: no meter was found (a meter that gave nothing stays unmeasured)
    if key in METERED and not profile.power.required and not m.get("power"):
        return NO_METER, f"{m.get('energy_note') or 'no power meter'}; {NO_METER_REASON}"
    return UNMEASURED, _unmeasured_reason(key, m)


def _unmeasured_reason(key: str, m: dict) -> str:
    if key in METERED:
        return m.get("energy_note") or "no power meter"
    if key == "accuracy_drop":
        return "no evaluation data in the pipeline (data.evaluation)"
    return "not measured"


def on_target(profile: Profile, measured_on: dict) -> tuple[bool, str]:
    """Was this measurement taken on the profile's device?"""
    device = profile.device
    if measured_on.get("emulated"):  # a timing under emulation is never the device's
        return False, f"measured under emulation ({measured_on['emulated']})"
    if device.arch == "any":
        return True, ""
    where = f"{measured_on.get('arch')} {measured_on.get('cpu')}"
    if measured_on.get("arch") != device.arch:
        return False, f"measured on {where}, not on a {profile.name} ({device.arch})"
    names = f"{measured_on.get('device_model') or ''} {measured_on.get('cpu') or ''}".lower()
    if device.match and not any(token.lower() in names for token in device.match):
        return False, f"measured on {where}, which is not a {profile.name}"
    return True, ""


def check(measurement: dict, profile: Profile, artifact: str, target: str) -> list[Verdict]:
    """One verdict per budgeted metric: pass, fail, unmeasured, no-meter or off-target."""
    is_on_target, off_reason = on_target(profile, measurement["measured_on"])
    verdicts = []
    for key, limit in profile.budget.model_dump().items():
        if limit is None:
            continue
        read, device_dependent = _READERS[key]
        value = read(measurement)
        if value is None:
            status, reason = _unmeasured(key, measurement, profile)
        elif device_dependent and not is_on_target:
            status, reason = OFF_TARGET, off_reason
        else:
            status, reason = (PASS, "") if value <= limit else (FAIL, "")
        verdicts.append(Verdict(artifact, target, key, limit, value, status, reason))
    return verdicts


def unmeasured_verdicts(profile: Profile, artifact: str, target: str, reason: str,
                        size_bytes: int, known: dict | None = None) -> list[Verdict]:
    """Verdicts for an artifact x target that was not measured (its accelerator is not on
    the measuring machine, or it was not timed, being over a budget checked first):
    every budget unmeasured with the reason, except the file's size, which is the same
    everywhere, and the values `known` from elsewhere ({budget key: value or None}: the
    metric's drop, measured on another target)."""
    verdicts = []
    known = {k: v for k, v in (known or {}).items() if v is not None}
    for key, limit in profile.budget.model_dump().items():
        if limit is None:
            continue
        if key == "model_size_mb" or key in known:
            value = size_bytes / 2**20 if key == "model_size_mb" else known[key]
            verdicts.append(Verdict(artifact, target, key, limit, value,
                                    PASS if value <= limit else FAIL))
        else:
            verdicts.append(Verdict(artifact, target, key, limit, None, UNMEASURED, reason))
    return verdicts
