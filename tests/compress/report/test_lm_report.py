"""A language model's report: the decision on tokens/s (a minimum: decode_tokens_per_s is
in profiles.AT_LEAST), its one-line summary, the benchmark table and the measured mix in
report.md (compress.report.md_lm), and the greedy agreement the benchmark scores. Rows are
made by compress.measure.lm.record() itself, mixes as compress.quant.lm.stage records them."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from compress.measure.lm import _greedy_agreement, record
from compress.quant.lm.mix import Candidate, Mix, QualityBudget
from compress.quant.lm.sensitivity import UnitCost
from compress.report import decide
from compress.report.decide import Variant
from compress.report.md_lm import is_language_model, lm_benchmark_table, mix_details
from profiles import AT_LEAST
from runtimes import formats

DECODE = "decode_tokens_per_s"
LIMITS = {DECODE: 10.0, "time_to_first_token_ms": 500.0, "perplexity_increase": 0.05}


# --- (a) the decision -----------------------------------------------------------------


def verdict(name: str, metric: str, value: float, limit: float, status: str,
            target: str = "rpi5") -> dict:
    return {"artifact": name, "target": target, "metric": metric, "budget": limit,
            "value": value, "status": status, "reason": ""}


def lm_variant(name: str, decode: float, ttft: float = 100.0, drop: float = 0.02,
               engine: str = "onnxruntime-genai", target: str = "rpi5") -> Variant:
    """A language model's variant judged on a target's decode and first-token budgets."""
    rows = (verdict(name, DECODE, decode, LIMITS[DECODE],
                    "pass" if decode >= LIMITS[DECODE] else "fail", target),
            verdict(name, "time_to_first_token_ms", ttft, LIMITS["time_to_first_token_ms"],
                    "pass" if ttft <= LIMITS["time_to_first_token_ms"] else "fail", target))
    fmt = formats.run_by(engine)[0]
    return Variant(name, target, False, 90.0, rows, 1000.0 / decode, 400.0,
                   {"name": "perplexity", "value": 12.0 * (1 + drop)}, drop,
                   engine, {"path": f"/runs/lm/{name}/model", "format": fmt,
                            "precision": "int4"}, 4,
                   {"decode_tok_s": decode, "ttft_ms": ttft})


def test_decode_tokens_per_s_is_a_minimum():
    assert DECODE in AT_LEAST and "time_to_first_token_ms" not in AT_LEAST


def test_a_decode_speed_half_its_minimum_misses_by_100_percent_and_5_tokens():
    miss = decide.closest_miss([lm_variant("int4", 5.0)])
    assert miss["artifact"] == "int4"
    [decode] = miss["misses"]
    assert (decode["budget"], decode["value"], decode["limit"]) == (DECODE, 5.0, 10.0)
    assert decode["over_by_ratio"] == pytest.approx(1.0)
    assert decode["over_by"] == pytest.approx(5.0)


def test_a_decode_speed_missed_by_a_little_is_the_closer_miss():
    rec = decide.recommend("rpi5", [lm_variant("far", 2.0), lm_variant("near", 9.0)])
    assert rec["status"] == decide.NOTHING_FITS
    assert rec["closest_miss"]["artifact"] == "near"


def test_a_minimum_and_a_maximum_missed_are_compared_as_shares_of_their_limits():
    slow_decode = lm_variant("slow-decode", 9.0)                # 10/9 - 1: 11% short
    late_first = lm_variant("late-first", 20.0, ttft=600.0)     # 600/500 - 1: 20% over
    assert decide.closest_miss([late_first, slow_decode])["artifact"] == "slow-decode"
    a_little_late = lm_variant("a-little-late", 20.0, ttft=520.0)   # 4% over
    assert decide.closest_miss([slow_decode, a_little_late])["artifact"] == "a-little-late"


def test_no_tokens_at_all_is_the_farthest_miss_with_no_ratio():
    stalled = Variant("zero", "rpi5", False, 90.0, (verdict("zero", DECODE, 0.0, 10.0, "fail"),))
    assert decide.closest_miss([stalled, lm_variant("slow", 1.0)])["artifact"] == "slow"
    [miss] = decide.closest_miss([stalled])["misses"]
    assert miss["over_by_ratio"] is None and miss["over_by"] == 10.0


def test_the_fastest_decode_wins_among_those_meeting_every_budget():
    rec = decide.recommend("rpi5", [lm_variant("int8", 14.0), lm_variant("int4", 22.0),
                                    lm_variant("too-slow", 6.0)])
    assert rec["status"] == decide.SHIP and rec["artifact"] == "int4"
    assert rec["language_model"] == {"decode_tok_s": 22.0, "ttft_ms": 100.0}


ENGINES = ("onnxruntime-genai", "llama.cpp", "openvino-genai")


@pytest.mark.parametrize("target, decodes, picked", [
    ("host-cpu", (30.0, 41.0, 35.0), "llama.cpp"),
    ("rpi5", (14.0, 12.0, 16.5), "openvino-genai")])
def test_engines_auto_picks_among_the_three_engines_by_each_targets_measurement(
        target, decodes, picked):
    """The same variant measured on the three language-model engines (engines: auto plans
    all three, tests/compress/config/test_target_defaults.py): each target ships the one
    its own measurement says is fastest, whichever engine that is."""
    variants = [lm_variant(f"int8-{engine}", decode, engine=engine, target=target)
                for engine, decode in zip(ENGINES, decodes)]
    rec = decide.recommend(target, variants)
    assert rec["status"] == decide.SHIP and rec["engine"] == picked
    assert rec["language_model"]["decode_tok_s"] == max(decodes)


def test_the_summary_of_a_language_model_says_tokens_per_s_at_least_and_perplexity():
    rec = decide.recommend("rpi5", [lm_variant("int4", 12.3, ttft=80.0, drop=0.031)])
    text = decide.summary(rec, LIMITS)
    assert text.startswith("rpi5: ship /runs/lm/int4/model (genai int4, on onnxruntime-genai")
    assert "decode 12.3 tok/s (at least 10)" in text
    assert "first token 80 ms (of 500)" in text
    assert "perplexity +3.10% (of +5%)" in text
    assert "weights 90 MB" in text and "peak memory 400 MB" in text


def test_the_summary_without_limits_gives_the_numbers_alone():
    rec = decide.recommend("rpi5", [lm_variant("int4", 12.3, ttft=80.0, drop=0.031)])
    text = decide.summary(rec, {})
    assert "decode 12.3 tok/s, first token 80 ms," in text
    assert "perplexity +3.10%; measured on the device" in text
    assert "at least" not in text and "(of" not in text


def test_a_decode_speed_under_its_minimum_is_not_said_to_be_over_it():
    rec = decide.recommend("rpi5", [lm_variant("int4", 5.0)])
    text = decide.summary(rec, LIMITS)
    assert text.startswith("rpi5: nothing fits; closest: int4 (decode_tokens_per_s 5")
    # 5 tok/s is under the minimum of 10: "5 over 10" says the opposite of what happened
    assert "over 10" not in text


# --- (b) report.md's tables -------------------------------------------------------------


def genai_folder(tmp_path: Path) -> Path:
    """An onnxruntime-genai folder as far as the KV cache's size goes."""
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    decoder = {"num_hidden_layers": 2, "num_key_value_heads": 1, "head_size": 4}
    (folder / "genai_config.json").write_text(json.dumps({"model": {"decoder": decoder}}))
    return folder


