"""profiles' language_model section: a causal language model's budget, and check()'s
verdicts on a language-model measurement (decode speed a floor, the rest ceilings)."""
import pytest
from pydantic import ValidationError

from profiles import (FAIL, MEMORY_FIT, OFF_TARGET, PASS, UNITS, UNMEASURED, Profile,
                      ProfileError, check, load_profile, unmeasured_language_verdicts,
                      unmeasured_verdicts)
from profiles.schema import LanguageModel

X86_HOST = {"arch": "x86_64", "cpu": "AMD EPYC", "device_model": None}
PI5_HOST = {"arch": "aarch64", "cpu": "", "device_model": "Raspberry Pi 5 Model B Rev 1.0"}
LIMITS = {"decode_tokens_per_s": 10, "time_to_first_token_ms": 2000, "peak_memory_mb": 1024,
          "model_size_mb": 512, "perplexity_increase": 0.05, "kl_mean": 0.1}


def _profile(memory_mb=4096, budget=None, **language_model) -> Profile:
    """A Pi 5 with only the language-model limits given (and no tensor budget unless
    `budget`)."""
    return Profile.model_validate({
        "name": "pi", "device": {"arch": "aarch64", "memory_mb": memory_mb,
                                 "match": ["Raspberry Pi 5"]},
        "budget": budget or {}, "language_model": language_model})


def _lm(host=PI5_HOST, decode=20.0, ttft=900.0, memory=600.0, size_mb=100.0, drop=0.02,
        kl=0.05, prompt=128, context=2048, fit_mb=150.0) -> dict:
    return {"artifact": "lm-int4", "target": "pi", "size_bytes": int(size_mb * 2**20),
            "peak_memory_mb": memory, "measured_on": host,
            "latency_ms": {"p50": 1000 / decode, "p90": 1100 / decode},
            "metric": {"name": "perplexity", "value": 15.6, "baseline": 15.3, "drop": drop,
                       "kl_mean": kl, "top1_agreement": 0.93},
            "language_model": {"decode_tok_s": decode, "ttft_ms": ttft, "prompt_tokens": prompt,
                               "context_tokens": context, "weights_bytes": int(size_mb * 2**20),
                               "kv_cache_bytes": 47 * 2**20, "weights_and_kv_cache_mb": fit_mb}}


def _cnn(host=PI5_HOST, p90=30.0, memory=120.0, size_mb=4.0, drop=0.004) -> dict:
    return {"latency_ms": {"p90": p90}, "peak_memory_mb": memory,
            "size_bytes": int(size_mb * 2**20), "energy_mj": None,
            "metric": {"name": "accuracy", "value": 0.97, "baseline": 0.974, "drop": drop},
            "measured_on": host}


def _by_metric(verdicts) -> dict:
    return {v.metric: v for v in verdicts}


# --- the schema ----------------------------------------------------------------------------

def test_the_section_defaults_to_conditions_without_limits():
    section = Profile.model_validate({"name": "x", "device": {"arch": "any"}}).language_model
    assert (section.prompt_tokens, section.context_tokens) == (128, 2048)
    assert section.limits() == dict.fromkeys(LIMITS)
    assert LanguageModel.limit_keys() == tuple(LIMITS)   # not prompt_tokens, context_tokens


@pytest.mark.parametrize("key, value", [
    ("decode_tokens_per_s", -1), ("decode_tokens_per_s", 0), ("time_to_first_token_ms", -5),
    ("perplexity_increase", -0.01), ("kl_mean", -0.1), ("prompt_tokens", 0),
    ("context_tokens", -2048), ("model_size_mb", True), ("kl_mean", float("nan")),
])
def test_the_schema_refuses_values_that_are_no_limit(key, value):
    with pytest.raises(ValidationError, match=key):
        LanguageModel.model_validate({key: value})


def test_zero_is_a_quality_limit():
    assert LanguageModel(perplexity_increase=0, kl_mean=0).limits()["kl_mean"] == 0


@pytest.mark.parametrize("text, line, fragment", [
    ("language_model:\n  prompt_tokens: 64\n  decode_tok_s: 5\n", 5,
     "language_model.decode_tok_s: unknown key"),
    ("language_model:\n  time_to_first_token_ms: -1\n", 4,
     "language_model.time_to_first_token_ms"),
    ("language_model: {latency_p90_ms: 30}\n", 3, "language_model.latency_p90_ms: unknown key"),
])
def test_a_profile_file_with_a_bad_language_model_key_says_where(tmp_path, text, line, fragment):
    path = tmp_path / "lm.yaml"
    path.write_text("name: lm\ndevice: {arch: any}\n" + text)
    with pytest.raises(ProfileError) as info:
        load_profile(str(path))
    assert f"lm.yaml:{line}: {fragment}" in str(info.value)


