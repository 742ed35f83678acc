"""A device install (`edge-compress[device]`) must not pull torch or the pipeline's stack."""
import tomllib

from tests.conftest import REPO

HOST_ONLY = ("torch", "pydantic", "onnxscript", "torch-pruning", "rich", "pyyaml", "litert-torch")


def _name(requirement: str) -> str:
    return requirement.split(";")[0].split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip()


def test_device_install_has_no_torch():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    device = {_name(r) for r in project["dependencies"] + project["optional-dependencies"]["device"]}
    assert device >= {"numpy", "onnxruntime", "ai-edge-litert", "psutil"}
    assert not device & set(HOST_ONLY)
    pipeline = {_name(r) for r in project["optional-dependencies"]["pipeline"]}
    assert {"torch", "pydantic", "onnx", "onnxruntime"} <= pipeline


def test_cli_on_a_device_install_names_the_missing_extra():
    import subprocess
    import sys
    block = ("import sys\n"
             "class _Missing:\n"
             "    def find_spec(self, name, path=None, target=None):\n"
             "        if name.split('.')[0] == 'pydantic':\n"
             "            raise ModuleNotFoundError(\"No module named 'pydantic'\", name='pydantic')\n"
             "sys.meta_path.insert(0, _Missing())\n"
             "from compress.cli import main\n"
             "sys.exit(main(['validate', 'examples/quickstart/pipeline.yaml']))\n")
    child = subprocess.run([sys.executable, "-c", block], cwd=REPO, capture_output=True, text=True)
    assert child.returncode == 2
    assert "edge-compress[pipeline]" in child.stderr and "Traceback" not in child.stderr
