"""Power meters against fixture sysfs trees and fake commands in the real output formats.

No assertion is about speed: windows are a few tenths of a second and the checks are on
consistency (joules = active power x window, the idle subtracted, the rail picked)."""
import importlib
import os
import sys
import threading
import time

import numpy as np
import pytest

from runtimes import FunctionSession, TensorSpec, Timing, measure
from runtimes.errors import RuntimeInputError
from runtimes.power import detect
from runtimes.power.command import last_number
from runtimes.power.pi5_pmic import parse_rails as parse_pmic
from runtimes.power.tegrastats import parse_rails as parse_tegrastats
from tests.runtimes import power_fakes as fakes

FAST = {"interval_ms": 10, "idle_seconds": 0.2}


def _window(meter, seconds=0.25) -> dict:
    meter.start()
    time.sleep(seconds)
    return meter.stop()


def _check_consistent(power: dict) -> None:
    assert power["samples"] >= 2 and power["sample_rate_hz"] > 0
    # the rate is over the span of the samples, which lies inside the window
    assert power["samples"] - 1 <= power["sample_rate_hz"] * power["window_s"] + 1e-6
    assert power["active_w"] == pytest.approx(power["mean_w"] - power["idle_w"])
    assert power["joules"] == pytest.approx(power["active_w"] * power["window_s"])


@pytest.fixture
def bin_dir(tmp_path, monkeypatch):
    folder = tmp_path / "bin"
    folder.mkdir()
    fakes.on_path(monkeypatch, folder)
    return folder


# --- ina3221 ---------------------------------------------------------------------------

def test_ina3221_reads_the_input_rail_of_an_orin_nano():
    meter, reason = detect("ina3221", root=str(fakes.POWER / "orin-nano"), **FAST)
    assert reason is None
    assert meter.detail == "INA3221 rail VDD_IN (1-0040)"
    assert meter.read() == pytest.approx(5.056 * 1.000)  # 5056 mV x 1000 mA


def test_ina3221_picks_a_rail_by_label_and_names_the_rails_it_has():
    root = str(fakes.POWER / "orin-nano")
    meter, _ = detect("ina3221", root=root, rail="vdd_soc", **FAST)
    assert meter.read() == pytest.approx(5.048 * 0.288)
    assert "rail VDD_SOC" in meter.detail
    with pytest.raises(RuntimeInputError) as err:
        detect("ina3221", root=root, rail="VDD_GPU")
    assert "no rail 'VDD_GPU'" in str(err.value)
    assert "VDD_IN, VDD_CPU_GPU_CV, VDD_SOC" in str(err.value)


def test_ina3221_sums_the_rails_of_a_board_without_an_input_rail():
    meter, _ = detect("ina3221", root=str(fakes.POWER / "agx-orin"), **FAST)
    assert "sum of rails VDD_GPU_SOC+VDD_CPU_CV+VIN_SYS_5V0" in meter.detail
    assert meter.read() == pytest.approx(19.96 * 0.24 + 19.96 * 0.048 + 4.992 * 0.8)


def test_ina3221_subtracts_the_idle_power(tmp_path):
    root = fakes.copy_tree("orin-nano", tmp_path / "root")
    meter, _ = detect("ina3221", root=str(root), **FAST)
    idle = meter.measure_idle()
    assert idle["idle_w"] == pytest.approx(5.056)
    hwmon = root / "sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon1"
    (hwmon / "curr1_input").write_text("2500\n")  # the workload: 2.5 A instead of 1 A
    power = _window(meter)
    assert power["meter"] == "ina3221" and power["idle_w"] == pytest.approx(5.056)
    assert power["mean_w"] == pytest.approx(5.056 * 2.5)
    assert power["active_w"] == pytest.approx(5.056 * 1.5)
    _check_consistent(power)
    assert "note" not in power


def test_auto_takes_the_ina3221_when_the_tree_has_one():
    meter, reason = detect("auto", root=str(fakes.POWER / "orin-nano"), **FAST)
    assert reason is None and meter.name == "ina3221"


# --- tegrastats ----------------------------------------------------------------------

def test_tegrastats_lines_parse_in_every_published_format():
    orin, nano, three = (fakes.POWER / "tegrastats_lines.txt").read_text().splitlines()
    assert parse_tegrastats(orin) == {"VDD_IN": 2.957, "VDD_CPU_GPU_CV": 0.486,
                                      "VDD_SOC": 1.012}
    assert parse_tegrastats(nano) == {"POM_5V_IN": 2.545, "POM_5V_GPU": 0.0,
                                      "POM_5V_CPU": 0.549}
    assert parse_tegrastats(three)["VDD_IN"] == 9.761  # cur/avg/max: the current value