def speed(decode: float, noisy: tuple = ()) -> dict:
    """What runtimes.lm.bench.measure_in_processes reports for one model."""
    return {"engine": "onnxruntime-genai", "measured_on": {"hostname": "here"},
            "runs": [{"step_ms": [40.0, 42.0, 41.0], "peak_rss_mb": 300.0},
                     {"step_ms": [43.0, 40.5], "peak_rss_mb": 310.0}],
            "decode_tok_s": decode, "prefill_tok_s": 900.0, "rss_base_mb": 50.0,
            "rss_loaded_mb": 250.0, "weights_bytes": 3 * 2**20, "load_s": 0.5,
            "ttft_s": 0.125, "torch_loaded": False, "prompt_tokens": 128, "threads": 4,
            "spread": {"decode_tok_s": 0.01}, "noisy": list(noisy), "generated_ids": [1, 2]}


def quality(drop: float, greedy) -> dict:
    return {"perplexity": 12.0 * (1 + drop), "reference_perplexity": 12.0,
            "perplexity_increase": drop, "kl_mean": 0.0123, "top1_agreement": 0.93,
            "greedy_agreement": greedy, "tokens": 256,
            "baseline_model": "float, the float export (genai)"}


def row(folder: Path, artifact: str, decode: float, baseline=False, noisy=(), greedy=0.75):
    job = SimpleNamespace(artifact=SimpleNamespace(id=artifact, format="genai"),
                          target="host-cpu", is_baseline=baseline)
    settings = {"path": folder, "context_tokens": 2048, "new_tokens": 64,
                "runtime": {"engine": "onnxruntime-genai", "threads": 4, "version": "0.9"}}
    return record(job, speed(decode, noisy), quality(0.0 if baseline else 0.04, greedy),
                  settings)


