"""Hard-swish as exporters decompose it (compress/quant/swish/forms.py): x * Clip(x + 3, 0,
6) / 6 and x * (Clip(x + 3, 0, 6) / 6), found and equalized as the HardSwish op is
(swish_sites.py, swish_equalize.py), on test_swish_equalize.py's MobileNetV3-like CNN
trained on the digits with its hard-swishes written out; and the records of the passes
that find nothing to do (hard-swish equalization, `equalize: true`)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import compress
from compress.quant.swish import equalize as swish_equalize
from compress.quant.swish import sites as swish_sites
from compress.quant.passes.hard_swish import NOTHING, channel_ranges
from tests.compress.quant.test_int8_techniques import _quantize, _sqnr, train_on_digits
from tests.compress.quant.test_swish_equalize import (_hard_swish_net, _optimized_ops,
                                                      _outputs_of)


def _module(divide_first: bool):
    import torch
    from torch import nn

    class Decomposed(nn.Module):
        """torch's x * relu6(x + 3) / 6, or the gate divided first."""

        def forward(self, x):
            if divide_first:
                return x * (torch.nn.functional.relu6(x + 3) / 6)
            return x * torch.clamp(x + 3, 0, 6) / 6
    return Decomposed


def _net(act, relu_too: bool = False):
    """_hard_swish_net with every nn.Hardswish (and, with `relu_too`, every ReLU) written
    out as `act`."""
    from torch import nn
    swapped = (nn.Hardswish, nn.ReLU) if relu_too else (nn.Hardswish,)
    return nn.Sequential(*[act() if isinstance(layer, swapped) else layer
                           for layer in _hard_swish_net()])


def _spread(model) -> None:
    """Channels into each hard-swish 1x to 30x apart (test_swish_equalize._spread_channels)."""
    import torch
    from torch import nn
    layers, generator = list(model), torch.Generator().manual_seed(0)
    for norm, act in zip(layers, layers[1:]):
        if isinstance(norm, nn.BatchNorm2d) and type(act).__name__ == "Decomposed":
            k = torch.logspace(-1.5, 0, norm.num_features)[
                torch.randperm(norm.num_features, generator=generator)]
            with torch.no_grad():
                norm.weight.mul_(k)
                norm.bias.mul_(k)


def _exported(build, folder, name: str, between=None):
    """The network trained, exported at opset 17 and pre-processed as int8-static does."""
    import torch
    from onnxruntime.quantization.shape_inference import quant_pre_process
    model, images = train_on_digits(build, epochs=2, between=between)
    raw, pre = folder / f"{name}_raw.onnx", folder / f"{name}.onnx"
    torch.onnx.export(model, (torch.zeros(1, 1, 8, 8),), str(raw), opset_version=17,
                      input_names=["image"], dynamo=False)
    quant_pre_process(str(raw), str(pre))
    return pre, images


@pytest.fixture(scope="module")
def forms(tmp_path_factory):
    folder = tmp_path_factory.mktemp("forms")
    files = {}
    for name, first in (("divided_after", False), ("divided_first", True)):
        files[name], images = _exported(lambda f=first: _net(_module(f)), folder, name,
                                        between=_spread)
    feeds = [{"image": images[i:i + 1]} for i in range(1400, 1797)]
    return {"folder": folder, "files": files, "calibration": feeds[::3][:100],
            "evaluation": feeds[1::3]}


def _quantized(forms, name: str):
    source = forms["files"][name]
    target = _quantize(source, forms["folder"] / f"int8_{name}.onnx", forms["calibration"])
    return onnx.load(str(source)), onnx.load(str(target))


@pytest.mark.parametrize("name", ["divided_after", "divided_first"])
def test_the_decomposed_forms_are_found_in_the_float_and_the_qdq_graph(forms, name):
    """Three sites, each the Add ... Mul chain quantize_static wrote (its Clip folded into
    the Add's QuantizeLinear), in the float model under the same names."""
    float_model, qdq = _quantized(forms, name)
    sites = swish_sites.find_sites(qdq)
    assert len(sites) == 3
    for site in sites:
        assert site.gate is None and site.act.op_type == ("Div" if name == "divided_after"
                                                          else "Mul")
        assert {n.op_type for n in site.chain} >= {"Add", "QuantizeLinear", "DequantizeLinear"}
    assert swish_sites.float_tensors(float_model) == [n for s in sites for n in (s.x, s.y)]
    assert swish_sites.hard_swishes(float_model) == 3


