"""One module per stage type; importing this package registers all of them."""
from compress.stages import benchmark, export_onnx, quantize  # noqa: F401
