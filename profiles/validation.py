"""pydantic's validation errors in the words of the file a person wrote: a field path
without pydantic's internal names (union members such as `constrained-str` or
`function-after[...]`), its list items numbered from 1 as the stage folders are
(`stages[2]` is 02-quantize), and a plain message with a "did you mean" for a misspelt
key or choice; and Strict, the base of every model of both. Shared by pipelines and
profiles."""
from __future__ import annotations

import re
import types
import typing

from pydantic import BaseModel, ConfigDict, model_validator

from runtimes.suggest import did_you_mean

# names pydantic puts in an error's location that are not keys of the document
_INTERNAL = re.compile(r"^(constrained-\w+|[\w-]+\[.*\]|str|int|float|bool|none|bytes)$")

MESSAGES = {
    "extra_forbidden": "unknown key (remove it or check its spelling)",
    "missing": "required key is missing",
}


def clean_location(loc) -> tuple:
    return tuple(part for part in loc if not (isinstance(part, str) and _INTERNAL.match(part)))


def message_of(error: dict, model: type | None = None) -> str:
    """The error in plain words; for a misspelt key (its valid keys found in `model`, the
    document's class) or a choice that is not one of a list, the closest valid one."""
    if error["type"] == "extra_forbidden" and model is not None:
        loc = clean_location(error["loc"])
        return MESSAGES["extra_forbidden"] + did_you_mean(str(loc[-1]), keys_at(model, loc))
    if error["type"] in MESSAGES:
        return MESSAGES[error["type"]]
    message = error["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if error["type"] == "literal_error" and isinstance(error.get("input"), str):
        choices = re.findall(r"'([^']*)'", str(error.get("ctx", {}).get("expected", "")))
        message += did_you_mean(error["input"], choices)
    return message


def field_of(loc, tags=()) -> str:
    """A location as a person finds it in the file: keys joined by dots, a list's items
    numbered from 1 in brackets, as the stage folders are (`stages[2]` is the stage whose
    folder is 02-...); a union member's tag that pydantic puts after an item (a stage's
    type, when it is one of `tags`) in parentheses: `stages[2] (quantize).calibration`."""
    text, after_item = "", False
    for part in loc:
        if isinstance(part, int):
            text += f"[{part + 1}]"
        elif after_item and part in tags:
            text += f" ({part})"
        else:
            text += f".{part}" if text else str(part)
        after_item = isinstance(part, int)
    return text or "(top level)"


def _members(annotation) -> list:
    """The types a value of `annotation` may be: Annotated and Optional/Union unwrapped."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _members(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in _members(arg)]
    return [annotation]


def _is_model(kind) -> bool:
    # a generic alias (tuple[...]) passes isinstance(..., type) on some Pythons
    return isinstance(kind, type) and typing.get_origin(kind) is None and \
        issubclass(kind, BaseModel)


def _tagged(cls, part) -> bool:
    """Whether `part` is the tag that chose this union member (a Literal field's value)."""
    return any(typing.get_origin(f.annotation) is typing.Literal
               and part in typing.get_args(f.annotation) for f in cls.model_fields.values())


def _step(kinds: list, part) -> list:
    found = []
    for kind in kinds:
        origin, args = typing.get_origin(kind), typing.get_args(kind)
        if isinstance(part, int) and origin in (tuple, list) and args:
            found += _members(args[0])
        elif _is_model(kind):
            if part in kind.model_fields:
                found += _members(kind.model_fields[part].annotation)
            elif _tagged(kind, part):
                found.append(kind)
        elif origin is dict and len(args) == 2:
            found += _members(args[1])
    # nothing took it: a name pydantic gave a union member, not a key of the document
    return found or kinds


def keys_at(model: type, loc: tuple) -> list[str]:
    """The keys the mapping that holds `loc`'s last part may have, following `loc` through
    `model`'s fields, lists and tagged unions ([] where it cannot be told)."""
    kinds = _members(model)
    for part in loc[:-1]:
        kinds = _step(kinds, part)
    return sorted({name for kind in kinds if _is_model(kind) for name in kind.model_fields})


def _takes_number(annotation) -> bool:
    """Whether a field's type is a number (int, float, constrained or optional ones, a
    Literal of numbers) and not also a bool."""
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