@pytest.mark.parametrize("name", ["divided_after", "divided_first"])
def test_equalizing_them_lifts_the_logits_and_leaves_every_site_integer(forms, name):
    """On the evaluation digits the logits come closer to float (measured: 23.7 -> 32.1
    and 24.5 -> 31.5 dB); the float Div quantize_static left at each site is gone, the
    gate runs as a QLinearConv and the product as a QLinearMul."""
    float_model, qdq = _quantized(forms, name)
    before = onnx.load_model_from_string(qdq.SerializeToString())
    names = [n for s in swish_sites.find_sites(qdq) for n in (s.x, s.y)]
    ranges, _ = channel_ranges(float_model, names, forms["calibration"])
    report = swish_equalize.equalize(qdq, ranges)
    assert report["sites"] == 3 and 1.0 < report["scale_max"] <= swish_equalize.MAX_SCALE
    onnx.checker.check_model(qdq)
    path = forms["folder"] / f"equalized_{name}.onnx"
    onnx.save(qdq, str(path))
    feeds = forms["evaluation"]
    reference = _outputs_of(float_model, feeds)
    assert _sqnr(path, reference, feeds) > _sqnr(forms["folder"] / f"int8_{name}.onnx",
                                                   reference, feeds) + 3
    old, new = _optimized_ops(before, forms["folder"]), _optimized_ops(qdq, forms["folder"])
    assert old.get("Div", 0) == 3 and new["QLinearConv"] == old["QLinearConv"] + 3
    for op in ("Div", "Add", "Mul", "QLinearAdd", "Clip"):
        assert new.get(op, 0) == 0, op


def _stage(path, images, folder, capsys, **settings):
    """int8-static through the pipeline: the artifact's meta, and what it said on stderr."""
    pipeline = compress.pipeline(
        name="forms", output=str(folder), model={"onnx": str(path)},
        data={"calibration": lambda: {"image": images}},
        stages=[{"type": "quantize", "scheme": "int8-static", "bias_correction_samples": 32,
                 **settings}])
    capsys.readouterr()
    meta = compress.run(pipeline, quiet=False).artifacts[-1].meta
    return meta, capsys.readouterr().err


def test_the_stage_equalizes_the_decomposed_form(forms, tmp_path, capsys, monkeypatch):
    """... and its progress lines (a terminal's bars) name the settings' passes in their
    order and what the check does, in words: no method names, no `feeds`."""
    from compress.runner.progress import Progress
    shown, task = [], Progress.task
    monkeypatch.setattr(Progress, "task", lambda self, said, total: (shown.append(said),
                                                                     task(self, said, total))[1])
    images = np.concatenate([f["image"] for f in forms["calibration"]])
    meta, _ = _stage(forms["files"]["divided_after"], images, tmp_path, capsys,
                     equalize_hard_swish=True)
    record = meta["hard_swish_equalization"]
    assert record["sites"] == 3 and record["kept"] is True and "said" not in record
    assert "refining the int8 weights: GPTQ rounding, then bias correction, each kept if it " \
        "lowers the error (32 samples)" in shown
    assert "equalizing 3 hard-swish -> depthwise convolution pair(s)" in shown  # asked: no check
    assert not [said for said in shown if "feeds" in said or "checked" in said], shown


def test_passes_that_find_nothing_say_so(tmp_path, capsys):
    """`equalize: true` on the network with hard-swish (written out) after every conv
    finds no Conv pair a scale passes through, and names the hard-swishes that stopped
    it; hard-swish equalization on the ReLU network finds no site. Both say so in their
    records and in a note where the setting asked for the pass; on by default (hard-swish
    equalization), the record alone says it."""
    from torch import nn
    path, images = _exported(lambda: _net(_module(False), relu_too=True), tmp_path, "all")
    meta, said = _stage(path, images[1400:1500], tmp_path / "eq", capsys, equalize=True)
    record = meta["equalization"]
    assert record["pairs"] == 0
    assert "found no Conv pair" in record["said"] and "6 convolution output(s) go through " \
        "hard-swish" in record["said"] and \
        f"int8-static: equalize changed nothing: it {record['said']}" in said
    relu, images = _exported(lambda: _net(nn.ReLU), tmp_path, "relu")
    meta, said = _stage(relu, images[1400:1500], tmp_path / "hs", capsys,
                        equalize_hard_swish=True)
    assert meta["hard_swish_equalization"] == {"sites": 0, "said": NOTHING}
    assert f"int8-static: equalize_hard_swish changed nothing: it {NOTHING}" in said
    meta, said = _stage(relu, images[1400:1500], tmp_path / "default", capsys)
    assert meta["hard_swish_equalization"] == {"sites": 0, "said": NOTHING}
    assert "equalize_hard_swish" not in said   # on by default: recorded, not noted
