"""Declarative fields for the operator's custom resources.

Each field is declared once, with its camelCase key, the constraint the CRD declares for it and
the problem code a violation gets. Three things read that one declaration, so they cannot drift
apart:

* ``SpecBlock.from_dict`` parses the camelCase mapping a user writes in the YAML config
  (types, required keys, unknown keys);
* ``SpecBlock.validate`` checks values (patterns, enums, ranges, list sizes) for objects built in
  Python or parsed from YAML alike, then the block's own cross-field rules (``check_rules``);
* ``SpecBlock.to_dict`` emits the manifest fragment (keys in declaration order, ``None`` omitted).
"""

from __future__ import annotations

import dataclasses
import enum
import re
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any, ClassVar, Self, TypeVar

from hyperpod_inference_iac.foundation.operator_versions import unplaced_field
from hyperpod_inference_iac.foundation.platform_values import is_platform_value
from hyperpod_inference_iac.foundation.validation import (
    MISSING_KEY,
    REQUIRED,
    UNKNOWN_KEY,
    WRONG_TYPE,
    Problems,
    is_unresolved,
    join_path,
    unknown_key,
    wrong_type,
)

_Block = TypeVar("_Block", bound="SpecBlock")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Constraint:
    """What the CRD (or our policy) allows for one field; ``code`` names every violation."""

    code: str
    pattern: str | None = None
    max_length: int | None = None
    minimum: int | None = None
    maximum: int | None = None
    allowed: tuple[str, ...] | None = None
    min_items: int | None = None
    max_items: int | None = None
    item_pattern: str | None = None
    hint: str = ""

    def check(self, value: Any, path: str, problems: Problems) -> None:
        if isinstance(value, tuple):
            self._check_items(value, path, problems)
        elif isinstance(value, str):
            self._check_text(value, path, problems)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            self._check_number(value, path, problems)

    def _add(self, path: str, message: str, value: Any, problems: Problems) -> None:
        problems.add(self.code, path, f"{message}{'; ' + self.hint if self.hint else ''}", value)

    def _check_text(self, value: str, path: str, problems: Problems) -> None:
        if is_unresolved(value):
            return
        if self.allowed is not None and value not in self.allowed:
            self._add(path, f"must be one of {', '.join(self.allowed)}", value, problems)
        # re.search, like the API server: a CRD pattern is anchored only where it says so.
        if self.pattern is not None and not re.search(self.pattern, value):
            self._add(path, f"must match {self.pattern}", value, problems)
        if self.max_length is not None and len(value) > self.max_length:
            self._add(path, f"must be at most {self.max_length} characters long", value, problems)

    def _check_number(self, value: float, path: str, problems: Problems) -> None:
        too_low = self.minimum is not None and value < self.minimum
        too_high = self.maximum is not None and value > self.maximum
        if too_low or too_high:
            kind = "a number" if isinstance(value, float) else "an integer"
            if self.maximum is None:
                self._add(path, f"must be {kind} of at least {self.minimum}", value, problems)
            else:
                self._add(path, f"must be {kind} from {self.minimum} to {self.maximum}", value, problems)

    def _check_items(self, items: tuple[Any, ...], path: str, problems: Problems) -> None:
        too_few = self.min_items is not None and len(items) < self.min_items
        too_many = self.max_items is not None and len(items) > self.max_items
        if too_few or too_many:
            if self.max_items is None:
                bounds = f"at least {self.min_items} item(s)"
            else:
                bounds = f"{self.min_items or 0} to {self.max_items} items"
            self._add(path, f"must have {bounds}", list(items), problems)
        for index, item in enumerate(items):
            if not isinstance(item, str) or is_unresolved(item):
                continue
            if self.allowed is not None and item not in self.allowed:
                self._add(join_path(path, index), f"must be one of {', '.join(self.allowed)}", item, problems)
            if self.item_pattern is not None and not re.search(self.item_pattern, item):
                self._add(join_path(path, index), f"must match {self.item_pattern}", item, problems)


