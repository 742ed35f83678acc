"""Shared fixtures: a real CNN trained on real data (scikit-learn's digits), and helpers
to write pipeline files around it. Nothing here touches the network."""
from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "examples" / "quickstart"

# A pipeline that is not about the INT8 model's quality quantizes without int8-static's
# refinements (the fast bias correction, GPTQ weight rounding, the check that keeps the
# better of them, hard-swish equalization): quantize_static's own ranges and rounding, in
# a fraction of the stage's time. tests/compress/quant/ holds the refinements to their
# quality.
FAST_INT8 = {"bias_correction": False, "weight_rounding": "nearest",
             "equalize_hard_swish": False}
# export.tflite mode int8 likewise: one range estimator, neither rounding nor correction
FAST_TFLITE_INT8 = {"bias_correction": False, "weight_rounding": "nearest",
                    "activation_ranges": "minmax"}

# export.onnx through torch's TorchScript exporter: an equivalent graph of the digits CNN in a
# fifth of the dynamo exporter's time (the stage took 1.5 s against 7.1 s, one run each of
# the base pipeline here). tests/export/ and the shared quickstart run keep the default.
FAST_EXPORT = {"type": "export.onnx", "exporter": "legacy"}

# The quickstart pipeline, made quick: few timed runs in one round, one target, the fast
# INT8 setting.
BASE_PIPELINE = {
    "name": "t",
    "model": {"torch": {"factory": "model:build", "checkpoint": "digits_cnn.pt"},
              "inputs": [{"name": "image", "shape": [1, 1, 8, 8], "dtype": "float32"}]},
    "data": {"calibration": "data:calibration", "evaluation": "data:evaluation",
             "metric": {"type": "accuracy"}},
    "stages": [FAST_EXPORT,
               {"type": "quantize", "scheme": "int8-static", **FAST_INT8},
               {"type": "benchmark", "warmup": 2, "runs": 20, "rounds": 1}],
    "targets": ["host-cpu"],
    "output": "runs",
}


PACKAGES = tuple(str(REPO / name) for name in ("compress", "export", "runtimes", "profiles"))


def _user_module(module) -> bool:
    """A module loaded from a pipeline's folder or an example (model.py, data.py, ...),
    not from the project's packages or the installed libraries."""
    file = getattr(module, "__file__", None) or ""
    return bool(file) and not file.startswith((sys.prefix, sys.base_prefix) + PACKAGES)


@pytest.fixture(autouse=True)
def forget_user_modules():
    """Tests import many different `model.py` files under the one name `model`: a module
    left in sys.modules by one test must not answer another test's `import model`."""
    before = dict(sys.modules)
    yield
    for name, module in list(sys.modules.items()):
        # new, or put in the place of one a session fixture had loaded (the quickstart's
        # model.py): the test's own module goes, the earlier one comes back
        if before.get(name) is not module and _user_module(module):
            if name in before:
                sys.modules[name] = before[name]
            else:
                del sys.modules[name]


