"""int8-static's passes (compress/quant/passes/): a pass is one module registered with
the runner, which runs the passes in their declared order, takes what they need in the
one float pass, and keeps a check's candidate by one rule; the streamed path asks the
passes what it cannot make."""
import dataclasses

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from compress.quant.passes import PASSES, Int8Pass
from compress.quant.passes.base import GRAPH, LAYERS, declared_order
from compress.quant.passes.check import keep
from compress.quant.passes.runner import plan
from compress.quant.schemes.int8_static import Int8Static
from tests.compress.quant.bias_headroom import BIAS_HEADROOM
from tests.compress.quant.test_bias_correction import _int8_static


def test_a_pass_is_one_module_the_runner_runs_in_its_place(project, monkeypatch):
    """The test's pass, registered: it runs on the file the stage writes, after the
    passes it names, and records what it found in the artifact's meta."""
    monkeypatch.setitem(PASSES, BIAS_HEADROOM.name, BIAS_HEADROOM)
    # after hard-swish, as it asks; the fidelity floor's recovery, which follows the
    # built-in passes of the graph, comes after it by name
    assert [p.name for p in plan(Int8Static(), "onnx").passes][-3:] == [
        "hard_swish", "bias_headroom", "fidelity_floor"]
    assert BIAS_HEADROOM not in plan(Int8Static(), "tflite").passes  # no TFLite backend
    result = _int8_static(project)
    meta = result.artifacts[-1].meta["int32_bias_headroom"]
    graph = onnx.load(str(result.run_dir / result.artifacts[-1].path)).graph
    inits = {i.name: i for i in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    biases = [numpy_helper.to_array(inits[producer[n.input[2]].input[0]])
              for n in graph.node if n.op_type in ("Conv", "Gemm")]
    assert meta["int32_biases"] == len(biases) == 4  # 3 Conv + the classifier Gemm
    assert meta["largest_share"] == max(np.abs(b).max() for b in biases) / (2**31 - 1)


def _named(name: str, when: str = LAYERS, after: tuple = ()) -> Int8Pass:
    return Int8Pass(name=name, when=when, on=lambda settings: True, backends={},
                    after=after)


def test_passes_run_by_step_then_after_the_ones_they_name():
    found = declared_order([_named("b", after=("c",)), _named("z", when=GRAPH),
                            _named("c"), _named("a", after=("b",))])
    assert [p.name for p in found] == ["c", "b", "a", "z"]
    with pytest.raises(ValueError, match="each wait for another"):
        declared_order([_named("a", after=("b",)), _named("b", after=("a",))])


@pytest.mark.parametrize("scores, margin, kept", [
    ({"as quantized": 27.0, "gptq": 27.5}, 0.5, "as quantized"),   # not past the margin
    ({"as quantized": 27.0, "gptq": 27.51}, 0.5, "gptq"),
    ({"as quantized": 27.0, "gptq": 27.01}, 0.0, "gptq"),            # no margin (TFLite)
    ({"as quantized": 27.0, "gptq": 27.0}, 0.0, "as quantized")])    # equals: the first
def test_the_check_keeps_a_fitted_candidate_only_past_the_margin(scores, margin, kept):
    assert keep(scores, {"gptq"}, margin) == kept


@pytest.mark.parametrize("settings, needs", [
    ({}, (True, True, True, True)),    # GPTQ, the checked correction, hard-swish
    ({"bias_correction": "fast", "weight_rounding": "nearest"}, (True, False, False, True)),
    ({"bias_correction": "sequential", "weight_rounding": "nearest",
      "equalize_hard_swish": False}, (False, False, False, False))])
def test_the_float_pass_takes_what_the_passes_need(settings, needs):
    found = plan(Int8Static(**settings), "onnx").needs
    assert (found.layers, found.hessians, found.outputs, found.channels) == needs


def test_the_streamed_path_asks_the_passes(monkeypatch):
    from compress.quant.streamed.backends import _unsupported
    asked = dataclasses.replace(BIAS_HEADROOM, asked=lambda settings: "bias_headroom")
    assert _unsupported(Int8Static()) is None
    monkeypatch.setitem(PASSES, asked.name, asked)
    assert _unsupported(Int8Static()) == "bias_headroom"
    monkeypatch.setitem(PASSES, asked.name, dataclasses.replace(asked, streams=True))
    assert _unsupported(Int8Static()) is None
