"""EfficientNet-Lite0 and its photo crops, as examples/efficientnet_lite0 defines them
(the model from the registry's weights; calibration and evaluation crops of real photos)."""
import importlib.util
from pathlib import Path

_HERE = Path(__file__).resolve().parent.parent / "efficientnet_lite0"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_efficientnet_lite0_{name}",
                                                  _HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = _load("model").build
_photos = _load("photos")
calibration, evaluation = _photos.calibration, _photos.evaluation
