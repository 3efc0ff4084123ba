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

import contextlib
import contextvars
import dataclasses
import enum
import functools
import pathlib
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Self, TypeVar

from aws_cdk import Duration

from hyperpod_inference_iac.foundation.validation import (
    PROPS,
    KeyPaths,
    Problems,
    is_unresolved,
)

P = TypeVar("P", bound="Props")


@dataclass(frozen=True)
class PropInfo:
    """What a property's field says besides its type and default."""

    doc: str
    key: str | None = None  # its config key (None: the camelCase of its name); "" when no config file sets it
    default_doc: str | None = None  # how the docs describe the default when its value says little (None: "the …")


def prop(default: Any = dataclasses.MISSING, *, doc: str, key: str | None = None, config: bool = True,
         default_doc: str | None = None, default_factory: Callable[[], Any] | None = None) -> Any:
    """One property: ``default`` (none: required), ``doc`` (one sentence or two, the reader's view), ``key`` (its
    config key when not the camelCase of its name), ``config=False`` for what only Python code passes (a cluster, a
    bucket), ``default_doc`` for a default whose value needs words (``None`` meaning "the cluster's subnets"),
    ``default_factory`` instead of ``default`` for an empty mapping (a new one for each props object)."""
    info = PropInfo(doc, "" if not config else key, default_doc)
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata={"prop": info})
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
        """Each config field's key by its name; for a list of props (or a mapping of props by name), also each
        entry's keys as ``<name>[].<field>`` (:meth:`KeyPaths.child` reads them), and for a block of props
        (:func:`block_props`) its keys as ``<name>.<field>`` (:meth:`KeyPaths.block` reads them), so one view names
        every nested key too. Worked out once per class: a config check asks for some classes' 20 times."""
        if cls not in _KEY_NAMES:
            _KEY_NAMES[cls] = cls._own_key_names()
        return dict(_KEY_NAMES[cls])

    @classmethod
    def _own_key_names(cls) -> dict[str, str]:
        hints = type_hints(cls)
        names: dict[str, str] = {}
        for field in cls.config_fields():
            names[field.name] = config_key(field)  # type: ignore[assignment]
            if (item := item_props(hints[field.name]) or entry_props(hints[field.name])) is not None:
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

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("check")
        if own is not None:
            cls.check = _types_first(own)  # type: ignore[method-assign]

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        """Every rule of these properties, each problem under ``at``'s name for it. Every class's ``check`` first
        checks each property's value against its declared type (``[<Construct>.WrongType]``): a property of the wrong
        type is reported once, and the rules then judge the others with its default in its place."""
        _wrong_types(self, problems, at)

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


_C = TypeVar("_C", bound=type)


def real_signature(cls: _C) -> _C:
    """A construct class whose signature is its constructor's (what ``help()`` and IDEs show), from the moment its
    module is imported. jsii's metaclass defines ``__call__``, so ``inspect.signature(CaptureStorage)`` was
    ``(*args, **kwargs)``; with ``__signature__`` set it is ``(scope, id, *, capture_prefix='data-capture/', ...)``,
    the keyword properties with their defaults (tests/unit/test_props.py)."""
    import inspect

    signature = inspect.signature(vars(cls)["__init__"])
    cls.__signature__ = signature.replace(  # type: ignore[attr-defined]  # (read by inspect, not typed)
        parameters=list(signature.parameters.values())[1:])  # without self
    return cls


def construct_name(cls: type[Props]) -> str:
    """The construct a props class belongs to, as its problem codes name it: ``CONSTRUCT``, else the class's name
    without ``Props`` or ``Options`` (a block such as ``InstanceGroup`` names itself)."""
    return cls.CONSTRUCT or cls.__name__.removesuffix("Props").removesuffix("Options")


WRONG_TYPE = "WrongType"  # the code's last part: ``<construct>.WrongType``


def _types_first(rules: Callable[..., None]) -> Callable[..., None]:
    """A class's ``check`` made to check the properties' types first: with a property of the wrong type, its rules
    judge a copy holding a stand-in there (the property's default, or an empty value of its type) and their problems
    about that property are left out, so one mistake is one problem and the others are all still found."""

    @functools.wraps(rules)
    def check(self: Props, problems: Problems, at: KeyPaths = PROPS, **kwargs: Any) -> None:
        if id(self) in _TYPES_CHECKED.get():  # (a class's rules calling a base's: the types are checked once)
            rules(self, problems, at, **kwargs)
            return
        with types_checked(self):
            wrong = _wrong_types(self, problems, at)
            if not wrong:
                rules(self, problems, at, **kwargs)
                return
        stand_in = _stand_in(self, wrong)
        found = Problems()
        try:
            with types_checked(stand_in):
                rules(stand_in, found, at, **kwargs)
        except (TypeError, AttributeError, ValueError):
            # (a rule that cannot judge the stand-in: the wrong type already reported is the problem to fix first)
            return
        bad = [at.at(name) for name in wrong]
        problems.extend(p for p in found if not any(p.path == b or p.path.startswith((f"{b}.", f"{b}[")) for b in bad))

    return check


