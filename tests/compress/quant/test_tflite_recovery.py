"""The fidelity floor and its recovery on full-int8 TFLite files (compress/quant/
tflite_recovery.py, passes/fidelity_floor/), on a small CNN trained on the digits that
full int8 ruins as a batch-norm-folded detector stem does (the ONNX test's model,
tests/compress/quant/test_recovery.py, spread further): the stem conv's output channels
span 0.01..45, the depthwise conv after it scaled by the inverse (the float function
unchanged). litert-torch converts it (export.tflite's convert_fp32) and the quantize
stage takes the .tflite file as a model source; the mixed file it writes is opened in
LiteRT with its default op resolver (XNNPACK), as apps open files."""
from __future__ import annotations

import numpy as np
import pytest

import compress
from profiles.schema import FLOOR_DB as DEFAULT_FLOOR_DB
from tests.compress.quant.test_int8_techniques import train_on_digits
from tests.compress.quant.test_recovery import _net, _spread

pytest.importorskip("ai_edge_quantizer", reason="ai-edge-quantizer is not installed")
pytest.importorskip("litert_torch", reason="litert-torch is not installed")

INPUT = "args_0"   # litert-torch's signature input
STEP_KEYS = {"layer", "tensor", "node", "op", "alone_sqnr_db", "to", "sqnr_db_before",
             "sqnr_db_after", "kept"}   # mixed_precision.Step.record, the ONNX pass's
LAYER_KEYS = {"layer", "tensor", "node", "op", "precision", "alone_sqnr_db"}


@pytest.fixture(scope="module")
def spread(tmp_path_factory):
    """The network trained two epochs on 1,400 digits, folded, spread and converted to
    TFLite; calibration images and evaluation images from the other digits."""
    import torch

    from export.tflite import convert_fp32
    model, images = train_on_digits(_net, epochs=2)
    folded = _spread(model, torch.from_numpy(images[1400:]), smallest=0.01)
    path = tmp_path_factory.mktemp("spread") / "spread.tflite"
    convert_fp32(folded, [torch.zeros(1, 1, 8, 8)], path, channels_last=False)
    return {"path": path, "calibration": images[1400:1700], "evaluation": images[1700:]}


def _stage(spread, folder, **settings):
    """int8-static of the .tflite file through the pipeline: the artifact's meta and file."""
    pipeline = compress.pipeline(
        name="spread", output=str(folder), model={"tflite": str(spread["path"])},
        data={"calibration": lambda: {INPUT: spread["calibration"]}},
        stages=[{"type": "quantize", "scheme": "int8-static", **settings}])
    result = compress.run(pipeline, quiet=True)
    return result.artifacts[-1].meta, result.run_dir / result.artifacts[-1].path


def _outputs(path, images) -> np.ndarray:
    """The file's logits, run as apps run it: LiteRT's default op resolver and delegates,
    int8 inputs and outputs through their scales."""
    from ai_edge_litert.interpreter import Interpreter

    from runtimes.litert_session import dequantized, to_native
    model = Interpreter(model_path=str(path))
    model.allocate_tensors()
    (given,), (logits,) = model.get_input_details(), model.get_output_details()
    rows = []
    for image in images:
        model.set_tensor(given["index"], to_native(given, image[None]))
        model.invoke()
        rows.append(dequantized(logits, model.get_tensor(logits["index"])))
    return np.concatenate(rows)


def _evaluated(spread, path) -> float:
    """Output SQNR against the float file on digits neither calibration nor check saw."""
    reference, found = _outputs(spread["path"], spread["evaluation"]), _outputs(
        path, spread["evaluation"])
    return float(10 * np.log10((reference ** 2).sum() / ((found - reference) ** 2).sum()))


@pytest.fixture(scope="module")
def quantized(spread, tmp_path_factory):
    """The stage as it comes (recovery on), and with `recover: false`."""
    folder = tmp_path_factory.mktemp("runs")
    return {"recovered": _stage(spread, folder / "on"),
            "not": _stage(spread, folder / "off", recover=False)}


def test_full_int8_ruins_the_model_and_without_recovery_the_record_says_so(spread, quantized):
    meta, path = quantized["not"]
    floor = meta["fidelity_floor"]
    assert set(floor) == {"floor_db", "sqnr_db", "check_feeds", "held", "recovered"}
    assert floor["floor_db"] == DEFAULT_FLOOR_DB and floor["check_feeds"] == 32
    assert floor["held"] is False and floor["recovered"] is False
    # the check's own score of the file kept, not a second measurement of it
    assert floor["sqnr_db"] == meta["check"]["calibration_sqnr_db"][meta["check"]["kept"]]
    assert floor["sqnr_db"] < 3 and _evaluated(spread, path) < 3
    assert "int16" not in meta["tensors"]["dtypes"]


