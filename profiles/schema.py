"""The schema of a device budget profile (profiles/*.yaml or a user's own file)."""
from __future__ import annotations

from typing import ClassVar, Literal, Optional, Union

from pydantic import (Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt,
                      StrictBool, field_validator, model_validator)

from profiles.validation import Strict
from runtimes import engines as engine_registry
from runtimes.lm.engines import all_engines as language_engines
from runtimes.power import METER_NAMES
from runtimes.errors import RuntimeInputError


class Device(Strict):
    arch: str = Field(description="machine architecture as `uname -m` prints it "
                      "(x86_64, aarch64), or 'any' for whatever machine runs the benchmark")
    cpu: Optional[str] = Field(None, description="CPU, for people reading the report")
    cores: Optional[PositiveInt] = None
    memory_mb: Optional[PositiveInt] = None
    accelerator: Optional[str] = None
    match: tuple[str, ...] = Field(
        (), description="substrings of the board model (/proc/device-tree/model) or CPU "
        "name that identify this device; measurements elsewhere are off-target")


ENGINES = engine_registry.names()          # every engine runtimes/engines/ registers
LM_ENGINES = tuple(e.name for e in language_engines())   # and runtimes/lm/'s
AUTO = "auto"    # the runner probes the installed engines on the target, the fastest measures
Engine = Literal[(*ENGINES, *LM_ENGINES, AUTO)]          # type: ignore[valid-type]


class Provider(Strict):
    """An onnxruntime execution provider, with its options (strings, numbers, booleans)."""
    name: str = Field(description="e.g. TensorrtExecutionProvider, CUDAExecutionProvider, "
                      "OpenVINOExecutionProvider, QNNExecutionProvider")
    options: dict[str, Union[str, int, float, bool]] = Field(default_factory=dict)
    check_options: bool = Field(True, description="refuse options this project does not "
                                "know for the provider (a typo would be ignored otherwise)")

    @model_validator(mode="after")
    def _known(self):
        from profiles.providers import PROVIDER_OPTIONS, check_options
        if self.check_options:
            check_options(self.name, self.options)
        elif self.name not in PROVIDER_OPTIONS:
            check_options(self.name, {})
        return self


