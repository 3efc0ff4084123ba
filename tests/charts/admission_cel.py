"""The admission policies' CEL evaluated as the API server evaluates a ValidatingAdmissionPolicy (its
``matchConditions``, then its ``variables`` in order, then each validation), by two evaluators:

- **cel-expr-python** (``cel_expr_python``: Python bindings of Google's cel-cpp, of the CEL project itself), the one
  the tests use: about 1 ms of CPU for a pod against the host-path policy's 25 expressions;
- **cel-python** (``celpy``: a pure-Python interpreter), the reference, 0.2-0.4 s for the same pod.

``HYPERPOD_TEST_CEL`` chooses: unset or ``fast`` (cel-expr-python), ``reference`` (cel-python only: the control, the
same tests must pass), ``differential`` (both, and every pod's outcome must be the same from both: every condition,
every variable's value and every validation's result or error). tests/charts/test_admission_cel.py runs the policy
tests in that mode, and compares both on hostile pods of its own.

Each expression is compiled once per process (cached by its text), whichever policy object or test module asks: the
host-path policy is the same text in three test modules. Neither evaluator is typed here (the API server type-checks
against the Pod's schema; tests/charts/test_token_policy.py keeps the expressions to what that compiles).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

import celpy
from cel_expr_python import cel

ERROR: Final = "<evaluation error>"
"""An outcome that is an evaluation error (the two evaluators word their errors differently; that they err is what
compares)."""

MODE_VARIABLE: Final = "HYPERPOD_TEST_CEL"
MODES: Final = ("fast", "reference", "differential")

Json = Any


@dataclass(frozen=True)
class Outcome:
    """What a policy makes of one request: ``matched`` is False when a match condition is false (nothing else is
    evaluated then); ``variables`` and ``validations`` in the policy's order, each a JSON value, a bool or
    :data:`ERROR`."""

    matched: bool
    conditions: tuple[Json, ...]
    variables: tuple[tuple[str, Json], ...]
    validations: tuple[Json, ...]


@dataclass(frozen=True)
class PolicyText:
    """The CEL of one ValidatingAdmissionPolicy's spec."""

    conditions: tuple[str, ...]
    variables: tuple[tuple[str, str], ...]
    validations: tuple[str, ...]

    @classmethod
    def of(cls, policy: Mapping[str, Any]) -> PolicyText:
        spec = policy["spec"]
        return cls(conditions=tuple(c["expression"] for c in spec.get("matchConditions", [])),
                   variables=tuple((v["name"], v["expression"]) for v in spec.get("variables", [])),
                   validations=tuple(v["expression"] for v in spec["validations"]))


class Evaluator(Protocol):
    name: str

    def outcome(self, policy: PolicyText, obj: Json, request: Json) -> Outcome:
        """``policy`` evaluated for ``object`` (a JSON pod) and ``request`` (JSON)."""
        ...


def _plain(value: Any) -> Json:
    """A cel-python value as plain JSON (its types subclass Python's, ``BoolType`` an ``int``)."""
    if isinstance(value, celpy.celtypes.BoolType):
        return bool(value)
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, celpy.celtypes.StringType):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return value


class ReferenceEvaluator:
    """cel-python, the pure-Python interpreter (``celpy``)."""

    name = "cel-python"

    def __init__(self) -> None:
        self._env = celpy.Environment()

    @functools.cache  # noqa: B019 - one instance per process (evaluators())
    def program(self, expression: str) -> Any:
        return self._env.program(self._env.compile(expression))

    def _run(self, expression: str, activation: dict[str, Any]) -> Any:
        try:
            return self.program(expression).evaluate(activation)
        except celpy.CELEvalError:
            return ERROR

    def outcome(self, policy: PolicyText, obj: Json, request: Json) -> Outcome:
        cel_object = celpy.json_to_cel(obj)
        conditions = tuple(_plain(self._run(c, {"object": cel_object})) for c in policy.conditions)
        if not all(c is True for c in conditions):
            return Outcome(matched=False, conditions=conditions, variables=(), validations=())
        cel_request = celpy.json_to_cel(request)
        variables: dict[str, Any] = {}
        values: list[tuple[str, Json]] = []
        for name, expression in policy.variables:
            value = self._run(expression, {"object": cel_object, "request": cel_request,
                                           "variables": celpy.celtypes.MapType(variables)})
            values.append((name, _plain(value)))
            if value is not ERROR:  # an erring variable errs where it is used (no such key)
                variables[celpy.celtypes.StringType(name)] = value
        activation = {"object": cel_object, "request": cel_request, "variables": celpy.celtypes.MapType(variables)}
        validations = tuple(_plain(self._run(v, activation)) for v in policy.validations)
        return Outcome(matched=True, conditions=conditions, variables=tuple(values), validations=validations)