def test_recovery_gives_the_stem_output_16_bits_and_the_floor_holds(spread, quantized):
    meta, path = quantized["recovered"]
    floor = meta["fidelity_floor"]
    assert set(floor) == {"floor_db", "sqnr_db", "check_feeds", "held", "recovered",
                          "sqnr_db_after", "layers", "steps", "seconds"}
    assert floor["held"] is True and floor["recovered"] is True and floor["sqnr_db"] < 3
    # litert-torch made the one-channel stem conv a DEPTHWISE_CONV_2D: the file's op 1
    (layer,) = floor["layers"]
    assert set(layer) == LAYER_KEYS and layer["precision"] == "16-bit"
    assert (layer["node"], layer["op"]) == ("op 1", "DEPTHWISE_CONV_2D")
    assert layer["alone_sqnr_db"] < 3
    widened, back = floor["steps"]   # one move lifts it; taking it back loses the floor
    assert set(widened) == set(back) == STEP_KEYS
    assert (widened["node"], widened["to"], widened["kept"]) == ("op 1", "16-bit", True)
    assert widened["sqnr_db_before"] == floor["sqnr_db"]
    assert widened["sqnr_db_after"] == floor["sqnr_db_after"] >= 20 > DEFAULT_FLOOR_DB
    assert (back["to"], back["kept"]) == ("8-bit", False)
    assert back["sqnr_db_after"] < DEFAULT_FLOOR_DB
    # the stem's output and the depthwise conv's input and output in int16; no op float
    assert meta["tensors"]["dtypes"]["int16"] == 3 and meta["float_ops"] == {}


def test_the_mixed_file_runs_in_litert_as_apps_open_it_and_keeps_int8_io(spread, quantized):
    """On digits neither the calibration nor the check saw, through the default op
    resolver and XNNPACK: int16x8 kernels for the two convolutions, QUANTIZE ops where
    int8 meets int16, the inputs and outputs int8 as before."""
    from ai_edge_litert.interpreter import Interpreter

    from compress.quant.tflite.graph import op_name
    from compress.quant.passes.fidelity_floor.tflite import read
    (meta, path), (_, ruined) = quantized["recovered"], quantized["not"]
    evaluated = _evaluated(spread, path)
    # (14.9 dB against 23.4 on the check's feeds: there, outputs beyond the calibrated
    # ranges are clipped, 16 bits or not)
    assert evaluated >= DEFAULT_FLOOR_DB + 3 and evaluated > _evaluated(spread, ruined) + 10
    model = read(path.read_bytes())
    ops = [op_name(model, op) for op in model.subgraphs[0].operators]
    assert ops == ["RESHAPE", "QUANTIZE", "DEPTHWISE_CONV_2D", "DEPTHWISE_CONV_2D", "QUANTIZE",
                   "CONV_2D", "MEAN", "FULLY_CONNECTED"]
    opened = Interpreter(model_path=str(path))
    assert {np.dtype(d["dtype"]).name for d in (*opened.get_input_details(),
                                               *opened.get_output_details())} == {"int8"}