def crd_field(
    *,
    default: Any = dataclasses.MISSING,
    key: str | None = None,
    wrap_items: str | None = None,
    code: str | None = None,
    allowed: type[enum.StrEnum] | None = None,
    **constraint: Any,
) -> Any:
    """A dataclass field with its YAML key and constraint.

    ``key`` overrides the camelCase spelling derived from the Python name (``commitSHA``).
    ``wrap_items`` turns a tuple of plain values into the CRD's list of one-key objects
    (``captureOptions: [{captureMode: Input}]``). ``code`` plus the remaining keyword arguments
    build the :class:`Constraint`; ``allowed`` takes the enum whose values are allowed.
    """
    checks = None
    if code is not None:
        values = tuple(member.value for member in allowed) if allowed is not None else None
        checks = Constraint(code=code, allowed=values, **constraint)
    metadata = {"key": key, "wrap_items": wrap_items, "constraint": checks}
    return dataclasses.field(default=default, metadata=metadata)


def planned_field(default: Any = None) -> Any:
    """A field the plan sets (a workload's credentials, say), never the user: not parsed from YAML, not emitted by
    ``to_dict``, not checked by ``validate``."""
    return dataclasses.field(default=default, metadata={"planned": True})


def is_planned(spec_field: dataclasses.Field[Any]) -> bool:
    return bool(spec_field.metadata.get("planned"))


