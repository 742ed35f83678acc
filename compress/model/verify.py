"""Every model a stage makes must load and run one call on the engine that will measure
it, before it is committed: a file onnxruntime or LiteRT refuses is reported by the stage
that made it, naming the op or opset at fault, never later by the benchmark."""
from __future__ import annotations

from compress.errors import ModelError
from runtimes import formats


def _run_onnx(output, feed: dict, what: str) -> None:
    from compress.model.onnx_errors import check_runs
    check_runs(output.path, [feed], f"{what} made a model that")


def _run_tflite(output, feed: dict, what: str) -> None:
    from compress.model.run import run_feeds
    from runtimes.errors import RuntimeInputError
    try:
        run_feeds(output.path, None, [feed], nhwc=output.meta.get("channels_last", False))
    except (RuntimeInputError, ValueError, RuntimeError) as exc:
        raise ModelError(f"{what} made a TFLite model that LiteRT cannot run: "
                         f"{' '.join(str(exc).split())[:400]}") from None


def _run_language_model(path, what: str) -> None:
    """A language model's folder or file loads and gives finite logits for a few ids."""
    import numpy as np

    from runtimes.errors import RuntimeInputError
    from runtimes.lm.engines import for_path
    form = for_path(path)[1]
    try:
        logits = form.open(path, 1, all_logits=True, context=16).logits([1, 2, 3, 4])
    except (RuntimeInputError, RuntimeError, ValueError) as exc:
        raise ModelError(f"{what} made a model {form.name} cannot run: "
                         f"{' '.join(str(exc).split())[:400]}") from None
    if not np.isfinite(logits).all():
        raise ModelError(f"{what} made a model whose logits hold NaN or infinity")


def verify_outputs(outputs, ctx, what: str) -> None:
    """Load and run the first feed through each ONNX or TFLite output of a stage, and a
    few token ids through a language model's."""
    for output in outputs:
        if formats.is_language(output.format):
            _run_language_model(output.path, what)
    tensors = [output for output in outputs if output.format in _TENSOR_RUNS]
    feed = ctx.sample_feeds(1)[0][0] if tensors else None
    for output in tensors:
        _TENSOR_RUNS[output.format](output, feed, what)


# a tensor model's one call, per format (an OpenVINO IR is checked by its export stage)
_TENSOR_RUNS = {"onnx": _run_onnx, "tflite": _run_tflite}
