"""A target's devices: one place, or a fleet of boards of one profile.

Opened in preflight (an unreachable board fails before any compression work; in a fleet
it is left out and named, as long as one device answers), closed after the benchmark.
A device that drops out mid-run is retired here with the reason; the report names it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional

from compress.errors import ConfigError, RemoteError
from compress.measure.places import PLACES, LocalPlace, SshPlace, kind_of, register_place
from profiles.validation import field_of


@dataclass
class Fleet:
    target: str
    places: list                                   # the devices still in service
    dropped: list = field(default_factory=list)    # [(device, why)] left out or lost
    size: int = 0                                  # how many it started with
    opened: list = field(default_factory=list)     # every place, lost ones too (to close)

    def __post_init__(self):
        self.size = self.size or len(self.places) + len(self.dropped)
        self.opened = self.opened or list(self.places)

    @property
    def remote(self) -> bool:
        return any(place.remote for place in self.places)

    @property
    def cores(self) -> int:
        """Cores a measurement may use: the smallest device's."""
        return min(place.cores for place in self.places)

    def drop(self, place, why: str) -> None:
        if place in self.places:
            self.places.remove(place)
            self.dropped.append((place.label, why))

    def place(self, label: str):
        return next((p for p in self.places if p.label == label), None)

    def close(self) -> list[str]:
        return [w for place in self.opened if (w := place.close())]

    def summary(self) -> Optional[dict]:
        """For the report: the devices of a fleet and those that dropped out."""
        if self.size < 2 and not self.dropped:
            return None
        return {"devices": [p.label for p in self.places],
                "dropped": [{"device": d, "reason": why} for d, why in self.dropped]}


@register_place("local")
def _here(ctx, target, name) -> Fleet:
    return Fleet(name, [LocalPlace(cores=os.cpu_count() or 1)])


@register_place("python")
def _other_python(ctx, target, name) -> Fleet:
    python = str(ctx.pipeline.resolve(target.python))
    return Fleet(name, [LocalPlace(python, cores=os.cpu_count() or 1)])


@register_place("ssh")
def _devices(ctx, target, name) -> Fleet:
    """Every device of the target, probed; in a fleet one that fails is left out (named),
    the target fails only when none answers. Raises RemoteError."""
    from compress.measure.remote.host import RemoteHost
    from compress.measure.remote.targets import engines_for_target, remote_spec
    profile = dict(ctx.targets)[name]
    engines = engines_for_target(ctx.pipeline, profile)
    try:
        addresses = target.devices(ctx.pipeline)
    except ValueError as exc:
        index = [name for name, _ in ctx.targets].index(name)
        raise ConfigError(str(exc), field=field_of(("targets", index, "hosts_file"))) from None
    fleet, errors = Fleet(name, [], size=len(addresses)), []
    for address in addresses:
        host = RemoteHost(name, remote_spec(target, ctx.pipeline, address))
        ctx.progress.note(f"target {name}: connecting to {address}")
        try:
            facts = host.probe(engines)
        except RemoteError as exc:
            host.close()
            if len(addresses) == 1:   # a single device: its own error, as it was
                raise
            errors.append(str(exc))
            fleet.dropped.append((address, str(exc)))
            ctx.progress.note(f"warning: target {name}: {address} left out: {exc}")
            continue
        fleet.places.append(SshPlace(host))
        fleet.opened.append(fleet.places[-1])
        ctx.progress.note(f"target {name}: {address}: {facts['arch']}, Python "
                          f"{'.'.join(map(str, facts['python']))}, {facts['cores']} cores, "
                          f"{', '.join(engines) or 'no runtime needed'} present "
                          f"({host.times.connect_s:.2f} s)")
    if not fleet.places:
        raise RemoteError(f"target {name}: none of its {len(addresses)} devices can "
                          "measure:\n  " + "\n  ".join(errors))
    return fleet


def open_fleets(ctx) -> dict[str, Fleet]:
    """{target name: Fleet} for a pipeline that benchmarks (else nothing to open)."""
    if not any(stage.type == "benchmark" for stage in ctx.pipeline.stages):
        return {}
    fleets: dict[str, Fleet] = {}
    try:
        for target, (name, _) in zip(ctx.pipeline.targets, ctx.targets):
            fleets[name] = PLACES[kind_of(target)](ctx, target, name)
    except BaseException:
        close_fleets(fleets)
        raise
    return fleets


def close_fleets(fleets: dict[str, Fleet]) -> list[str]:
    """Remove what the run put on each device; warnings for what could not be removed."""
    return [warning for fleet in fleets.values() for warning in fleet.close()]