def test_tegrastats_meter_subtracts_idle_and_kills_the_process(bin_dir):
    fakes.install_tegrastats(bin_dir)
    meter, _ = detect("tegrastats", interval_ms=20, idle_seconds=0.3)
    assert meter.detail == "tegrastats rail VDD_IN (every 20 ms)"
    assert meter.measure_idle()["idle_w"] == pytest.approx(3.0)
    fakes.set_busy(bin_dir)
    power = _window(meter, 0.4)
    assert power["mean_w"] == pytest.approx(7.0) and power["active_w"] == pytest.approx(4.0)
    _check_consistent(power)
    starts = fakes.tegrastats_starts(bin_dir)
    assert len(starts) == 3  # the probe, the idle baseline, the window
    assert all(args == "--interval 20" for _, args in starts)
    for pid, _ in starts:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_tegrastats_on_an_original_nano_reads_pom_5v_in(bin_dir, monkeypatch):
    monkeypatch.setenv("FAKE_TEGRASTATS", "nano")
    fakes.install_tegrastats(bin_dir)
    meter, _ = detect("tegrastats", interval_ms=20)
    assert "rail POM_5V_IN" in meter.detail
    meter, _ = detect("tegrastats", interval_ms=20, rail="POM_5V_CPU", idle_seconds=0)
    power = _window(meter, 0.3)
    assert power["mean_w"] == pytest.approx(0.549) and power["idle_w"] == 0.0
    with pytest.raises(RuntimeInputError, match="POM_5V_IN, POM_5V_GPU, POM_5V_CPU"):
        detect("tegrastats", interval_ms=20, rail="VDD_IN")


# --- Raspberry Pi 5 PMIC --------------------------------------------------------------

def test_pmic_rails_pair_currents_with_voltages_by_name():
    rails = parse_pmic((fakes.POWER / "pmic_read_adc.txt").read_text())
    assert len(rails) == 12 and "EXT5V" not in rails and "BATT" not in rails
    assert rails["VDD_CORE"] == pytest.approx(1.4288 * 0.9065925)    # current(7) x volt(15)
    assert rails["3V7_WL_SW"] == pytest.approx(0.1024727 * 3.710912)
    assert sum(rails.values()) == pytest.approx(2.947977, abs=1e-6)


def test_pi5_pmic_meter_sums_the_rails_and_subtracts_idle(bin_dir):
    fakes.install_vcgencmd(bin_dir)
    meter, _ = detect("pi5-pmic", **FAST)
    assert "PMIC rails' sum over 12 rails" in meter.detail
    assert "excludes USB/peripheral power drawn from EXT5V" in meter.detail
    assert meter.measure_idle()["idle_w"] == pytest.approx(2.947977, abs=1e-6)
    fakes.set_busy(bin_dir)  # VDD_CORE draws twice the current
    power = _window(meter)
    assert power["active_w"] == pytest.approx(1.4288 * 0.9065925)
    _check_consistent(power)
    core, _ = detect("pi5-pmic", rail="VDD_CORE", **FAST)
    assert core.read() == pytest.approx(2 * 1.4288 * 0.9065925)


def test_vcgencmd_without_the_pmic_adc_is_not_a_pi5_meter(bin_dir):
    fakes.install_vcgencmd(bin_dir)
    (bin_dir / "pi4").touch()
    meter, reason = detect("auto", root=str(bin_dir))
    assert meter is None and "pi5-pmic: `vcgencmd pmic_read_adc` printed no rail" in reason
    with pytest.raises(RuntimeInputError, match="meter 'pi5-pmic' named but"):
        detect("pi5-pmic")


# --- RAPL ------------------------------------------------------------------------------

def _write_energy(zone, microjoules: int) -> None:
    tmp = zone / "energy_uj.tmp"
    tmp.write_text(f"{microjoules}\n")
    os.replace(tmp, zone / "energy_uj")