def has_nul(value: Json) -> bool:
    """Whether a string of ``value`` (a key or a value, at any depth) holds a NUL character."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, Mapping):
        return any(has_nul(k) or has_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(has_nul(v) for v in value)
    return False


class FastEvaluator:
    """cel-expr-python: Google's cel-cpp, untyped here (every variable ``dyn``), as cel-python is.

    cel-expr-python 0.1.3 reads a Python string as a C string: ``"/opt/dlami/nvme/m\x00"`` becomes
    ``"/opt/dlami/nvme/m"``, a planned cache path (found by the hostile pods of tests/charts/test_admission_cel.py).
    A request holding a NUL anywhere is therefore evaluated by the reference instead."""

    name = "cel-expr-python"

    def __init__(self) -> None:
        dyn = cel.Type.DYN
        self._env = cel.NewEnv(variables={"object": dyn, "request": dyn, "variables": dyn})

    @functools.cache  # noqa: B019 - one instance per process (evaluators())
    def program(self, expression: str) -> Any:
        return self._env.compile(expression)

    def _value(self, expression: str, source: Any) -> Json:
        value = self.program(expression).eval(source)
        return ERROR if value.type() == cel.Type.ERROR else value.plain_value()

    def outcome(self, policy: PolicyText, obj: Json, request: Json) -> Outcome:
        if has_nul(obj) or has_nul(request):
            return evaluators()["reference"].outcome(policy, obj, request)
        conditions = tuple(self._value(c, self._env.Activation(data={"object": obj})) for c in policy.conditions)
        if not all(c is True for c in conditions):
            return Outcome(matched=False, conditions=conditions, variables=(), validations=())
        variables: dict[str, Json] = {}
        values: list[tuple[str, Json]] = []
        for name, expression in policy.variables:
            value = self._value(expression, self._env.Activation(
                data={"object": obj, "request": request, "variables": variables}))
            values.append((name, value))
            if value is not ERROR:
                variables[name] = value
        activation = self._env.Activation(data={"object": obj, "request": request, "variables": variables})
        validations = tuple(self._value(v, activation) for v in policy.validations)
        return Outcome(matched=True, conditions=conditions, variables=tuple(values), validations=validations)


@functools.cache
def evaluators() -> dict[str, Evaluator]:
    """One of each per process, so that each compiles an expression once."""
    return {"fast": FastEvaluator(), "reference": ReferenceEvaluator()}


def mode() -> str:
    chosen = os.environ.get(MODE_VARIABLE, "") or "fast"
    if chosen not in MODES:
        raise ValueError(f"{MODE_VARIABLE}={chosen!r}: one of {', '.join(MODES)}")
    return chosen


def typed(value: Any) -> Any:
    """``value`` with each scalar's type beside it, so that ``True`` and ``1``, ``1`` and ``1.0`` differ."""
    if isinstance(value, Outcome):
        return ("Outcome", typed(value.matched), typed(value.conditions), typed(value.variables),
                typed(value.validations))
    if isinstance(value, Mapping):
        return ("map", sorted((typed(k), typed(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return ("list", [typed(v) for v in value])
    return (type(value).__name__, value)


class Disagreement(AssertionError):
    """The two evaluators made different outcomes of one request."""


def agreed_outcome(policy: PolicyText, obj: Json, request: Json,
                   chosen: Sequence[str] = ("fast", "reference")) -> Outcome:
    """The outcome from each evaluator in ``chosen``, which must all be the same."""
    outcomes = {name: evaluators()[name].outcome(policy, obj, request) for name in chosen}
    first, *others = outcomes.values()
    for name, other in zip(list(outcomes)[1:], others, strict=True):
        if typed(other) != typed(first):
            raise Disagreement(f"{chosen[0]} vs {name} on {obj!r} ({request!r}):\n{first}\n{other}")
    return first


def evaluate(policy: PolicyText, obj: Json, request: Json) -> Outcome:
    """``policy``'s outcome by the evaluator(s) :func:`mode` chooses."""
    chosen = mode()
    if chosen == "differential":
        return agreed_outcome(policy, obj, request)
    return evaluators()[chosen].outcome(policy, obj, request)
