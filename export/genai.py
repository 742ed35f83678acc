"""A causal LM with its KV cache as ONNX, through onnxruntime-genai's model builder: a
Hugging Face folder in, a model folder out (model.onnx, its weights, genai_config.json,
the tokenizer), which onnxruntime-genai runs (runtimes/lm/genai.py).

The builder runs as its own process (`python -m onnxruntime_genai.models.builder`), as a
user would run it (through genai_compat.py for a config it does not read as written): it
loads torch and transformers and holds the whole model in memory, which the pipeline's
process then gives back. It writes into a `.partial` folder renamed at the end, so a
failed build leaves nothing that looks finished.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

PRECISIONS = ("fp32", "fp16", "int8", "int4")


class BuildFailed(Exception):
    """The builder refused the model or failed; the message ends with its last output."""


def _builder(hf_folder: Path) -> list[str]:
    """The builder's command; through genai_compat.py where the config keeps its RoPE
    settings per attention type, a form the builder (0.18) does not read."""
    from export.genai_compat import per_attention_type
    config = json.loads((hf_folder / "config.json").read_text())
    if per_attention_type(config.get("rope_parameters")):
        return ["-m", "export.genai_compat"]
    return ["-m", "onnxruntime_genai.models.builder"]


def build_genai(hf_folder: str | Path, out: str | Path, precision: str = "fp32",
                extra_options: dict | None = None, cache: str | Path | None = None,
                target_options: dict | None = None) -> Path:
    """`hf_folder` (config.json, weights, tokenizer) built into `out` for the CPU.
    `target_options`: the builder's structured options, e.g. a weight type per node
    ({"quant_config": {"weights": {"type": "int4", "overrides": [{"match": {"name":
    "/lm_head/MatMul"}, "type": "int8"}]}}})."""
    hf_folder, out = Path(hf_folder), Path(out)
    if precision not in PRECISIONS:
        raise BuildFailed(f"precision {precision!r} is not one the builder makes for the "
                          f"CPU: {', '.join(PRECISIONS)}")
    if not (hf_folder / "config.json").is_file():
        raise BuildFailed(f"{hf_folder} is not a Hugging Face model folder (no config.json)")
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    command = [sys.executable, *_builder(hf_folder), "-i", str(hf_folder),
               "-o", str(partial), "-p", precision, "-e", "cpu",
               "-c", str(cache or partial.with_name(partial.name + "-cache"))]
    if target_options:
        command += ["--target_options", json.dumps(target_options)]
    if extra_options:
        command += ["--extra_options", *(f"{k}={v}" for k, v in extra_options.items())]
    # GIT_DIR: the builder stamps its version with `git rev-parse HEAD` run five folders
    # above its module, which inside a checkout is the checkout's commit, not its own: the
    # same model built at two commits would differ there. Without a repository it stamps
    # the commit its wheel records
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "GIT_DIR": os.devnull}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode or not (partial / "genai_config.json").is_file():
        shutil.rmtree(partial, ignore_errors=True)
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise BuildFailed(f"onnxruntime-genai's model builder failed on {hf_folder} "
                          f"(exit {done.returncode}):\n{tail}")
    if cache is None:
        shutil.rmtree(partial.with_name(partial.name + "-cache"), ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    return out
