"""`check(measurement, profile)`: turn one measurement into verdicts. Pure: no I/O."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, NamedTuple, Optional

from profiles.schema import Profile

PASS, FAIL, UNMEASURED, OFF_TARGET = "pass", "fail", "unmeasured", "off-target"
# An energy or power budget of a profile whose meter is optional (power.required: false),
# on a machine with no meter at all: not judged, and not a failure even with --strict.
NO_METER = "no-meter"
METERED = ("energy_mj", "power_w")
# the unit each budget is written in (the report prints it after the number)
UNITS = {"latency_p90_ms": "ms", "peak_memory_mb": "MB", "model_size_mb": "MB",
         "energy_mj": "mJ", "power_w": "W", "accuracy_drop": "", "output_sqnr_db": "dB",
         # a language model's (profile.language_model, and the memory fit)
         "decode_tokens_per_s": "tok/s", "time_to_first_token_ms": "ms",
         "perplexity_increase": "", "kl_mean": "nats", "weights_and_kv_cache_mb": "MB"}
NO_METER_REASON = ("the budget applies where a meter is (RAPL, an external meter: "
                   "docs/reference.md, Power and energy)")


def meter_headline(note: Optional[str]) -> str:
    """A benchmark's energy note without its details: "no power meter on this host (ina3221:
    ...; rapl: ...)" is said in full once per machine (report.md, where each target was
    measured); a verdict, a fits row and the terminal carry only what comes before " ("."""
    return (note or "no power meter").split(" (", 1)[0]


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


def _output_sqnr(m: dict) -> Optional[float]:
    details = (m.get("metric") or {}).get("details") or {}
    return details.get("sqnr_db")


def _language_model(key: str) -> Callable[[dict], Optional[float]]:
    return lambda m: (m.get("language_model") or {}).get(key)


def _size_mb(m: dict) -> float:
    return m["size_bytes"] / 2**20


def _mismatch(key: str, said: str) -> Callable[[dict, Profile], str]:
    """Why a measurement is not the budget's: it was taken at another `key` (a prompt or
    a KV cache of another length) than the profile's language_model section names."""
    def reason(m: dict, profile: Profile) -> str:
        measured = _language_model(key)(m)
        budgeted = getattr(profile.language_model, key)
        if measured is not None and measured != budgeted:
            return said.format(measured=measured, budgeted=budgeted)
        return ""
    return reason


_prompt_mismatch = _mismatch("prompt_tokens", "measured at {measured} prompt tokens, the "
                             "budget is at {budgeted}")
_context_mismatch = _mismatch("context_tokens", "computed at {measured} context tokens, the "
                              "profile's is {budgeted}")


def _does_not_fit(m: dict, profile: Profile) -> str:
    tokens = _language_model("context_tokens")(m) or profile.language_model.context_tokens
    return f"weights + KV cache at {tokens} tokens exceed the device's memory"


class _Reader(NamedTuple):
    """How one budget key is judged."""
    read: Callable[[dict], Optional[float]]   # its value in a measurement
    # whether the value depends on the machine it was measured on. A file's size is the
    # same everywhere, so a size verdict is real even off the device.
    device_dependent: bool
    at_least: bool = False      # a floor (a speed): passes at or above the limit, not below
    # why the number was taken under other conditions than the budget's ("" if it was not)
    mismatch: Callable[[dict, Profile], str] = lambda m, profile: ""
    fail_reason: Callable[[dict, Profile], str] = lambda m, profile: ""
    # judged only where there is a number: a limit every profile has by default (the
    # fidelity floor) says nothing of a run without evaluation data
    optional: bool = False


# a tensor model's budget (profile.budget)
_READERS: dict[str, _Reader] = {
    "latency_p90_ms": _Reader(lambda m: m["latency_ms"]["p90"], True),
    "peak_memory_mb": _Reader(lambda m: m.get("peak_memory_mb"), True),
    "model_size_mb": _Reader(_size_mb, False),
    "energy_mj": _Reader(lambda m: m.get("energy_mj"), True),
    "power_w": _Reader(lambda m: (m.get("power") or {}).get("mean_w"), True),
    "accuracy_drop": _Reader(_metric_drop, True),
    # a broken file is broken on every machine: judged where measured, on the device or not
    "output_sqnr_db": _Reader(_output_sqnr, False, at_least=True, optional=True,
                              fail_reason=lambda m, profile: "under the fidelity floor"),
}
# the weights and the KV cache of profile.language_model.context_tokens against the
# device's memory (device.memory_mb): arithmetic on the file, the same everywhere
MEMORY_FIT = "weights_and_kv_cache_mb"
# a language model's budget (profile.language_model, and the memory fit); a measurement
# with a "language_model" record is judged by it. The quality numbers compare the model's
# logits with the float model's on the same text: the same on every machine up to float
# rounding.
_LM_READERS: dict[str, _Reader] = {
    "decode_tokens_per_s": _Reader(_language_model("decode_tok_s"), True, at_least=True),
    "time_to_first_token_ms": _Reader(_language_model("ttft_ms"), True,
                                      mismatch=_prompt_mismatch),
    "peak_memory_mb": _Reader(lambda m: m.get("peak_memory_mb"), True),
    "model_size_mb": _Reader(_size_mb, False),
    "perplexity_increase": _Reader(_metric_drop, False),
    "kl_mean": _Reader(lambda m: (m.get("metric") or {}).get("kl_mean"), False),
    MEMORY_FIT: _Reader(_language_model(MEMORY_FIT), False, mismatch=_context_mismatch,
                        fail_reason=_does_not_fit),
}
# budget keys whose limit is a floor (the value must reach it)
AT_LEAST = frozenset(key for table in (_READERS, _LM_READERS)
                     for key, reader in table.items() if reader.at_least)
