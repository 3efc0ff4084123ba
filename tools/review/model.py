"""What a review is made of: lines, each in one group, saying base → head and whether it broadens."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

# The order a reviewer reads them in; "other" (everything else) is counted last.
GROUPS: dict[str, str] = {
    "identity": "identity",
    "encryption": "encryption",
    "exposure": "exposure",
    "dns_tls": "DNS and TLS",
    "data_governance": "data governance",
    "budgets_costs": "budgets and costs",
    "workloads": "workloads",
    "alarms": "alarms",
    "other": "everything else",
}

MISSING: Any = type("Missing", (), {"__repr__": lambda self: "MISSING", "__bool__": lambda self: False})()


@dataclass(frozen=True)
class Line:
    """One reviewable change. ``text`` is a sentence: what changed, base → head, and on what."""

    group: str
    subject: str
    text: str
    broadens: bool = False
    where: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.group not in GROUPS:
            raise ValueError(f"unknown group {self.group!r}")

    @property
    def key(self) -> tuple[str, str, str, bool]:
        return (self.group, self.subject, self.text, self.broadens)


@dataclass
class Review:
    base: str
    head: str
    lines: list[Line] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # Per stack: what the CDK's own diff engine said (changed resources, its broadening verdict, raw text).
    cdk: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def broadening(self) -> list[Line]:
        return [line for line in self.lines if line.broadens]

    def by_group(self) -> dict[str, list[Line]]:
        grouped: dict[str, list[Line]] = {}
        for group in GROUPS:
            members = [line for line in self.lines if line.group == group]
            if members:
                grouped[group] = members
        return grouped

    def to_json(self) -> dict[str, Any]:
        return {
            "base": self.base, "head": self.head,
            "changes": len(self.lines), "broadening": len(self.broadening),
            "lines": [asdict(line) | {"where": list(line.where)} for line in self.lines],
            "warnings": self.warnings,
            "cdk": self.cdk,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Review:
        lines = [Line(**(entry | {"where": tuple(entry.get("where", ()))})) for entry in data["lines"]]
        return cls(base=data["base"], head=data["head"], lines=lines, warnings=list(data.get("warnings", [])),
                   cdk=dict(data.get("cdk", {})))


def merge_lines(lines: Iterable[Line]) -> list[Line]:
    """One line per (group, subject, text, broadens), its places merged; sorted by group, then subject."""
    merged: dict[tuple[str, str, str, bool], Line] = {}
    for line in lines:
        known = merged.get(line.key)
        if known is None:
            merged[line.key] = line
        else:
            where = tuple(dict.fromkeys(known.where + line.where))
            merged[line.key] = Line(known.group, known.subject, known.text, known.broadens, where)
    order = list(GROUPS)
    return sorted(merged.values(), key=lambda line: (order.index(line.group), line.subject, line.text))


# ---- words for values ---------------------------------------------------------------------------

_HASH = re.compile(r"\b[0-9a-f]{64}\b")


def short(value: Any, limit: int = 160) -> str:
    """A value as a reviewer reads it: strings bare, content hashes shortened, lists comma-joined."""
    if value is MISSING or value is None:
        return "(none)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        text = ", ".join(short(item, limit) for item in value) if value else "(empty)"
    elif isinstance(value, dict):
        import json

        text = json.dumps(value, sort_keys=True, separators=(",", ":")) if value else "{}"
    else:
        text = str(value)
    text = _HASH.sub(lambda m: m.group(0)[:12] + "…", text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def listing(items: Iterable[Any], most: int = 8) -> str:
    items = [short(item) for item in items]
    if len(items) <= most:
        return ", ".join(items)
    return ", ".join(items[:most]) + f" (+{len(items) - most} more)"


def change(what: str, old: Any, new: Any, unit: str = "") -> str:
    """``what old → new`` (or ``what new (new)`` / ``what old (removed)``), with a unit after numbers."""

    def word(value: Any) -> str:
        text = short(value)
        if not unit or value is MISSING or value is None:
            return text
        return f"{text}{unit}" + (" (no cap)" if unit.strip() == "KB" and number(value) == 0 else "")

    if old is MISSING:
        return f"{what} {word(new)} (new)"
    if new is MISSING:
        return f"{what} {word(old)} (removed)"
    return f"{what} {word(old)} → {word(new)}"


def number(value: Any) -> float | None:
    if isinstance(value, bool) or value is MISSING or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def increases(old: Any, new: Any, absent: float | None = None, zero_is: float | None = None) -> bool:
    """Whether a numeric setting grows. ``absent`` is what a missing value means (None: unknown, which
    counts as growing when the new value is the unknown one); ``zero_is`` what 0 means (e.g. no cap)."""

    def effective(value: Any) -> float | None:
        if value is MISSING or value is None:
            return absent
        parsed = number(value)
        if parsed == 0 and zero_is is not None:
            return zero_is
        return parsed

    before, after = effective(old), effective(new)
    if after is None:
        return before is not None or new is MISSING
    if before is None:
        return True
    return after > before
