import numpy as np
import onnx
import pytest

import compress
from compress.errors import StageError
from runtimes import load
from tests.conftest import assert_only_finished_stages, pipeline_dict, write_pipeline


def test_dynamic_batch_export_runs_any_batch(project):
    data = pipeline_dict(stages=[{"type": "export.onnx", "opset": 18}], targets=[])
    data["model"]["dynamic_batch"] = True
    result = compress.run(write_pipeline(project, data))
    exported = result.artifacts[-1]
    assert exported.meta["opset"] == 18
    assert exported.meta["parity"]["worst"]["max_abs_error"] < 1e-4
    proto = onnx.load(str(result.run_dir / exported.path))
    assert not proto.graph.initializer or all(not i.external_data for i in proto.graph.initializer)
    with load(str(result.run_dir / exported.path)) as session:
        assert session.inputs[0].shape[0] is None
        out = session.run({"image": np.zeros((5, 1, 8, 8), np.float32)})[0]
    assert out.shape == (5, 10)


def test_parity_failure_names_the_output_and_its_error(project):
    data = pipeline_dict(stages=[{"type": "export.onnx", "atol": 1e-15, "rtol": 1e-15}], targets=[])
    with pytest.raises(StageError, match=r"stage 1 \(export.onnx\): ONNX output 'output' differs from torch by"):
        compress.run(write_pipeline(project, data))
    assert_only_finished_stages(project / "runs", ["00-source"])
