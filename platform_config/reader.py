"""A small reader that walks a YAML mapping and records every problem with its key path.

It is deliberately tiny: each accessor returns a usable fallback value after recording a
problem, so validation continues and the user sees every mistake in one run.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import types
import typing
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar

from aws_cdk import Duration

from hyperpod_inference_iac.foundation.props import (
    Props,
    block_props,
    config_key,
    entry_props,
    item_props,
    type_hints,
)
from hyperpod_inference_iac.foundation.validation import (
    MISSING_KEY,
    REQUIRED,
    UNKNOWN_KEY,
    WRONG_TYPE,
    KeyPaths,
    Problems,
    join_path,
    unknown_key,
    wrong_type,
)

T = TypeVar("T")
P = TypeVar("P", bound=Props)
_MISSING: Any = object()
# How read_props reads a Duration: the unit its key ends with (periodMinutes).
_DURATION_UNITS: dict[str, Callable[[int], Duration]] = {
    "Seconds": Duration.seconds, "Minutes": Duration.minutes, "Hours": Duration.hours, "Days": Duration.days}


EMPTY_STRING = "Config.EmptyString"


def _empty_fix(required: bool, default: str | None) -> str:
    if required:
        return "must not be empty: give a value"
    if default is not None:
        return f"must not be empty: leave the key out for the default {default!r}, or give a value"
    return "must not be empty: leave the key out for its default (docs/configuration.md), or give a value"


class Section:
    """One mapping of the config file. Tracks which keys were read so unknown keys are reported."""

    def __init__(self, data: Any, path: str, problems: Problems) -> None:
        self.path = path
        self.problems = problems
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            problems.add(WRONG_TYPE, path or "(top level)", wrong_type("a mapping", data), data)
            data = {}
        self.data: Mapping[str, Any] = data
        self._read: set[str] = set()

    def at(self, key: str | int) -> str:
        return join_path(self.path, key)

    def has(self, key: str) -> bool:
        return key in self.data

    def raw(self, key: str, default: Any = None) -> Any:
        self._read.add(key)
        return self.data.get(key, default)

    def _get(self, key: str, required: bool, default: Any) -> Any:
        self._read.add(key)
        if key not in self.data or self.data[key] is None:
            if required:
                self.problems.add(MISSING_KEY, self.at(key), REQUIRED)
            return _MISSING
        return self.data[key]

    def string(self, key: str, *, required: bool = False, default: str | None = None,
               pattern: str | None = None, hint: str = "", allow_empty: bool = False) -> str | None:
        """The key's string, or ``default`` after a problem. An explicit ``""`` is refused (``Config.EmptyString``)
        unless ``allow_empty`` (then the value's own check judges it): it is never silently the default."""
        value = self._get(key, required, default)
        if value is _MISSING:
            return default
        if not isinstance(value, str):
            # A YAML number is not silently turned into a string: 012345678901 would lose its leading zero,
            # 1.30 would become 1.3. Quote it.
            self.problems.add(WRONG_TYPE, self.at(key), wrong_type("a string", value, "quote it in YAML"), value)
            return default
        if value == "" and not allow_empty:
            self.problems.add(EMPTY_STRING, self.at(key), _empty_fix(required, default), value)
            return default
        if pattern is not None and not re.fullmatch(pattern, value):
            self.problems.add("Config.BadFormat", self.at(key), hint or f"must match {pattern}", value)
            return default
        return value

    def integer(self, key: str, *, required: bool = False, default: int | None = None,
                minimum: int | None = None, maximum: int | None = None) -> int | None:
        value = self._get(key, required, default)
        if value is _MISSING:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            self.problems.add(WRONG_TYPE, self.at(key), wrong_type("an integer", value), value)
            return default
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            bounds = f"from {minimum} to {maximum}" if maximum is not None else f"of at least {minimum}"
            self.problems.add("Config.OutOfRange", self.at(key), f"must be an integer {bounds}", value)
            return default
        return value

    def number(self, key: str, *, required: bool = False, default: float | None = None) -> float | None:
        """An integer or a decimal number (not a boolean), or ``default`` after a problem."""
        value = self._get(key, required, default)
        if value is _MISSING:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.problems.add(WRONG_TYPE, self.at(key), wrong_type("a number", value), value)
            return default
        return value

    def boolean(self, key: str, *, default: bool) -> bool:
        value = self._get(key, False, default)
        if value is _MISSING:
            return default
        if not isinstance(value, bool):
            self.problems.add(WRONG_TYPE, self.at(key), wrong_type("true or false", value), value)
            return default
        return value

    def section(self, key: str, *, required: bool = False) -> Section:
        value = self._get(key, required, None)
        return Section(None if value is _MISSING else value, self.at(key), self.problems)

    def optional_section(self, key: str) -> Section | None:
        if self.has(key) and self.data[key] is not None:
            return self.section(key)
        self._read.add(key)
        return None

    def items(self, key: str, *, required: bool = False, min_items: int = 0) -> list[tuple[str, Any]]:
        """The entries of a list, each with its key path, e.g. ``("models[0]", {...})``."""
        value = self._get(key, required, None)
        if value is _MISSING:
            value = []
        if not isinstance(value, list):
            self.problems.add(WRONG_TYPE, self.at(key), wrong_type("a list", value), value)
            return []
        if len(value) < min_items:
            self.problems.add("Config.TooFewItems", self.at(key), f"needs at least {min_items} item(s)", value)
        return [(join_path(self.at(key), i), item) for i, item in enumerate(value)]

    def string_list(self, key: str, *, required: bool = False, min_items: int = 0,
                    check: Callable[[str, str], None] | None = None) -> list[str]:
        out: list[str] = []
        for path, item in self.items(key, required=required, min_items=min_items):
            if not isinstance(item, str):
                self.problems.add(WRONG_TYPE, path, wrong_type("a string", item), item)
                continue
            if check is not None:
                check(path, item)
            out.append(item)
        return out

    def entries(self, key: str) -> list[tuple[str, str, Any]]:
        """The entries of a mapping by name, each with its key path, e.g. ``("qwen3-8b", "schedulers.qwen3-8b",
        {...})``; a key that is no string is a problem (a YAML number or boolean as a name: quote it)."""
        value = self._get(key, False, None)
        if value is _MISSING:
            return []
        if not isinstance(value, Mapping):
            self.problems.add(WRONG_TYPE, self.at(key), wrong_type("a mapping of names to mappings", value), value)
            return []
        found = []
        for name, item in value.items():
            if not isinstance(name, str):
                self.problems.add(WRONG_TYPE, join_path(self.at(key), str(name)),
                                  wrong_type("a string (a key)", name, "quote it in YAML"), name)
                continue
            found.append((name, join_path(self.at(key), name), item))
        return found

    def number_map(self, key: str) -> dict[str, int]:
        """A mapping of strings to integers (not booleans); each value of another type a problem at its own key."""
        value = self._get(key, False, None)
        if value is _MISSING:
            return {}
        if not isinstance(value, Mapping):
            self.problems.add(WRONG_TYPE, self.at(key), wrong_type("a mapping of strings to integers", value), value)
            return {}
        found: dict[str, int] = {}
        for name, item in value.items():
            at = join_path(self.at(key), str(name))
            if not isinstance(name, str):
                self.problems.add(WRONG_TYPE, at, wrong_type("a string (a key)", name, "quote it in YAML"), name)
            elif isinstance(item, bool) or not isinstance(item, int):
                self.problems.add(WRONG_TYPE, at, wrong_type("an integer", item), item)
            else:
                found[name] = item
        return found

    def string_map(self, key: str) -> dict[str, str]:
        value = self._get(key, False, None)
        if value is _MISSING:
            return {}
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            self.problems.add(WRONG_TYPE, self.at(key), wrong_type("a mapping of strings to strings", value), value)
            return {}
        return dict(value)

    def finish(self) -> None:
        """Report keys nobody read: almost always a typo, which would otherwise be silently ignored."""
        for key in self.data:
            if key not in self._read:
                self.problems.add(UNKNOWN_KEY, self.at(str(key)), unknown_key(self._read))


def read_props(cls: type[P], section: Section, *, at: KeyPaths | None = None, allow_empty: Collection[str] = (),
               check_with: Mapping[str, Any] | None = None, problems: Problems | None = None, **given: Any) -> P:
    """A construct's props read from one section of the file, each field at its config key with the type and
    default the props class declares, then checked by the class's own rules under the file's key paths (``at``,
    default the class's keys under the section). ``given``: the fields the app sets itself (not in the file).
    A list of props (``Sequence[InstanceGroup]``) is read entry by entry, each entry's unknown keys reported, and so
    is a mapping of props by name (``Mapping[str, SchedulerOptions]``: each name's block at ``<key>.<name>``). A
    field that holds a block of props (``AlarmSettings | None``) is read from the mapping at its key, each of the
    block's keys over the field's default block (a key left out keeps it); an optional block (``| None``) also takes
    ``enabled: false``, which makes it None.

    A key that is missing, of the wrong type or empty is reported once, here; the rules' problems about that same
    field are left out (one mistake, one problem), those about the other fields are all reported: into the section's
    problems, or into ``problems`` for a loader that weighs them against another construct's rules on the same keys.
    ``allow_empty``: string fields whose explicit ``""`` the class's own rule judges (with its own code, as for a
    Python consumer) rather than ``Config.EmptyString``. ``check_with``: the keyword arguments of the class's
    ``check`` that are not properties (the stack's account or region)."""
    failed: list[str] = []
    props = _read_props(cls, section, given, failed, allow_empty)
    found = Problems()
    props.check(found, at or cls.key_paths(section.path), **(check_with or {}))
    (section.problems if problems is None else problems).extend(
        p for p in found if not any(p.path == f or p.path.startswith((f"{f}.", f"{f}[")) for f in failed))
    return props


def _read_props(cls: type[P], section: Section, given: Mapping[str, Any], failed: list[str],
                allow_empty: Collection[str] = (), base: P | None = None) -> P:
    """The fields of ``cls`` read from ``section`` (defaults: ``base``'s values, else the class's); the key path of
    each that could not be read goes to ``failed``."""
    hints = type_hints(cls)
    values: dict[str, Any] = {}
    for field in cls.config_fields():
        key, name = config_key(field), field.name
        assert key is not None
        if name in given:
            continue
        if base is not None:  # (the holder's default block: its values are the defaults here)
            field = dataclasses.field(default=getattr(base, name), metadata=field.metadata)
        before = len(section.problems)
        if (item := item_props(hints[name])) is not None:
            entries = section.items(key, required=_required(field))
            if len(section.problems) != before:  # missing, or not a list
                failed.append(section.at(key))
            values[name] = tuple(_read_entry(item, path, data, section.problems, failed) for path, data in entries)
            continue
        if (block := block_props(hints[name])) is not None:
            values[name] = _read_block(block, section, key, hints[name], field, failed)
            continue
        if (entry := entry_props(hints[name])) is not None:
            named = section.entries(key)
            if len(section.problems) != before:  # not a mapping, or a name that is no string
                failed.append(section.at(key))
            values[name] = {entry_name: _read_entry(entry, path, data, section.problems, failed)
                            for entry_name, path, data in named} if section.has(key) else _default(field)
            continue
        values[name] = _read_field(section, key, hints[name], field, name in allow_empty)
        if len(section.problems) != before:
            failed.append(section.at(key))
    return base.replace(**values, **given) if base is not None else cls(**values, **given)


def _read_entry(cls: type[P], path: str, data: Any, problems: Problems, failed: list[str]) -> P:
    before = len(problems)
    entry = Section(data, path, problems)
    if len(problems) != before:  # not a mapping (reported): stand-ins, whose keys are not also reported missing
        failed.append(path)
        return _read_props(cls, Section({}, path, Problems()), {}, [])
    props = _read_props(cls, entry, {}, failed)
    entry.finish()
    return props


def _read_block(cls: type[P], section: Section, key: str, hint: Any, field: dataclasses.Field[Any],
                failed: list[str]) -> P | None:
    """A block of props at ``key``: its keys over the field's default block; None when the field is optional and
    the block says ``enabled: false`` (or the key is left out of an optional field without a default block)."""
    default = field.default
    optional = typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint)
    if optional and "enabled" in {config_key(f) for f in cls.config_fields()}:
        raise TypeError(f"{cls.__name__} has a key `enabled`: read_props reserves it to switch an optional block off")
    if not section.has(key) or section.data[key] is None:
        if not _required(field):
            section.raw(key)
            return default if isinstance(default, cls) else None
        section.section(key, required=True)  # (reported: a block is required here)
        failed.append(section.at(key))
        return _read_props(cls, Section({}, section.at(key), Problems()), {}, [])  # (stand-ins, not reported)
    before = len(section.problems)
    block = section.section(key)
    if len(section.problems) != before:  # not a mapping (reported): its default, or stand-ins whose keys are not
        failed.append(section.at(key))  # reported missing (one mistake, one problem)
        if isinstance(default, cls) or optional:
            return default if isinstance(default, cls) else None
        return _read_props(cls, Section({}, section.at(key), Problems()), {}, [])
    enabled = block.boolean("enabled", default=True) if optional else True
    props = _read_props(cls, block, {}, failed, base=default if isinstance(default, cls) else None)
    block.finish()
    return props if enabled else None


