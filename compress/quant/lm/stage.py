"""The quantize stage's lm-weight-only scheme: onnxruntime-genai's builder makes the file
from the model as given (its float Hugging Face folder), at one width, or at the mix of
widths measured on the text (mix.py): each unit's cost at 4 bits on the calibration
ids, the smallest set kept at 8 bits that meets the budget on the evaluation ids."""
from __future__ import annotations

import shutil
from pathlib import Path

from compress.core.artifacts import Output
from compress.errors import ModelError


def _extra_options(config) -> dict:
    """The builder's own options for the scheme's settings (its defaults left out)."""
    options = {"block_size": config.block_size, "is_symmetric": config.symmetric}
    if config.method != "default":
        options["algo_config"] = config.method
    return options


def _route(artifact, ctx):
    from compress.quant.lm.genai_route import GenaiRoute
    if artifact.precision != "fp32" or artifact.format != "genai":
        raise ModelError(f"lm-weight-only builds from the float export: give it the "
                         f"export.genai stage's artifact, not {artifact.id} "
                         f"({artifact.format} {artifact.precision})")
    return GenaiRoute(ctx.path(ctx.source_artifact), ctx.path(artifact), threads=2)


def quantize_lm(artifact, config, ctx) -> list[Output]:
    from export.genai import BuildFailed
    route, out = _route(artifact, ctx), ctx.out_dir / "model"
    meta = {"scheme": config.scheme, "bits": config.bits, "method": config.method,
            "block_size": config.block_size, "symmetric": config.symmetric}
    try:
        if config.method == "gptq":
            return [Output(out, "genai", "int4", {**meta, **_gptq(route, config, ctx, out)})]
        if config.mix is None:
            ctx.progress.note(f"building INT{config.bits} weight-only ({config.method}, block "
                              f"{config.block_size}) with onnxruntime-genai's model builder")
            route.build(f"int{config.bits}", out, extra_options=_extra_options(config))
            precision = "int4-mixed" if config.method == "k_quant_mixed" else f"int{config.bits}"
            return [Output(out, "genai", precision, meta)]
        mix = _measured_mix(route, artifact, config, ctx, out)
    except (BuildFailed, ValueError) as exc:   # ValueError: what the builder cannot make
        raise ModelError(str(exc)) from None
    return [Output(out, "genai", "int4-mixed", {**meta, "mix": mix})]


def _gptq(route, config, ctx, out: Path) -> dict:
    """GPTQ's INT4 file (compress/quant/lm/gptq.py): what was done, for the record."""
    import time

    from compress.quant.lm import gptq
    from compress.quant.lm.genai_route import GenaiRoute
    ids, started = list(ctx.lm_text().calibration), time.perf_counter()
    if len(ids) < gptq.FEW_TOKENS:
        ctx.progress.note(f"GPTQ on {len(ids)} calibration tokens: a layer with more inputs "
                          f"than that gets a noisy Hessian; data.text.calibration_tokens: "
                          f"2048 or more is safer")
    work = ctx.out_dir / "gptq"
    model, modules = gptq.gptq_model(route.hf_folder, ids, ctx.lm_text().window, config,
                                     ctx.progress)
    hf = gptq.save_dequantized(model, modules, route.hf_folder, work / "hf")
    del model
    dequantized = GenaiRoute(hf, work / "fp32")
    ctx.progress.note("building the dequantized model's FP32 and INT4 files")
    dequantized.build("fp32", work / "fp32")
    # the output layer (and the embeddings tied to it) as the builder quantizes them:
    # its asymmetric method for asymmetric GPTQ (its default one is symmetric only there)
    base = "default" if config.symmetric else "k_quant"
    dequantized.build("int4", out, method=base, extra_options={
        "block_size": config.block_size, "is_symmetric": config.symmetric})
    replaced = gptq.transplant(work / "fp32", out, modules)
    if not replaced:
        raise ModelError("GPTQ's layers match no weight of the builder's file (it transforms "
                         "this architecture's weights): use method default, rtn or k_quant")
    shutil.rmtree(work)
    return {"algorithm": "gptq (neural-compressor)", "calibration_tokens": len(ids),
            "modules": len(modules), "matmuls_replaced": replaced,
            "output_layer": f"the builder's {base} method",
            "seconds": round(time.perf_counter() - started, 1)}


def _measured_mix(route, artifact, config, ctx, out: Path) -> dict:
    """The builder's mix of INT4 and INT8 whose units measure.py chooses."""
    from compress.quant.lm.measured import MixPlan, measured_mix
    from compress.quant.lm.nbits import FloatModel, NBits
    from compress.quant.lm.units import units_of
    from runtimes.lm.genai import folder_bytes
    base = "k_quant" if config.method == "default" else config.method
    model = FloatModel(_private_copy(ctx.path(artifact), ctx.out_dir / "float"))
    units = units_of(model.matmuls(), config.mix.granularity)
    nbits = NBits(block_size=config.block_size, symmetric=config.symmetric, method=base)
    nodes = {u.name: u.nodes for u in units}

    def build(high, folder):
        route.build("int4", folder, tuple(n for name in high for n in nodes[name]),
                    method=base, extra_options={"block_size": config.block_size,
                                                "is_symmetric": config.symmetric})
        return folder_bytes(folder)
    plan = MixPlan(units, lambda unit, where: model.write({n: 4 for n in unit.nodes}, nbits,
                                                          where),
                   build, route.reference, lambda path, ref: route.score(path, ref),
                   ("INT4", "INT8"))
    record = measured_mix(plan, config.mix.limits(), ctx, out)
    shutil.rmtree(ctx.out_dir / "float")
    return {**record, "base_method": base}


def _private_copy(folder: Path, into: Path) -> Path:
    """A copy of the float folder onnx may load: a run's artifact can be a hard link of
    the stage cache's file, and onnx refuses external data with more than one link."""
    shutil.copytree(folder, into)
    return into
