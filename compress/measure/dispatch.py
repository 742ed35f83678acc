"""Measurements spread over devices: one at a time per device, devices side by side.

`dispatch(items, measure)` runs `measure(index, place)` for every item on a device of
the item's fleet. Each device has one worker; places that share a device (every local
Python is `here`) share its worker, so two measurements never share cores. An item goes
to the device of its fleet it prefers: a fleet's rounds rotate over its boards, so each
variant is timed on several and every board gets its share.

A device whose connection fails (places.DeviceLost) is retired from its fleet, named
with the reason, and the measurement is retried on another device of the fleet; when
none is left the error stands. Any other error stops the dispatch and is raised.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

from compress.measure.places import DeviceLost


def board_for(position: int, round_index: int, boards: int) -> int:
    """The rotation: which of a fleet's `boards` measures the target's `position`-th job
    in round `round_index` (each job moves one board on per round)."""
    return (position + round_index) % boards


@dataclass
class Item:
    index: int          # the caller's job index
    fleet: object       # compress.measure.fleet.Fleet
    position: int = 0   # the job's place among its target's jobs
    round_index: int = 0

    def preferred(self) -> str:
        places = self.fleet.places
        return (places[board_for(self.position, self.round_index, len(places))].device
                if places else "")

    def serves(self, device: str) -> bool:
        return any(place.device == device for place in self.fleet.places)


class _Board:
    """The items waiting, and what the workers share."""

    def __init__(self, items: list[Item], note: Callable[[str], None]):
        self.pending, self.running, self.note = list(items), 0, note
        self.fleets = list({id(i.fleet): i.fleet for i in items}.values())
        self.error: BaseException | None = None
        self.changed = threading.Condition()

    def take(self, device: str) -> Item | None:
        """The next item that prefers `device`, waiting while others could still come to
        it (a board that drops out hands its items to the rest); None when none will."""
        with self.changed:
            while self.error is None:
                mine = [i for i in self.pending if i.serves(device)]
                pick = next((i for i in mine if i.preferred() == device), None)
                if pick is not None:
                    self.pending.remove(pick)
                    self.running += 1
                    return pick
                if not mine and not self.running:
                    return None
                self.changed.wait()
            return None

    def done(self, item: Item, lost: DeviceLost | None = None, place=None,
             error: BaseException | None = None) -> None:
        with self.changed:
            self.running -= 1
            if lost is not None:
                self._retire(item, place, lost)
            elif error is not None and self.error is None:
                self.error = error
            self.changed.notify_all()

    def _retire(self, item: Item, place, lost: DeviceLost) -> None:
        for fleet in self.fleets:   # out of every fleet it served
            for gone in [p for p in fleet.places if p.device == place.device]:
                fleet.drop(gone, str(lost))
        fleet = item.fleet
        if not fleet.places:
            self.error = self.error or lost
            return
        self.note(f"warning: target {fleet.target}: {place.label} dropped out ({lost}); "
                  f"its measurements go to {', '.join(p.label for p in fleet.places)}")
        self.pending.insert(0, item)


def _work(board: _Board, device: str, measure: Callable) -> None:
    while (item := board.take(device)) is not None:
        place = next(p for p in item.fleet.places if p.device == device)
        try:
            measure(item.index, place)
        except DeviceLost as lost:
            board.done(item, lost=lost, place=place)
            return   # this device is out for every fleet it served
        except BaseException as exc:   # noqa: BLE001 - handed to the caller's thread
            board.done(item, error=exc)
            return
        board.done(item)


def dispatch(items: list[Item], measure: Callable[[int, object], None],
             note: Callable[[str], None] = print) -> None:
    """Run every item; returns when all are measured, raises the first error."""
    devices = list(dict.fromkeys(p.device for item in items for p in item.fleet.places))
    board = _Board(items, note)
    if len(devices) == 1:   # the usual case: no thread, errors and Ctrl-C as they come
        _work(board, devices[0], measure)
    else:
        workers = [threading.Thread(target=_work, args=(board, device, measure), daemon=True,
                                    name=f"measure-{device}") for device in devices]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    if board.error is not None:
        raise board.error
    if board.pending:   # their only devices dropped out while serving another fleet
        lost = board.pending[0].fleet
        raise DeviceLost(f"target {lost.target}: no device left to measure on; "
                         f"dropped: {'; '.join(f'{d}: {why}' for d, why in lost.dropped)}")
