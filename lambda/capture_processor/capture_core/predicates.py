"""The closed predicate grammar of deletions (``column OP literal`` joined by ``AND``, OP one of ``=``, ``<``,
``>``; a literal is a single-quoted string, ``''`` for a quote, or a number), without pyiceberg: the processor
applies the erasure register with it even when it writes Parquet only."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass


class PredicateError(ValueError):
    """A --where predicate outside the grammar, or naming a column the table does not have."""


_TERM = re.compile(
    r"\s*(?P<column>[a-z_][a-z0-9_]*)\s*(?P<op>=|<|>)\s*(?:'(?P<string>(?:[^']|'')*)'|(?P<number>-?\d+(?:\.\d+)?))\s*",
)


@dataclass(frozen=True)
class Term:
    """One ``column OP literal`` of the grammar; the same terms filter the tables (pyiceberg), the Parquet layout,
    the quarantine and the raw objects (capture_core.erasure)."""

    column: str
    op: str  # "=", "<" or ">"
    literal: str | int | float


def parse_terms(text: str, columns: Sequence[str] | None = None) -> list[Term]:
    """``column OP literal [AND ...]`` (the module docstring's grammar); each column one of ``columns`` when
    given."""
    terms = re.split(r"\s+AND\s+", text.strip(), flags=re.IGNORECASE) if text.strip() else []
    if not terms:
        raise PredicateError("the predicate is empty")
    result = []
    for term in terms:
        match = _TERM.fullmatch(term)
        if match is None:
            raise PredicateError(f"{term!r} is not `column = literal`, `column < literal` or `column > literal`")
        column = match["column"]
        if columns is not None and column not in columns:
            raise PredicateError(f"{column!r} is not a column of the table")
        literal: str | int | float
        if match["string"] is not None:
            literal = match["string"].replace("''", "'")
        else:
            literal = float(match["number"]) if "." in match["number"] else int(match["number"])
        result.append(Term(column, match["op"], literal))
    return result
