"""The executor seams without devices: the dispatcher's rules (one measurement at a time
per device, rounds rotated over a fleet's boards, a lost board's work retried on another,
a runner's error not retried), fleets in pipeline.yaml, and the Measurement record.

The places here are fakes of the Place interface (a board that answers after a pause,
or whose connection drops), like a mock transport; the real fleet over SSH is
tests/compress/measure/test_fleet.py (`make test-remote`)."""
from __future__ import annotations

import threading
import time

import pytest

from compress.config.pipeline import parse_pipeline
from compress.errors import ConfigError, ModelError
from compress.measure.dispatch import Item, dispatch
from compress.measure.fleet import Fleet
from compress.measure.places import DeviceLost
from runtimes.result import REQUIRED, Measurement
from tests.conftest import pipeline_dict


class Board:
    """A fake board: measuring takes `pause` seconds; `fails_after` measurements in, its
    connection drops (DeviceLost) or the runner fails (`error`)."""
    remote, emulated, cores = True, False, 4

    def __init__(self, name: str, pause: float = 0.02, fails_after: int | None = None,
                 error: type = DeviceLost):
        self.label = self.device = name
        self.pause, self.fails_after, self.error = pause, fails_after, error
        self.busy, self.overlapped, self.done = 0, False, []
        self.lock = threading.Lock()

    def run(self, index: int) -> None:
        with self.lock:
            self.busy += 1
            self.overlapped |= self.busy > 1
        try:
            if self.fails_after is not None and len(self.done) >= self.fails_after:
                raise self.error(f"{self.label} went away")
            time.sleep(self.pause)
            self.done.append(index)
        finally:
            with self.lock:
                self.busy -= 1


def _run(items, notes=None):
    dispatch(items, lambda index, place: place.run(index),
             (notes if notes is not None else []).append)


def test_rounds_rotate_over_the_boards_and_no_board_measures_two_at_once():
    a, b = Board("a"), Board("b")
    fleet = Fleet("rpi4", [a, b])
    for round_index in range(2):
        _run([Item(job, fleet, job, round_index) for job in range(4)])
    assert sorted(a.done) == sorted(b.done) == [0, 1, 2, 3]   # each job once on each
    assert not a.overlapped and not b.overlapped


def test_targets_measured_here_share_one_device():
    here = [Board("here"), Board("here")]   # two targets, one machine
    for board in here:
        board.device = "here"
    _run([Item(i, Fleet(f"t{i % 2}", [here[i % 2]])) for i in range(6)])
    assert sorted(here[0].done + here[1].done) == list(range(6))
    assert not any(board.overlapped for board in here)


def test_a_lost_board_is_named_and_its_measurement_goes_to_the_other():
    a, b = Board("a", pause=0.05), Board("b", fails_after=1)
    fleet, notes = Fleet("rpi4", [a, b]), []
    _run([Item(job, fleet, job) for job in range(6)], notes)
    assert sorted(a.done + b.done) == list(range(6))
    assert len(b.done) == 1 and fleet.places == [a]
    assert fleet.dropped == [("b", "b went away")]
    assert fleet.summary() == {"devices": ["a"], "dropped": [{"device": "b",
                                                               "reason": "b went away"}]}
    assert any("b dropped out (b went away); its measurements go to a" in n for n in notes)


def test_with_every_board_lost_the_error_stands():
    fleet = Fleet("rpi4", [Board("a", fails_after=0), Board("b", fails_after=1)])
    with pytest.raises(DeviceLost, match="went away"):
        _run([Item(job, fleet, job) for job in range(4)])


def test_a_runner_error_is_not_retried_elsewhere():
    a, b = Board("a", pause=0.01), Board("b", fails_after=0, error=ModelError)
    with pytest.raises(ModelError, match="b went away"):
        _run([Item(job, Fleet("rpi4", [a, b]), job) for job in range(4)])


def _fleet_target(**fields) -> dict:
    return pipeline_dict(targets=[{"profile": "rpi4", **fields}])


@pytest.mark.parametrize("fields, message", [
    ({"ssh": ["pi@a", "pi@a"]}, "lists a device twice"),
    ({"ssh": []}, "lists no device"),
    ({"ssh": ["pi@a:99999"]}, "port"),
    ({"ssh": "pi@a", "hosts_file": "boards.txt"}, "not both"),
    ({"hosts_file": "boards.txt", "python": "/x"}, None),
])
def test_fleet_settings_are_checked(fields, message):
    if message is None:
        assert parse_pipeline(_fleet_target(**fields)).targets[0].remote
        return
    with pytest.raises(ConfigError, match=message):
        parse_pipeline(_fleet_target(**fields))


@pytest.mark.parametrize("text, message", [
    ("pi@a\n# a comment\n\npi@b:2222  # second\n", None),
    ("pi@a\npi@a\n", "line 2: pi@a is listed twice"),
    ("# nothing\n", "lists no device"),
    ("pi@a:notaport\n", "line 1"),
])
def test_a_hosts_file_is_read_line_by_line(tmp_path, text, message):
    (tmp_path / "boards.txt").write_text(text)
    pipeline = parse_pipeline(_fleet_target(hosts_file="boards.txt"), base_dir=tmp_path)
    target = pipeline.targets[0]
    if message is None:
        assert target.devices(pipeline) == ["pi@a", "pi@b:2222"]
    else:
        with pytest.raises(ValueError, match=message):
            target.devices(pipeline)


def test_a_runner_answer_without_its_figures_is_named():
    answer = {key: 0 for key in REQUIRED}
    answer.update(runtime={"engine": "onnxruntime"}, latency_samples_ms=[1.0, 2.0])
    measured = Measurement.from_json(answer, "pi@a", 1.5)
    assert (measured.engine, measured.device, measured.latency_samples_ms) == \
        ("onnxruntime", "pi@a", (1.0, 2.0))
    del answer["peak_rss_mb"], answer["window_s"]
    with pytest.raises(ValueError, match="lacks window_s, peak_rss_mb"):
        Measurement.from_json(answer)


def test_the_ray_search_example_is_the_search_example_on_ray():
    from compress.config.pipeline import load_pipeline
    from tests.conftest import REPO
    serial, on_ray = (load_pipeline(REPO / "examples" / "search" / name)
                      for name in ("pipeline.yaml", "ray.yaml"))
    assert on_ray.executor.type == "ray" and serial.executor.type == "local"
    assert serial.model_dump(exclude={"name", "executor"}) == \
        on_ray.model_dump(exclude={"name", "executor"})


def test_every_executor_the_yaml_takes_is_registered():
    import typing
    from compress.config.executor import Executor
    from compress.search.executors import TRIAL_EXECUTORS
    members = typing.get_args(typing.get_args(Executor)[0])
    assert {m.model_fields["type"].default for m in members} == set(TRIAL_EXECUTORS)


def test_a_ray_client_address_without_the_client_names_the_extra(monkeypatch):
    import sys

    from compress.config.executor import RayExecutor
    from compress.errors import MissingDependency
    from compress.search import ray_trials

    class NotStarted:
        def is_initialized(self):
            return False
    monkeypatch.setitem(sys.modules, "grpc", None)   # as where ray[client] is not installed
    with pytest.raises(MissingDependency, match=r"ray\[client\]"):
        ray_trials._init(NotStarted(), RayExecutor(address="ray://head:10001"))
