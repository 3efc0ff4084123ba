"""Read a config file into plain data, whatever the file holds: bounded, and every refusal a problem, never a crash.

A config file is a few KiB of UTF-8 YAML written by people. Anything else is refused before it can cost
time or memory, each refusal one problem with a code and the place (the line, or the key path):

* ``Config.FileTooLarge``: more than :data:`MAX_FILE_BYTES`, checked on the bytes read (at most one more than
  the bound), before any parsing;
* ``Config.NotUtf8``: a UTF-16/UTF-32 file (byte order mark, or NUL bytes) or bytes that are not UTF-8; a
  UTF-8 byte order mark is tolerated;
* ``Config.TooDeep``: mappings and lists nested more than :data:`MAX_DEPTH` levels;
* ``Config.TooManyItems``: a list or mapping of more than :data:`MAX_ITEMS` entries;
* ``Config.AliasNotAllowed``: YAML anchors (``&name``) and aliases (``*name``). An alias is a reference: a
  small file can name one node a billion times ("billion laughs"), and every walk of the data (the checks,
  the problems' quoted values, the charts' schema validation, the rendered manifests) pays for the expanded
  tree. Without aliases the data is a tree no larger than the file, so every later step is bounded by
  :data:`MAX_FILE_BYTES`;
* ``Config.DuplicateKey``: a key given twice in one mapping (YAML would keep the last silently), reported
  at its key path with both lines;
* ``Config.InvalidYaml``: anything else the YAML parser or constructor refuses (a date such as 2025-13-45,
  an integer of more digits than Python converts), at its line.

The scanner and parser are libyaml's (``CSafeLoader``) where PyYAML has it; the composer is PyYAML's own,
bounded here, and the constructor is ``SafeConstructor`` (plain data only).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml
from yaml.composer import Composer
from yaml.constructor import ConstructorError
from yaml.events import (
    AliasEvent,
    CollectionStartEvent,
    Event,
    MappingEndEvent,
    NodeEvent,
    ScalarEvent,
    SequenceEndEvent,
)
from yaml.nodes import CollectionNode, MappingNode, Node, ScalarNode, SequenceNode

from hyperpod_inference_iac.foundation.validation import ConfigError, Problems, join_path

# 1 MiB: config/default.yaml, a full platform with three models, is 12 KiB; a hundred models stay far under
# 1 MiB. The bound is what makes the rest finite: the slowest 1 MiB file measured, about 700 full model entries
# each checked against its CRD schema, takes 4.5 s and 40 MiB; hostile shapes are refused in milliseconds.
MAX_FILE_BYTES = 1 << 20
# Nesting of mappings and lists: the deepest key of config/default.yaml is 9 levels down
# (models[i].spec.autoScalingSpec...); 64 leaves room for any CRD spec and keeps every recursive walk short.
MAX_DEPTH = 64
# Entries of one list or mapping: the longest list of config/default.yaml has 8 (capture.redact); a platform
# lists tens of models or endpoint names, AWS allows 50 tags. The bound keeps every check that compares
# entries with each other (duplicates, overlaps) far from quadratic time on a file of 100,000 tiny entries.
MAX_ITEMS = 1000

FILE_TOO_LARGE = "Config.FileTooLarge"
NOT_UTF8 = "Config.NotUtf8"
TOO_DEEP = "Config.TooDeep"
TOO_MANY_ITEMS = "Config.TooManyItems"
ALIAS_NOT_ALLOWED = "Config.AliasNotAllowed"
DUPLICATE_KEY = "Config.DuplicateKey"
INVALID_YAML = "Config.InvalidYaml"

_UTF8_BOM = b"\xef\xbb\xbf"
# UTF-32 first: its little-endian mark begins with UTF-16's.
_OTHER_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32 (little-endian)"), (b"\x00\x00\xfe\xff", "UTF-32 (big-endian)"),
               (b"\xff\xfe", "UTF-16 (little-endian)"), (b"\xfe\xff", "UTF-16 (big-endian)"))
_SAVE_AS_UTF8 = "save it as UTF-8 (most editors: 'Save with encoding', or iconv -t UTF-8)"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_TOO_DEEP = (f"mappings and lists may be nested at most {MAX_DEPTH} levels deep (config/default.yaml needs 9); "
             "is a bracket unclosed?")


class _Refused(yaml.MarkedYAMLError):
    """A refusal of the bounded composer, with its code."""

    def __init__(self, code: str, message: str, mark: Any) -> None:
        super().__init__(problem=message, problem_mark=mark)
        self.code = code


_Collection = TypeVar("_Collection", bound=CollectionNode)


class _BoundedComposer(Composer):
    """PyYAML's composer without anchors and aliases, with a depth bound, noting keys given twice.

    A mixin, as PyYAML's own ``Composer`` is: the loader class it is mixed into brings the parser's events, the
    resolver's tags and the constructor's objects; their signatures are stated here for the type checker. The
    overrides take any ``anchor`` (this composer refuses anchors before any is composed: it is always None)."""

    if TYPE_CHECKING:  # (the parser's, the resolver's and the constructor's, as ConfigLoader mixes them in)
        def get_event(self) -> Any: ...  # (an Event whose kind the caller has checked: Parser's stub says no more)
        def peek_event(self) -> Event: ...
        def check_event(self, *choices: type[Event]) -> bool: ...
        def resolve(self, kind: type[Node], value: str | None, implicit: bool) -> str: ...
        def construct_object(self, node: Node, deep: bool = False) -> Any: ...

    def compose_document(self) -> Node:
        self._depth = 0
        self._path: list[str | int] = []
        self.duplicates: list[tuple[str, int, int]] = []  # (key path, first line, second line), 1-based
        self.get_event()  # DocumentStartEvent
        node = self.compose_node(None, None)
        self.get_event()  # DocumentEndEvent
        return node

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        event = self.peek_event()
        anchor = event.anchor if isinstance(event, NodeEvent) else None
        if anchor is not None:
            found = f"alias *{anchor}" if isinstance(event, AliasEvent) else f"anchor &{anchor}"
            raise _Refused(ALIAS_NOT_ALLOWED, f"has the YAML {found}: anchors and aliases are not allowed in a "
                           "config file (an alias can repeat a node a billion times); write the value out where it "
                           "is used", event.start_mark)
        if isinstance(event, ScalarEvent):
            # (typeshed's stub types the anchor as a dict; PyYAML takes the event's anchor, a str or None)
            return self.compose_scalar_node(None)  # type: ignore[arg-type]
        if self._depth >= MAX_DEPTH:
            raise _Refused(TOO_DEEP, _TOO_DEEP, event.start_mark)
        self._depth += 1
        try:
            if isinstance(event, yaml.SequenceStartEvent):
                return self.compose_sequence_node(None)
            return self.compose_mapping_node(None)
        finally:
            self._depth -= 1

    def _start(self, kind: type[_Collection]) -> _Collection:
        """The collection node of the start event next (its tag resolved as PyYAML's composer does)."""
        start: CollectionStartEvent = self.get_event()
        tag = start.tag
        if tag is None or tag == "!":
            tag = self.resolve(kind, None, start.implicit)
        # (libyaml's parser marks events with its own Mark class; typeshed's nodes name only PyYAML's)
        return kind(tag, [], start.start_mark, None, flow_style=start.flow_style)  # type: ignore[arg-type]

    def compose_sequence_node(self, anchor: object) -> SequenceNode:
        node = self._start(SequenceNode)
        while not self.check_event(SequenceEndEvent):
            self._check_items(node)
            self._path.append(len(node.value))
            node.value.append(self.compose_node(node, len(node.value)))
            self._path.pop()
        node.end_mark = self.get_event().end_mark
        return node

    def compose_mapping_node(self, anchor: object) -> MappingNode:
        node = self._start(MappingNode)
        lines: dict[Any, int] = {}
        while not self.check_event(MappingEndEvent):
            self._check_items(node)
            key = self.compose_node(node, None)
            name = self._key(key)
            self._path.append("?" if name is None else str(name))
            value = self.compose_node(node, key)
            if name is not None and name in lines:
                self.duplicates.append((self._key_path(), lines[name], key.start_mark.line + 1))
            elif name is not None:
                lines[name] = key.start_mark.line + 1
            self._path.pop()
            node.value.append((key, value))
        node.end_mark = self.get_event().end_mark
        return node

    def _check_items(self, node: Node) -> None:
        if len(node.value) >= MAX_ITEMS:
            kind = "list" if isinstance(node, SequenceNode) else "mapping"
            raise _Refused(TOO_MANY_ITEMS, f"a {kind} may have at most {MAX_ITEMS} entries; this one (at "
                           f"{self._key_path() or 'the top level'}) has more", self.peek_event().start_mark)

    def _key(self, key: Node) -> Any:
        """A scalar key as the mapping will hold it (``true`` and ``yes`` are one key), or None."""
        if not isinstance(key, ScalarNode) or key.tag == _MERGE_TAG:
            return None
        value = self.construct_object(key)  # (the constructor caches it)
        try:
            hash(value)
        except TypeError:
            return None
        return value

    def _key_path(self) -> str:
        path = ""
        for part in self._path:
            path = join_path(path, part)
        return path


_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's scanner and parser where available


class ConfigLoader(_BoundedComposer, _Base):  # type: ignore[misc]  # (_Base: libyaml's loader or PyYAML's)
    """Plain data (``SafeConstructor``), bounded depth, no aliases, duplicate keys noted (``duplicates``)."""

    def __init__(self, stream: str) -> None:
        _Base.__init__(self, stream)  # (not Composer's, which takes no stream)

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError) as error:  # 2025-13-45 as a date; an integer of 5,000 digits
            raise ConstructorError(None, None, f"cannot be read as a {node.tag.rsplit(':', 1)[-1]}: {error} "
                                   "(quote it to make it a string)", node.start_mark) from None


