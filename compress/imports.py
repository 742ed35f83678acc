"""Import user code named as `module.path:attribute` in pipeline.yaml."""
from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Callable

from compress.errors import CompressError


def _module_file(module_name: str, base_dir: Path) -> Path | None:
    relative = Path(*module_name.split("."))
    for candidate in (base_dir / relative.with_suffix(".py"), base_dir / relative / "__init__.py"):
        if candidate.is_file():
            return candidate.resolve()
    return None


def _load(module_name: str, base_dir: Path) -> ModuleType:
    """Import from the pipeline's folder first. Two pipelines in one process may both
    name `model:build` from different folders: a cached module of that name from another
    folder must not be reused, so such a file is loaded afresh."""
    file = _module_file(module_name, base_dir)
    cached = sys.modules.get(module_name)
    if file is None or (cached is not None and getattr(cached, "__file__", None)
                        and Path(cached.__file__).resolve() == file):
        return importlib.import_module(module_name)
    spec = importlib.util.spec_from_file_location(module_name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def import_callable(spec: str, base_dir: Path, error: type[CompressError], what: str) -> Callable:
    """Import `module.path:attr`, looking in the YAML's directory first, then sys.path."""
    module_name, _, attr = spec.partition(":")
    added = str(base_dir) not in sys.path
    if added:  # for the user module's own imports of its neighbours
        sys.path.insert(0, str(base_dir))
    try:
        module = _load(module_name, Path(base_dir))
    except ImportError as exc:
        raise error(f"{what}: cannot import module '{module_name}' ({exc}). The module is "
                    f"looked up next to the pipeline file ({base_dir}) and on PYTHONPATH") from None
    except SyntaxError as exc:
        raise error(f"{what}: module '{module_name}' has a syntax error: {exc.msg} "
                    f"({exc.filename}, line {exc.lineno})") from None
    except (Exception, SystemExit) as exc:  # its own code failed while being imported
        raise error(f"{what}: importing module '{module_name}' failed: "
                    f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}") from None
    finally:
        if added:
            sys.path.remove(str(base_dir))
    target = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise error(f"{what}: module '{module_name}' has no attribute '{attr}'")
    if not callable(target):
        raise error(f"{what}: '{spec}' is not callable")
    return target
