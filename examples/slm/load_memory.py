"""Where an onnxruntime-genai folder's resident memory goes: its model.onnx loaded by
onnxruntime alone (the session onnxruntime-genai makes, without genai), with MatMulNBits'
weight prepacking on (onnxruntime's default) and off, each in a fresh process: resident
memory before loading, after loading (and how much of it is anonymous, i.e. copies, not
the mapped file) and at the peak of one prefill of `--tokens` ids from an empty cache.

    python examples/slm/load_memory.py runs/smollm2/03-int4/model [--tokens 128]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, sys
import numpy as np
import onnxruntime as ort

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024

def anonymous():
    for line in open("/proc/self/smaps_rollup"):
        if line.startswith("Anonymous:"):
            return int(line.split()[1]) / 1024

folder, prepack, tokens = sys.argv[1], sys.argv[2] == "on", int(sys.argv[3])
config = json.load(open(folder + "/genai_config.json"))["model"]["decoder"]
base = status("VmRSS")
options = ort.SessionOptions()
options.intra_op_num_threads = 1
if not prepack:
    options.add_session_config_entry("session.disable_prepacking", "1")
session = ort.InferenceSession(folder + "/model.onnx", options, providers=["CPUExecutionProvider"])
loaded, loaded_anonymous = status("VmRSS"), anonymous()
empty = np.zeros((1, config["num_key_value_heads"], 0, config["head_size"]), np.float32)
feed = {"input_ids": np.arange(1, tokens + 1, dtype=np.int64)[None],
        "attention_mask": np.ones((1, tokens), np.int64)}
for i in session.get_inputs():
    if i.name.startswith("past_key_values"):
        feed[i.name] = empty
session.run(["logits"], feed)
print(json.dumps({"prepack": prepack, "base_mb": base, "loaded_mb": loaded,
                  "loaded_anonymous_mb": loaded_anonymous, "peak_mb": status("VmHWM")}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()
    weights = sum(p.stat().st_size for p in args.folder.glob("model.onnx*")) / 2**20
    print(f"{args.folder}: weights {weights:.1f} MiB; one {args.tokens}-token prefill")
    print("| prepacking | base MB | loaded MB (anonymous) | peak MB | (peak - base) / weights |")
    print("|---|---:|---:|---:|---:|")
    for prepack in ("on", "off"):
        done = subprocess.run([sys.executable, "-c", CHILD, str(args.folder), prepack,
                               str(args.tokens)], capture_output=True, text=True, check=True)
        r = json.loads(done.stdout.splitlines()[-1])
        print(f"| {prepack} | {r['base_mb']:.0f} | {r['loaded_mb']:.0f} "
              f"({r['loaded_anonymous_mb']:.0f}) | {r['peak_mb']:.0f} | "
              f"{(r['peak_mb'] - r['base_mb']) / weights:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
