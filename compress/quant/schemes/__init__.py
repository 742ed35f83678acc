"""The quantization schemes, a registry like the stages': one module per scheme holds its
settings class (chosen by `scheme:` in the quantize stage) and its registration, the
functions that make it, one per back end, each with one signature:

    onnx(source, target, config, ctx, exclude, shared) -> meta
        onnxruntime on a prepared ONNX file; `exclude`: node names kept in float (the
        accuracy-aware search adds some), `shared`: a dict kept between the search's
        calls on one model (int8-static's calibrated ranges)
    streamed(header, target, config, ctx, exclude, shared) -> meta
        the same, tensor by tensor, for a model too large to hold (compress/quant/streamed/backends.py)
    torch(ctx, artifact, config, target) -> meta
        from a torch model to an ONNX one (PT2E QAT, neural-compressor)

and, for a TFLite source, the ai-edge-quantizer mode the scheme maps to. Importing this
package imports every module in it: adding a scheme is one module here, its settings
class and `@register_scheme(...)` over its onnx function. The quantize stage's union of
settings classes is built from the registry (scheme_configs).

    base.py              What the schemes share: QuantizeBase, the mixins of settings several have, ...
    fp16.py              fp16: half-precision weights and compute for GPU targets ...
    gguf_type.py         gguf: one of llama.cpp's own types (Q8_0, Q4_K_M, Q4_0 ...) made by its ...
    int4_weight_only.py  int4-weight-only: 4-bit block-wise MatMul (and embedding) weights, ...
    int8_dynamic.py      int8-dynamic: int8 weights, activations quantized at run time ...
    int8_qat.py          int8-qat: quantization-aware training of a torch model (PT2E) ...
    int8_static.py       int8-static: QDQ with calibrated activation ranges and the INT8 passes ...
    lm_weight_only.py    lm-weight-only: a causal language model's weights at 8 or 4 bits, or a measured mix ...
    registry.py          SCHEMES: what each scheme registers (settings, precision, back ends) ...
"""
import importlib
import pkgutil

from compress.quant.schemes.registry import (SCHEMES, SchemeSpec, register_scheme,  # noqa: F401
                                             scheme_configs, scheme_of_setting)

for _module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    importlib.import_module(f"{__name__}.{_module.name}")

from compress.quant.schemes.base import DEFAULT_BIAS_METHOD, bias_method  # noqa: E402,F401

SCHEME_CONFIGS = scheme_configs()