def read_document(path: str | Path) -> tuple[Any, Problems]:
    """The file's data and its duplicate keys as problems (the data keeps the last of each, as YAML does), or
    one :class:`ConfigError` when the file cannot be read as a bounded UTF-8 YAML document."""
    path = Path(path)
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        raise ConfigError([], source=f"{path} (cannot be read: {error.strerror}; pass an existing file with "
                                     f"CONFIG=path/to/file.yaml or -c config=path/to/file.yaml)") from None
    problems = Problems()
    if len(raw) > MAX_FILE_BYTES:
        problems.add(FILE_TOO_LARGE, "(file)", f"must be at most {MAX_FILE_BYTES // 1024} KiB ({MAX_FILE_BYTES} "
                     "bytes): a platform config is a few KiB (config/default.yaml is 12 KiB); is this the right "
                     "file?")
        raise ConfigError(problems, source=str(path))
    text = _decode(raw, problems)
    if text is None:
        raise ConfigError(problems, source=str(path))
    loader = ConfigLoader(text)
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as error:
        problem = str(getattr(error, "problem", ""))
        if "maximum nesting depth" in problem:  # libyaml's own bound (1,000 flow levels), met while scanning ahead
            error = _Refused(TOO_DEEP, _TOO_DEEP, error.problem_mark)  # type: ignore[attr-defined]
        problems.add(getattr(error, "code", INVALID_YAML), _where(error, text), _reason(error))
        raise ConfigError(problems, source=str(path)) from None
    finally:
        loader.dispose()
    for key_path, first, second in getattr(loader, "duplicates", ()):
        problems.add(DUPLICATE_KEY, key_path or "(top level)",
                     f"is given twice (lines {first} and {second}); YAML would silently keep only the last: "
                     "remove one")
    return data, problems