def test_rapl_handles_the_counter_wrapping_around(tmp_path):
    root = fakes.copy_tree("rapl-laptop", tmp_path / "root")
    zones = root / "sys/class/powercap"
    second = zones / "intel-rapl:2"              # a second socket
    second.mkdir()
    for name, text in (("name", "package-1"), ("max_energy_range_uj", "262143328850"),
                       ("energy_uj", "1000")):
        (second / name).write_text(text + "\n")
    meter, _ = detect("rapl", root=str(root))
    assert meter.detail == "RAPL package-0+package-1 energy counters"
    _write_energy(zones / "intel-rapl:0", 262143328850 - 500_000)  # 0.5 J before the wrap
    _write_energy(second, 1000)
    first = meter.read()
    _write_energy(zones / "intel-rapl:0", 1_500_000)  # wrapped: 0.5 J + 1.5 J
    _write_energy(second, 3_001_000)                  # 3 J
    _write_energy(zones / "intel-rapl:0:0", 1)        # a subzone, going "backwards": ignored
    assert meter.read() - first == pytest.approx(2.0 + 3.0)


def test_rapl_power_from_energy_deltas_counts_packages_only(tmp_path):
    root = fakes.copy_tree("rapl-laptop", tmp_path / "root")
    zones = root / "sys/class/powercap"
    for zone in zones.iterdir():
        (zone / "max_energy_range_uj").write_text("5000000\n")  # wraps every 5 J
    meter, _ = detect("rapl", root=str(root), interval_ms=20, idle_seconds=0)
    assert meter.kind == "energy"
    stop, start = threading.Event(), time.perf_counter()

    def counters():  # package-0 at 10 W (wrapping once), its core at 7 W, psys at 20 W
        while not stop.is_set():
            elapsed = time.perf_counter() - start
            _write_energy(zones / "intel-rapl:0", int(4_500_000 + 10e6 * elapsed) % 5_000_000)
            _write_energy(zones / "intel-rapl:0:0", int(7e6 * elapsed) % 5_000_000)
            _write_energy(zones / "intel-rapl:1", int(20e6 * elapsed) % 5_000_000)
            time.sleep(0.002)

    writer = threading.Thread(target=counters, daemon=True)
    writer.start()
    try:
        time.sleep(0.05)
        assert meter.measure_idle()["idle_w"] == 0.0  # idle seconds 0: no baseline
        power = _window(meter, 0.3)
    finally:
        stop.set()
        writer.join()
    assert power["mean_w"] == pytest.approx(10.0, rel=0.25)
    _check_consistent(power)
    assert "idle seconds 0" in power["note"]


def test_a_named_meter_that_is_absent_says_what_was_looked_for(tmp_path):
    with pytest.raises(RuntimeInputError) as err:
        detect("rapl", root=str(tmp_path))
    assert str(err.value).startswith("meter 'rapl' named but /sys/class/powercap/intel-rapl:* "
                                     "does not exist on this host")
    assert str(err.value).endswith("pick another meter or meter: auto")


# --- NVML ------------------------------------------------------------------------------

@pytest.fixture
def pynvml(tmp_path, monkeypatch):
    folder = tmp_path / "nvml"
    folder.mkdir()
    (folder / "pynvml.py").write_text(fakes.PYNVML)
    monkeypatch.syspath_prepend(str(folder))
    sys.modules.pop("pynvml", None)
    module = importlib.import_module("pynvml")
    yield module
    sys.modules.pop("pynvml", None)


def test_nvml_uses_the_energy_counter_when_the_gpu_has_one(pynvml):
    meter, _ = detect("nvml", interval_ms=10, idle_seconds=0)
    assert meter.kind == "energy"
    assert meter.detail == "NVML GPU 0 (NVIDIA A2) total energy counter (mJ)"
    power = _window(meter, 0.2)
    assert power["mean_w"] == pytest.approx(42.0, rel=0.05)
    _check_consistent(power)
    meter.close()
    assert pynvml.calls == {"init": 1, "shutdown": 1}


def test_nvml_samples_power_usage_without_an_energy_counter(pynvml):
    pynvml.DEVICES[1]["energy"] = False
    meter, _ = detect("nvml", rail="1", **FAST)  # --meter-rail is the GPU index for nvml
    assert meter.kind == "power" and "GPU 1 (NVIDIA L4) power usage (mW)" in meter.detail
    assert meter.read() == 20.0
    with pytest.raises(RuntimeInputError, match="NVML has no GPU 7 \\(it sees 2\\)"):
        detect("nvml", rail="7")