def test_the_stem_output_costs_most_alone_and_only_its_whole_group_recovers(spread, quantized,
                                                                            tmp_path):
    """Quantized alone in the float file, the stem output leaves the logits near 0 dB and
    every other int8 activation above the floor (the pooled features, the least, 18 dB). Given 16 bits, its producer alone or
    its reader alone change nothing (a QUANTIZE op takes the tensor back to int8, or up
    from it); both together recover the model."""
    from compress.quant.passes.fidelity_floor import tflite as recovery
    from compress.quant.passes.fidelity_floor.mixed_precision import SIXTEEN_BIT
    from compress.quant.passes.tflite_backend import scores
    from export.tflite import quantize_int8, quantize_mixed
    float_bytes, (_, ruined) = spread["path"].read_bytes(), quantized["not"]
    feeds = [{INPUT: spread["evaluation"][i:i + 1]} for i in range(0, 96, 12)]
    from compress.model.run import run_feeds
    reference = run_feeds(spread["path"], None, feeds)
    costs = recovery.ranked(float_bytes, ruined.read_bytes(), feeds, reference, tmp_path)
    (stem, cost), others = costs[0], costs[1:]
    assert (stem.producer, cost < 3) == ("op 1", True) and all(c > 15 for _, c in others)
    assert [op for _, op in stem.ops] == ["DEPTHWISE_CONV_2D"] * 2 and stem.bits == 8
    ranges = quantize_int8(spread["path"], {"minmax": tmp_path / "int8.tflite"},
                           [{INPUT: spread["calibration"][i:i + 1]} for i in range(300)])
    group = recovery.recipe({stem: SIXTEEN_BIT})   # its producer first, then its reader
    producer, reader = (dict([entry]) for entry in group.items())
    found = {}
    for name, ops in (("int8", {}), ("producer", producer), ("reader", reader),
                      ("group", group)):
        quantize_mixed(spread["path"], ranges["minmax"], tmp_path / f"{name}.tflite", ops)
        found[name] = (tmp_path / f"{name}.tflite").read_bytes()
    found = scores(found, feeds, reference, tmp_path)
    assert max(found["int8"], found["producer"], found["reader"]) < 3 < 25 < found["group"]


def test_an_op_without_16_bit_activations_goes_float():
    """ai-edge-quantizer's own policy says which ops take int16 activations: the
    convolutions, ADD, MUL, LOGISTIC do; HARD_SWISH does not (its group's step is float)."""
    from compress.quant.passes.fidelity_floor.tflite import _widens
    assert all(map(_widens, ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "ADD", "MUL",
                             "LOGISTIC", "CONV_2D_TRANSPOSE")))
    assert not _widens("HARD_SWISH")


def test_above_the_floor_the_file_is_left_as_kept_and_off_records_nothing(spread, tmp_path):
    meta, _ = _stage(spread, tmp_path / "low", floor_db=-50.0)
    assert meta["fidelity_floor"]["held"] is True and "steps" not in meta["fidelity_floor"]
    assert "int16" not in meta["tensors"]["dtypes"]
    off, _ = _stage(spread, tmp_path / "off", floor_db=None)
    assert "fidelity_floor" not in off


def test_export_tflite_carries_the_floor_settings():
    from compress.stages.export_tflite import ExportTflite
    config = ExportTflite(mode="int8")
    assert (config.floor_db, config.recover) == (DEFAULT_FLOOR_DB, True)


def test_the_report_renders_the_tflite_record(quantized):
    from compress.report.html_quality import quality_section
    from compress.report.md_floor import floor_details
    recovered = quantized["recovered"][0]
    text = "\n".join(floor_details({"artifacts": [{"id": "int8", "meta": recovered}]}))
    assert "### int8: fidelity floor 10 dB" in text and "(the floor holds)" in text
    assert "- the output of op 1 (DEPTHWISE\\_CONV\\_2D): " in text
    assert "16-bit activations (quantized alone, it left the outputs at" in text
    page = quality_section({"benchmarks": [], "artifacts": [{"id": "int8", "meta": recovered}]})
    assert "int8: the fidelity floor" in page and "16-bit" in page


def test_the_int16x8_layers_are_rounded_and_corrected_too(spread, quantized):
    """The mixed file's two int16x8 convolutions (int64 biases, int16 inputs) are layers
    the fast correction and GPTQ take, as the int8 ones: the kept candidate's passes are
    made again on each file the recovery tries."""
    from compress.quant.passes.tflite_candidates import variants
    from compress.quant.tflite.graph import bias_views, correctable_layers
    float_bytes, mixed = spread["path"].read_bytes(), quantized["recovered"][1].read_bytes()
    layers = correctable_layers(float_bytes, mixed)
    assert [np.dtype(layer.bias_dtype).name for layer in layers] == [
        "int64", "int64", "int32", "int32"]
    feeds = [{INPUT: spread["calibration"][i:i + 1]} for i in range(0, 300, 5)]
    made, report = variants(float_bytes, {"": mixed}, feeds, [("gptq", True)])
    assert report["candidates"][("", "gptq", True)]["layers_corrected"] == 4
    assert report["candidates"][("", "gptq", True)]["layers_rounded"] == 4
    before = bias_views(bytearray(mixed), layers[:2])
    after = bias_views(bytearray(made[("", "gptq", True)]), layers[:2])
    assert all(b.dtype == np.int64 and not np.array_equal(a, b) for a, b in zip(before, after))
