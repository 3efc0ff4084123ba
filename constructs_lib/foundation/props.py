"""Construct properties stated once.

Each construct declares its properties in one frozen, keyword-only ``…Props`` dataclass, in the style of
``aws_eks_v2``'s ``NodegroupProps``: every field with its type, its default (``@default``) and its documentation,
and, for the properties a config file may set, its key there (the camelCase of its name unless it says otherwise).
The class's ``check`` holds every rule of the properties. Everything else is derived from that one declaration or
checked against it by a test (``tests/unit/test_props.py``):

* the construct's constructor takes the same keyword arguments, with the defaults read from the class
  (``min_size: int = GpuNodeGroupProps.min_size``), and builds the props from them;
* the rules name a problem by the Python property for a Python consumer (``min_size``) and by the config key for
  a config file (``cluster.gpuNodeGroups[0].minSize``): ``key_paths`` gives either from the same fields;
* the app's config model *is* the props class (``platform_config`` reads a section into it with
  :func:`platform_config.reader.read_props`), so a default or a key cannot differ between the two;
* the construct's documentation page carries the table :func:`props_table` renders, between
  ``<!-- props:<ClassName> -->`` markers (``python -m tools.props_docs`` rewrites them).
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from aws_cdk import Duration

from hyperpod_inference_iac.foundation.validation import PROPS, KeyPaths, Problems


@dataclass(frozen=True)
class PropInfo:
    """What a property's field says besides its type and default."""

    doc: str
    key: str | None = None  # its config key (None: the camelCase of its name); "" when no config file sets it
    default_doc: str | None = None  # how the docs describe the default when its value says little (None: "the …")


def prop(default: Any = dataclasses.MISSING, *, doc: str, key: str | None = None, config: bool = True,
         default_doc: str | None = None) -> Any:
    """One property: ``default`` (none: required), ``doc`` (one sentence or two, the reader's view), ``key`` (its
    config key when not the camelCase of its name), ``config=False`` for what only Python code passes (a cluster, a
    bucket), ``default_doc`` for a default whose value needs words (``None`` meaning "the cluster's subnets")."""
    info = PropInfo(doc, "" if not config else key, default_doc)
    return dataclasses.field(default=default, metadata={"prop": info})


