"""Import user code named as `module.path:attribute` in pipeline.yaml."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Callable

from compress.errors import CompressError


def import_callable(spec: str, base_dir: Path, error: type[CompressError], what: str) -> Callable:
    """Import `module.path:attr`, looking in the YAML's directory first, then sys.path."""
    module_name, _, attr = spec.partition(":")
    added = str(base_dir) not in sys.path
    if added:
        sys.path.insert(0, str(base_dir))
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise error(f"{what}: cannot import module '{module_name}' ({exc}). The module is "
                    f"looked up next to the pipeline file ({base_dir}) and on PYTHONPATH") from None
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