def test_device_profiles_budget_language_models_and_keep_their_tensor_budget():
    for name in ("rpi5", "jetson-orin-nano"):
        profile = load_profile(name)
        assert all(v is not None for v in profile.language_model.limits().values()), name
        assert profile.budget.latency_p90_ms and profile.budget.model_size_mb < 100, name
    assert load_profile("rpi5").language_model.decode_tokens_per_s == 10
    host = load_profile("host-cpu").language_model
    # any machine: quality limits (a drifted variant is never recommended), no speed limit
    assert host.decode_tokens_per_s is None and host.time_to_first_token_ms is None
    assert host.perplexity_increase == 0.05 and host.kl_mean == 0.1
    assert host.prompt_tokens == 128


def test_units_cover_every_language_model_verdict():
    assert UNITS.keys() >= {*LIMITS, MEMORY_FIT}
    assert UNITS["decode_tokens_per_s"] == "tok/s" and UNITS["kl_mean"] == "nats"


# --- check() on a language model ---------------------------------------------------------

def test_decode_speed_is_a_floor():
    profile = _profile(memory_mb=None, decode_tokens_per_s=10)
    for decode, status in ((25.0, PASS), (10.0, PASS), (9.9, FAIL)):
        (verdict,) = check(_lm(decode=decode), profile, "lm", "pi")
        assert (verdict.metric, verdict.value, verdict.status) == \
            ("decode_tokens_per_s", decode, status), decode


def test_time_to_first_token_is_a_ceiling():
    profile = _profile(memory_mb=None, time_to_first_token_ms=1000)
    for ttft, status in ((400.0, PASS), (1000.0, PASS), (1500.0, FAIL)):
        (verdict,) = check(_lm(ttft=ttft), profile, "lm", "pi")
        assert (verdict.metric, verdict.value, verdict.status) == \
            ("time_to_first_token_ms", ttft, status), ttft


def test_every_limit_read_from_its_place_in_the_measurement():
    verdicts = _by_metric(check(_lm(), _profile(memory_mb=None, **LIMITS), "lm", "pi"))
    assert {k: v.value for k, v in verdicts.items()} == {
        "decode_tokens_per_s": 20.0, "time_to_first_token_ms": 900.0, "peak_memory_mb": 600.0,
        "model_size_mb": 100.0, "perplexity_increase": 0.02, "kl_mean": 0.05}
    assert {v.status for v in verdicts.values()} == {PASS}
    over = _by_metric(check(_lm(memory=2000.0, size_mb=600.0, drop=0.08, kl=0.3),
                            _profile(memory_mb=None, **LIMITS), "lm", "pi"))
    assert {k for k, v in over.items() if v.status == FAIL} == {
        "peak_memory_mb", "model_size_mb", "perplexity_increase", "kl_mean"}


def test_off_the_device_speed_and_memory_are_off_target_but_size_and_quality_are_judged():
    verdicts = _by_metric(check(_lm(host=X86_HOST, size_mb=600.0, drop=0.01, kl=0.5),
                                _profile(**LIMITS), "lm", "pi"))
    for key in ("decode_tokens_per_s", "time_to_first_token_ms", "peak_memory_mb"):
        assert verdicts[key].status == OFF_TARGET, key
        assert "x86_64" in verdicts[key].reason and verdicts[key].value is not None
    assert verdicts["model_size_mb"].status == FAIL
    assert verdicts["perplexity_increase"].status == PASS
    assert verdicts["kl_mean"].status == FAIL
    assert verdicts[MEMORY_FIT].status == PASS


def test_a_slow_decode_off_the_device_is_not_a_failure():
    (verdict,) = check(_lm(host=X86_HOST, decode=1.0), _profile(memory_mb=None,
                                                                  decode_tokens_per_s=10),
                       "lm", "pi")
    assert verdict.status == OFF_TARGET


def test_weights_and_kv_cache_must_fit_the_device_memory():
    profile = _profile(memory_mb=512)
    (fits,) = check(_lm(fit_mb=400.0), profile, "lm", "pi")
    assert (fits.metric, fits.budget, fits.value, fits.status) == (MEMORY_FIT, 512, 400.0, PASS)
    (over,) = check(_lm(fit_mb=700.0, host=X86_HOST), profile, "lm", "pi")   # on any machine
    assert over.status == FAIL
    assert over.reason == "weights + KV cache at 2048 tokens exceed the device's memory"
    assert check(_lm(fit_mb=700.0), _profile(memory_mb=None), "lm", "pi") == []


def test_a_memory_fit_at_another_context_length_is_unmeasured():
    (verdict,) = check(_lm(context=512, fit_mb=100.0), _profile(memory_mb=4096), "lm", "pi")
    assert verdict.status == UNMEASURED and verdict.value is None
    assert verdict.reason == "computed at 512 context tokens, the profile's is 2048"


