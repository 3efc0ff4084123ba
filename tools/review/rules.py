"""A table of rules: which handler reads a changed field, chosen by the object's kind and the field's path."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

H = TypeVar("H", bound=Callable[..., object])


class Rules(Generic[H]):
    def __init__(self) -> None:
        self._rules: list[tuple[Callable[[str], bool], re.Pattern[str], H]] = []

    def add(self, admits: Callable[[str], bool], pattern: str) -> Callable[[H], H]:
        """Decorator: ``handler`` reads fields matching ``pattern`` of objects whose kind ``admits`` accepts."""
        compiled = re.compile(pattern)

        def register(handler: H) -> H:
            self._rules.append((admits, compiled, handler))
            return handler
        return register

    def matching(self, kind: str, path: str) -> Iterator[tuple[re.Match[str], H]]:
        """Every rule for this kind whose pattern matches the path, in the order they were added."""
        for admits, pattern, handler in self._rules:
            if admits(kind):
                match = pattern.search(path)
                if match is not None:
                    yield match, handler
