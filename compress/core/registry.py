"""A named table of functions filled by a decorator: how places and trial executors are
added (one module registers itself; nothing else names it)."""
from __future__ import annotations

from typing import Callable


def registrar(table: dict[str, Callable]) -> Callable[[str], Callable]:
    """`register = registrar(TABLE)`; then `@register("name")` over a function adds it."""
    def register(name: str):
        def add(function: Callable) -> Callable:
            table[name] = function
            return function
        return add
    return register