class Runtime(Strict):
    engines: tuple[Engine, ...] = Field(
        ENGINES, min_length=1, description="engines that run models on this device, in "
        "priority order: an artifact is measured with the first listed that runs its format "
        "(ONNX: onnxruntime or openvino; TFLite: litert), and not at all when none does. "
        "`auto`: on the target, the runner times every installed engine that runs the "
        "artifact for a moment and measures it with the fastest (the probe's numbers go in "
        "the report). A language model's format has one engine each (onnxruntime-genai, "
        "llama.cpp, openvino-genai): listing any of them measures only those; listing none, "
        "or auto, measures every one, and the measurement picks")
    threads: Optional[PositiveInt] = Field(
        None, description="intra-op threads; empty = one per core of the measuring machine")
    xnnpack: bool = Field(True, description="LiteRT: run on the XNNPACK CPU delegate "
                          "(false: TFLite's built-in kernels)")
    xnnpack_weight_cache: Optional[str] = Field(
        None, description="LiteRT: a directory on the measuring machine (~ expanded) where "
        "XNNPACK keeps each model's packed weights in a file named by the model's content; "
        "later loads map them instead of packing again (faster loads and less memory for "
        "models with megabytes of weights; smaller ones gain nothing). Empty: no cache. "
        "Needs ai-edge-litert 2.x and xnnpack: true")
    delegate: Optional[str] = Field(
        None, description="LiteRT: 'gpu' for LiteRT's GPU accelerator (WebGPU on Vulkan, "
        "shipped with ai-edge-litert), or an external delegate library to load, e.g. "
        "libedgetpu.so.1 (Coral Edge TPU) or libvx_delegate.so (NPU). Where it cannot be "
        "used the measurement is 'unmeasured' with the reason, never a CPU run")
    delegate_options: dict[str, Union[StrictBool, int, float, str]] = Field(
        {}, description="options of the delegate: for 'gpu' the fields of LiteRT's "
        "GpuOptions (enforce_f32: true keeps float32 instead of fp16); for a library the "
        "options it documents (Edge TPU: device: usb:0), passed as strings")

    providers: tuple[Provider, ...] = Field(
        (), description="onnxruntime execution providers in priority order (nodes none of "
        "them takes run on the CPU provider); empty: the CPU provider alone. Where one is "
        "not installed the measurement is 'unmeasured' with the reason, never a CPU run")
    cpu_affinity: Optional[tuple[NonNegativeInt, ...]] = Field(
        None, min_length=1, description="pin the benchmark to these CPU numbers "
        "(taskset-style), e.g. [2, 3] to keep it off the cores that serve interrupts")

    @model_validator(mode="after")
    def _delegate_options_known(self):
        from profiles.providers import check_delegate_options
        check_delegate_options(self.delegate, self.delegate_options)
        return self

    @model_validator(mode="after")
    def _settings_go_together(self):
        try:   # each engine's own rule, as the runner applies it to its flags
            engine_registry.check(self.settings(self.threads))
        except RuntimeInputError as exc:
            raise ValueError(str(exc)) from None
        return self

    def settings(self, threads: int | None,
                 precision: str | None = None) -> engine_registry.Settings:
        """The engine settings this runtime asks for (every engine's: each reads its own),
        with `threads` and an artifact's inference `precision` where it names one."""
        return engine_registry.Settings(
            threads=threads, providers=tuple((p.name, dict(p.options)) for p in self.providers),
            xnnpack=self.xnnpack, xnnpack_weight_cache=self.xnnpack_weight_cache,
            delegate=self.delegate, delegate_options=dict(self.delegate_options),
            **({"precision": precision} if precision else {}))

    @property
    def auto(self) -> bool:
        return self.engines == (AUTO,)

    def runs(self, engine: str) -> bool:
        """Whether `engine` may measure on this device (any engine may, with auto)."""
        return self.auto or engine in self.engines

    def runs_language(self, engine: str) -> bool:
        """Whether the language-model engine `engine` measures here: with auto, or when
        listed, or when the list names no language-model engine (every one does)."""
        return self.runs(engine) or not set(self.engines) & set(LM_ENGINES)

    def listed(self) -> str:
        return ", ".join(self.engines)

    @field_validator("engines", mode="before")
    @classmethod
    def _auto_alone(cls, engines):
        return (AUTO,) if engines == AUTO else engines

    @field_validator("engines")
    @classmethod
    def _no_repeats(cls, engines: tuple) -> tuple:
        if AUTO in engines and len(engines) > 1:
            raise ValueError("`auto` stands alone (engines: auto), not in a list of engines")
        if len(set(engines)) != len(engines):
            raise ValueError("list each engine once")
        return engines


class Power(Strict):
    # the meters runtimes/power/ registers, with auto and none
    meter: Literal[METER_NAMES] = Field(  # type: ignore[valid-type]
        "auto", description="power meter: auto (the first one found on the measuring "
        "machine), none, ina3221 (Jetson rails, sysfs), tegrastats, pi5-pmic (Raspberry Pi 5 "
        "vcgencmd pmic_read_adc), rapl (Intel powercap), nvml (NVIDIA GPU), command "
        "(an external meter: a command printing watts)")
    command: Optional[str] = Field(None, description="meter: command -- the command to run "
                                   "for each sample; it prints the power in watts")
    rail: Optional[str] = Field(None, description="ina3221/tegrastats: the rail label to "
                                "read (default: the board's input rail, else all rails summed)")
    interval_ms: Optional[PositiveInt] = Field(None, description="sampling interval "
                                               "(default: the meter's own)")
    idle_seconds: NonNegativeFloat = Field(
        1.0, description="idle power is measured this long before the timed window and "
        "subtracted from the energy per inference (0: not subtracted)")
    required: StrictBool = Field(
        True, description="whether the energy_mj and power_w budgets need a meter. true: "
        "no meter is an 'unmeasured' verdict, which --strict counts as a failure (a board "
        "that has one). false: on a machine with no meter the verdict is 'no-meter', which "
        "--strict does not count; where a meter is found the budget is a real pass or fail "
        "(a profile for whatever machine runs the benchmark)")

    @model_validator(mode="after")
    def _command_needs_meter_command(self):
        if self.meter == "command" and not self.command:
            raise ValueError("meter: command needs `command:`, the command that prints watts")
        if self.command and self.meter != "command":
            raise ValueError("`command:` is only used with meter: command")
        return self


