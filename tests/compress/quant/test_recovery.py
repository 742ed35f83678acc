"""int8-static's fidelity floor and its recovery by measured mixed precision
(compress/quant/passes/fidelity_floor/, mixed_precision.py, qdq_groups.py), on a small CNN
trained on the digits that int8 ruins as a batch-norm-folded detector stem does: the
stem conv's output channels span 0.08..45, feeding a depthwise conv whose weights are
scaled up to match (the float function unchanged). One uint8 scale over 0..45 rounds
every channel but one to a step or two."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import compress
from compress.quant import qdq_groups
from compress.quant.passes.fidelity_floor import mixed_precision
from compress.quant.passes.fidelity_floor import onnx as recovery
from profiles.schema import FLOOR_DB as DEFAULT_FLOOR_DB
from tests.compress.quant.test_int8_techniques import train_on_digits


def _net():
    from torch import nn
    return nn.Sequential(nn.Conv2d(1, 16, 3, 1, 1), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.Conv2d(16, 16, 3, 1, 1, groups=16), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.Conv2d(16, 32, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(32, 10))


def _spread(model, x, smallest: float = 0.08):
    """The network with its batch norms folded and the stem's output channels rescaled
    (the depthwise conv's weights by the inverse: ReLU lets the scale through): the
    channel the outputs need least spans 0..45, the others 0..0.08 to 0..1."""
    import torch
    from torch.nn.utils.fusion import fuse_conv_bn_eval
    stem, depthwise = fuse_conv_bn_eval(model[0], model[1]), fuse_conv_bn_eval(model[3], model[4])
    with torch.no_grad():
        h, out = torch.relu(stem(x)), model(x)

        def loss_without(k: int) -> float:
            cut = h.clone()
            cut[:, k] = 0
            return float((model[6:](torch.relu(depthwise(cut))) - out).pow(2).mean())
        least = min(range(16), key=loss_without)
        target = torch.empty(16)
        target[[k for k in range(16) if k != least]] = torch.logspace(np.log10(smallest), 0, 15)
        target[least] = 45.0
        scale = target / h.amax(dim=(0, 2, 3))
        stem.weight.mul_(scale[:, None, None, None])
        stem.bias.mul_(scale)
        depthwise.weight.div_(scale[:, None, None, None])
    return torch.nn.Sequential(stem, torch.nn.ReLU(), depthwise, torch.nn.ReLU(),
                               *list(model)[6:]).eval()


@pytest.fixture(scope="module")
def spread(tmp_path_factory):
    """The network trained two epochs on 1,400 digits, folded and spread, exported;
    calibration images and evaluation feeds from the other digits."""
    import torch
    model, images = train_on_digits(_net, epochs=2)
    folded = _spread(model, torch.from_numpy(images[1400:]))
    path = tmp_path_factory.mktemp("spread") / "spread.onnx"
    torch.onnx.export(folded, (torch.zeros(1, 1, 8, 8),), str(path), input_names=["image"],
                      output_names=["logits"], opset_version=17, dynamo=False)
    return {"path": path, "calibration": images[1400:1700],
            "evaluation": [{"image": images[i:i + 1]} for i in range(1700, 1797)]}


def _stage(spread, folder, **settings):
    """int8-static through the pipeline: the artifact's meta and its file."""
    pipeline = compress.pipeline(
        name="spread", output=str(folder), model={"onnx": str(spread["path"])},
        data={"calibration": lambda: {"image": spread["calibration"]}},
        stages=[{"type": "quantize", "scheme": "int8-static", **settings}])
    result = compress.run(pipeline, quiet=True)
    return result.artifacts[-1].meta, result.run_dir / result.artifacts[-1].path


def _evaluated(spread, path) -> float:
    """Output SQNR on the evaluation digits (feeds neither calibration nor check saw)."""
    feeds = spread["evaluation"]
    reference = mixed_precision.float_outputs(spread["path"].read_bytes(), feeds, 2)
    return mixed_precision.sqnr(path.read_bytes(), feeds, reference, 2)


@pytest.fixture(scope="module")
def quantized(spread, tmp_path_factory):
    """The stage as it comes (recovery on), and with `recover: false`."""
    folder = tmp_path_factory.mktemp("runs")
    return {"recovered": _stage(spread, folder / "on"),
            "not": _stage(spread, folder / "off", recover=False)}


def test_int8_ruins_the_model_and_without_recovery_the_record_says_so(spread, quantized):
    meta, path = quantized["not"]
    floor = meta["fidelity_floor"]
    assert floor["floor_db"] == DEFAULT_FLOOR_DB
    assert floor["held"] is False and floor["recovered"] is False and "steps" not in floor
    assert floor["sqnr_db"] < 6 and _evaluated(spread, path) < 6
    # the check's own score, not a second measurement of the same file
    kept = meta["bias_correction"]["kept"]
    assert floor["sqnr_db"] == meta["bias_correction"]["calibration_sqnr_db"][kept]
    assert meta["qdq"]["activation_types"] == {"uint8": 7}


def test_recovery_gives_the_stem_output_16_bits_and_the_floor_holds(spread, quantized):
    meta, path = quantized["recovered"]
    floor = meta["fidelity_floor"]
    assert floor["held"] is True and floor["sqnr_db"] < 6
    assert [(layer["node"], layer["precision"]) for layer in floor["layers"]] == [
        ("/0/Conv", "16-bit")]
    # one move lifts it past the floor; taking it back does not hold the floor
    widened, back = floor["steps"]
    assert (widened["node"], widened["to"], widened["kept"]) == ("/0/Conv", "16-bit", True)
    assert widened["sqnr_db_before"] == floor["sqnr_db"]
    assert widened["sqnr_db_after"] == floor["sqnr_db_after"] >= 30 > DEFAULT_FLOOR_DB
    assert (back["node"], back["to"], back["kept"]) == ("/0/Conv", "8-bit", False)
    assert back["sqnr_db_after"] < DEFAULT_FLOOR_DB
    # on digits neither the calibration nor the check saw, too (there, outputs beyond the
    # calibrated ranges are clipped, 16 bits or not: ~20 dB); one 16-bit pair, the rest uint8
    evaluated = _evaluated(spread, path)
    assert evaluated >= DEFAULT_FLOOR_DB + 5 and evaluated > _evaluated(spread, quantized[
        "not"][1]) + 10
    assert meta["qdq"]["activation_types"] == {"uint8": 6, "uint16": 1}
    onnx.checker.check_model(onnx.load(str(path)))


def test_the_costs_rank_the_stem_output_first_by_far(spread, quantized):
    """Quantized alone, the stem output leaves the logits near 0 dB, every other group
    far above the floor: the ranking the recovery follows."""
    meta, path = quantized["not"]
    float_model, qdq = onnx.load(str(spread["path"])), onnx.load(str(path))
    feeds = spread["evaluation"][:8]
    reference = mixed_precision.float_outputs(float_model, feeds, 2)
    costs = mixed_precision.ranked(float_model, qdq, feeds, reference,
                                   mixed_precision.float_names(float_model))
    assert costs[0][0].producer == "/0/Conv" and costs[0][1] < 6
    assert all(cost > 30 for _, cost in costs[1:])


def test_a_corrected_bias_follows_its_input_to_16_bits(spread, quantized):
    """The kept model's biases were corrected for the uint8 stem output: widened without
    moving the depthwise conv's correction, the model gains little."""
    meta, path = quantized["not"]
    assert "bias" in meta["bias_correction"]["kept"]
    float_model, kept = onnx.load(str(spread["path"])), path.read_bytes()
    names, feeds = mixed_precision.float_names(float_model), spread["evaluation"][:8]
    stem = mixed_precision.ranked(float_model, onnx.load_model_from_string(kept), feeds,
                                  mixed_precision.float_outputs(float_model, feeds, 2),
                                  names)[0][0]
    feeds = [{"image": spread["calibration"][i:i + 1]} for i in range(0, 300, 5)]
    means = mixed_precision.Means.of(float_model, onnx.load_model_from_string(kept), [stem],
                                     feeds, names)
    levels = {stem: mixed_precision.SIXTEEN_BIT}
    moved = mixed_precision.assigned(kept, levels, float_model, means)
    left = mixed_precision.assigned(kept, levels, float_model, None)
    moved_db, left_db = (_evaluated(spread, _written(model, path.parent / f"{name}.onnx"))
                         for name, model in (("moved", moved), ("left", left)))
    assert moved_db > left_db + 10 and left_db < DEFAULT_FLOOR_DB


def _written(model: bytes, path):
    path.write_bytes(model)
    return path


def test_a_floor_out_of_reach_moves_every_group_and_keeps_what_pays(spread, tmp_path):
    """Every group given more bits (16, then float), one at a time, each step recorded
    from the score the one before left; then every move taken back that the outputs do
    without (within MIN_GAIN_DB of the best reached)."""
    meta, _ = _stage(spread, tmp_path, floor_db=150.0)
    floor = meta["fidelity_floor"]
    steps = floor["steps"]
    assert floor["held"] is False and floor["sqnr_db_after"] > floor["sqnr_db"] + 20
    ahead = next(k for k, s in enumerate(steps) if s["to"] != "16-bit")
    forward = steps[:ahead]   # 16 bits, group by group, every move kept
    assert all(s["kept"] for s in forward)
    assert 1 < len(forward) <= recovery.MAX_STEPS
    assert len({s["tensor"] for s in forward}) == len(forward)
    assert any(s["to"] == "float" for s in steps) and any(s["to"] == "8-bit" for s in steps)
    back = ahead + next(k for k, s in enumerate(steps[ahead:]) if s["to"] != "float")
    for before, after in zip(steps[:back], steps[1:back]):   # the moves forward, chained
        now = before["sqnr_db_after"] if before["kept"] else before["sqnr_db_before"]
        assert after["sqnr_db_before"] == now
    # the floor out of reach: moves are taken back from the best state the forward moves
    # passed, not from the last (a move can lower the score)
    reached = max(s["sqnr_db_after"] for s in steps[:back] if s["sqnr_db_after"] is not None)
    assert steps[back]["sqnr_db_before"] == reached
    for step in steps[back:]:   # taken back only within the margin of what was reached
        if step["kept"]:
            assert step["sqnr_db_after"] >= reached - recovery.MIN_GAIN_DB
    assert {layer["precision"] for layer in floor["layers"]} <= {"16-bit", "float"}
    assert "/0/Conv" in {layer["node"] for layer in floor["layers"]}


def test_a_model_above_the_floor_is_left_as_kept_and_off_records_nothing(spread, tmp_path):
    meta, path = _stage(spread, tmp_path / "low", floor_db=-50.0)
    assert meta["fidelity_floor"]["held"] is True and "steps" not in meta["fidelity_floor"]
    assert meta["qdq"]["activation_types"] == {"uint8": 7}
    off, _ = _stage(spread, tmp_path / "off", floor_db=None)
    assert "fidelity_floor" not in off


@pytest.mark.parametrize("dtype, zero", [(np.uint8, 113), (np.int8, 0), (np.int8, -20)])
def test_16_bits_cover_the_8_bit_range(dtype, zero):
    """The same range, to float round-off; a symmetric int8 pair keeps zero point 0, and
    its top, 32767 steps of 1/256, reaches past 127 by less than one 8-bit step."""
    scale, zero = np.float32(0.05), np.array(zero, dtype)
    wide_scale, wide_zero, factor = qdq_groups.sixteen_bit(scale, zero)
    assert wide_zero.dtype == qdq_groups.WIDER[np.dtype(dtype)]
    symmetric = dtype == np.int8 and zero == 0
    assert factor == (256 if symmetric else 257) and (wide_zero == 0) == symmetric
    (low, high), (wide_low, wide_high) = (qdq_groups.span(scale, zero),
                                          qdq_groups.span(wide_scale, wide_zero))
    np.testing.assert_allclose(wide_low, low, rtol=1e-5)
    assert high - 1e-5 <= wide_high < high + (scale if symmetric else 1e-5)


def test_the_report_says_which_layers_got_more_bits_and_why(quantized):
    from compress.report.md_floor import floor_details
    recovered, kept = quantized["recovered"][0], quantized["not"][0]
    text = "\n".join(floor_details({"artifacts": [{"id": "int8", "meta": recovered}]}))
    assert "### int8: fidelity floor 10 dB" in text and "(the floor holds)" in text
    assert "- the output of /0/Conv (Conv): 16-bit activations (quantized alone, it left " \
           "the outputs at" in text and "1 layer(s) kept more bits" in text
    text = "\n".join(floor_details({"artifacts": [{"id": "int8", "meta": kept}]}))
    assert "nothing was changed (`recover: false`)" in text
    from compress.report.html_quality import quality_section
    page = quality_section({"benchmarks": [], "artifacts": [{"id": "int8", "meta": recovered}]})
    assert "int8: the fidelity floor" in page and "16-bit" in page
    held = {**recovered, "fidelity_floor": {"floor_db": 10.0, "sqnr_db": 24.0, "held": True}}
    assert floor_details({"artifacts": [{"id": "int8", "meta": held}]}) == []
