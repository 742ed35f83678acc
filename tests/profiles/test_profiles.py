import pytest

from profiles import (FAIL, OFF_TARGET, PASS, UNMEASURED, ProfileError, check, list_profiles,
                      load_profile, on_target)

X86_HOST = {"arch": "x86_64", "cpu": "AMD EPYC", "device_model": None}
PI4_HOST = {"arch": "aarch64", "cpu": "Raspberry Pi 4 Model B Rev 1.4",
            "device_model": "Raspberry Pi 4 Model B Rev 1.4"}
PI5_HOST = {"arch": "aarch64", "cpu": "", "device_model": "Raspberry Pi 5 Model B Rev 1.0"}


def _measurement(host, p90=30.0, memory=120.0, size_mb=4.0, energy=None, drop=0.004):
    return {"latency_ms": {"p90": p90}, "peak_memory_mb": memory,
            "size_bytes": int(size_mb * 2**20), "energy_mj": energy,
            "energy_note": "no power meter on this host",
            "metric": {"name": "accuracy", "value": 0.97, "baseline": 0.974, "drop": drop},
            "measured_on": host}


def test_builtin_profiles_load_with_real_hardware_facts():
    names = {p.name for p in list_profiles()}
    assert {"host-cpu", "rpi4", "rpi5", "jetson-orin-nano"} <= names
    rpi4 = load_profile("rpi4")
    assert rpi4.device.arch == "aarch64" and rpi4.device.cores == 4
    assert rpi4.budget.latency_p90_ms and rpi4.budget.accuracy_drop is not None


def test_on_device_measurement_gets_real_verdicts():
    rpi4 = load_profile("rpi4")
    verdicts = {v.metric: v for v in check(_measurement(PI4_HOST, p90=130.0), rpi4, "m", "rpi4")}
    assert verdicts["latency_p90_ms"].status == FAIL
    assert verdicts["peak_memory_mb"].status == PASS
    assert verdicts["accuracy_drop"].status == PASS
    assert verdicts["energy_mj"].status == UNMEASURED
    assert "no power meter" in verdicts["energy_mj"].reason


def test_measurement_elsewhere_is_off_target_but_size_is_real():
    rpi4 = load_profile("rpi4")
    verdicts = {v.metric: v for v in check(_measurement(X86_HOST, size_mb=40), rpi4, "m", "rpi4")}
    assert verdicts["latency_p90_ms"].status == OFF_TARGET
    assert "x86_64" in verdicts["latency_p90_ms"].reason
    assert verdicts["latency_p90_ms"].value == 30.0  # the number is still shown
    assert verdicts["model_size_mb"].status == FAIL  # a file's size is the same everywhere


def test_an_emulated_measurement_never_passes_a_device_budget():
    emulated = {**PI4_HOST, "emulated": "aarch64 emulated on an x86 CPU (AMD EPYC)"}
    for profile in ("rpi4", "host-cpu"):  # host-cpu accepts any machine, but not emulation
        verdicts = {v.metric: v for v in check(_measurement(emulated), load_profile(profile),
                                               "m", profile)}
        assert verdicts["latency_p90_ms"].status == OFF_TARGET
        assert "emulation" in verdicts["latency_p90_ms"].reason
        assert verdicts["model_size_mb"].status == PASS


def test_power_and_energy_budgets_are_real_verdicts_when_measured(tmp_path):
    path = tmp_path / "board.yaml"
    path.write_text("name: board\ndevice: {arch: any}\n"
                    "power: {meter: command, command: read-watts}\n"
                    "budget: {energy_mj: 5, power_w: 4}\n")
    board = load_profile(str(path))
    measured = {**_measurement(X86_HOST, energy=6.5),
                "power": {"meter": "command", "mean_w": 3.2, "idle_w": 1.0}}
    verdicts = {v.metric: v for v in check(measured, board, "m", "board")}
    assert verdicts["energy_mj"].status == FAIL and verdicts["energy_mj"].value == 6.5
    assert verdicts["power_w"].status == PASS and verdicts["power_w"].value == 3.2
    unmetered = {v.metric: v for v in check(_measurement(X86_HOST), board, "m", "board")}
    assert unmetered["power_w"].status == UNMEASURED
    assert "no power meter" in unmetered["power_w"].reason


def test_a_command_meter_needs_its_command(tmp_path):
    path = tmp_path / "board.yaml"
    path.write_text("name: board\ndevice: {arch: any}\npower: {meter: command}\n")
    with pytest.raises(ProfileError, match="needs `command:`"):
        load_profile(str(path))


def test_a_pi5_is_not_a_pi4():
    assert on_target(load_profile("rpi4"), PI5_HOST)[0] is False
    assert on_target(load_profile("rpi5"), PI5_HOST)[0] is True
    assert on_target(load_profile("host-cpu"), X86_HOST)[0] is True


def test_user_profile_by_path(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\ndevice: {arch: any}\nbudget: {latency_p90_ms: 1}\n")
    assert load_profile(str(path)).budget.latency_p90_ms == 1


@pytest.mark.parametrize("text, fragment", [
    ("name: x\ndevice: {arch: any}\nbudget: {latency_ms: 1}\n", "budget.latency_ms"),
    ("name: x\n", "device"),
    ("name: [x\n", "not valid YAML"),
])
def test_invalid_profiles_say_what_is_wrong(tmp_path, text, fragment):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ProfileError, match="bad.yaml") as info:
        load_profile(str(path))
    assert fragment in str(info.value)


