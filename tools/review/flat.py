"""Documents as path → leaf maps, so two versions compare field by field.

Lists whose items all carry a unique name (Kubernetes ``name``, CloudFormation ``Id``/``Key``...) are
keyed by it (``containers[model-server].image``), so reordering is no change and an item is followed
by its name; other lists are one leaf (compared whole)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from tools.review.model import MISSING, Line, listing, short

Path = tuple[str, ...]


def _key_of(items: list[Any], keys: Collection[str]) -> str | None:
    for key in keys:
        if items and all(isinstance(item, dict) and isinstance(item.get(key), str) for item in items):
            names = [item[key] for item in items]
            if len(set(names)) == len(names):
                return key
    return None


def is_intrinsic(value: Any) -> bool:
    """A CloudFormation function (``{"Ref": ...}``, ``{"Fn::Join": ...}``): one value, not a mapping."""
    if not isinstance(value, dict) or len(value) != 1:
        return False
    function = str(next(iter(value)))
    return function in ("Ref", "Condition") or function.startswith("Fn::")


def flatten(value: Any, keys: Collection[str] = ("name",), opaque: Collection[str] = (),
            prefix: Path = ()) -> dict[Path, Any]:
    """``opaque``: mapping keys whose values stay whole (policy documents, compared by their own rules).
    CloudFormation functions stay whole too."""
    whole = bool(prefix) and prefix[-1] in opaque
    if isinstance(value, dict) and value and not whole and not is_intrinsic(value):
        out: dict[Path, Any] = {}
        for name, item in value.items():
            out.update(flatten(item, keys, opaque, (*prefix, str(name))))
        return out
    if isinstance(value, list) and not whole:
        key = _key_of(value, keys)
        if key is not None:
            out = {}
            for item in value:
                rest = {k: v for k, v in item.items() if k != key}
                segment = f"[{item[key]}]"
                out.update(flatten(rest, keys, opaque, (*prefix, segment)) if rest else {(*prefix, segment): {}})
            return out
    return {prefix: value}


def render(path: Path) -> str:
    text = ""
    for segment in path:
        text += segment if segment.startswith("[") or not text else f".{segment}"
    return text


def changed(old: dict[Path, Any], new: dict[Path, Any]) -> list[tuple[Path, Any, Any]]:
    """(path, old, new) of every leaf that differs, MISSING for a side without it, in path order."""
    out = []
    for path in sorted(set(old) | set(new)):
        before, after = old.get(path, MISSING), new.get(path, MISSING)
        if before != after:
            out.append((path, before, after))
    return out


def whole_item(path: Path, old: dict[Path, Any], new: dict[Path, Any]) -> Path | None:
    """The outermost keyed item (``[...]`` segment) on ``path`` that exists on one side only."""
    for depth, segment in enumerate(path):
        if segment.startswith("["):
            head = path[: depth + 1]
            in_old = any(p[: depth + 1] == head for p in old)
            in_new = any(p[: depth + 1] == head for p in new)
            if in_old != in_new:
                return head
    return None


def whole_subtree(path: Path, old: dict[Path, Any], new: dict[Path, Any]) -> Path | None:
    """The shortest prefix of ``path`` (below the top level) that exists on one side only."""
    for depth in range(2, len(path)):
        head = path[:depth]
        in_old = any(p[:depth] == head for p in old)
        in_new = any(p[:depth] == head for p in new)
        if in_old != in_new:
            return head
    return None


def collapse(entries: list[tuple[Path, Any, Any, Line]], old: dict[Path, Any], new: dict[Path, Any],
             least: int = 3) -> list[Line]:
    """Lines of leaves under a subtree that one side lacks (a whole block added or removed), when they
    are ``least`` or more and do not broaden, as one line per block and subject; the others as they are."""
    blocks: dict[tuple[Path, str, str], list[tuple[Path, Any, Any, Line]]] = {}
    kept: list[Line] = []
    for entry in entries:
        path, _, _, line = entry
        block = None if line.broadens else whole_subtree(path, old, new)
        if block is None:
            kept.append(line)
        else:
            blocks.setdefault((block, line.group, line.subject), []).append(entry)
    for (block, group, subject), members in blocks.items():
        if len(members) < least:
            kept += [line for *_, line in members]
            continue
        added = any(p[: len(block)] == block for p in new)
        settings = [f"{render(path[len(block):])} {short(now if added else was, 40)}" for path, was, now, _ in members]
        first = members[0][3]
        kept.append(Line(group, subject, f"{render(block)} {'added' if added else 'removed'} "
                         f"({len(members)} settings: {listing(settings, 4)})", False, first.where))
    return kept
