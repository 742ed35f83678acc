"""Import user code named as `module.path:attribute` in pipeline.yaml."""
from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import site
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


PRODUCT = Path(__file__).resolve().parents[2]
_INSTALLED = tuple({sys.prefix, sys.base_prefix, site.getusersitepackages()})


def _shadows(module_name: str, base_dir: Path) -> str | None:
    """What a module file beside the pipeline would replace: a module of the standard
    library or an installed package of that name (json.py, numpy.py). Loaded, it would
    take that module's place for the whole run, the product's own imports included."""
    top = module_name.split(".")[0]
    if _module_file(top, base_dir) is None:
        return None
    if top in sys.stdlib_module_names:
        return f"the standard library's module '{top}'"
    if (PRODUCT / top / "__init__.py").is_file():
        return f"this product's package '{top}'"
    found = importlib.machinery.PathFinder.find_spec(top)  # installed packages
    if found is not None and found.origin and found.origin.startswith(_INSTALLED):
        return f"the installed module '{top}' ({found.origin})"
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
    shadowed = _shadows(module_name, Path(base_dir))
    if shadowed:
        raise error(f"{what}: the module '{module_name}' beside the pipeline file has the name "
                    f"of {shadowed}, which it would replace for the whole run. Rename the "
                    f"file (e.g. my_{module_name.split('.')[0]}.py) and the reference to it")
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
