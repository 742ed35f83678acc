"""LiteRT (ai-edge-litert, or the older tflite-runtime): .tflite files, on the XNNPACK
delegate (`Settings.xnnpack`, on by default) or its built-in kernels, with an external
delegate library or LiteRT's GPU accelerator (`Settings.delegate`, "gpu") and the
delegate's options (`Settings.delegate_options`); XNNPACK's weight cache in a directory
(`Settings.xnnpack_weight_cache`), through LiteRT's CompiledModel API."""
from __future__ import annotations

from runtimes.engines.base import GPU_DELEGATE, Engine, Settings, option_text, register
from runtimes.errors import RuntimeInputError




def _compiled(settings: Settings) -> bool:
    """Whether the session is LiteRT's CompiledModel API (runtimes.litert_compiled): the
    GPU accelerator and XNNPACK's weight cache are reached only through it."""
    return settings.delegate == GPU_DELEGATE or bool(settings.xnnpack_weight_cache)


def _open(path: str, settings: Settings):
    if _compiled(settings):
        _check(settings)   # also for a session opened from Python, not from a profile
        from runtimes.litert_compiled import CompiledSession
        return CompiledSession(path, threads=settings.threads,
                               options=settings.delegate_options,
                               weight_cache_dir=settings.xnnpack_weight_cache,
                               accelerator=settings.delegate or "cpu")
    from runtimes.litert_session import LiteRTSession
    return LiteRTSession(path, threads=settings.threads, xnnpack=settings.xnnpack,
                         delegate=settings.delegate, delegate_options=settings.delegate_options)


def _check(settings: Settings) -> None:
    """The weight cache is XNNPACK's, reached through the CompiledModel API: it cannot
    go with the built-in kernels or an external delegate (the Interpreter API's)."""
    if not settings.xnnpack_weight_cache:
        return
    if not settings.xnnpack:
        raise RuntimeInputError("the XNNPACK weight cache needs XNNPACK: drop --no-xnnpack "
                                "(`xnnpack: false`) or the weight cache")
    if settings.delegate not in (None, GPU_DELEGATE):
        raise RuntimeInputError(
            f"the XNNPACK weight cache cannot go with the delegate '{settings.delegate}' "
            "(LiteRT gives it only through its CompiledModel API, which loads no external "
            "delegate): drop one of them")


def _placement(path: str, settings: Settings, described: dict, feeds=None) -> dict:
    """From a session of its own, built but not run (`feeds` are not needed); LiteRT's
    GPU says only whether it took the whole model, which the timed session (`described`)
    has told already."""
    from runtimes.placement import litert_gpu_placement, litert_placement
    if settings.delegate == GPU_DELEGATE:
        return litert_gpu_placement(path, threads=settings.threads,
                                    options=settings.delegate_options,
                                    fully_accelerated=described.get("fully_accelerated"))
    return litert_placement(path, xnnpack=settings.xnnpack, delegate=settings.delegate,
                            threads=settings.threads,
                            delegate_options=settings.delegate_options)


def _flags(settings: Settings) -> list[str]:
    flags = [] if settings.xnnpack else ["--no-xnnpack"]
    if settings.xnnpack_weight_cache:
        flags += ["--xnnpack-weight-cache", settings.xnnpack_weight_cache]
    flags += ["--delegate", settings.delegate] if settings.delegate else []
    for key, value in settings.delegate_options.items():
        flags += ["--delegate-option", f"{key}={option_text(value)}"]
    return flags


def _add_arguments(group) -> None:
    group.add_argument("--no-xnnpack", dest="xnnpack", action="store_false",
                       help="run the built-in kernels instead of the XNNPACK delegate")
    group.add_argument("--xnnpack-weight-cache", metavar="DIR",
                       help="keep XNNPACK's packed weights in a file in DIR, named by the "
                       "model's content, and map them from there on later loads (faster "
                       "loads and less memory for models with megabytes of weights; "
                       "smaller ones gain nothing)")
    group.add_argument("--delegate", help="'gpu' for LiteRT's GPU accelerator, or an external "
                       "delegate library to load (e.g. libedgetpu.so.1). Exit code 3 when it "
                       "cannot be used here")
    group.add_argument("--delegate-option", action="append", default=[], metavar="KEY=VALUE",
                       help="an option of the --delegate (gpu: enforce_f32=true, ...; Edge "
                       "TPU: device=usb:0)")


def parse_delegate_options(delegate: str | None, options: list[str]) -> dict:
    """--delegate-option KEY=VALUE (repeated) -> {key: value}."""
    parsed = {}
    for text in options:
        key, equals, value = text.partition("=")
        if not equals or not key:
            raise RuntimeInputError(f"--delegate-option '{text}': write KEY=VALUE")
        parsed[key] = value
    if parsed and not delegate:
        raise RuntimeInputError("--delegate-option needs a --delegate to give it to")
    return parsed


def _settings(args) -> dict:
    return {"xnnpack": args.xnnpack, "delegate": args.delegate,
            "xnnpack_weight_cache": args.xnnpack_weight_cache,
            "delegate_options": parse_delegate_options(args.delegate, args.delegate_option)}


def _preload(settings: Settings) -> None:
    """The API the session will use, so its load time holds no import; only that one, so
    an interpreter's idle memory holds no CompiledModel runtime."""
    if _compiled(settings):
        try:
            import runtimes.litert_compiled  # noqa: F401
            import ai_edge_litert.compiled_model  # noqa: F401
        except ImportError:
            pass   # the session says what is missing
        return
    from runtimes.litert_session import interpreter_module
    interpreter_module()


ENGINE = register(Engine(
    name="litert", suffixes=(".tflite",),
    # tensorflow's tf.lite is the last fallback (litert_session.interpreter_module)
    modules=("ai_edge_litert", "tflite_runtime", "tensorflow"), pip="ai-edge-litert",
    open=_open,
    placement=_placement, flags=_flags, add_arguments=_add_arguments,
    settings_from=_settings,
    # XNNPACK is a delegate too: where each op ran is worth reporting
    accelerated=lambda settings: bool(settings.delegate) or settings.xnnpack,
    preload=_preload, check=_check,
    accelerators=lambda settings: ((settings.delegate, dict(settings.delegate_options)),)
    if settings.delegate else ()))
