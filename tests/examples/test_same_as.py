"""examples/same_as: what counts as the same file. An ONNX file is the same model whatever
source notes the torch exporter wrote on its nodes (inside subgraphs too); a changed weight
or operator is not the same."""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "examples" / "same_as"))
import same_as  # noqa: E402


def _model(path, weight=1.0, note="a.py, line 1", op="Relu"):
    """x * w -> op, and an If whose branch holds a node with a note too."""
    w = numpy_helper.from_array(np.full((2,), weight, np.float32), "w")
    mul = helper.make_node("Mul", ["x", "w"], ["y"], name="mul")
    act = helper.make_node(op, ["y"], ["z"], name="act")
    inner = helper.make_node("Identity", ["z"], ["b"], name="inner")
    branch = helper.make_graph([inner], "branch", [], [helper.make_tensor_value_info(
        "b", TensorProto.FLOAT, [2])])
    cond = helper.make_node("If", ["c"], ["out"], then_branch=branch, else_branch=branch)
    for node in (mul, act, inner):
        entry = node.metadata_props.add()
        entry.key, entry.value = "pkg.torch.onnx.stack_trace", f'File "{note}"'
        entry = node.metadata_props.add()
        entry.key, entry.value = "namespace", f"{note}/{node.name}"
    graph = helper.make_graph(
        [mul, act, cond], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def test_the_exporters_source_notes_do_not_count(tmp_path):
    one = _model(tmp_path / "one.onnx", note="/home/a/model.py, line 3")
    two = _model(tmp_path / "two.onnx", note="/tmp/copy/model.py, line 9")
    assert one.read_bytes() != two.read_bytes()
    assert same_as.content_sha256(one) == same_as.content_sha256(two)


def test_the_producers_version_stamp_does_not_count(tmp_path):
    """onnxruntime-genai's builder stamps producer_version with the commit of the checkout
    it is installed in: two commits' builds of the same model differ there alone."""
    stamped = []
    for commit in ("fa22119", "a351265"):
        model = onnx.load(str(_model(tmp_path / "m.onnx")))
        model.producer_version = f"0.18.0+{commit}"
        onnx.save(model, str(tmp_path / f"{commit}.onnx"))
        stamped.append(tmp_path / f"{commit}.onnx")
    assert stamped[0].read_bytes() != stamped[1].read_bytes()
    assert same_as.content_sha256(stamped[0]) == same_as.content_sha256(stamped[1])


def test_a_changed_weight_or_operator_counts(tmp_path):
    base = same_as.content_sha256(_model(tmp_path / "base.onnx"))
    assert same_as.content_sha256(_model(tmp_path / "w.onnx", weight=2.0)) != base
    assert same_as.content_sha256(_model(tmp_path / "op.onnx", op="Sigmoid")) != base


def test_other_files_are_compared_byte_for_byte(tmp_path):
    (tmp_path / "a.tflite").write_bytes(b"TFL3 one")
    (tmp_path / "b.tflite").write_bytes(b"TFL3 two")
    assert (same_as.content_sha256(tmp_path / "a.tflite")
            != same_as.content_sha256(tmp_path / "b.tflite"))


def test_differences_name_where_and_what():
    before = {"anchors: m": {"pipeline": {"sha256": "a", "fidelity": {"sqnr_db": 30.0}}}}
    after = {"anchors: m": {"pipeline": {"sha256": "a", "fidelity": {"sqnr_db": 29.0}}},
             "anchors: n": {}}
    assert same_as.differences(before, after) == [
        "/anchors: m/pipeline/fidelity/sqnr_db: 30.0 -> 29.0", "/anchors: n: only in this tree"]
    assert same_as.differences(before, before) == []


def test_weights_in_a_data_file_count_and_their_layout_does_not(tmp_path):
    inline = same_as.content_sha256(_model(tmp_path / "inline.onnx"))

    def external(name, weight):
        model = onnx.load(str(_model(tmp_path / f"{name}-src.onnx", weight=weight)))
        onnx.save(model, str(tmp_path / f"{name}.onnx"), save_as_external_data=True,
                  all_tensors_to_one_file=True, location=f"{name}.data", size_threshold=0)
        return same_as.content_sha256(tmp_path / f"{name}.onnx")
    assert external("same", 1.0) == inline
    assert external("other", 2.0) != inline


def test_a_benchmark_on_another_engine_is_named_not_compared():
    """host-cpu's engine is the fastest as measured: where two runs pick apart, the metric
    is another engine's run's and leaves both fingerprints; the same engine is compared."""
    metric = {"top1_agreement": 1.0}
    before = {"conformance: m": {"metrics": {"int8@host-cpu@openvino": metric,
                                             "fp32@host-cpu@onnxruntime": metric}}}
    after = {"conformance: m": {"metrics": {"int8@host-cpu@onnxruntime": metric,
                                            "fp32@host-cpu@onnxruntime": {"top1_agreement": 0.5}}}}
    assert same_as.engines_apart(before, after) == [
        "conformance: m/int8@host-cpu: measured on openvino in the reference, onnxruntime here"]
    assert same_as.differences(before, after) == [
        "/conformance: m/metrics/fp32@host-cpu@onnxruntime/top1_agreement: 1.0 -> 0.5"]


def _report(sha="a1", kl=0.004, p90=12.0, baseline_model="/runs/x/01-float/model"):
    """A language-model run's report.json as the pipeline writes it (two of its rows)."""
    return {"artifacts": [{"id": "int8", "format": "genai", "precision": "int8",
                           "size_bytes": 270524389, "sha256": sha, "path": "02-int8/model",
                           "meta": {"seconds": 31.0}}],
            "benchmarks": [{"artifact": "int8", "target": "host-cpu",
                            "engine": "onnxruntime-genai", "latency_p90_ms": p90,
                            "metric": {"name": "perplexity", "value": 14.338, "kl_mean": kl,
                                       "baseline_model": baseline_model}}]}


def test_two_runs_differ_by_their_files_and_fidelity_not_their_timings_or_paths():
    """examples/same_as/runs.py: a forced run or another commit's run of a language-model
    example is the same when its files' sha256 and fidelity figures are."""
    import runs
    same = runs.made(_report(p90=19.0, baseline_model="/tmp/ref/runs/x/01-float/model"))
    assert same_as.differences(runs.made(_report()), same) == []
    assert same_as.differences(runs.made(_report()), runs.made(_report(sha="b2"))) == [
        "/artifacts/int8/sha256: 'a1' -> 'b2'"]
    assert same_as.differences(runs.made(_report()), runs.made(_report(kl=0.005))) == [
        "/fidelity/int8@host-cpu@onnxruntime-genai/kl_mean: 0.004 -> 0.005"]