def camel_case(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def key_of(spec_field: dataclasses.Field[Any]) -> str:
    return spec_field.metadata.get("key") or camel_case(spec_field.name)


def plain(value: Any) -> Any:
    """A JSON-ready copy: enums become strings, tuples and mappings become lists and dicts. Platform
    values stay as they are: rendering the plan resolves them."""
    if isinstance(value, SpecBlock):
        return value.to_dict()
    if is_platform_value(value):
        return value
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return value


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` wins; nested mappings merge key by key; lists are replaced, not appended."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = plain(value)
    return merged


class SpecBlock:
    """Mixin for frozen, keyword-only dataclasses that mirror one block of a CRD spec."""

    # What @dataclass gives every subclass: declared here, so dataclasses.fields(self) type-checks.
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]
    # Where this block sits in an operator kind (kind, key path of spec): a key it does not declare that a release
    # announced without a stated path (operator_versions.UNPLACED_FIELDS) is refused with that field's own code.
    UNPLACED_AT: ClassVar[tuple[str, tuple[str, ...]] | None] = None

    @classmethod
    def refused_key(cls, key: str) -> tuple[str, str] | None:
        """(code, message) for an undeclared ``key`` that is a known mistake with a better message than
        ``Config.UnknownKey``; None for an ordinary unknown key."""
        if cls.UNPLACED_AT is None:
            return None
        kind, within = cls.UNPLACED_AT
        field = unplaced_field(kind, (*within, key))
        return (field.code, field.message) if field is not None else None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for spec_field in dataclasses.fields(self):
            value = getattr(self, spec_field.name)
            if value is None or is_planned(spec_field):
                continue
            wrap = spec_field.metadata.get("wrap_items")
            if wrap is not None:
                out[key_of(spec_field)] = [{wrap: plain(item)} for item in value]
            else:
                out[key_of(spec_field)] = plain(value)
        return out

    def validate(self, path: str, problems: Problems) -> None:
        """Field constraints of this block and every nested block, then the cross-field rules."""
        for spec_field in dataclasses.fields(self):
            value = getattr(self, spec_field.name)
            if value is None or is_planned(spec_field):
                continue
            sub_path = join_path(path, key_of(spec_field))
            constraint: Constraint | None = spec_field.metadata.get("constraint")
            if constraint is not None:
                constraint.check(value, sub_path, problems)
            if isinstance(value, SpecBlock):
                value.validate(sub_path, problems)
            elif isinstance(value, tuple):
                for index, item in enumerate(value):
                    if isinstance(item, SpecBlock):
                        item.validate(join_path(sub_path, index), problems)
        self.check_rules(path, problems)

    def check_rules(self, path: str, problems: Problems) -> None:
        """Cross-field rules the CRD states only in prose; blocks that have some override this."""

    @classmethod
    def from_dict(cls, data: Any, path: str, problems: Problems) -> Self | None:
        """Parse the camelCase mapping; ``None`` (with problems added) when its shape is wrong."""
        return parse_block(cls, data, path, problems)


@cache
def _type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def parse_block(cls: type[_Block], data: Any, path: str, problems: Problems) -> _Block | None:
    if not isinstance(data, Mapping):
        problems.add(WRONG_TYPE, path, wrong_type("a mapping", data), data)
        return None
    declared = {key_of(f): f for f in dataclasses.fields(cls) if not is_planned(f)}
    for key in data:
        refused = cls.refused_key(str(key)) if key not in declared else None
        if refused is not None:
            problems.add(refused[0], join_path(path, str(key)), refused[1])
        elif key not in declared:
            problems.add(
                UNKNOWN_KEY,
                join_path(path, str(key)),
                unknown_key(declared, "other CRD fields go in the entry's extraSpec"),
            )
    # (mypy checks a class against Hashable by its instances' __hash__; the class itself is hashable)
    hints = _type_hints(cls)  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    complete = True
    for key, spec_field in declared.items():
        sub_path = join_path(path, key)
        raw = data.get(key)
        if raw is None:
            if spec_field.default is dataclasses.MISSING and spec_field.default_factory is dataclasses.MISSING:
                problems.add(MISSING_KEY, sub_path, REQUIRED)
                complete = False
            continue
        wrap = spec_field.metadata.get("wrap_items")
        parsed, ok = _convert(hints[spec_field.name], raw, sub_path, problems, wrap)
        if ok:
            kwargs[spec_field.name] = parsed
        complete = complete and ok
    return cls(**kwargs) if complete else None


def _is_platform_type(hint: Any) -> bool:
    from hyperpod_inference_iac.foundation.platform_values import PlatformValue, S3Location, S3Uri

    return hint in (PlatformValue, S3Uri, S3Location)


def _convert(hint: Any, raw: Any, path: str, problems: Problems, wrap: str | None = None) -> tuple[Any, bool]:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        # Parsed from YAML, a field is its plain type; platform values are set by the plan, not written.
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None) and not _is_platform_type(arg))
        origin = typing.get_origin(hint)
    if origin is tuple:
        if not isinstance(raw, list):
            problems.add(WRONG_TYPE, path, wrong_type("a list", raw), raw)
            return None, False
        item_hint = typing.get_args(hint)[0]
        items, all_ok = [], True
        for index, item in enumerate(raw):
            item_path = join_path(path, index)
            if wrap is not None:
                if not isinstance(item, Mapping) or set(item) != {wrap}:
                    problems.add(WRONG_TYPE, item_path, wrong_type(f"a mapping with the single key {wrap}", item), item)
                    all_ok = False
                    continue
                item, item_path = item[wrap], join_path(item_path, wrap)
            value, ok = _convert(item_hint, item, item_path, problems)
            items.append(value)
            all_ok = all_ok and ok
        return tuple(items), all_ok
    if origin is not None and issubclass(origin, Mapping):
        if not isinstance(raw, Mapping):
            problems.add(WRONG_TYPE, path, wrong_type("a mapping", raw), raw)
            return None, False
        return dict(raw), True
    if hint is Any:
        return raw, True
    if isinstance(hint, type) and issubclass(hint, SpecBlock):
        parsed = hint.from_dict(raw, path, problems)
        return parsed, parsed is not None
    if isinstance(hint, type) and issubclass(hint, enum.StrEnum):
        if not isinstance(raw, str):
            problems.add(WRONG_TYPE, path, wrong_type("a string", raw), raw)
            return None, False
        # An unknown value stays a plain string so validate() reports it with the field's own code.
        return (hint(raw) if raw in hint._value2member_map_ else raw), True
    expected = {str: "a string", bool: "true or false", int: "an integer", float: "a number"}[hint]
    accepted = (int, float) if hint is float else hint  # YAML writes 10 for 10.0
    if not isinstance(raw, accepted) or (hint in (int, float) and isinstance(raw, bool)):
        problems.add(WRONG_TYPE, path, wrong_type(expected, raw), raw)
        return None, False
    return raw, True
