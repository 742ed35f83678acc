"""The words every output uses for a run's answer, kept in one place: what a target's
recommendation is called (shippable, candidate, none), the short glossary report.md opens
with, and the one line per target the terminal ends with. report.json keeps its own
status values (compress.report.decide: ship, candidate, nothing fits, unmeasured); these
are how they read."""
from __future__ import annotations

import re

from compress.report.decide import CANDIDATE, NOTHING_FITS, SHIP, UNJUDGED, UNMEASURED

SHIPPABLE, NONE = "shippable", "none"
# a recommendation's status as a person reads it
SHOWN = {SHIP: SHIPPABLE, CANDIDATE: CANDIDATE, NOTHING_FITS: NONE, UNMEASURED: NONE,
         UNJUDGED: UNJUDGED}

# the terms a report uses that a newcomer would not know, in the order they meet them
GLOSSARY = (
    ("gated", "a target whose answer decides the exit code (every target unless it says "
              "`gate: false`)"),
    ("shippable", "a variant meeting every budget, measured on the target's device"),
    ("candidate", "a variant meeting every budget measured, but measured off the device "
                  "(another CPU, emulation) or with a budget left unmeasured: check it there"),
    ("off-target", "a number measured on another machine than the profile's device: "
                   "information, not a verdict"),
    ("no-meter", "an energy or power budget on a machine with no power meter: not judged "
                 "here, judged where a meter is"),
    ("feeds", "the input arrays a model was run on (calibration or evaluation samples)"),
)


# what --strict changes, said wherever a report names it
STRICT_MEANS = "strict: only a shippable variant counts, not a candidate"


def answered(rec: dict, strict: bool) -> bool:
    """Whether a target has something to ship, as the exit code counts it: a shippable
    variant or, unless `strict`, a candidate (compress.runner.judging.passed)."""
    return rec["status"] == SHIP or (rec["status"] == CANDIDATE and not strict)


def terms_used(text: str, always: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """The GLOSSARY's terms `text` uses as words (and `always`), with their meanings."""
    return [(term, meaning) for term, meaning in GLOSSARY
            if term in always or re.search(rf"(?<![\w-]){re.escape(term)}(?![\w-])", text,
                                           re.IGNORECASE)]


def status_of(rec: dict) -> str:
    """shippable, candidate or none: what a target's recommendation amounts to."""
    return SHOWN[rec["status"]]


def _number(value, unit: str, digits: str = ".3g") -> str:
    return "—" if value is None else f"{value:{digits}}{unit}"


def target_line(rec: dict) -> str:
    """One line for a target: its answer, the file, p90, size, drop and where measured.
    The file's path follows, since a deployment step needs it (compress ship copies it)."""
    target, shown = rec["target"], status_of(rec)
    if shown == UNJUDGED:
        return f"{target}: {rec['why']}"
    if shown == NONE:
        miss = rec.get("closest_miss")
        closest = f"; closest: {miss['artifact']}" if miss else ""
        return f"{target}: none ({rec['why']}{closest})"
    if rec.get("language_model"):
        speed = f"decode {rec['language_model']['decode_tok_s']:.3g} tok/s"
    else:
        speed = f"p90 {_number(rec['latency_p90_ms'], ' ms')}"
    drop = "" if rec["drop"] is None else f", drop {rec['drop']:.4g}"
    if rec["measured_on_device"]:
        left = rec.get("unmeasured") if shown == CANDIDATE else None
        where = "measured on the device" + (f", {', '.join(left)} unmeasured" if left else "")
    else:   # why, in a few words: "measured on x86_64 AMD EPYC, not on a rpi4 (aarch64)"
        reason = (rec.get("off_target_reason") or "").removeprefix("measured ")
        where = "measured off the device" + (f" ({reason})" if reason else "")
    return (f"{target}: {shown} {rec['artifact']} ({rec['format']} {rec['precision']}), "
            f"{speed}, {_number(rec['model_size_mb'], ' MB')}{drop}, {where}: "
            f"{rec['path'] or rec['artifact']}")
