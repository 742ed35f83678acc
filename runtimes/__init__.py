"""Torch-free runtime layer: load a model, run it, measure it.

Imports only numpy and the runtime libraries, so it installs and runs on a Raspberry Pi
or a Jetson (`pip install "edge-compress[device]"`) without PyTorch.

What a model is and what opens it:

    formats.py       Every artifact format, one row each: kind, engines, baseline, size, shipping
    engines/         What runs a model file, one module per engine, registered
    session.py       What every runtime adapter looks like, and a fake one for tests
    loader.py        `load(path, ...)`: a model file opened with its engine
    onnx_session.py  onnxruntime's adapter        openvino_session.py  OpenVINO's
    litert_session.py LiteRT's adapter            litert_compiled.py   LiteRT's GPU (CompiledModel)
    plugin_eps.py    Execution providers that come as onnxruntime plugin libraries
    xnnpack_cache.py XNNPACK's packed weights kept between loads
    lm/              Language models: their engines, tokens/s, quality on text

Measuring it (the device's side of the benchmark):

    __main__.py      `python -m runtimes bench|lm-bench ...`, the on-device entry point
    bench/           `python -m runtimes bench MODEL`: the runner, its options, auto, report
    measure.py       One `measure()` for every engine: latency percentiles, memory, energy
    result.py        `Measurement`: the runner's answer as the pipeline reads it
    engine_choice.py `--engine auto`: the fastest installed engine here, measured
    feeds.py         Model inputs read and checked (numpy only)
    input_bounds.py  An input's memory, known before it is allocated
    metrics.py       Quality metrics from model outputs (numpy only)
    output_kinds.py  Which figure judges an output when the user named none
    placement.py     Where each node ran: execution provider or delegate
    op_time.py       The share of an ONNX model's time each node takes, measured
    flops.py         FLOPs of a model's nodes, estimated from their shapes
    conditions.py    The run conditions a figure depends on, and warnings about them

The machine it runs on:

    hostinfo.py      The machine a measurement ran on
    cpus.py          CPU lists ("0-3,6") and pinning the process to some CPUs
    memory.py        Resident memory of this process (without psutil if need be)
    meters.py        Power meters' entry point (`detect`); the meters are in power/
    power/           One module per power meter (RAPL, INA3221, tegrastats, Pi 5 PMIC, NVML)
    sysread.py       sysfs files and small host commands, tolerating their absence
    native_log.py    What native libraries print to file descriptors 1 and 2

Used by every package above this one too:

    errors.py        Errors of the runtime layer
    digest.py        Content digests of model files
    safe_text.py     text from outside (op names, profile fields, messages, URIs) made safe
                     to print: control codes shown escaped, URL passwords masked
    suggest.py       'did you mean ...?' for a misspelt name (a stage type, a setting, a
                     profile, a scheme, a factory)
"""
from runtimes.errors import RuntimeInputError
from runtimes.loader import load
from runtimes.measure import Timing, measure
from runtimes.session import FunctionSession, Session, TensorSpec

__all__ = ["load", "measure", "Timing", "Session", "FunctionSession", "TensorSpec",
           "RuntimeInputError"]