def measured_mix() -> dict:
    """An artifact's meta["mix"] as compress.quant.lm.stage._measured_mix records it."""
    ranking = [UnitCost("layers.1", 1_000_000, 0.05, 0.03, 0.9),
               UnitCost("layers.0", 800_000, 0.01, 0.005, 0.97)]
    judged = [Candidate((), 10 * 2**20, {"kl_mean": 0.2, "perplexity_increase": 0.08}),
              Candidate(("layers.1",), 12 * 2**20, {"kl_mean": 0.07, "perplexity_increase": 0.02})]
    mix = Mix((QualityBudget(0.1, "kl_mean"),), ranking, judged, judged[1], Path("model"))
    recorded = mix.as_dict()
    recorded.update(base_method="k_quant", seconds=12.3, low="INT4", high="INT8",
                    bits={"layers.0": "INT4", "layers.1": "INT8"})
    recorded.pop("folder")
    return recorded


def report(tmp_path: Path, *rows: dict, artifacts=()) -> dict:
    made = {"benchmarks": list(rows), "artifacts": list(artifacts),
            "text": {"text": "pydoc_data.topics (CPython)", "evaluation_tokens": 256}}
    return json.loads(json.dumps(made))   # as report.json holds it


def table_rows(lines: list[str]) -> list[str]:
    return [line for line in lines[2:] if line.startswith("| ")]


def test_the_table_has_a_row_per_benchmark_with_decode_tokens_per_s(tmp_path):
    folder = genai_folder(tmp_path)
    made = report(tmp_path, row(folder, "float", 12.34, baseline=True, greedy=1.0),
                  row(folder, "int4", 31.0))
    assert is_language_model(made)
    rows = table_rows(lm_benchmark_table(made))
    assert len(rows) == 2
    assert rows[0].startswith("| host-cpu | float (baseline) | 12.3 | ")
    assert rows[1].startswith("| host-cpu | int4 | 31.0 | ")
    assert "| 125.0 |" in rows[1]                    # time to first token, ms
    assert "+4.00%" in rows[1] and "| 0.750 |" in rows[1]   # perplexity change, greedy


def test_a_row_has_as_many_cells_as_the_header(tmp_path):
    lines = lm_benchmark_table(report(tmp_path, row(genai_folder(tmp_path), "int4", 31.0)))
    assert lines[0].count("|") == lines[1].count("|") == table_rows(lines)[0].count("|")


def test_no_greedy_agreement_shows_a_dash(tmp_path):
    made = report(tmp_path, row(genai_folder(tmp_path), "int4", 31.0, greedy=None))
    assert table_rows(lm_benchmark_table(made))[0].rstrip().endswith("| — |")


def test_the_note_says_what_each_figure_is_from_the_rows_own_settings(tmp_path):
    lines = lm_benchmark_table(report(tmp_path, row(genai_folder(tmp_path), "int4", 31.0)))
    note = next(line for line in lines if line.startswith("Each figure"))
    assert "median of 2 runs" in note and "128-token prompt" in note
    assert "64 tokens decoded" in note and "4 thread(s)" in note
    assert "256 token ids (pydoc\\_data.topics (CPython))" in note


def test_the_noisy_note_appears_only_when_runs_spread(tmp_path):
    folder = genai_folder(tmp_path)
    steady = lm_benchmark_table(report(tmp_path, row(folder, "int4", 31.0)))
    assert not any("spread by more than 5%" in line for line in steady)
    noisy = lm_benchmark_table(report(tmp_path, row(folder, "int4", 31.0,
                                                    noisy=("decode_tok_s", "ttft_s"))))
    [note] = [line for line in noisy if "spread by more than 5%" in line]
    assert note.endswith("host-cpu int4: decode\\_tok\\_s, ttft\\_s")


