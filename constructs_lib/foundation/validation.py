"""One way to report bad input, shared by the constructs, the charts and the repository's config loader.

Every check appends a :class:`Problem` (stable code, key path, message, offending value) to a
:class:`Problems` collector instead of raising at the first one, so a user sees every mistake
in one run. ``Problems.raise_if_any()`` then raises one :class:`ConfigError` whose message
lists them all, one per line, e.g.::

    [DataCapture.SamplingOutOfRange] models[0].spec.dataCapture.modelPod.initialSamplingPercentage:
    must be an integer from 0 to 100 (got 150)

Each construct's rules live in one ``check_*`` function that takes a :class:`KeyPaths`: the
construct calls it with its own property names (``instance_types[0]``), a config loader with the
keys of its file (``cluster.gpuNodeGroups[0].instanceTypes[0]``). One rule, one code, reported
once, under the name the reader wrote.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hyperpod_inference_iac.foundation.patterns import DNS1123_LABEL, DNS1123_SUBDOMAIN

if TYPE_CHECKING:
    from aws_cdk import Duration, Token

__all__ = [
    "DNS1123_LABEL",
    "DNS1123_SUBDOMAIN",
    "ConfigError",
    "KeyPaths",
    "Problem",
    "Problems",
    "is_unresolved",
    "join_path",
]

# Codes of the shape errors every parser reports (config loader and charts alike).
WRONG_TYPE = "Config.WrongType"
MISSING_KEY = "Config.MissingKey"
UNKNOWN_KEY = "Config.UnknownKey"

_NOT_GIVEN: Any = object()


# The words every reader of YAML uses for the three shape problems (the app's config loader and the charts' parser
# of the operator's custom resources): one problem, one wording, wherever it is found.
REQUIRED = "is required"


def kind_of(value: Any) -> str:
    """What a YAML value is, in the reader's words: ``a list``, ``a string``, ``empty``."""
    return {dict: "a mapping", list: "a list", str: "a string", bool: "true/false", int: "an integer",
            float: "a number", type(None): "empty"}.get(type(value), type(value).__name__)


def wrong_type(expected: str, value: Any, hint: str = "") -> str:
    """``must be a string, not a list (quote it in YAML)``."""
    return f"must be {expected}, not {kind_of(value)}{f' ({hint})' if hint else ''}"


def unknown_key(known: Iterable[str], hint: str = "") -> str:
    """``is not a known key here; known: a, b``, and where other keys go, when somewhere."""
    names = ", ".join(sorted(known)) or "(none)"
    return f"is not a known key here; known: {names}{f'; {hint}' if hint else ''}"


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
    """Collects problems. The same problem (code, path, value) is kept once, whoever reports it."""

    items: list[Problem] = field(default_factory=list)
    # (code, path, repr of the value) of each problem kept: a file with 100,000 bad entries is checked in
    # linear time, not by comparing each new problem with every earlier one.
    _seen: set[tuple[str, str, str]] = field(default_factory=set, init=False, repr=False, compare=False)
    _seen_of: int = field(default=0, init=False, repr=False, compare=False)  # len(items) _seen was made of

    def add(self, code: str, path: str, message: str, value: Any = _NOT_GIVEN) -> None:
        problem = Problem(code, path, message, value)
        if self._seen_of != len(self.items):  # items given to the constructor or changed by a caller
            self._seen = {_identity(known) for known in self.items}
        identity = _identity(problem)
        if identity not in self._seen:
            self._seen.add(identity)
            self.items.append(problem)
        self._seen_of = len(self.items)

    def extend(self, other: Iterable[Problem]) -> None:
        for problem in other:
            self.add(problem.code, problem.path, problem.message, problem.value)

    def has_at_or_below(self, path: str) -> bool:
        """True when a problem was already reported at ``path`` or inside it."""
        return any(p.path == path or p.path.startswith((f"{path}.", f"{path}[")) for p in self.items)

    def __bool__(self) -> bool:
        return bool(self.items)

    def __iter__(self) -> Iterator[Problem]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def raise_if_any(self, source: str = "") -> None:
        if self.items:
            raise ConfigError(self.items, source=source)


def _identity(problem: Problem) -> tuple[str, str, str]:
    return problem.code, problem.path, repr(problem.value)


