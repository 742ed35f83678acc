"""The order of a target's feasible variants (compress.report.decide's rule 2): the fastest
p90 first, where "faster" means beyond the measured noise. Pure: no I/O.

A variant's p90 carries an interval (compress.measure.noise: its rounds' lowest to highest
p90, at least TIE_RATIO wide), widened to the noise its engine showed on the machine that
measured it (noise.widen, as `compress compare` reads a report): at least as wide, for its
p90, as the widest of the variants timed by the same engine, machine and threads, for any
target (the same runtime on the same machine swings alike from one process to the next:
LiteRT on two threads timed one small file at 0.025 or 0.165 ms, by process). The
variants whose interval overlaps the fastest one's are a tie, ordered by the smaller file,
then the smaller metric drop, then the integer precision (int8 before fp16 before fp32),
then the artifact's name: whatever order the variants come in and whichever of them
measured a hair faster this time, the same one leads. The others follow by p90.
"""
from __future__ import annotations

from compress.measure.noise import band, factors, overlap, widen


def precision_rank(precision) -> int:
    """int8 (any integer) 0, 16-bit float 1, fp32 2, unknown 3: fewer bits first."""
    word = str(precision or "").lower().split(" ")[0]
    if word.startswith(("int", "uint", "w4", "w8")):
        return 0
    if "16" in word:
        return 1
    return 2 if word.startswith(("fp32", "float32", "f32")) else 3


def _own(variant) -> tuple[float, float]:
    """The variant's p90 interval (its p90's band where the record has none)."""
    return variant.p90_interval or band(variant.latency_p90_ms)


def _how(variant) -> tuple:
    return variant.engine, variant.machine, variant.threads


def engine_noise(timed: list) -> dict:
    """Per (engine, machine, threads): the widest (below, above) factors of an interval
    around its p90 among `timed` (the measured variants of every target)."""
    return factors((_how(v), v.latency_p90_ms, _own(v)) for v in timed)


def span(variant, noise: dict | None = None) -> tuple[float, float]:
    """The variant's interval, at least its engine's noise on the target wide."""
    factor = (noise or {}).get(_how(variant), (1.0, 1.0))
    return widen(variant.latency_p90_ms, _own(variant), factor)


def _tie_key(variant) -> tuple:
    return (variant.model_size_mb, variant.drop or 0.0,
            precision_rank(variant.files.get("precision")), variant.artifact)


def _speed_key(variant) -> tuple:
    return (variant.latency_p90_ms, *_tie_key(variant))


def rank(feasible: list, noise: dict | None = None) -> tuple[list, int]:
    """(the variants in order, how many lead it tied: 1 when the fastest stands alone).
    `noise`: engine_noise of the target's measured variants."""
    leader = min(feasible, key=_speed_key)
    tied = [v for v in feasible if overlap(span(v, noise), span(leader, noise))]
    rest = sorted((v for v in feasible if all(v is not t for t in tied)), key=_speed_key)
    return sorted(tied, key=_tie_key) + rest, len(tied)


def _ms(span_: tuple[float, float]) -> str:
    return f"{span_[0]:.3g}..{span_[1]:.3g} ms"


def why_tied(ranked: list, tied: int, noise: dict | None = None) -> str:
    """Why the first of `ranked` leads the tie it is in: which tie-break decided."""
    winner = ranked[0]
    fastest = min(ranked[:tied], key=_speed_key)
    other = ranked[1] if fastest is winner else fastest
    mine, theirs = _tie_key(winner), _tie_key(other)
    reason = ("smaller" if mine[0] < theirs[0] else
              "closer to the original" if mine[1] < theirs[1] else
              "fewer bits (integer before float)" if mine[2] < theirs[2] else
              "as small and as close to the original; first by name")
    return (f"tied with {other.artifact} within the measured noise (p90 "
            f"{_ms(span(winner, noise))} vs {_ms(span(other, noise))}); {reason}")
