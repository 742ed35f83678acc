"""Run conditions against fixture sysfs trees and fake nvpmodel / vcgencmd commands."""
import os

import pytest

from runtimes.conditions import compare, parse_nvpmodel, parse_throttled, snapshot
from runtimes.cpus import format_cpus, parse_cpus
from runtimes.errors import RuntimeInputError
from tests.runtimes import power_fakes as fakes


@pytest.fixture
def bin_dir(tmp_path, monkeypatch):
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}/usr/bin:/bin")
    return folder


def _tree(name, tmp_path):
    return fakes.copy_tree(name, tmp_path / name, kind=fakes.CONDITIONS)


def _set(root, path, value):
    (root / path.lstrip("/")).write_text(f"{value}\n")


def test_a_jetson_snapshot_has_power_mode_clocks_and_temperatures(tmp_path, bin_dir):
    fakes.install(bin_dir, "nvpmodel", fakes.NVPMODEL)
    root = _tree("jetson-orin-nano", tmp_path)
    found = snapshot(str(root))
    assert found["governors"] == ["schedutil"]
    assert found["cpufreq"]["5"] == {"governor": "schedutil", "cur_khz": 1510400,
                                     "min_khz": 1510400, "max_khz": 1510400,
                                     "hw_max_khz": 1510400}
    zone = found["thermal"]["thermal_zone0"]
    assert zone["type"] == "cpu-thermal" and zone["temp_c"] == 47.5
    assert {"type": "passive", "temp_c": 99.0} in zone["trips"]
    assert found["nvpmodel"] == {"mode": "MAXN", "id": 0}
    assert found["jetson_clocks"]["on"] is True
    assert "inferred" in found["jetson_clocks"]["basis"]
    assert "pi_throttled" not in found and "throttle_counts" not in found
    _set(root, "/sys/devices/system/cpu/cpu2/cpufreq/scaling_min_freq", 729600)
    assert snapshot(str(root))["jetson_clocks"]["on"] is False
    assert compare(found, snapshot(str(root))) == []


def test_nvpmodel_output_parses():
    assert parse_nvpmodel("NV Fan Mode:cool\nNV Power Mode: MODE_30W_4CORE\n5\n") == {
        "mode": "MODE_30W_4CORE", "id": 5}
    assert parse_nvpmodel("NV Power Mode: 15W\n") == {"mode": "15W"}
    assert parse_nvpmodel("nvpmodel: command failed") is None


def test_missing_sources_are_absent_not_errors(tmp_path, bin_dir):
    assert snapshot(str(tmp_path / "nothing")) == {}
    assert compare({}, {}) == []
    found = snapshot(str(_tree("x86-host", tmp_path)))
    assert "nvpmodel" not in found and "jetson_clocks" not in found


def test_x86_throttle_counters_rising_are_a_warning(tmp_path, bin_dir):
    root = _tree("x86-host", tmp_path)
    before = snapshot(str(root))
    assert before["throttle_counts"]["0"] == {"core_throttle_count": 0,
                                              "package_throttle_count": 3}
    _set(root, "/sys/devices/system/cpu/cpu1/thermal_throttle/core_throttle_count", 4)
    _set(root, "/sys/devices/system/cpu/cpu2/thermal_throttle/core_throttle_count", 1)
    warnings = compare(before, snapshot(str(root)))
    assert warnings == ["thermal throttling during the run: core_throttle_count rose by 5 "
                        "on CPU 1-2"]


def test_frequency_drops_warn_unless_the_governor_chose_them(tmp_path, bin_dir):
    root = _tree("x86-host", tmp_path)
    before = snapshot(str(root))
    for cpu in range(4):
        _set(root, f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq", 1200000)
    _set(root, "/sys/devices/system/cpu/cpu3/cpufreq/scaling_max_freq", 2000000)
    warnings = compare(before, snapshot(str(root)))
    assert len(warnings) == 2
    assert "scaling_max_freq) dropped during the run on CPU 3" in warnings[0]
    assert "1.20 GHz" in warnings[1] and "71% below the maximum at the start (4.20 GHz)" \
        in warnings[1] and "governor performance" in warnings[1]
    # only the CPUs the run was pinned to count: CPU 3's lowered limit is left out
    assert len(compare(before, snapshot(str(root)), cpus=[0, 1])) == 1
    for cpu in range(4):
        _set(root, f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor", "powersave")
    assert compare(before, snapshot(str(root))) == []


def test_reaching_a_passive_trip_point_is_a_warning(tmp_path, bin_dir):
    root = _tree("x86-host", tmp_path)
    before = snapshot(str(root))
    _set(root, "/sys/class/thermal/thermal_zone0/temp", 95000)  # above an active trip only
    assert compare(before, snapshot(str(root))) == []
    _set(root, "/sys/class/thermal/thermal_zone0/temp", 107500)
    assert compare(before, snapshot(str(root))) == [
        "thermal_zone0 (acpitz) reached 107.5 °C, at or above its passive trip point "
        "(107.0 °C) where the kernel throttles"]


def test_raspberry_pi_throttled_bits(tmp_path, bin_dir):
    fakes.install_vcgencmd(bin_dir)
    root = str(_tree("rpi5", tmp_path))
    before = snapshot(root)
    assert before["pi_throttled"] == {"value": "0x0", "flags": []}
    (bin_dir / "throttled").write_text("0x50005")
    after = snapshot(root)
    assert after["pi_throttled"]["flags"] == ["under-voltage", "currently throttled",
                                              "under-voltage has occurred",
                                              "throttling has occurred"]
    assert compare(before, after) == [
        "the Raspberry Pi firmware reports under-voltage, currently throttled at the end "
        "of the run (throttled=0x50005)",
        "during the run the Raspberry Pi firmware flagged: under-voltage has occurred, "
        "throttling has occurred (throttled=0x0 before, 0x50005 after)"]
    # bits that had occurred before the run, and nothing throttled now: no warning
    (bin_dir / "throttled").write_text("0x80000")
    assert compare(snapshot(root), snapshot(root)) == []
    assert parse_throttled("throttled=0x8")["flags"] == ["soft temperature limit active"]


def test_cpu_lists():
    assert parse_cpus("0-3,6") == [0, 1, 2, 3, 6] and parse_cpus("2,3") == [2, 3]
    assert format_cpus([6, 0, 1, 2, 3]) == "0-3,6" and format_cpus([1]) == "1"
    for bad in ("a-b", "3-1", "", "1,,2"):
        with pytest.raises(RuntimeInputError, match="this host's CPUs are"):
            parse_cpus(bad)
