"""Find and load profiles by name (the YAML files beside this module) or by path."""
from __future__ import annotations

import os
from pathlib import Path

from pydantic import ValidationError

from profiles.schema import Profile
from profiles.validation import clean_location, field_of, message_of
from profiles.yamlread import YamlProblem, line_for, line_map, load
from runtimes.suggest import IN_BETWEEN, did_you_mean

BUILTIN_DIR = Path(__file__).parent


class ProfileError(Exception):
    """A profile that cannot be found or is not valid; the message says how to fix it."""


def list_profiles() -> list[Profile]:
    return [load_profile(str(p)) for p in sorted(BUILTIN_DIR.glob("*.yaml"))]


def _resolve(name_or_path: str, base_dir: str | None) -> Path:
    looks_like_path = name_or_path.endswith((".yaml", ".yml")) or os.sep in name_or_path
    if looks_like_path:
        path = Path(name_or_path)
        if not path.is_absolute() and base_dir:
            path = Path(base_dir) / path
        if not path.is_file():
            raise ProfileError(f"profile file not found: {path}")
        return path
    path = BUILTIN_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        known = [p.stem for p in sorted(BUILTIN_DIR.glob("*.yaml"))]
        raise ProfileError(f"unknown profile '{name_or_path}'"
                           f"{did_you_mean(name_or_path, known, IN_BETWEEN)}. Known profiles: "
                           f"{', '.join(known)}; or give the path of your own profile YAML")
    return path


def load_profile(name_or_path: str, base_dir: str | None = None) -> Profile:
    path = _resolve(name_or_path, base_dir)
    try:
        raw, node = load(path)
    except YamlProblem as exc:
        where = f"{path}:{exc.line}" if exc.line else str(path)
        raise ProfileError(f"{where}: {exc}") from None
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read it: {exc.strerror}") from None
    if not isinstance(raw, dict):
        raise ProfileError(f"{path}: a profile must be a mapping with name, device, budget")
    try:
        return Profile.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = clean_location(first["loc"])
        line = line_for(loc, line_map(node)) if node is not None else None
        where = f"{path}:{line}" if line else str(path)
        raise ProfileError(f"{where}: {field_of(loc)}: {message_of(first, Profile)}") from None