class Export(Strict):
    preset: Optional[str] = Field(None, description="export preset this device prefers")
    # export.tflite's modes, as export/presets.py's TFLITE_MODES lists them (profiles import
    # nothing from export)
    tflite_mode: Optional[Literal["fp32", "fp16", "dynamic-int8", "int8"]] = Field(
        None, description="the mode export.tflite stages use for this device when the "
        "pipeline does not set one")


# The fidelity floor's default, in dB of the worst output's SQNR: the corpus's INT8 files
# that keep their quality score 17.1 to 40.6 dB on their evaluation data (docs/
# conformance.md), broken ones (a detector whose stem channels span 0.08 to 45, a power
# spectrum before a Log) 1-3 dB; int8-static's recovery aims at the same floor.
FLOOR_DB = 10.0


class Budget(Strict):
    latency_p90_ms: Optional[PositiveFloat] = None
    peak_memory_mb: Optional[PositiveFloat] = Field(
        None, description="peak resident memory of the whole benchmark process")
    model_size_mb: Optional[PositiveFloat] = None
    energy_mj: Optional[PositiveFloat] = Field(
        None, description="energy per inference above idle, from the power meter")
    power_w: Optional[PositiveFloat] = Field(
        None, description="mean power the device draws while it runs the model")
    accuracy_drop: Optional[float] = Field(
        None, ge=0, description="largest allowed drop of the metric below the original model")
    output_sqnr_db: Optional[float] = Field(
        FLOOR_DB, description="a floor: every output of a variant keeps at least this SQNR "
        "(dB) against the original model's on the evaluation data (the worst output is "
        "judged); under it a variant is never recommended, whatever its metric says. null: "
        "no floor. docs/reference.md, \"The fidelity floor\"")

    def limits(self) -> dict[str, Optional[float]]:
        """{budget key: limit or None (not budgeted)}."""
        return self.model_dump()


class LanguageModel(Strict):
    """The budget of a causal language model on this device (a tensor model's is
    `budget:`): the conditions it is measured at, and its limits (empty: not budgeted)."""
    prompt_tokens: PositiveInt = Field(
        128, description="time to first token is measured with a prompt this long (not a "
        "limit)")
    context_tokens: PositiveInt = Field(
        2048, description="tokens of KV cache the device must hold beside the weights "
        "(the memory fit is judged at this length; not a limit)")
    decode_tokens_per_s: Optional[PositiveFloat] = Field(
        None, description="a floor: at least this many generated tokens per second")
    time_to_first_token_ms: Optional[PositiveFloat] = Field(
        None, description="at most this long from the prompt (prompt_tokens long) to the "
        "first generated token")
    peak_memory_mb: Optional[PositiveFloat] = Field(
        None, description="at most this peak resident memory of the benchmark process")
    model_size_mb: Optional[PositiveFloat] = Field(
        None, description="at most this size of the weights on disk")
    perplexity_increase: Optional[NonNegativeFloat] = Field(
        None, description="at most this relative increase of perplexity over the float "
        "model (0.05 = +5%)")
    kl_mean: Optional[NonNegativeFloat] = Field(
        None, description="at most this mean KL divergence from the float model's "
        "next-token distribution, in nats per token")

    CONDITIONS: ClassVar[tuple[str, ...]] = ("prompt_tokens", "context_tokens")

    @classmethod
    def limit_keys(cls) -> tuple[str, ...]:
        """The fields that are limits (not the conditions they are measured at)."""
        return tuple(k for k in cls.model_fields if k not in cls.CONDITIONS)

    def limits(self) -> dict[str, Optional[float]]:
        """{budget key: limit or None (not budgeted)}."""
        return {key: getattr(self, key) for key in self.limit_keys()}


class Profile(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.@-]+$", description="what reports call the "
                      "device (letters, digits, _ . @ -)")
    description: str = ""
    device: Device
    runtime: Runtime = Runtime()
    export: Export = Export()
    power: Power = Power()
    budget: Budget = Budget()
    language_model: LanguageModel = LanguageModel()
