"""What every language-model engine module offers (runtimes/lm/genai.py, llamacpp.py, ...):
its `ENGINE` record, and a model with the stream calls, on which greedy generation is
built once. The tokens/s benchmark drives the same three stream calls, so every engine
is timed on the same steps."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class LMEngine:
    """An engine module's record (its `ENGINE`; runtimes/lm/engines.py finds them). Which
    format it opens is the format table's (runtimes/formats.py)."""
    name: str
    packages: tuple[str, ...]    # the distributions that bring the engine (its version)
    modules: tuple[str, ...]     # what a device must import to run it (any one of them)
    runtime: Callable[[], object]  # loads the engine's libraries (a clear error if missing)
    open: Callable               # (path, threads, provider=, **options) -> a StreamModel
    kv_cache_bytes: Callable[[Path, int], int]


class StreamModel(ABC):
    """An engine's model: `feed` a prompt from an empty cache (with room for more),
    then `next_token` picks one id at a time (the first from the prompt's logits, each
    later one after a model call on the previous pick) until `done`."""

    @abstractmethod
    def feed(self, ids: list[int], new_tokens: int = 0) -> None:
        """The prompt in one call, from an empty cache."""

    @abstractmethod
    def next_token(self) -> int:
        """The next greedy pick."""

    @abstractmethod
    def done(self) -> bool:
        """An end token was picked, or the room asked for is used up."""

    def greedy(self, ids: list[int], new_tokens: int) -> list[int]:
        """The `new_tokens` ids greedy decoding picks after `ids` (fewer at an end token)."""
        self.feed(ids, new_tokens)
        picked: list[int] = []
        while len(picked) < new_tokens and not self.done():
            picked.append(self.next_token())
        return picked