def one_torch_thread() -> None:
    """torch on one thread, where it is loaded. The models here are tiny (the digits CNN
    has ~25k weights): a second thread gains next to nothing on them, and on a machine
    whose cores are busy the two wait on each other, several times slower (an epoch of the
    digits CNN on a shared 2-core machine: 0.4 s on one thread, 2.4-3 s on two)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    # before every test and its fixtures, module-scoped ones included, not once: a library
    # a test loads may set torch's threads again, and with test workers on every core two
    # threads wait on each other (the pruning tests, which fine-tune: 87 s instead of 4).
    # The session fixtures that train or export load torch and call one_torch_thread.
    one_torch_thread()


@pytest.fixture(scope="session")
def digits_checkpoint(tmp_path_factory) -> Path:
    """The quickstart CNN, trained for real on the digits training split (~10 s)."""
    sys.path.insert(0, str(QUICKSTART))
    for name in ("model", "data", "train"):  # the quickstart's own, not another test's
        sys.modules.pop(name, None)
    try:
        import torch
        from train import fit
        one_torch_thread()
        model = fit(epochs=8, seed=0)
    finally:
        sys.path.remove(str(QUICKSTART))
    path = tmp_path_factory.mktemp("checkpoint") / "digits_cnn.pt"
    torch.save(model.state_dict(), path)
    return path


@pytest.fixture(scope="session")
def quickstart_onnx(tmp_path_factory, digits_checkpoint) -> Path:
    """The quickstart CNN, trained, exported once with torch.onnx.export."""
    import torch
    sys.path.insert(0, str(QUICKSTART))
    try:
        from model import build
    finally:
        sys.path.remove(str(QUICKSTART))
    model = build()
    model.load_state_dict(torch.load(digits_checkpoint, weights_only=True))
    path = tmp_path_factory.mktemp("quickstart-onnx") / "digits.onnx"
    torch.onnx.export(model.eval(), (torch.zeros(1, 1, 8, 8),), str(path),
                      input_names=["image"], output_names=["logits"], dynamo=False)
    return path


def fill_project(folder: Path, checkpoint: Path) -> Path:
    """Put the quickstart model/data modules and a trained checkpoint into `folder`."""
    for name in ("model.py", "data.py"):
        shutil.copy(QUICKSTART / name, folder / name)
    shutil.copy(checkpoint, folder / "digits_cnn.pt")
    return folder


@pytest.fixture
def project(tmp_path, digits_checkpoint) -> Path:
    """A folder with the quickstart model/data modules and the trained checkpoint."""
    return fill_project(tmp_path, digits_checkpoint)


@pytest.fixture(scope="session")
def quickstart_run(tmp_path_factory, digits_checkpoint):
    """The quickstart pipeline run once for the tests that read a finished run (its report,
    report.html, its verdicts): ONNX, its INT8, the source's TFLite in the mode rpi4's
    profile asks for (full int8), all measured on host-cpu and rpi4. (folder, pipeline
    path, compress.run's result). The `runs` tests that run it again (tests/compress/runner/
    test_pipeline.py) leave it as a run leaves it: every file whole, the reports rewritten."""
    import compress
    folder = fill_project(tmp_path_factory.mktemp("quickstart-run"), digits_checkpoint)
    stages = [{"type": "export.onnx"}, {"type": "quantize", "scheme": "int8-static", **FAST_INT8},
              {"type": "export.tflite", "input": "source", **FAST_TFLITE_INT8},  # mode: rpi4's
              {"type": "benchmark", "warmup": 2, "runs": 20, "rounds": 1}]
    path = write_pipeline(folder, pipeline_dict(targets=["host-cpu", "rpi4"], stages=stages))
    return folder, path, compress.run(path)


# The test modules that read the one quickstart run: one unit of work for pytest-xdist's
# loadscope, so that the run (~20 s) is made by one worker, not by each.
QUICKSTART_RUN_READERS = ("tests/compress/runner/test_pipeline.py",
                          "tests/compress/report/test_report_html.py",
                          "tests/compress/report/test_terminal_lines.py")


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, absent without it
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "quickstart-run" if module in QUICKSTART_RUN_READERS else \
                super()._split_scope(nodeid)
    return Scheduling(config, log)


def pipeline_dict(**overrides) -> dict:
    data = copy.deepcopy(BASE_PIPELINE)
    data.update(overrides)
    return data


def write_pipeline(folder: Path, data: dict, name: str = "pipeline.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def child_env() -> dict:
    """This process's environment (as a test has set it) with one_torch_thread's setting for
    a child: torch and numpy's BLAS read OMP_NUM_THREADS when they load. The runtimes
    measure with the threads they are given (the profile's runtime.threads)."""
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def run_cli(*args, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`python -m compress ...` in a subprocess, as a user would run it."""
    return subprocess.run([sys.executable, "-m", "compress", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=600, env=child_env())


def assert_only_finished_stages(runs: Path, kept: list[str]) -> None:
    """A run that failed in a stage keeps the stages it finished (for a re-run to resume
    from) and nothing half-written: no .partial folder, no report."""
    assert sorted(p.parent.name for p in runs.rglob("stage.json")) == sorted(kept)
    assert not [p for p in runs.rglob("*") if ".partial" in p.name or p.name.startswith("report.")]
