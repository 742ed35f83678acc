"""onnxruntime execution providers a profile can ask for, and the options each one takes.

The option names are those of onnxruntime's provider options (its C API structs and the
execution provider pages of its documentation). A profile's option that is not listed
here is refused when the profile loads: a misspelt `trt_fp16_enabled` would otherwise be
ignored by some providers and the run would quietly measure something else. An option
that exists but is not listed yet can be passed with `check_options: false`.
"""
from __future__ import annotations

PROVIDER_OPTIONS: dict[str, tuple[str, ...]] = {
    "CPUExecutionProvider": (),
    "CUDAExecutionProvider": (
        "device_id", "gpu_mem_limit", "arena_extend_strategy", "cudnn_conv_algo_search",
        "do_copy_in_default_stream", "cudnn_conv_use_max_workspace", "cudnn_conv1d_pad_to_nc1d",
        "enable_cuda_graph", "use_tf32", "prefer_nhwc", "tunable_op_enable",
        "tunable_op_tuning_enable", "tunable_op_max_tuning_duration_ms"),
    "TensorrtExecutionProvider": (
        "device_id", "trt_max_workspace_size", "trt_max_partition_iterations",
        "trt_min_subgraph_size", "trt_fp16_enable", "trt_bf16_enable", "trt_int8_enable",
        "trt_int8_calibration_table_name", "trt_int8_use_native_calibration_table",
        "trt_dla_enable", "trt_dla_core", "trt_dump_subgraphs", "trt_engine_cache_enable",
        "trt_engine_cache_path", "trt_engine_decryption_enable",
        "trt_engine_decryption_lib_path", "trt_force_sequential_engine_build",
        "trt_timing_cache_enable", "trt_timing_cache_path", "trt_builder_optimization_level",
        "trt_layer_norm_fp32_fallback", "trt_cuda_graph_enable"),
    "OpenVINOExecutionProvider": (
        "device_type", "device_id", "precision", "num_of_threads", "num_streams", "cache_dir",
        "enable_opencl_throttling", "enable_qdq_optimizer", "disable_dynamic_shapes",
        "load_config", "model_priority"),
    "QNNExecutionProvider": (
        "backend_type", "backend_path", "profiling_level", "profiling_file_path",
        "rpc_control_latency", "vtcm_mb", "htp_performance_mode",
        "htp_graph_finalization_optimization_mode", "qnn_context_priority", "soc_model",
        "htp_arch", "device_id", "enable_htp_fp16_precision", "offload_graph_io_quantization"),
}

# pip packages that bring each provider to onnxruntime (for the "not installed" message)
PROVIDER_PACKAGES = {
    "CUDAExecutionProvider": "onnxruntime-gpu[cuda,cudnn] and nvidia-cublas (1.31: CUDA 13, "
                             "cuDNN 9; `make gpu-env`), or onnxruntime-gpu with the machine's "
                             "own CUDA",
    "TensorrtExecutionProvider": "onnxruntime-gpu plus TensorRT 10 (libnvinfer.so.10: "
                                 "tensorrt-cu13 10.x from NVIDIA's index, or the system's; on a "
                                 "Jetson: the JetPack onnxruntime-gpu wheel)",
    "OpenVINOExecutionProvider": "onnxruntime-openvino (in its own environment: it ships the "
                                 "same `onnxruntime` module)",
    "QNNExecutionProvider": "onnxruntime-qnn",
}


def check_options(name: str, options: dict) -> None:
    """ValueError naming the unknown provider or options and the ones that exist."""
    if name not in PROVIDER_OPTIONS:
        raise ValueError(f"unknown execution provider '{name}'; known: "
                         f"{', '.join(PROVIDER_OPTIONS)}")
    unknown = sorted(set(options) - set(PROVIDER_OPTIONS[name]))
    if unknown:
        known = ", ".join(PROVIDER_OPTIONS[name]) or "none"
        raise ValueError(f"{name} has no option {', '.join(repr(u) for u in unknown)}; its "
                         f"options are: {known} (an option missing from this list: set "
                         "check_options: false on the provider)")


# LiteRT's GPU accelerator (`delegate: gpu`): the fields of ai-edge-litert's GpuOptions.
LITERT_GPU_OPTIONS = ("enforce_f32", "constant_tensor_sharing", "infinite_float_capping",
                      "benchmark_mode", "allow_src_quantized_fc_conv_ops",
                      "hint_waiting_for_completion")


def check_delegate_options(delegate: str | None, options: dict) -> None:
    """ValueError for options without a delegate, or ones the GPU accelerator lacks (an
    external library's options are its own: they are passed on unchecked)."""
    if options and not delegate:
        raise ValueError("delegate_options needs a `delegate` to give them to")
    if delegate == "gpu":
        unknown = sorted(set(options) - set(LITERT_GPU_OPTIONS))
        if unknown:
            raise ValueError(f"the LiteRT GPU accelerator has no option "
                             f"{', '.join(map(repr, unknown))}; its options are: "
                             f"{', '.join(LITERT_GPU_OPTIONS)}")
        bad = sorted(k for k, v in options.items() if not isinstance(v, bool))
        if bad:
            raise ValueError(f"GPU options {', '.join(bad)}: give true or false")