def test_an_artifact_id_with_markdown_characters_is_escaped(tmp_path):
    hostile = "int4_k*mix|<b>"
    made = report(tmp_path, row(genai_folder(tmp_path), hostile, 31.0, noisy=("load_s",)),
                  artifacts=[{"id": hostile, "meta": {"mix": measured_mix()}}])
    escaped = "int4\\_k\\*mix\\|\\<b\\>"
    [line] = table_rows(lm_benchmark_table(made))
    assert f"| {escaped} |" in line and hostile not in line
    assert mix_details(made)[0].startswith(f"### {escaped}: measured mix")


def test_the_mix_details_give_each_units_bits_and_cost(tmp_path):
    made = report(tmp_path, artifacts=[{"id": "int4-mix", "meta": {"mix": measured_mix()}},
                                       {"id": "int8", "meta": {"bits": 8}}])
    lines = mix_details(made)
    assert lines[0] == "### int4-mix: measured mix (kl\\_mean at most 0.1, k\\_quant)"
    assert "1 of 2 units at INT8: layers.1; the rest at INT4. Found in 12 s." in lines
    assert "| layers.1 | 1,000,000 | 0.0500 | +3.00% | INT8 |" in lines
    assert "| layers.0 | 800,000 | 0.0100 | +0.50% | INT4 |" in lines
    judged = next(line for line in lines if line.startswith("Files judged"))
    assert "0: 10.0 MiB, KL 0.2000, perplexity +8.00%" in judged
    assert "1: 12.0 MiB, KL 0.0700, perplexity +2.00%" in judged
    assert not any("int8" in line for line in lines)


def test_no_mix_no_details(tmp_path):
    made = report(tmp_path, artifacts=[{"id": "int4", "meta": {}}, {"id": "x", "meta": None}])
    assert mix_details(made) == []


# --- (c) greedy agreement -------------------------------------------------------------


class Scripted:
    """A model whose greedy generation on each prompt is given."""

    def __init__(self, generations: dict):
        self.generations, self.asked = generations, []

    def greedy(self, prompt: list, n: int) -> list:
        self.asked.append((prompt, n))
        return list(self.generations[tuple(prompt)])[:n]


PROMPT, OTHER = (5, 6, 7), (8,)
EXPECTED = [1, 2, 3, 4]


@pytest.mark.parametrize("generated, share", [
    ([1, 2, 3, 4], 1.0),
    ([9, 2, 3, 4], 0.0),
    ([1, 2, 9, 4], 0.5),          # departs at position 2 of 4: the rest does not count
    ([1, 2], 0.5),                # stopped at an end token after two
], ids=["identical", "first-differs", "differs-at-2", "stops-early"])
def test_greedy_agreement_is_the_share_before_the_first_difference(generated, share):
    model = Scripted({PROMPT: generated})
    assert _greedy_agreement(model, [EXPECTED], [PROMPT]) == share
    assert model.asked == [([5, 6, 7], 4)]


def test_greedy_agreement_pools_the_prompts_tokens():
    model = Scripted({PROMPT: [1, 2, 3, 4], OTHER: [0, 0]})
    assert _greedy_agreement(model, [EXPECTED, [7, 7]], [PROMPT, OTHER]) == pytest.approx(4 / 6)


def test_no_prompts_no_greedy_agreement():
    assert _greedy_agreement(Scripted({}), [], ()) is None


def test_the_sweep_gets_its_own_table_after_the_benchmark(tmp_path):
    made = row(genai_folder(tmp_path), "int4", 31.0)
    made["language_model"]["sweep"] = [
        {"prompt_tokens": 512, "threads": 2, "decode_tok_s": 28.5, "prefill_tok_s": 650.0,
         "ttft_ms": 790.0, "peak_rss_mb": 330.0, "noisy": ["decode_tok_s"]}]
    lines = lm_benchmark_table(report(tmp_path, made))
    start = next(i for i, line in enumerate(lines) if "| prompt tokens | threads |" in line)
    assert lines[start + 2] == "| host-cpu | int4 | 512 | 2 | 28.5 † | 650 | 790.0 | 330 |"
    assert lines[-1] == "† its runs spread by more than 5%"


def test_no_sweep_no_sweep_table(tmp_path):
    lines = lm_benchmark_table(report(tmp_path, row(genai_folder(tmp_path), "int4", 31.0)))
    assert not any("prompt tokens" in line for line in lines)
