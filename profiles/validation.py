"""pydantic's validation errors in the words of the file a person wrote: a field path
without pydantic's internal names (union members such as `constrained-str` or
`function-after[...]`), and a plain message; and Strict, the base of every model of
both. Shared by pipelines and profiles."""
from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, model_validator

# names pydantic puts in an error's location that are not keys of the document
_INTERNAL = re.compile(r"^(constrained-\w+|[\w-]+\[.*\]|str|int|float|bool|none|bytes)$")

MESSAGES = {
    "extra_forbidden": "unknown key (remove it or check its spelling)",
    "missing": "required key is missing",
}


def clean_location(loc) -> tuple:
    return tuple(part for part in loc if not (isinstance(part, str) and _INTERNAL.match(part)))


def message_of(error: dict) -> str:
    if error["type"] in MESSAGES:
        return MESSAGES[error["type"]]
    return error["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")


def field_of(loc) -> str:
    return ".".join(str(part) for part in loc) or "(top level)"


def _takes_number(annotation) -> bool:
    """Whether a field's type is a number (int, float, constrained or optional ones, a
    Literal of numbers) and not also a bool."""
    import types
    import typing
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation in (int, float):
        return True
    if origin is typing.Annotated:
        return _takes_number(args[0])
    if origin is typing.Literal:
        return any(isinstance(a, (int, float)) and not isinstance(a, bool) for a in args)
    if origin in (typing.Union, types.UnionType):
        return bool not in args and any(_takes_number(a) for a in args)
    return False


class _Bool:
    """A bool set where a number belongs: no number type accepts it, so pydantic reports
    the field itself ("Input should be a valid integer") at its own location."""

    def __init__(self, value: bool):
        self.value = value

    def __repr__(self) -> str:
        return str(self.value).lower()


def refuse_bools_for_numbers(model_cls, data):
    """YAML's `true` where a number belongs is a mistake: pydantic would read it as 1."""
    if isinstance(data, dict) and any(isinstance(v, bool) for v in data.values()):
        data = dict(data)
        for name, value in data.items():
            field = model_cls.model_fields.get(name)
            if isinstance(value, bool) and field is not None and _takes_number(field.annotation):
                data[name] = _Bool(value)
    return data


class Strict(BaseModel):
    # A typo in YAML must be an error, never a silently ignored key; nor is a NaN, an
    # infinity or `true` a number.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _numbers_are_numbers(cls, data):
        return refuse_bools_for_numbers(cls, data)


def first_per_field(errors: list[dict]) -> list[dict]:
    """One error per field: a value that fits no member of a union gets one error per
    member (a name pattern, a Python object), of which the first says what to write."""
    seen, kept = set(), []
    for error in errors:
        loc = clean_location(error["loc"])
        if loc not in seen:
            seen.add(loc)
            kept.append(error)
    return kept
