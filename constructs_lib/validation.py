"""One way to report bad input, shared by the config loader, the constructs and the charts.

Every check appends a :class:`Problem` (stable code, key path, message, offending value) to a
:class:`Problems` collector instead of raising at the first one, so a user sees every mistake
in one run. ``Problems.raise_if_any()`` then raises one :class:`ConfigError` whose message
lists them all, one per line, e.g.::

    [DataCapture.SamplingOutOfRange] models[0].dataCapture.modelPod.initialSamplingPercentage:
    must be an integer from 0 to 100 (got 150)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

_NOT_GIVEN: Any = object()


@dataclass(frozen=True)
class Problem:
    code: str
    path: str
    message: str
    value: Any = _NOT_GIVEN

    def __str__(self) -> str:
        got = "" if self.value is _NOT_GIVEN else f" (got {self.value!r})"
        return f"[{self.code}] {self.path}: {self.message}{got}"


class ConfigError(ValueError):
    """Raised once with every problem found; ``problems`` keeps them for programs and tests."""

    def __init__(self, problems: Iterable[Problem], *, source: str = "") -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        self.source = source
        where = f" in {source}" if source else ""
        lines = [f"{len(self.problems)} problem(s){where}:"] + [f"  - {p}" for p in self.problems]
        super().__init__("\n".join(lines))

    @property
    def codes(self) -> list[str]:
        return [p.code for p in self.problems]


@dataclass
class Problems:
    """Collects problems; paths are joined with :meth:`at` so nested validators stay readable."""

    items: list[Problem] = field(default_factory=list)

    def add(self, code: str, path: str, message: str, value: Any = _NOT_GIVEN) -> None:
        self.items.append(Problem(code, path, message, value))

    def extend(self, other: Problems) -> None:
        self.items.extend(other.items)

    def __bool__(self) -> bool:
        return bool(self.items)

    def __iter__(self) -> Iterator[Problem]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def raise_if_any(self, source: str = "") -> None:
        if self.items:
            raise ConfigError(self.items, source=source)


def join_path(parent: str, child: str | int) -> str:
    """``join_path("models", 0) == "models[0]"``; ``join_path("a", "b") == "a.b"``."""
    if isinstance(child, int):
        return f"{parent}[{child}]"
    return f"{parent}.{child}" if parent else child


def is_token(value: Any) -> bool:
    """True for an unresolved CDK token (``${Token[...]}``): such values are checked at deploy time."""
    return isinstance(value, str) and "${Token[" in value


DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