def join_path(parent: str, child: str | int) -> str:
    """``join_path("models", 0) == "models[0]"``; ``join_path("a", "b") == "a.b"``."""
    if isinstance(child, int):
        return f"{parent}[{child}]"
    return f"{parent}.{child}" if parent else child


@dataclass(frozen=True)
class KeyPaths:
    """Names the place a value came from, in the vocabulary of whoever supplied it.

    ``KeyPaths()`` speaks a construct's property names: ``at("instance_types", 0)`` is
    ``instance_types[0]``. ``KeyPaths("cluster.gpuNodeGroups[0]", {"instance_types": "instanceTypes"})``
    speaks a config file's keys: the same call gives ``cluster.gpuNodeGroups[0].instanceTypes[0]``.
    A property without a mapping keeps its own name.
    """

    base: str = ""
    names: Mapping[str, str] = field(default_factory=dict)

    def at(self, prop: str = "", *more: str | int) -> str:
        local = prop
        for part in more:
            local = join_path(local, part)
        if local in self.names:  # a whole path renamed, e.g. capture_prefixes[0] -> prefix
            return join_path(self.base, self.names[local]) if self.names[local] else self.base
        path = self.base
        if prop:
            path = join_path(path, self.names.get(prop, prop))
        for part in more:
            path = join_path(path, part)
        return path or "(top level)"

    def child(self, prop: str, *more: str | int, names: Mapping[str, str] | None = None) -> KeyPaths:
        """The paths of a nested block (an instance group, a list entry). Without ``names``, an entry of a list
        (``more``: its index) or of a mapping by name (its name) keeps this view's names for it: the
        ``<prop>[].<name>`` ones (``Props.key_paths`` gives them for a list or a mapping of props), so a config
        file's keys stay its keys inside the entry too."""
        if names is None and more and isinstance(more[0], int | str):
            prefix = f"{prop}[]."
            names = {key.removeprefix(prefix): value for key, value in self.names.items() if key.startswith(prefix)}
        return KeyPaths(self.at(prop, *more), dict(names or {}))

    def block(self, prop: str) -> KeyPaths:
        """The paths of a block of properties that ``prop`` holds (``Props.key_paths`` names its fields
        ``<prop>.<field>``): this view's names for them, relative to the block, so a config file's keys stay its keys
        inside the block and a Python consumer's stay the properties."""
        own, prefix = self.names.get(prop, prop), f"{prop}."
        names = {name.removeprefix(prefix): key.removeprefix(f"{own}.") for name, key in self.names.items()
                 if name.startswith(prefix)}
        return KeyPaths(self.at(prop), names)


def is_unresolved(value: Any) -> bool:
    """True for a value CloudFormation resolves at deploy time (a CDK token, as a string, a number or a
    list): such values are checked by the service, not here. Plain values are never tokens."""
    # The CDK's own check decides; the cheap tests before it skip the jsii round trip (and the import of
    # aws-cdk-lib, in a process that has none: the preflight, the weights manifest) for values that cannot hold a
    # token: a string without "Token[" in it, an int (Token.as_number gives a float), and a number or a list
    # before aws-cdk-lib is imported (only the CDK makes their encodings).
    if isinstance(value, str):
        return "Token[" in value and _token().is_unresolved(value)
    cdk_loaded = "aws_cdk" in sys.modules
    if isinstance(value, float):
        return cdk_loaded and _token().is_unresolved(value)
    if isinstance(value, list):
        encoded = cdk_loaded or any(isinstance(item, str) and "Token[" in item for item in value)
        return (encoded and _token().is_unresolved(value)) or any(is_unresolved(item) for item in value)
    return False


_SECONDS: weakref.WeakKeyDictionary[Duration, float] = weakref.WeakKeyDictionary()


def seconds_of(duration: Duration) -> float:
    """``duration.to_seconds()``, asked of the jsii kernel once per ``Duration`` object (a value that never changes):
    each call is a round trip of about 0.8 ms of CPU, and a config check asks about 20 times, mostly of the same
    default alarm periods."""
    try:
        return _SECONDS[duration]
    except KeyError:
        seconds = _SECONDS[duration] = duration.to_seconds()
        return seconds


def _token() -> type[Token]:
    from aws_cdk import Token

    return Token


PROPS = KeyPaths()
"""A construct's own view: problems are named after its properties."""