def test_nvml_is_only_used_when_named(pynvml, tmp_path, monkeypatch):
    # A GPU's energy says nothing about a model on the CPU: auto never picks NVML.
    monkeypatch.setenv("PATH", str(tmp_path))
    meter, reason = detect("auto", root=str(tmp_path))
    assert meter is None and "nvml is used only when named" in reason
    assert "init" not in pynvml.calls or pynvml.calls["init"] == pynvml.calls["shutdown"]


def test_nvml_without_power_readings_is_refused_when_named(pynvml):
    for gpu in pynvml.DEVICES:  # what a Jetson's integrated GPU answers
        gpu["energy"] = gpu["power"] = False
    with pytest.raises(RuntimeInputError, match="NVML gives no power reading for this GPU"):
        detect("nvml")
    assert pynvml.calls["init"] == pynvml.calls["shutdown"]


# --- command -------------------------------------------------------------------------

def test_command_meter_takes_the_last_number_and_subtracts_idle(bin_dir):
    script = fakes.install_watts(bin_dir)
    meter, _ = detect("command", command=str(script), **FAST)
    assert meter.measure_idle()["idle_w"] == 2.0
    fakes.set_busy(bin_dir)
    power = _window(meter)
    assert power["mean_w"] == 5.0 and power["active_w"] == 3.0
    _check_consistent(power)
    assert last_number("V=5.02 I=0.41 P=2.06\n") == 2.06
    assert last_number("power: 1.5e1 W") == 15.0


def test_measure_reports_energy_per_inference_net_of_idle(bin_dir):
    script = fakes.install_watts(bin_dir)
    meter, _ = detect("command", command=str(script), **FAST)

    def workload(x):  # the meter reads "busy" from the first run on: warmup and window
        fakes.set_busy(bin_dir)
        time.sleep(0.002)
        return [x]

    session = FunctionSession(workload, [TensorSpec("x", (2, 3), "float32")])
    result = measure(session, {"x": np.ones((2, 3), np.float32)},
                     Timing(warmup=1, runs=5, min_seconds=0.2), meter=meter)
    energy = result["energy"]
    assert energy["idle_w"] == 2.0 and energy["active_w"] == 3.0
    inferences = result["runs"] * result["batch_size"]
    assert energy["mj_per_inference"] == pytest.approx(energy["joules"] * 1000 / inferences)


def test_a_window_too_short_for_the_meter_gives_no_joules(bin_dir):
    script = fakes.install_watts(bin_dir)
    meter, _ = detect("command", command=str(script), interval_ms=5000, idle_seconds=0)
    session = FunctionSession(lambda x: [x], [TensorSpec("x", (1, 3), "float32")])
    result = measure(session, {"x": np.ones((1, 3), np.float32)}, Timing(warmup=0, runs=3),
                     meter=meter)
    energy = result["energy"]
    assert energy["samples"] == 1 and energy["joules"] is None
    assert energy["mj_per_inference"] is None
    assert "too short for this meter's sample rate" in energy["note"]
    assert "run longer (--seconds)" in energy["note"]


def test_command_meter_errors_name_the_fix(bin_dir):
    with pytest.raises(RuntimeInputError, match="needs the command that prints watts"):
        detect("command")
    broken = fakes.install(bin_dir, "broken", "echo no reading >&2\nexit 3\n", "/bin/sh")
    with pytest.raises(RuntimeInputError) as err:
        detect("command", command=str(broken))
    assert "exited 3: no reading" in str(err.value) and "pick another meter" in str(err.value)
    wordy = fakes.install(bin_dir, "wordy", "echo unplugged\n", "/bin/sh")
    with pytest.raises(RuntimeInputError, match="printed no number"):
        detect("command", command=str(wordy))
    with pytest.raises(RuntimeInputError, match="has no rails"):
        detect("command", command=str(fakes.install(bin_dir, "ok", "echo 1\n", "/bin/sh")),
               rail="VDD_IN")


# --- detect ----------------------------------------------------------------------------

def test_detect_none_auto_and_unknown(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no tegrastats, no vcgencmd
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    assert detect("none") == (None, "power metering turned off")
    meter, reason = detect("auto", root=str(tmp_path))
    assert meter is None and reason.startswith("no power meter on this host (ina3221: ")
    for looked in ("ina3221:", "tegrastats:", "pi5-pmic:", "rapl:", "nvml is used only when named"):
        assert looked in reason
    with pytest.raises(RuntimeInputError, match="unknown meter 'wattmeter'"):
        detect("wattmeter")
    with pytest.raises(RuntimeInputError, match="interval must be positive"):
        detect("auto", interval_ms=0)