_TYPES_CHECKED: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar("types_checked", default=frozenset())


@contextlib.contextmanager
def types_checked(props: Props) -> Iterator[None]:
    """Within it, ``props.check`` runs the rules only: its types are checked already, or stand in on purpose (a
    loader's helper that gives a certificate by its ARN to the rules that read only the ARN)."""
    token = _TYPES_CHECKED.set(_TYPES_CHECKED.get() | {id(props)})
    try:
        yield
    finally:
        _TYPES_CHECKED.reset(token)


def _wrong_types(props: Props, problems: Problems, at: KeyPaths) -> list[str]:
    """Each property whose value is not of its declared type, reported as ``[<Construct>.WrongType] retention_days:
    must be an int (got str '14')`` (an entry of a list or a mapping under its own path); the names of those
    properties."""
    code = f"{construct_name(type(props))}.{WRONG_TYPE}"
    wrong: list[str] = []
    for name, parts, expected, value in type_faults(props):
        problems.add(code, at.at(name, *parts), f"must be {expected} (got {type(value).__name__} {value!r})")
        if name not in wrong:
            wrong.append(name)
    return wrong


def type_faults(props: Props) -> Iterator[tuple[str, tuple[str | int, ...], str, Any]]:
    """Each value of ``props`` that is not of its declared type: (property, the path inside it, what it must be, the
    value). A number token passes where an int is declared (its value is the service's to judge)."""
    hints = type_hints(type(props))
    for field in dataclasses.fields(props):  # type: ignore[arg-type]
        for parts, expected, value in _faults(getattr(props, field.name), hints[field.name]):
            yield field.name, parts, expected, value


_HINTS: dict[type, dict[str, Any]] = {}
_KEY_NAMES: dict[type, dict[str, str]] = {}


def type_hints(cls: type) -> dict[str, Any]:
    """``typing.get_type_hints(cls)``, evaluated once per class (it compiles every string annotation each time): shared,
    do not change the returned mapping."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


_Fault = tuple[tuple[str | int, ...], str, Any]


_SHAPES: dict[Any, tuple[Any, tuple[Any, ...]]] = {}


def _shape(hint: Any) -> tuple[Any, tuple[Any, ...]]:
    """``typing.get_origin(hint)`` and ``typing.get_args(hint)``, worked out once per hint (a config check asks
    about 4,000 times)."""
    try:
        return _SHAPES[hint]
    except KeyError:
        shape = _SHAPES[hint] = (typing.get_origin(hint), typing.get_args(hint))
        return shape
    except TypeError:  # (an unhashable hint)
        return typing.get_origin(hint), typing.get_args(hint)


def _faults(value: Any, hint: Any) -> Iterator[_Fault]:
    origin, args = _shape(hint)
    if hint is Any:
        return
    if origin in (typing.Union, types.UnionType):
        arms = [arg for arg in args if arg is not type(None)]
        if value is None and len(arms) < len(args):
            return
        for arm in arms:  # the arm whose kind the value has decides (a list of props: its entries' faults)
            if _kind_matches(value, arm):
                yield from _faults(value, arm)
                return
        yield (), " or ".join(_expected(arm) for arm in arms), value
        return
    if not _kind_matches(value, hint):
        yield (), _expected(hint), value
    elif origin in (tuple, list, Sequence) and args:
        for index, item in enumerate(value):
            for parts, expected, bad in _faults(item, args[0]):
                yield (index, *parts), expected, bad
    elif origin is not None and issubclass(origin, Mapping) and args:
        for key, item in value.items():
            for parts, expected, bad in _faults(key, args[0]):
                yield (str(key), *parts), f"{expected} (a key)", bad
            for parts, expected, bad in _faults(item, args[1]):
                yield (str(key), *parts), expected, bad
    elif isinstance(hint, type) and issubclass(hint, Props):
        for name, parts, expected, bad in type_faults(value):
            yield (name, *parts), expected, bad


def _kind_matches(value: Any, hint: Any) -> bool:
    """Whether ``value`` is of ``hint``'s own kind (a list for a list of anything): its entries are judged apart."""
    origin, args = _shape(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_kind_matches(value, arm) for arm in args)
    if hint is type(None):
        return value is None
    if origin in (tuple, list, Sequence):
        return isinstance(value, list | tuple)  # (a string is a sequence, never a list of them)
    if origin is not None and issubclass(origin, Mapping):
        return isinstance(value, Mapping)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:  # (a number token is a float: the service judges it)
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and is_unresolved(value))
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(hint, type) and issubclass(hint, enum.StrEnum):
        return isinstance(value, str)  # (a value that is no member: the class's rule names the members)
    if hint is pathlib.Path:
        return isinstance(value, pathlib.PurePath)
    if isinstance(hint, type) and getattr(hint, "_is_protocol", False) and hasattr(hint, "__jsii_type__"):
        return _implements(value, hint)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True  # (a type this check does not know: left to the rules)


