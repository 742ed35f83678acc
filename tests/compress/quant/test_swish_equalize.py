"""Channel equalization through hard-swish into depthwise convolutions
(compress/quant/swish/equalize.py), on a small MobileNetV3-like CNN trained on the
digits, in both forms of hard-swish: x * HardSigmoid(x) (what quant_pre_process makes of
the op, and what opset 13 exports) and the HardSwish op (`preprocess: false`)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import compress
from compress.quant.swish import equalize as swish_equalize
from compress.quant.swish import sites as swish_sites
from compress.quant.passes.hard_swish import channel_ranges
from tests.compress.quant.test_int8_techniques import _quantize, _sqnr, tiny, train_on_digits  # noqa: F401,E501


def _hard_swish_net():
    from torch import nn

    def block(cin, cout, stride):
        return [nn.Conv2d(cin, cout, 1), nn.BatchNorm2d(cout), nn.Hardswish(),
                nn.Conv2d(cout, cout, 3, stride, 1, groups=cout), nn.BatchNorm2d(cout),
                nn.ReLU()]
    return nn.Sequential(nn.Conv2d(1, 16, 3, 1, 1), nn.BatchNorm2d(16), nn.Hardswish(),
                         nn.Conv2d(16, 16, 3, 1, 1, groups=16), nn.BatchNorm2d(16), nn.ReLU(),
                         *block(16, 48, 1), *block(48, 64, 2), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(64, 10))


def _spread_channels(model) -> None:
    """Channels into hard-swish 1x to 30x apart, as trained networks have them (the
    orientation classifier's hard-swish outputs: 10-60x) and four epochs on the digits do
    not: each BatchNorm before a hard-swish scaled per channel, then trained on."""
    import torch
    from torch import nn
    layers = list(model)
    generator = torch.Generator().manual_seed(0)
    for norm, act in zip(layers, layers[1:]):
        if isinstance(norm, nn.BatchNorm2d) and isinstance(act, nn.Hardswish):
            k = torch.logspace(-1.5, 0, norm.num_features)[
                torch.randperm(norm.num_features, generator=generator)]
            with torch.no_grad():
                norm.weight.mul_(k)
                norm.bias.mul_(k)


@pytest.fixture(scope="module")
def swish(tmp_path_factory):
    """The network trained briefly on 1,400 digits in both hard-swish forms: "gate"
    pre-processed as int8-static does, "op" as exported; calibration and evaluation
    feeds from the other digits."""
    import torch
    from onnxruntime.quantization.shape_inference import quant_pre_process

    model, images = train_on_digits(_hard_swish_net, between=_spread_channels)
    folder = tmp_path_factory.mktemp("swish")
    files = {"op": folder / "op.onnx", "gate": folder / "gate.onnx"}
    torch.onnx.export(model, (torch.zeros(1, 1, 8, 8),), str(files["op"]), opset_version=17,
                      input_names=["image"], dynamo=False)
    quant_pre_process(str(files["op"]), str(files["gate"]))
    feeds = [{"image": images[i:i + 1]} for i in range(1400, 1797)]
    return {"folder": folder, "files": files, "calibration": feeds[::3][:100],
            "evaluation": feeds[1::3]}


def _quantized(swish, form: str):
    source = swish["files"][form]
    target = _quantize(source, swish["folder"] / f"int8_{form}.onnx", swish["calibration"])
    return onnx.load(str(source)), onnx.load(str(target))


def _equalized(swish, form: str):
    float_model, qdq = _quantized(swish, form)
    sites = swish_sites.find_sites(qdq)
    names = [n for s in sites for n in (s.x, s.y)]
    ranges, _ = channel_ranges(float_model, names, swish["calibration"])
    before = qdq.SerializeToString()
    report = swish_equalize.equalize(qdq, ranges)
    return float_model, onnx.load_model_from_string(before), qdq, report


@pytest.mark.parametrize("form", ["gate", "op"])
def test_every_hard_swish_into_a_depthwise_conv_is_found(swish, tiny, form):
    """The stem's and both blocks' (the pointwise conv's output through hard-swish into
    the depthwise conv), in either form; none in a ReLU network."""
    _, qdq = _quantized(swish, form)
    sites = swish_sites.find_sites(qdq)
    assert len(sites) == 3
    assert all((site.gate is not None) == (form == "gate") and len(site.depthwise) == 1
               for site in sites)
    relu = _quantize(tiny["pre"], swish["folder"] / "relu.onnx", tiny["calibration"])
    assert swish_sites.find_sites(onnx.load(str(relu))) == []


def _depthwise_errors(float_model, qdq, sites, feeds) -> list[float]:
    """RMS error of each site's depthwise conv output, as its QuantizeLinear /
    DequantizeLinear pair passes it on, against the float model's (quantize_static gives
    a conv its fused ReLU's output name: the float tensor of that name is after the ReLU,
    as the pair's clip is)."""
    from compress.quant.float_probe import tensor_values
    users = {name: node for node in qdq.graph.node for name in node.input}
    names = [conv.output[0] for site in sites for conv in site.depthwise]
    passed = [users[users[name].output[0]].output[0] for name in names]
    want = list(tensor_values(float_model, names, feeds))
    got = list(tensor_values(qdq, passed, feeds))
    return [float(np.sqrt(np.mean([((g[p] - w[n]) ** 2).mean() for g, w in zip(got, want)])))
            for n, p in zip(names, passed)]


@pytest.mark.parametrize("form", ["gate", "op"])
def test_equalized_depthwise_inputs_are_closer_to_float(swish, form):
    """Every depthwise conv's output is closer to the float model's on the evaluation
    digits, and so are the logits; the narrow channels were scaled up."""
    float_model, before, after, report = _equalized(swish, form)
    assert report["sites"] == 3 and 1.0 < report["scale_max"] <= swish_equalize.MAX_SCALE
    sites = swish_sites.find_sites(before)
    feeds = swish["evaluation"]
    for old, new in zip(_depthwise_errors(float_model, before, sites, feeds),
                        _depthwise_errors(float_model, after, sites, feeds)):
        assert new < old
    path = swish["folder"] / f"equalized_{form}.onnx"
    onnx.save(after, str(path))
    reference = _outputs_of(float_model, feeds)
    assert _sqnr(path, reference, feeds) > _sqnr(swish["folder"] / f"int8_{form}.onnx",
                                                   reference, feeds)


def _outputs_of(model, feeds) -> np.ndarray:
    from compress.quant.float_probe import tensor_values
    name = model.graph.output[0].name
    return np.concatenate([v[name] for v in tensor_values(model, [name], feeds)])


def test_no_scale_changes_nothing_but_the_gate(swish, monkeypatch):
    """With every s = 1 the rewrite is the identity where the gate is already quantized:
    the 1x1 convolution computes hard-sigmoid's affine map on the same integers (int8
    per channel holds its one weight exactly), so the outputs agree to a few gate steps."""
    monkeypatch.setattr(swish_equalize, "HEADROOM", 1e9)
    float_model, before, after, report = _equalized(swish, "gate")
    assert report["scale_max"] == 1.0
    feeds = swish["evaluation"][:40]
    out = [_outputs_of(m, feeds) for m in (before, after)]
    assert np.abs(out[0] - out[1]).max() < 0.02 * np.abs(out[0]).max()


def _optimized_ops(model, folder) -> dict:
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(folder / "optimized.onnx")
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    ops: dict = {}
    for node in onnx.load(str(folder / "optimized.onnx")).graph.node:
        ops[node.op_type] = ops.get(node.op_type, 0) + 1
    return ops


@pytest.mark.parametrize("form", ["gate", "op"])
def test_onnxruntime_still_runs_every_site_in_integers(swish, form, tmp_path):
    """What keeps the file at by hand's speed: onnxruntime fuses the gate into a
    QLinearConv and the product into a QLinearMul; no float hard-swish, hard-sigmoid or
    Mul is left at the sites."""
    _, before, after, _ = _equalized(swish, form)
    old, new = _optimized_ops(before, tmp_path), _optimized_ops(after, tmp_path)
    assert new["QLinearConv"] == old["QLinearConv"] + 3
    assert new.get("QLinearMul", 0) == old.get("QLinearMul", 0) + (3 if form == "op" else 0)
    for op in ("HardSwish", "HardSigmoid", "Mul"):
        assert new.get(op, 0) == 0, op


def _stage(swish, tmp_path, **settings):
    feeds = swish["calibration"]
    images = np.concatenate([f["image"] for f in feeds])
    pipeline = compress.pipeline(
        name="swish", output=str(tmp_path), model={"onnx": str(swish["files"]["op"])},
        data={"calibration": lambda: {"image": images}},
        stages=[{"type": "quantize", "scheme": "int8-static", "bias_correction_samples": 32,
                 **settings}])
    return compress.run(pipeline, quiet=True).artifacts[-1].meta


def test_the_stage_checks_the_equalized_file_and_can_be_told(swish, tmp_path):
    """Unset: scored against the file before it on the check's feeds, kept only past the
    margin; true: kept; false: not made."""
    from compress.quant.passes.onnx_backend import FIT_MARGIN_DB
    checked = _stage(swish, tmp_path / "checked")["hard_swish_equalization"]
    scores = checked["calibration_sqnr_db"]
    assert checked["sites"] == 3
    assert checked["kept"] == (scores["equalized"] > scores["as is"] + FIT_MARGIN_DB)
    assert _stage(swish, tmp_path / "on", equalize_hard_swish=True)[
        "hard_swish_equalization"]["kept"] is True
    assert "hard_swish_equalization" not in _stage(swish, tmp_path / "off",
                                                   equalize_hard_swish=False)


def test_the_calibrating_run_takes_the_per_channel_ranges(swish, monkeypatch, tmp_path):
    """The float tensors found before quantizing are the sites' own; the calibrating
    run's per-channel ranges are a run of their own's; and the stage makes no float run
    for them where the calibrating run took them."""
    from compress.quant import float_pass
    from compress.quant.passes import hard_swish as int8_steps
    float_model, qdq = _quantized(swish, "gate")
    names = swish_sites.float_tensors(float_model)
    assert names == [n for s in swish_sites.find_sites(qdq) for n in (s.x, s.y)]
    feeds = swish["calibration"]
    taken = float_pass.calibrating_pass(float_model, feeds, float_pass.Chosen([0]),
                                        channels=names).channels
    own, _ = channel_ranges(float_model, names, feeds)
    for name in names:
        for a, b in zip(taken[name], own[name]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)

    def no_float_run(*_):
        raise AssertionError("a float run of its own")
    monkeypatch.setattr(int8_steps, "channel_ranges", no_float_run)
    assert _stage(swish, tmp_path)["hard_swish_equalization"]["sites"] == 3
