"""compress/quant/lm/gptq.py and quant/nbits_pack.py: neural-compressor's 4-bit integers
moved into onnxruntime's MatMulNBits, a fused node (q, k and v side by side) made of
several modules, and the ONNX node then computes what the INC modules compute; a weight
that is not made of INC modules is left to the builder."""
import numpy as np
import pytest

pytest.importorskip("neural_compressor.torch.quantization", reason="the inc extra is not installed")
torch = pytest.importorskip("torch")


class Attention(torch.nn.Module):
    """Three projections of one input, as a transformer layer's q, k and v."""

    def __init__(self):
        super().__init__()
        self.q = torch.nn.Linear(64, 32, bias=False)
        self.k = torch.nn.Linear(64, 16, bias=False)
        self.v = torch.nn.Linear(64, 16, bias=False)

    def forward(self, x):
        return torch.cat([self.q(x), self.k(x), self.v(x)], dim=-1)


def _inc_modules(symmetric: bool):
    from neural_compressor.torch.quantization import RTNConfig, convert, prepare
    torch.manual_seed(0)
    model = Attention().eval()
    quantized = convert(prepare(model, RTNConfig(bits=4, group_size=32, use_sym=symmetric)))
    modules = {n: m for n, m in quantized.named_modules()
               if type(m).__name__ == "INCWeightOnlyLinear"}
    return quantized, modules


def _folders(tmp_path, modules):
    """The FP32 file (the fused weight, as the builder writes it) and an INT4 file of it
    (onnxruntime's own rounding, as the builder's INT4), in two genai-style folders."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    fused = np.concatenate([modules[n].recover().float().numpy().T for n in "qkv"], axis=1)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="/attn/qkv_proj/MatMul")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        [numpy_helper.from_array(fused.astype(np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    fp32, int4 = tmp_path / "fp32", tmp_path / "int4"
    fp32.mkdir()
    int4.mkdir()
    onnx.save(model, str(fp32 / "model.onnx"))
    quantizer = MatMulNBitsQuantizer(model, bits=4, block_size=32, is_symmetric=True)
    quantizer.process()
    onnx.save(quantizer.model.model, str(int4 / "model.onnx"))
    return fp32, int4


def _exact(module) -> np.ndarray:
    """A module's weight from its integers, scales and zero points, in float64 (its own
    recover() multiplies in float16)."""
    unpacked = module.unpack()
    values = unpacked["int_weight"].numpy().astype(np.float64)
    scales = np.repeat(unpacked["scales"].float().numpy().astype(np.float64), 32, axis=1)
    zero = unpacked.get("zp")
    if zero is not None:
        values -= np.repeat(zero.numpy().astype(np.float64), 32, axis=1)
    return values * scales


@pytest.mark.parametrize("symmetric", [True, False])
def test_a_fused_node_computes_what_the_inc_modules_compute(tmp_path, symmetric):
    import onnxruntime as ort

    from compress.quant.lm.gptq import transplant
    _, modules = _inc_modules(symmetric)
    fp32, int4 = _folders(tmp_path, modules)
    x = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)
    expected = np.concatenate([x @ _exact(modules[n]).T for n in "qkv"], axis=1)
    before = ort.InferenceSession(str(int4 / "model.onnx")).run(None, {"x": x})[0]
    assert transplant(fp32, int4, modules) == 1
    after = ort.InferenceSession(str(int4 / "model.onnx")).run(None, {"x": x})[0]
    assert np.abs(after - expected).max() < 1e-5 * np.abs(expected).max()
    if not symmetric:   # onnxruntime's symmetric rounding is not INC's asymmetric one
        assert np.abs(before - expected).max() > 1e-3 * np.abs(expected).max()


def test_a_weight_not_made_of_inc_modules_is_left_alone(tmp_path):
    from compress.quant.lm.gptq import transplant
    _, modules = _inc_modules(True)
    fp32, int4 = _folders(tmp_path, modules)
    _, others = _inc_modules(False)      # the same shapes, other weights
    untouched = (int4 / "model.onnx").read_bytes()
    assert transplant(fp32, int4, {"q": others["q"], "k": modules["k"]}) == 0
    assert (int4 / "model.onnx").read_bytes() == untouched


def test_stacked_parts_must_share_their_inputs():
    from compress.quant.nbits_pack import NBitsTensors, stacked
    a = NBitsTensors(np.zeros((2, 1, 16), np.uint8), np.ones(2, np.float32), None, 2, 32, 32)
    b = NBitsTensors(np.zeros((2, 2, 16), np.uint8), np.ones(4, np.float32), None, 2, 64, 32)
    with pytest.raises(ValueError, match="share their inputs"):
        stacked([a, b])
    assert stacked([a, a]).n == 4 and stacked([a, a]).packed.shape == (4, 1, 16)