def _implements(value: Any, interface: type) -> bool:
    """Whether ``value`` is an object implementing the jsii interface (``s3.IBucket``): a class that declares it
    (``@jsii.implements``), or a proxy jsii returns for it."""
    delegates = vars(value).get("_delegates") if type(value).__name__ == "InterfaceDynamicProxy" else None
    if delegates is not None:  # (jsii's stand-in for an object of several interfaces: one of them is enough)
        return any(_implements(delegate, interface) for delegate in delegates)
    kinds = type(value).__mro__
    proxy = getattr(interface, "__jsii_proxy_class__", None)  # (what jsii returns for an object of the interface)
    return interface in kinds or (proxy is not None and proxy() in kinds) or any(
        interface in declared.__mro__ for kind in kinds for declared in vars(kind).get("__jsii_ifaces__", ()))


def _expected(hint: Any) -> str:
    """What a value of ``hint`` is, in the words of a problem: ``an int``, ``a list of str``, ``an IBucket``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_expected(arm) for arm in args if arm is not type(None))
    if origin in (tuple, list, Sequence):
        return f"a list of {_bare(args[0])}" if args else "a list"
    if origin is not None and issubclass(origin, Mapping):
        return f"a mapping of {_bare(args[0])} to {_bare(args[1])}" if args else "a mapping"
    name = {float: "number"}.get(hint) or _bare(hint)
    return f"{'an' if name[:1] in 'aeiouAEIOU' else 'a'} {name}"


def _bare(hint: Any) -> str:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_bare(arm) for arm in typing.get_args(hint) if arm is not type(None))
    if typing.get_origin(hint) is not None:
        return _expected(hint).split(" ", 1)[1]
    return getattr(hint, "__name__", str(hint))


def _stand_in(props: P, wrong: Sequence[str]) -> P:
    """``props`` with each property of ``wrong`` at its default, or an empty value of its type when it has none (a
    required object, such as a cluster, is kept as given)."""
    hints = type_hints(type(props))
    changes: dict[str, Any] = {}
    for field in dataclasses.fields(props):  # type: ignore[arg-type]
        if field.name not in wrong:
            continue
        if field.default is not dataclasses.MISSING:
            changes[field.name] = field.default
        elif field.default_factory is not dataclasses.MISSING:
            changes[field.name] = field.default_factory()
        elif (empty := _empty(hints[field.name])) is not dataclasses.MISSING:
            changes[field.name] = empty
        # (else: a required object, a cluster; kept as given: the rules rarely read it, and if one fails on it the
        # rules' problems wait for a good value)
    return dataclasses.replace(props, **changes)  # type: ignore[type-var]


def _empty(hint: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin in (tuple, list, Sequence):
        return ()
    if origin is not None and issubclass(origin, Mapping):
        return {}
    return {str: "", int: 0, float: 0.0, bool: False}.get(hint, dataclasses.MISSING)


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


def entry_props(hint: Any) -> type[Props] | None:
    """The props class of a mapping of props by name (``Mapping[str, SchedulerOptions]``, optional or not): a config
    file gives it as a mapping of names to blocks of the class's keys."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next((arg for arg in typing.get_args(hint) if arg is not type(None)), hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is not None and issubclass(origin, Mapping) and len(args) == 2:
        value = args[1]
        if isinstance(value, type) and issubclass(value, Props):
            return value
    return None


def default_text(field: dataclasses.Field[Any], *, config: bool = False) -> str:
    """The default as the docs show it (``config``: as a config file writes it)."""
    info = info_of(field)
    if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
        return "required"
    value = field.default if field.default_factory is dataclasses.MISSING else field.default_factory()
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
    hints = type_hints(cls)
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


@typing.overload
def listed(values: None) -> None: ...
@typing.overload
def listed(values: Sequence[Any]) -> Sequence[Any]: ...
def listed(values: Sequence[Any] | None) -> Sequence[Any] | None:
    """A list property as the props keep it: a tuple (frozen); a value that is no list (a string, a number) as given,
    so the type check reports it once (``must be a list of str (got str 'g6e.12xlarge')``)."""
    if isinstance(values, str | bytes | Mapping) or not isinstance(values, typing.Iterable):
        return values
    return tuple(values)


def mapped(values: Mapping[Any, Any] | None) -> Mapping[Any, Any] | None:
    """A mapping property as the props keep it: a copy (a dict); anything else as given, for the type check."""
    return dict(values) if isinstance(values, Mapping) else values


__all__ = ["PropInfo", "Props", "block_props", "config_key", "config_table", "construct_name", "entry_props",
           "item_props", "listed", "mapped", "prop", "props_table", "real_signature", "type_faults", "type_hints",
           "types_checked"]