def _required(field: dataclasses.Field[Any]) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


def _default(field: dataclasses.Field[Any]) -> Any:
    """A field's default (None for a required one): of the field's declared type, which only the field knows."""
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


def _read_field(section: Section, key: str, hint: Any, field: dataclasses.Field[Any], allow_empty: bool) -> Any:
    """One field's value by its type; after a problem, its default or a neutral stand-in."""
    required = _required(field)
    default = _default(field)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    origin = typing.get_origin(hint)
    if hint is bool:
        return section.boolean(key, default=bool(default))
    if hint is int:
        value = section.integer(key, required=required, default=default)
        return 0 if value is None and required else value
    if hint is float:
        number = section.number(key, required=required, default=default)
        return 0 if number is None and required else number
    if hint is Duration:  # an integer of the unit the key names (periodMinutes); negative is 0, for the rules
        unit = next((unit for unit in _DURATION_UNITS if key.endswith(unit)), None)
        if unit is None:
            raise TypeError(f"read_props reads a Duration from a key naming its unit ({', '.join(_DURATION_UNITS)}), "
                            f"not {key}")
        count = section.integer(key, required=required)
        return default if count is None else _DURATION_UNITS[unit](max(count, 0))
    if hint is str:
        text = section.string(key, required=required, default=default, allow_empty=allow_empty)
        return "" if text is None and required else text
    if isinstance(hint, type) and issubclass(hint, enum.StrEnum):
        # (the default as the file writes it: an empty value's message names it)
        member = section.string(key, required=required, default=None if default is None else str(default))
        # (the class's rule reports a value that is no member)
        return hint(member) if member is not None and member in hint._value2member_map_ else member
    if origin in (tuple, Sequence):
        items = section.string_list(key, required=required)
        if not section.has(key) and not required:
            return default
        # Items of an enumeration become its members; a bad one stays a string, for the class's rule to report.
        kinds = [kind for arg in typing.get_args(hint) for kind in (typing.get_args(arg) or (arg,))
                 if isinstance(kind, type) and issubclass(kind, enum.StrEnum)]
        return tuple(kinds[0](item) if kinds and item in kinds[0]._value2member_map_ else item for item in items)
    if origin is not None and issubclass(origin, Mapping):
        if not section.has(key):
            section.raw(key)
            return default
        return section.number_map(key) if typing.get_args(hint)[1:] == (int,) else section.string_map(key)
    raise TypeError(f"read_props cannot read {key} of type {hint!r}: read it in the loader")
