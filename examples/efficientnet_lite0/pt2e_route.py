"""The other full-int8 route, for comparison: PT2E quantization in torch before conversion
(litert-torch's PT2EQuantizer), against the export.tflite stage's route (ai-edge-quantizer
after conversion), on the same photo crops.

Run `compress run examples/efficientnet_lite0/tflite.yaml` first (it makes the fp32 and
int8 .tflite files this compares with), then:

    python examples/efficientnet_lite0/pt2e_route.py

It builds two PT2E models (torch.export with strict=False, torch 2.13's default, and with
strict=True, which lets the quantizer find the residual additions), then prints float32
tensor counts, PAD and TRANSPOSE operator counts, top-1 agreement and cosine with the
torch model on the 105 evaluation crops, file sizes, and LiteRT latency measured
interleaved (200 rounds, 2 threads).
Each PT2E build calibrates on 280 crops and takes a few minutes on 2 cores.
"""
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("LITERT_TORCH_SHOW_PROGRESS", "n")
HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(HERE), str(REPO)]

import numpy as np  # noqa: E402
import torch  # noqa: E402

from export.tflite import tensor_report  # noqa: E402
from model import build  # noqa: E402
from photos import calibration, evaluation  # noqa: E402
from runtimes.loader import load  # noqa: E402
from runtimes.metrics import fidelity  # noqa: E402

RUN = REPO / "runs" / "efficientnet_lite0_tflite"
OUT = REPO / "runs" / "pt2e_route"


def pad_and_transpose_ops(path: Path) -> tuple[int, int]:
    """How many PAD and TRANSPOSE operators the .tflite file runs."""
    from ai_edge_litert import schema_py_generated as schema
    model = schema.ModelT.InitFromObj(schema.Model.GetRootAs(path.read_bytes(), 0))
    codes = [max(model.operatorCodes[op.opcodeIndex].builtinCode,
                 model.operatorCodes[op.opcodeIndex].deprecatedBuiltinCode)
             for op in model.subgraphs[0].operators]
    return codes.count(schema.BuiltinOperator.PAD), codes.count(schema.BuiltinOperator.TRANSPOSE)


def build_pt2e(model, calib: np.ndarray, strict: bool, path: Path) -> None:
    import litert_torch
    from litert_torch.quantize.pt2e_quantizer import (PT2EQuantizer,
                                                      get_symmetric_quantization_config)
    from litert_torch.quantize.quant_config import QuantConfig
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    example = (torch.from_numpy(calib[:1]),)
    graph = torch.export.export(model, example, strict=strict).module()
    quantizer = PT2EQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=True, is_dynamic=False))
    graph = prepare_pt2e(graph, quantizer)
    with torch.no_grad():
        for i in range(len(calib)):
            graph(torch.from_numpy(calib[i:i + 1]))
    graph = convert_pt2e(graph, fold_quantize=False)
    litert_torch.convert(graph, example, quant_config=QuantConfig(pt2e_quantizer=quantizer)
                         ).export(str(path))


def main() -> None:
    torch.set_num_threads(2)
    models = {"fp32 (no quantization)": RUN / "03-tflite-fp32" / "model.tflite",
              "ai-edge-quantizer (export.tflite)": RUN / "05-tflite-int8" / "model.tflite"}
    missing = [str(p) for p in models.values() if not p.is_file()]
    if missing:
        raise SystemExit(f"run `compress run examples/efficientnet_lite0/tflite.yaml` first "
                         f"(missing {', '.join(missing)})")
    OUT.mkdir(parents=True, exist_ok=True)
    model = build().eval()
    calib, images = calibration()["images"], evaluation()["images"]
    for strict in (False, True):
        path = OUT / f"pt2e_strict_{strict}.tflite"
        if not path.is_file():
            started = time.time()
            build_pt2e(model, calib, strict, path)
            print(f"built {path.name} in {time.time() - started:.0f} s", flush=True)
        models[f"PT2E, torch.export strict={strict}"] = path
    with torch.no_grad():
        reference = model(torch.from_numpy(images)).numpy()

    sessions = {name: load(str(path), threads=2) for name, path in models.items()}
    rows = {}
    for name, session in sessions.items():
        feed_name = session.inputs[0].name
        outputs = np.concatenate([session.run({feed_name: images[i:i + 1]})[0]
                                  for i in range(len(images))])
        rows[name] = {"fidelity": fidelity(outputs, reference),
                      "float32": len(tensor_report(models[name])["float32_tensors"]),
                      "size": models[name].stat().st_size, "times": [],
                      "pad_transpose": pad_and_transpose_ops(models[name])}
        for _ in range(30):  # warm-up
            session.run({feed_name: images[:1]})
    names = list(sessions)
    for k in range(200):  # interleaved, order rotated, so drift hits every model alike
        for name in names[k % len(names):] + names[:k % len(names)]:
            session = sessions[name]
            started = time.perf_counter()
            session.run({session.inputs[0].name: images[:1]})
            rows[name]["times"].append((time.perf_counter() - started) * 1e3)
    print("\n| route | float32 tensors | PAD / TRANSPOSE ops | top-1 agreement | cosine | "
          "size MB | p50 ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, row in rows.items():
        f = row["fidelity"]
        pads, transposes = row["pad_transpose"]
        print(f"| {name} | {row['float32']} | {pads} / {transposes} | "
              f"{f['top1_agreement']:.3f} | {f['cosine']:.4f} | "
              f"{row['size'] / 1e6:.2f} | {np.median(row['times']):.2f} |")


if __name__ == "__main__":
    main()