def _decode(raw: bytes, problems: Problems) -> str | None:
    for bom, encoding in _OTHER_BOMS:
        if raw.startswith(bom):
            problems.add(NOT_UTF8, "line 1, byte 0", f"the file must be UTF-8, not {encoding} (its byte order "
                         f"mark says so); {_SAVE_AS_UTF8}")
            return None
    body = raw.removeprefix(_UTF8_BOM)
    offset = len(raw) - len(body)
    nul = body.find(b"\x00")
    if nul >= 0:
        problems.add(NOT_UTF8, _byte_at(body, nul, offset), "is a NUL byte: the file must be UTF-8 text (UTF-16 "
                     f"and UTF-32 put NULs between the characters); {_SAVE_AS_UTF8}")
        return None
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as error:
        problems.add(NOT_UTF8, _byte_at(body, error.start, offset),
                     f"is not UTF-8 ({error.reason}: {body[error.start:error.start + 4]!r}); the file must be "
                     f"UTF-8: {_SAVE_AS_UTF8}")
        return None


def _byte_at(body: bytes, index: int, offset: int) -> str:
    line = body.count(b"\n", 0, index) + 1
    return f"line {line}, byte {index + offset}"


def _where(error: yaml.YAMLError, text: str) -> str:
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    if mark is not None:
        return f"line {mark.line + 1}, column {mark.column + 1}"
    position = getattr(error, "position", None)  # a ReaderError (a control character)
    if isinstance(position, int):
        return f"line {text.count(chr(10), 0, position) + 1}"
    return "unknown position"


def _reason(error: yaml.YAMLError) -> str:
    if isinstance(error, _Refused):
        return str(error.problem)
    if isinstance(error, yaml.reader.ReaderError):
        return f"is not valid YAML: {error.reason} (character {error.character!r})"
    return f"is not valid YAML: {getattr(error, 'problem', None) or error}"