def test_unknown_profile_lists_known_ones():
    with pytest.raises(ProfileError, match="host-cpu"):
        load_profile("rpi9")


def test_profiles_pick_their_engines():
    rpi4, rpi5, host = load_profile("rpi4"), load_profile("rpi5"), load_profile("host-cpu")
    for pi in (rpi4, rpi5):  # LiteRT with XNNPACK and a full-int8 model
        assert pi.runtime.engines == ("litert",) and pi.runtime.xnnpack
        assert pi.export.tflite_mode == "int8" and pi.runtime.delegate is None
    assert host.runtime.auto   # the fastest installed engine per file, measured


def test_an_engine_listed_twice_is_an_error(tmp_path):
    path = tmp_path / "twice.yaml"
    path.write_text("name: twice\ndevice: {arch: any}\nruntime: {engines: [litert, litert]}\n")
    with pytest.raises(ProfileError, match="twice.yaml:3: runtime.engines: list each engine once"):
        load_profile(str(path))


def test_accelerator_profiles_name_their_providers_delegates_and_presets():
    expected = {"jetson-orin-nano": ("TensorrtExecutionProvider", "jetson-gpu"),
                "jetson-nano": ("TensorrtExecutionProvider", "jetson-gpu"),
                "nvidia-gpu": ("CUDAExecutionProvider", "jetson-gpu"),
                "qcs6490": ("QNNExecutionProvider", "qualcomm-htp"),
                "intel-core-ultra-npu": ("OpenVINOExecutionProvider", "intel-npu")}
    for name, (provider, preset) in expected.items():
        profile = load_profile(name)
        assert profile.runtime.providers[0].name == provider
        assert profile.export.preset == preset and profile.device.accelerator
    coral = load_profile("coral-edgetpu")
    assert coral.runtime.delegate == "libedgetpu.so.1" and coral.export.tflite_mode == "int8"


def test_provider_options_are_checked_when_a_profile_loads(tmp_path):
    path = tmp_path / "gpu.yaml"
    path.write_text("name: gpu\ndevice: {arch: any}\nruntime:\n  providers:\n"
                    "    - {name: TensorrtExecutionProvider, options: {trt_fp16_enabled: true}}\n")
    with pytest.raises(ProfileError, match="has no option 'trt_fp16_enabled'"):
        load_profile(str(path))
    path.write_text("name: gpu\ndevice: {arch: any}\nruntime:\n  providers:\n"
                    "    - {name: TensorrtExecutionProvider, check_options: false,\n"
                    "       options: {trt_new_option: 1}}\n")
    assert load_profile(str(path)).runtime.providers[0].options == {"trt_new_option": 1}


def test_delegate_options_are_checked_when_a_profile_loads(tmp_path):
    path = tmp_path / "gpu.yaml"

    def profile(runtime: str):
        path.write_text(f"name: gpu\ndevice: {{arch: any}}\nruntime:\n{runtime}")
        return load_profile(str(path))

    assert profile("  delegate: gpu\n  delegate_options: {enforce_f32: true}\n"
                   ).runtime.delegate_options == {"enforce_f32": True}
    with pytest.raises(ProfileError, match="no option 'precision'.*enforce_f32"):
        profile("  delegate: gpu\n  delegate_options: {precision: fp32}\n")
    with pytest.raises(ProfileError, match="enforce_f32: give true or false"):
        profile("  delegate: gpu\n  delegate_options: {enforce_f32: 1}\n")
    with pytest.raises(ProfileError, match="needs a `delegate`"):
        profile("  delegate_options: {device: usb}\n")
    # a delegate library's options are its own: passed on as they are
    assert profile("  delegate: libedgetpu.so.1\n  delegate_options: {device: 'usb:0'}\n"
                   ).runtime.delegate_options == {"device": "usb:0"}


@pytest.mark.parametrize("sqnr, status", [(2.9, FAIL), (10.0, PASS), (31.5, PASS)])
def test_the_fidelity_floor_judges_the_worst_output_on_and_off_the_device(sqnr, status):
    # a power spectrum before a Log, broken by uint8 activations, scored 2.9 dB: broken
    # on any machine, so the floor is judged where it was measured
    measured = _measurement(X86_HOST)
    measured["metric"]["details"] = {"sqnr_db": sqnr}
    rpi4 = load_profile("rpi4")
    floor = {v.metric: v for v in check(measured, rpi4, "m", "rpi4")}["output_sqnr_db"]
    assert (floor.budget, floor.value, floor.status) == (10.0, sqnr, status)
    assert floor.reason == ("under the fidelity floor" if status == FAIL else "")


def test_no_fidelity_number_is_no_floor_verdict(tmp_path):
    rpi4 = load_profile("rpi4")
    assert "output_sqnr_db" not in {v.metric for v in check(_measurement(PI4_HOST), rpi4,
                                                             "m", "rpi4")}
    path = tmp_path / "loose.yaml"
    path.write_text("name: loose\ndevice: {arch: any}\nbudget: {output_sqnr_db: null}\n")
    measured = _measurement(X86_HOST)
    measured["metric"]["details"] = {"sqnr_db": 1.0}
    assert "output_sqnr_db" not in {v.metric for v in check(measured, load_profile(str(path)),
                                                             "m", "loose")}