NO_EVALUATION = "no evaluation data in the pipeline (data.evaluation)"
_NO_NUMBER = {"accuracy_drop": NO_EVALUATION, "perplexity_increase": NO_EVALUATION,
              "kl_mean": NO_EVALUATION, "output_sqnr_db": NO_EVALUATION}


def _limits(profile: Profile, language: bool) -> tuple[dict[str, float], dict[str, _Reader]]:
    """The budgeted keys of the section that judges this kind of model, with their
    readers: a language model's never meets a tensor model's budget, nor the reverse."""
    if not language:
        limits, readers = profile.budget.limits(), _READERS
    else:
        limits = {**profile.language_model.limits(), MEMORY_FIT: profile.device.memory_mb}
        readers = _LM_READERS
    return {k: v for k, v in limits.items() if v is not None}, readers


def budget_limits(profile: Profile, language: bool) -> dict[str, float]:
    """The budgeted keys, with their limits, that judge this kind of model on `profile`."""
    return _limits(profile, language)[0]


def _judge(reader: _Reader, value: float, limit: float, m: dict,
           profile: Profile) -> tuple[str, str]:
    passes = value >= limit if reader.at_least else value <= limit
    return (PASS, "") if passes else (FAIL, reader.fail_reason(m, profile))


def _unmeasured(key: str, m: dict, profile: Profile) -> tuple[str, str]:
    """The status and reason of a budget with no number."""
    # no `power` record: no meter was found (a meter that gave nothing stays unmeasured)
    if key in METERED and not profile.power.required and not m.get("power"):
        return NO_METER, f"{meter_headline(m.get('energy_note'))}; {NO_METER_REASON}"
    return UNMEASURED, _unmeasured_reason(key, m)


def _unmeasured_reason(key: str, m: dict) -> str:
    if key in METERED:
        return meter_headline(m.get("energy_note"))
    return _NO_NUMBER.get(key, "not measured")


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
    """One verdict per budgeted metric: pass, fail, unmeasured, no-meter or off-target.
    A measurement with a "language_model" record is judged by profile.language_model
    (and the memory fit), any other by profile.budget."""
    is_on_target, off_reason = on_target(profile, measurement["measured_on"])
    limits, readers = _limits(profile, "language_model" in measurement)
    verdicts = []
    for key, limit in limits.items():
        reader = readers[key]
        value = reader.read(measurement)
        if value is None and reader.optional:
            continue
        mismatch = reader.mismatch(measurement, profile) if value is not None else ""
        if value is None:
            status, reason = _unmeasured(key, measurement, profile)
        elif mismatch:   # a number, but not of what the budget asks: none for it
            value, status, reason = None, UNMEASURED, mismatch
        elif reader.device_dependent and not is_on_target:
            status, reason = OFF_TARGET, off_reason
        else:
            status, reason = _judge(reader, value, limit, measurement, profile)
        verdicts.append(Verdict(artifact, target, key, limit, value, status, reason))
    return verdicts


def unmeasured_verdicts(profile: Profile, artifact: str, target: str, reason: str,
                        size_bytes: int, known: dict | None = None) -> list[Verdict]:
    """Verdicts for a tensor model's artifact x target that was not measured (its
    accelerator is not on the measuring machine, or it was not timed, being over a budget
    checked first): every budget unmeasured with the reason, except the file's size,
    which is the same everywhere, and the values `known` from elsewhere ({budget key:
    value or None}: the metric's drop, measured on another target)."""
    return _unmeasured_in(profile, False, (artifact, target, reason), size_bytes, known)


def unmeasured_language_verdicts(profile: Profile, artifact: str, target: str, reason: str,
                                 size_bytes: int, known: dict | None = None) -> list[Verdict]:
    """unmeasured_verdicts for a language model: judged by profile.language_model and the
    memory fit; `known` may carry perplexity_increase, kl_mean and weights_and_kv_cache_mb."""
    return _unmeasured_in(profile, True, (artifact, target, reason), size_bytes, known)


def _unmeasured_in(profile: Profile, language: bool, header: tuple[str, str, str],
                   size_bytes: int, known: dict | None) -> list[Verdict]:
    artifact, target, reason = header
    known = {k: v for k, v in (known or {}).items() if v is not None}
    known["model_size_mb"] = size_bytes / 2**20
    limits, readers = _limits(profile, language)
    verdicts = []
    for key, limit in limits.items():
        if key not in known and readers[key].optional:
            continue
        if key in known:
            status, why = _judge(readers[key], known[key], limit, {}, profile)
            verdicts.append(Verdict(artifact, target, key, limit, known[key], status, why))
        else:
            verdicts.append(Verdict(artifact, target, key, limit, None, UNMEASURED, reason))
    return verdicts


DID_NOT_RUN = "did not run"


def did_not_run_verdicts(profile: Profile, artifact: str, target: str, reason: str,
                         language: bool = False) -> list[Verdict]:
    """Verdicts for an artifact x target whose runner was killed there (a signal: the
    out-of-memory killer, a crash in the runtime): the variant did not fit the device,
    so every budget of the target fails for it, with no number and why ("did not run:
    <the signal, the peak memory seen, the likely cause>"), as a missed budget fails.
    A budget judged only where there is a number (the fidelity floor) is left out."""
    limits, readers = _limits(profile, language)
    return [Verdict(artifact, target, key, limit, None, FAIL, f"{DID_NOT_RUN}: {reason}")
            for key, limit in limits.items() if not readers[key].optional]
