"""compress/quant/lm: units a language model's widths are chosen for (the builder's node
names), and the search for the smallest mix within a perplexity or KL budget. The files of the
search here are small stand-ins whose quality follows how many units are at the high width;
the real model's route is tested in tests/compress/model/test_smollm2_routes.py."""
import pytest

from compress.quant.lm.mix import QualityBudget, choose_mix
from compress.quant.lm.sensitivity import UnitCost
from compress.quant.lm.units import units_of
from runtimes.lm.quality import TextQuality

# onnxruntime-genai's builder names (SmolLM2, two of its layers) and their weights
MATMULS = [(f"/model/layers.{n}/{part}/MatMul", size) for n in (0, 1) for part, size in
           (("attn/qkv_proj", 552960), ("attn/o_proj", 331776), ("mlp/gate_proj", 884736),
            ("mlp/up_proj", 884736), ("mlp/down_proj", 884736))] + [("/lm_head/MatMul", 28311552)]


def test_a_layers_projections_are_one_unit_and_the_output_layer_its_own():
    units = units_of(MATMULS)
    assert [u.name for u in units] == ["layers.0", "layers.1", "lm_head"]
    assert len(units[0].nodes) == 5 and units[0].parameters == 3538944
    assert [u.name for u in units_of(MATMULS, "matmul")] == [n for n, _ in MATMULS]
    with pytest.raises(ValueError, match="one of layer, matmul"):
        units_of(MATMULS, "block")


def _search(tmp_path, increase_with_k, budget, kl_with_k=None, measure="perplexity_increase"):
    """choose_mix over 6 units whose files' perplexity increase is increase_with_k[k] (and
    mean KL kl_with_k[k])."""
    kl_with_k = kl_with_k or [0.1] * 7
    ranking = [UnitCost(f"u{n}", 1000, 1.0 / (n + 1), 0.1, 0.9) for n in range(6)]
    built = []

    def build(high, folder):
        folder.mkdir()
        (folder / "model.onnx").write_bytes(b"x" * (100 + 10 * len(high)))
        built.append(len(high))
        return 100 + 10 * len(high)

    def score(folder):
        k = (len((folder / "model.onnx").read_bytes()) - 100) // 10
        return TextQuality(10.0, 100, {"perplexity_increase": increase_with_k[k],
                                       "kl_mean": kl_with_k[k]})
    mix = choose_mix(ranking, build, score, QualityBudget(budget, measure), tmp_path / "mix")
    return mix, built


def test_the_smallest_mix_within_the_budget_is_chosen_in_few_builds(tmp_path):
    mix, built = _search(tmp_path, [0.4, 0.2, 0.09, 0.05, 0.04, 0.03, 0.02], budget=0.05)
    assert mix.chosen.high == ("u0", "u1", "u2") and mix.folder == tmp_path / "mix"
    assert (tmp_path / "mix" / "model.onnx").stat().st_size == 130
    assert len(built) <= 5 and sorted(set(built)) == sorted(built)   # none built twice
    assert [p.name for p in tmp_path.iterdir()] == ["mix"]   # the other files removed
    assert {len(c.high) for c in mix.candidates} == set(built)


def test_no_mix_is_chosen_when_every_unit_high_misses_the_budget(tmp_path):
    mix, built = _search(tmp_path, [0.4, 0.3, 0.3, 0.2, 0.2, 0.1, 0.08], budget=0.05)
    assert mix.chosen is None and mix.folder is None and built == [0, 6]
    assert not list(tmp_path.iterdir())


def test_all_low_is_kept_when_it_already_meets_the_budget(tmp_path):
    mix, built = _search(tmp_path, [0.01] * 7, budget=0.05)
    assert mix.chosen.high == () and built == [0]


def test_a_kl_budget_holds_where_perplexity_misleads(tmp_path):
    """As on Gemma 3: perplexity worse with more units high while KL falls steadily; a
    budget on KL follows KL."""
    increase = [0.12, 0.25, 0.22, 0.20, 0.15, 0.14, 0.01]
    kl = [0.62, 0.30, 0.20, 0.12, 0.08, 0.04, 0.01]
    mix, _ = _search(tmp_path, increase, 0.1, kl_with_k=kl, measure="kl_mean")
    assert len(mix.chosen.high) == 4 and mix.chosen.quality["kl_mean"] == 0.08
    assert mix.as_dict()["measure"] == "kl_mean" and mix.as_dict()["budget"] == 0.1
    with pytest.raises(ValueError, match="perplexity_increase, kl_mean"):
        _search(tmp_path / "other", increase, 0.1, measure="top1")


def test_the_output_layer_at_int8_under_the_default_method_is_refused_before_building(tmp_path):
    """With tied embeddings the builder (0.18) writes a file onnxruntime cannot load for
    that mix: refused with the methods that work, nothing built."""
    import json

    from compress.quant.lm.genai_route import GenaiRoute
    (tmp_path / "config.json").write_text(json.dumps({"tie_word_embeddings": True}))
    route = GenaiRoute(tmp_path, tmp_path / "fp32")
    with pytest.raises(ValueError, match="use method k_quant or rtn"):
        route.build("int4", tmp_path / "out", ("/lm_head/MatMul",), method="default")
    assert not (tmp_path / "out").exists()


def test_a_size_budget_alone_keeps_the_most_units_high_that_fit(tmp_path):
    mix, built = _search(tmp_path, [0.4, 0.2, 0.09, 0.05, 0.04, 0.03, 0.02],
                         budget=135 / 2**20, measure="megabytes")
    assert mix.chosen.high == ("u0", "u1", "u2") and mix.chosen.bytes == 130
    assert len(built) <= 5 and sorted(set(built)) == sorted(built)


def test_quality_and_size_together_choose_nothing_when_they_cannot_both_hold(tmp_path):
    from compress.quant.lm.mix import QualityBudget, choose_mix  # noqa: F811
    ranking = [UnitCost(f"u{n}", 1000, 1.0, 0.1, 0.9) for n in range(4)]

    def build(high, path):
        path.write_bytes(b"x" * (100 + 10 * len(high)))
        return 100 + 10 * len(high)

    def score(path):
        k = (path.stat().st_size - 100) // 10
        return TextQuality(10.0, 100, {"perplexity_increase": 0.1 - 0.02 * k, "kl_mean": 0.1})
    both = (QualityBudget(0.03, "perplexity_increase"), QualityBudget(125 / 2**20, "megabytes"))
    assert choose_mix(ranking, build, score, both, tmp_path / "m").chosen is None
    roomy = (both[0], QualityBudget(200 / 2**20, "megabytes"))
    assert len(choose_mix(ranking, build, score, roomy, tmp_path / "n").chosen.high) == 4
