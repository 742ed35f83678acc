"""compress/measure/lm_sweep.py: the benchmark's `sweep:` points besides the profile's own,
and a prompt longer than the evaluation ids it is cut from refused with the fix."""
import pytest

from compress.errors import DataError
from compress.measure.lm_sweep import LMSweep, check_prompts, sweep_point


def test_the_points_are_every_prompt_by_every_thread_count_but_the_profiles_own():
    sweep = LMSweep(prompt_tokens=(32, 128, 512), threads=(1, 2))
    points = sweep.points(128, 2)
    assert (128, 2) not in points and len(points) == 5
    assert points[0] == (32, 1) and (512, 2) in points


def test_an_axis_left_out_stays_at_the_profiles_value():
    assert LMSweep(threads=(1, 4)).points(128, 2) == [(128, 1), (128, 4)]
    assert LMSweep(prompt_tokens=(64,)).points(128, 2) == [(64, 2)]
    assert LMSweep().points(128, 2) == []


def test_a_prompt_longer_than_the_evaluation_ids_is_refused():
    check_prompts(LMSweep(prompt_tokens=(256,)), 256)
    check_prompts(None, 8)
    with pytest.raises(DataError, match="512 tokens is longer than the 256 evaluation ids"):
        check_prompts(LMSweep(prompt_tokens=(512,)), 256)


def test_a_point_keeps_speed_and_memory():
    speed = {"decode_tok_s": 50.0, "prefill_tok_s": 700.0, "ttft_s": 0.2,
             "peak_rss_mb": 260.0, "noisy": ["decode_tok_s"]}
    assert sweep_point(speed, 64, 1) == {
        "prompt_tokens": 64, "threads": 1, "decode_tok_s": 50.0, "prefill_tok_s": 700.0,
        "ttft_ms": 200.0, "peak_rss_mb": 260.0, "noisy": ["decode_tok_s"]}
