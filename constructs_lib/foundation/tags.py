"""Tags on every resource of a scope, checked against AWS's tag rules before a deploy fails on them.

The rules (AWS General Reference, "Tagging your AWS resources"; the same for the services this library
creates): at most 50 user tags per resource; a key of 1-128 and a value of 0-256 Unicode characters;
letters, digits, spaces and ``_ . : / = + - @`` only; keys starting with ``aws:`` (any case) are AWS's own
and cannot be set. A mistake fails a deploy half way, on the first resource that carries the tag, so it is
refused here instead, each bad tag under its own key path.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping

from aws_cdk import Tags
from constructs import IConstruct

from hyperpod_inference_iac.foundation.validation import PROPS, KeyPaths, Problems, is_unresolved

MAX_TAGS = 50
MAX_KEY_LENGTH = 128
MAX_VALUE_LENGTH = 256
RESERVED_PREFIX = "aws:"
_PUNCTUATION = "_.:/=+-@"
_ASCII_ALLOWED = re.compile(r"[A-Za-z0-9 _.:/=+\-@]*")
_ALLOWED = "letters, digits, spaces and _ . : / = + - @"


def check_tags(problems: Problems, at: KeyPaths = PROPS, *, tags: Mapping[str, str]) -> None:
    """Every rule of :func:`apply_tags`'s ``tags`` (key -> value; tokens skipped), each bad tag at ``tags.<key>``."""
    code = "Tags"
    if len(tags) > MAX_TAGS:
        problems.add(f"{code}.TooMany", at.at("tags"),
                     f"at most {MAX_TAGS} tags: AWS's limit per resource (and some constructs add their own, such "
                     "as Name); keep the ones cost allocation and access control need", len(tags))
    for key, value in tags.items():
        path = at.at("tags", key)
        if is_unresolved(key):
            continue
        if not 1 <= len(key) <= MAX_KEY_LENGTH or _bad_character(key) is not None:
            problems.add(f"{code}.BadKey", path, f"a tag key must be 1-{MAX_KEY_LENGTH} characters of {_ALLOWED}"
                         f"{_first_bad(key)}", key)
        elif key.lower().startswith(RESERVED_PREFIX):
            problems.add(f"{code}.ReservedPrefix", path,
                         f"keys starting with {RESERVED_PREFIX} (in any case) are reserved for AWS's own tags; "
                         "rename the key", key)
        if is_unresolved(value):
            continue
        if len(value) > MAX_VALUE_LENGTH or _bad_character(value) is not None:
            problems.add(f"{code}.BadValue", path, f"a tag value must be 0-{MAX_VALUE_LENGTH} characters of "
                         f"{_ALLOWED}{_first_bad(value)}", value)


def apply_tags(scope: IConstruct, tags: Mapping[str, str]) -> None:
    """Tag every taggable resource below ``scope`` (``Tags.of(scope).add``, in key order), after
    :func:`check_tags`: one :class:`~hyperpod_inference_iac.ConfigError` lists every bad tag."""
    problems = Problems()
    check_tags(problems, tags=tags)
    problems.raise_if_any(f"tags of {scope.node.path or 'the app'}")
    for key, value in sorted(tags.items()):
        Tags.of(scope).add(key, value)


def _bad_character(text: str) -> int | None:
    """The index of the first character AWS does not allow in tags, or None."""
    if _ASCII_ALLOWED.fullmatch(text):
        return None
    for index, character in enumerate(text):
        if character not in _PUNCTUATION and unicodedata.category(character)[0] not in "LNZ":
            return index
    return None


def _first_bad(text: str) -> str:
    index = _bad_character(text)
    return "" if index is None else f" ({text[index]!r} at position {index + 1} is not)"