def camel_case(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def info_of(field: dataclasses.Field[Any]) -> PropInfo:
    info = field.metadata.get("prop")
    if not isinstance(info, PropInfo):
        raise TypeError(f"{field.name}: declare it with props.prop(...)")
    return info


def config_key(field: dataclasses.Field[Any]) -> str | None:
    """The field's config key, or None when no config file sets it."""
    info = info_of(field)
    if info.key == "":
        return None
    return info.key or camel_case(field.name)


class Props:
    """Base of the ``…Props`` dataclasses (frozen, keyword-only). Subclasses override :meth:`check`."""

    # The ConfigError's source names the construct: "GpuNodeGroup <node path>".
    CONSTRUCT: ClassVar[str] = ""
    # A block of settings other props hold as one property (an alarm's: "alarm"): a config table shows such a
    # property as one row, and in a config file the block's keys left out keep the holder's default for it.
    BLOCK: ClassVar[str] = ""

    @classmethod
    def fields(cls) -> Iterator[dataclasses.Field[Any]]:
        yield from dataclasses.fields(cls)  # type: ignore[arg-type]

    @classmethod
    def config_fields(cls) -> Iterator[dataclasses.Field[Any]]:
        return (field for field in cls.fields() if config_key(field) is not None)

    @classmethod
    def key_names(cls) -> dict[str, str]:
        """Each config field's key by its name; for a list of props, also each entry's keys as
        ``<name>[].<field>`` (:meth:`KeyPaths.child` reads them), and for a block of props (:func:`block_props`) its
        keys as ``<name>.<field>`` (:meth:`KeyPaths.block` reads them), so one view names every nested key too."""
        hints = typing.get_type_hints(cls)
        names: dict[str, str] = {}
        for field in cls.config_fields():
            names[field.name] = config_key(field)  # type: ignore[assignment]
            if (item := item_props(hints[field.name])) is not None:
                names.update({f"{field.name}[].{name}": key for name, key in item.key_names().items()})
            elif (block := block_props(hints[field.name])) is not None:
                names.update({f"{field.name}.{name}": f"{names[field.name]}.{key}"
                              for name, key in block.key_names().items()})
        return names

    @classmethod
    def key_paths(cls, base: str, **renamed: str) -> KeyPaths:
        """A config file's view of these properties under ``base``: each named by its config key (``renamed``
        overrides one, e.g. a key the app places elsewhere)."""
        return KeyPaths(base, {**cls.key_names(), **renamed})

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        """Every rule of these properties, each problem under ``at``'s name for it."""

    def raise_if_invalid(self, source: str) -> None:
        problems = Problems()
        self.check(problems)
        problems.raise_if_any(source)

    def kwargs(self, of: type[Props] | None = None) -> dict[str, Any]:
        """The properties as the construct's keyword arguments: ``GpuNodeGroup(scope, id, cluster=c, **o.kwargs())``;
        ``of``: only those of that class, a base of this one (a construct's options in an app's config section that
        holds more)."""
        return {field.name: getattr(self, field.name) for field in (of or self).fields()}

    def replace(self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]

    def summary(self) -> str:
        """How the docs show these props as a default value (a block's)."""
        return ", ".join(f"{field.name}={getattr(self, field.name)!r}" for field in self.fields())


def block_props(hint: Any) -> type[Props] | None:
    """The props class of a property that holds one block of props (``AlarmSettings``, ``AlarmSettings | None``): a
    config file gives it as a mapping of the block's keys."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        hint = args[0] if len(args) == 1 else None
    return hint if isinstance(hint, type) and issubclass(hint, Props) else None


def item_props(hint: Any) -> type[Props] | None:
    """The props class of a list of props (``Sequence[InstanceGroup]``, ``tuple[X, ...]``, optional or not)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next((arg for arg in typing.get_args(hint) if arg is not type(None)), hint)
    if typing.get_origin(hint) in (tuple, list, Sequence):
        item = typing.get_args(hint)[0] if typing.get_args(hint) else None
        if isinstance(item, type) and issubclass(item, Props):
            return item
    return None


def default_text(field: dataclasses.Field[Any], *, config: bool = False) -> str:
    """The default as the docs show it (``config``: as a config file writes it)."""
    info = info_of(field)
    if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
        return "required"
    value = field.default
    if config and value is None:  # (a key left out: what the default means is all there is to say)
        return info.default_doc or "\N{EN DASH}"
    if isinstance(value, enum.Enum):
        shown = f"`{value.value}`" if config else f"`{value.__class__.__name__}.{value.name}`"
    elif isinstance(value, Props):
        shown = value.summary()
    elif isinstance(value, Duration):
        shown = f"`{value.to_human_string()}`"
    elif isinstance(value, tuple) and (config or (value and all(isinstance(item, enum.Enum) for item in value))):
        # As a config file lists them (and a list of enumeration members in Python, by their values).
        shown = f"`[{', '.join(str(item.value if isinstance(item, enum.Enum) else item) for item in value)}]`"
    elif config and isinstance(value, bool):
        shown = f"`{str(value).lower()}`"  # as YAML writes it
    elif config and isinstance(value, str):
        shown = f"`{value}`"
    else:
        shown = f"`{value!r}`"
    return f"{shown} ({info.default_doc})" if info.default_doc else shown


def _config_type(annotation: str) -> str:
    """The YAML kind of a property's annotation, as docs/configuration.md names it."""
    bare = annotation.replace(" | None", "")
    if bare.startswith(("Sequence[", "tuple[")):
        return "list"
    if bare.startswith("Mapping["):
        return "map"
    # (a Duration is an integer of the unit its key names: periodMinutes)
    return {"str": "string", "int": "int", "float": "number", "bool": "bool", "Duration": "int"}.get(bare, "string")


def config_table(cls: type[Props], base: str, *, leave_out: Sequence[str] = ()) -> str:
    """The config file's view of a props class under ``base`` (``cluster.gpuNodeGroups[]``): key, kind, default,
    meaning; what only Python code passes is left out, and so are the keys ``leave_out`` names (a key the file
    places elsewhere, documented there). A section of props (a block without ``BLOCK``) lists its own keys under its
    key; a ``BLOCK`` (an alarm's settings) is one row, its keys in a table of their own."""
    return "\n".join(["| key | type | default | meaning |", "|---|---|---|---|", *_config_rows(cls, base, leave_out)])


def _config_rows(cls: type[Props], base: str, leave_out: Sequence[str] = ()) -> Iterator[str]:
    hints = typing.get_type_hints(cls)
    for field in cls.config_fields():
        if config_key(field) in leave_out:
            continue
        key = f"{base}.{config_key(field)}"
        block = block_props(hints[field.name])
        if block is not None and not block.BLOCK:
            yield from _config_rows(block, key)
            continue
        kind = f"{block.BLOCK} block" if block is not None else _config_type(str(field.type))
        # (a block's key left out keeps the holder's default for it)
        default = f"the {cls.BLOCK}'s" if cls.BLOCK else default_text(field, config=True)
        yield f"| `{key}` | {kind} | {default} | {info_of(field).doc} |"


def props_table(cls: type[Props]) -> str:
    """The documentation table of a props class: property, config key, type, default, meaning."""
    rows = ["| property | config key | type | default | meaning |", "|---|---|---|---|---|"]
    for field in cls.fields():
        key = config_key(field)
        shown_key = f"`{key}`" if key else "(Python only)"
        annotation = str(field.type).replace("|", "\\|")
        rows.append(f"| `{field.name}` | {shown_key} | `{annotation}` | {default_text(field)} | {info_of(field).doc} |")
    return "\n".join(rows)


def listed(values: Sequence[Any]) -> Sequence[Any]:
    """A list property as the props keep it: a tuple (frozen), a string as given (its rule says it is no list)."""
    return values if isinstance(values, str) else tuple(values)


__all__ = ["PropInfo", "Props", "block_props", "config_key", "config_table", "item_props", "listed", "prop",
           "props_table"]