def test_a_time_to_first_token_at_another_prompt_length_is_unmeasured():
    profile = _profile(memory_mb=None, prompt_tokens=256, time_to_first_token_ms=5000,
                       decode_tokens_per_s=10)
    verdicts = _by_metric(check(_lm(prompt=128, ttft=100.0), profile, "lm", "pi"))
    ttft = verdicts["time_to_first_token_ms"]
    assert (ttft.status, ttft.value) == (UNMEASURED, None)
    assert ttft.reason == "measured at 128 prompt tokens, the budget is at 256"
    assert verdicts["decode_tokens_per_s"].status == PASS   # decode does not depend on it
    same = _by_metric(check(_lm(prompt=256, ttft=100.0), profile, "lm", "pi"))
    assert same["time_to_first_token_ms"].status == PASS


def test_numbers_missing_from_a_language_model_measurement_are_unmeasured():
    measurement = _lm()
    measurement["language_model"] = {"prompt_tokens": 128, "context_tokens": 2048}
    measurement["metric"] = None
    verdicts = _by_metric(check(measurement, _profile(**LIMITS), "lm", "pi"))
    for key in ("decode_tokens_per_s", "time_to_first_token_ms", "perplexity_increase",
                "kl_mean", MEMORY_FIT):
        assert verdicts[key].status == UNMEASURED and verdicts[key].value is None, key
    assert "evaluation data" in verdicts["kl_mean"].reason


# --- a tensor model's budget and a language model's never meet ----------------------------

def test_a_cnn_budget_does_not_judge_a_language_model():
    cnn_budget = {"latency_p90_ms": 30, "model_size_mb": 8, "peak_memory_mb": 150,
                  "accuracy_drop": 0.01}
    profile = _profile(memory_mb=None, budget=cnn_budget)   # no language_model limits
    assert check(_lm(size_mb=100.0, memory=600.0), profile, "lm", "pi") == []
    rpi5 = _by_metric(check(_lm(size_mb=100.0), load_profile("rpi5"), "lm", "rpi5"))
    assert rpi5["model_size_mb"].budget == 512 and rpi5["model_size_mb"].status == PASS
    assert "latency_p90_ms" not in rpi5 and "accuracy_drop" not in rpi5


def test_a_language_model_budget_does_not_judge_a_cnn():
    profile = _profile(**LIMITS)   # memory_mb set too: no memory fit for a CNN
    assert check(_cnn(), profile, "cnn", "pi") == []
    rpi5 = _by_metric(check(_cnn(size_mb=40.0), load_profile("rpi5"), "cnn", "rpi5"))
    assert set(rpi5) == {"latency_p90_ms", "peak_memory_mb", "model_size_mb", "energy_mj",
                         "accuracy_drop"}
    assert rpi5["model_size_mb"].budget == 20 and rpi5["model_size_mb"].status == FAIL


# --- unmeasured artifacts ------------------------------------------------------------------

def test_an_unmeasured_language_model_is_judged_by_its_section():
    profile = _profile(**LIMITS, budget={"model_size_mb": 8, "latency_p90_ms": 30})
    verdicts = _by_metric(unmeasured_language_verdicts(
        profile, "lm", "pi", "no board reachable", 100 * 2**20,
        {"perplexity_increase": 0.08, "kl_mean": 0.02, "accuracy_drop": 0.5}))
    assert set(verdicts) == {*LIMITS, MEMORY_FIT}
    assert (verdicts["model_size_mb"].budget, verdicts["model_size_mb"].status) == (512, PASS)
    assert (verdicts["perplexity_increase"].value, verdicts["perplexity_increase"].status) == \
        (0.08, FAIL)
    assert verdicts["kl_mean"].status == PASS
    for key in ("decode_tokens_per_s", "time_to_first_token_ms", "peak_memory_mb", MEMORY_FIT):
        assert verdicts[key].status == UNMEASURED, key
        assert verdicts[key].reason == "no board reachable"


def test_an_unmeasured_language_model_with_a_known_memory_fit():
    (verdict,) = unmeasured_language_verdicts(_profile(memory_mb=512), "lm", "pi", "skipped",
                                              100 * 2**20, {MEMORY_FIT: 900.0})
    assert verdict.status == FAIL and "2048 tokens" in verdict.reason


def test_an_unmeasured_tensor_model_keeps_the_tensor_budget():
    profile = _profile(**LIMITS, budget={"model_size_mb": 8, "accuracy_drop": 0.01})
    verdicts = _by_metric(unmeasured_verdicts(profile, "cnn", "pi", "skipped", 40 * 2**20,
                                              {"accuracy_drop": 0.002, "kl_mean": 9.0}))
    assert set(verdicts) == {"model_size_mb", "accuracy_drop"}
    assert (verdicts["model_size_mb"].budget, verdicts["model_size_mb"].status) == (8, FAIL)
    assert verdicts["accuracy_drop"].status == PASS
