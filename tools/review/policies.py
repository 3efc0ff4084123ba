"""Two versions of a policy document, compared statement by statement, each change judged by whether
it widens what the statement matches (an Allow that matches more broadens; so does a Deny that
matches less).

The CDK's diff engine lists IAM statements added and removed (and says whether any broadens); this
adds what a reviewer asks next: which actions, resources, principals or condition values came or went
in a statement that stayed, and which way each moves. It is a reading of the two documents, not an
IAM evaluator: wildcards are compared as text, and a change whose direction it cannot tell (an
operator it does not order, a token it cannot read) counts as broadening."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from tools.review.model import listing
from tools.review.template import Template

LARGER, SMALLER, UNKNOWN = "+", "-", "?"

# Condition operators whose values are a set that the request must match one of: more values, more matches.
_MATCH_ONE = {"StringEquals", "StringLike", "StringEqualsIgnoreCase", "ArnEquals", "ArnLike", "IpAddress",
              "NumericEquals", "DateEquals", "BinaryEquals"}
# ...and their negations: more values, fewer matches.
_MATCH_NONE = {"StringNotEquals", "StringNotLike", "StringNotEqualsIgnoreCase", "ArnNotEquals", "ArnNotLike",
               "NotIpAddress", "NumericNotEquals", "DateNotEquals"}


def _operator(op: str) -> str:
    base = op.split(":", 1)[-1]
    return base.removesuffix("IfExists")


def _values(value: Any) -> frozenset[str]:
    items = value if isinstance(value, list) else [value]
    return frozenset(item if isinstance(item, str) else _json(item) for item in items)


def _json(value: Any) -> str:
    import json

    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


@dataclass(frozen=True)
class Statement:
    sid: str
    effect: str
    action_kind: str
    actions: frozenset[str]
    resource_kind: str
    resources: frozenset[str]
    principal_kind: str
    principals: frozenset[str]
    conditions: frozenset[tuple[str, str, frozenset[str]]]

    @classmethod
    def parse(cls, raw: Any, template: Template) -> Statement:
        if not isinstance(raw, dict):
            text = template.text(raw)
            return cls("", "Unknown", "Action", frozenset({text}), "Resource", frozenset(), "", frozenset(),
                       frozenset())
        rendered = template.render(raw)
        action_kind = "NotAction" if "NotAction" in rendered else "Action"
        resource_kind = "NotResource" if "NotResource" in rendered else "Resource"
        principal_kind = next((kind for kind in ("NotPrincipal", "Principal") if kind in rendered), "")
        principals: set[str] = set()
        value = rendered.get(principal_kind) if principal_kind else None
        if value == "*":
            principals.add("*")
        elif isinstance(value, dict):
            for kind, who in value.items():
                for item in _values(who):
                    principals.add("*" if (kind == "AWS" and item == "*") else f"{kind}:{item}")
        elif value is not None:
            principals.add(_json(value))
        conditions: set[tuple[str, str, frozenset[str]]] = set()
        condition = raw.get("Condition") or {}
        if not isinstance(condition, dict):
            conditions.add(("(condition)", template.text(condition), frozenset()))
        else:
            for op, keys in condition.items():
                resolved = template.resolve_json(keys)
                if isinstance(resolved, dict):
                    for key, expected in resolved.items():
                        conditions.add((op, str(key), _values(expected)))
                else:
                    conditions.add((op, "(token)", _values(resolved)))
        return cls(
            sid=str(rendered.get("Sid", "") or ""),
            effect=str(rendered.get("Effect", "Allow")),
            action_kind=action_kind, actions=_values(rendered.get(action_kind, [])),
            resource_kind=resource_kind, resources=_values(rendered.get(resource_kind, [])),
            principal_kind=principal_kind, principals=frozenset(principals),
            conditions=frozenset(conditions),
        )

    def describe(self, most: int = 8) -> str:
        verb = f"{self.effect} " + (f"every action but {listing(sorted(self.actions), most)}"
                                    if self.action_kind == "NotAction" else listing(sorted(self.actions), most))
        target = (f" on everything but {listing(sorted(self.resources), most)}" if self.resource_kind == "NotResource"
                  else f" on {listing(sorted(self.resources), most)}" if self.resources else "")
        who = ""
        if self.principals:
            who = (" to everyone but " if self.principal_kind == "NotPrincipal" else " to ") + listing(
                sorted(self.principals), most)
        condition = f" if {conditions_text(self.conditions)}" if self.conditions else ""
        return f"{verb}{target}{who}{condition}"

    def label(self) -> str:
        """The statement's Sid, else what it allows or denies on what."""
        if self.sid:
            return f"{self.sid} ({self.effect})"
        target = f" on {listing(sorted(self.resources), 2)}" if self.resources else ""
        return f"{self.effect} {listing(sorted(self.actions), 3)}{target}"


def conditions_text(conditions: frozenset[tuple[str, str, frozenset[str]]]) -> str:
    return "; ".join(f"{op} {key} = {listing(sorted(values), 6)}" for op, key, values in sorted(conditions))


def statements(document: Any, template: Template) -> list[Statement] | None:
    """The statements of a policy document, or None when the document is not readable as one."""
    if not isinstance(document, dict):
        return None
    raw = document.get("Statement", [])
    raw = raw if isinstance(raw, list) else [raw]
    return [Statement.parse(item, template) for item in raw]


@dataclass(frozen=True)
class StatementChange:
    text: str
    broadens: bool


def _scope(kind: str, positive: str) -> tuple[str, str]:
    """(direction of an added value, direction of a removed one) for a list of this kind."""
    return (LARGER, SMALLER) if kind == positive else (SMALLER, LARGER)


def _broadens(effect: str, directions: set[str]) -> bool:
    if UNKNOWN in directions:
        return True
    return (LARGER in directions) if effect != "Deny" else (SMALLER in directions)


def _set_fragments(name: str, kind_old: str, kind_new: str, old: frozenset[str], new: frozenset[str],
                   positive: str) -> list[tuple[str, str]]:
    if kind_old != kind_new:
        return [(f"{kind_old} {listing(sorted(old))} → {kind_new} {listing(sorted(new))}", UNKNOWN)]
    added, removed = _scope(kind_new, positive)
    out = []
    if new - old:
        out.append((f"{name} + {listing(sorted(new - old))}", added))
    if old - new:
        out.append((f"{name} - {listing(sorted(old - new))}", removed))
    return out


def _condition_fragments(effect: str, old: frozenset, new: frozenset) -> list[tuple[str, str]]:
    before = {(op, key): values for op, key, values in old}
    after = {(op, key): values for op, key, values in new}
    out = []
    for op, key in sorted(set(before) | set(after)):
        was, now = before.get((op, key)), after.get((op, key))
        if was == now:
            continue
        if was is None:
            out.append((f"condition {op} {key} = {listing(sorted(now))} added", SMALLER))
            continue
        if now is None:
            out.append((f"condition {op} {key} = {listing(sorted(was))} removed", LARGER))
            continue
        base = _operator(op)
        gained, lost = sorted(now - was), sorted(was - now)
        if base in _MATCH_ONE or base in _MATCH_NONE:
            grows, shrinks = (LARGER, SMALLER) if base in _MATCH_ONE else (SMALLER, LARGER)
            exempt = effect == "Deny" and base in _MATCH_NONE and key.lower() == "aws:principalarn"
            if gained:
                text = (f"now exempts {listing(gained)} ({op} {key})" if exempt
                        else f"condition {op} {key} + {listing(gained)}")
                out.append((text, grows))
            if lost:
                text = (f"no longer exempts {listing(lost)} ({op} {key})" if exempt
                        else f"condition {op} {key} - {listing(lost)}")
                out.append((text, shrinks))
        else:
            out.append((f"condition {op} {key} {listing(sorted(was))} → {listing(sorted(now))}", UNKNOWN))
    return out


def _pair_changes(old: Statement, new: Statement) -> StatementChange | None:
    fragments: list[tuple[str, str]] = []
    if old.effect != new.effect:
        fragments.append((f"effect {old.effect} → {new.effect}", UNKNOWN))
    fragments += _set_fragments("actions", old.action_kind, new.action_kind, old.actions, new.actions, "Action")
    fragments += _set_fragments("resources", old.resource_kind, new.resource_kind, old.resources, new.resources,
                                "Resource")
    fragments += _set_fragments("principals", old.principal_kind, new.principal_kind, old.principals,
                                new.principals, "Principal")
    fragments += _condition_fragments(new.effect, old.conditions, new.conditions)
    if old.sid != new.sid:
        fragments.append((f"sid {old.sid or '(none)'} → {new.sid or '(none)'}", ""))
    if not fragments:
        return None
    directions = {direction for _, direction in fragments if direction}
    effect = new.effect if old.effect == new.effect else "Allow"
    label = new.label() if new.sid else old.label()
    return StatementChange(f"{label}: " + "; ".join(text for text, _ in fragments),
                           _broadens(effect, directions))


def _similarity(a: Statement, b: Statement) -> float:
    def jaccard(x: frozenset, y: frozenset) -> float:
        return len(x & y) / len(x | y) if x | y else 1.0

    if a.effect != b.effect:
        return 0.0
    keys_a = {(op, key) for op, key, _ in a.conditions}
    keys_b = {(op, key) for op, key, _ in b.conditions}
    return (jaccard(a.actions, b.actions) + jaccard(a.resources, b.resources) + jaccard(a.principals, b.principals)
            + 0.5 * jaccard(frozenset(keys_a), frozenset(keys_b)))


def diff_documents(old_doc: Any, new_doc: Any, old_template: Template, new_template: Template
                   ) -> list[StatementChange]:
    """What changed between two policy documents (either may be None: the policy is new or gone)."""
    old = statements(old_doc, old_template) if old_doc is not None else []
    new = statements(new_doc, new_template) if new_doc is not None else []
    if old is None or new is None:
        return [StatementChange("policy document changed (not readable statement by statement; see the CDK diff)",
                                True)]
    # Statements present on both sides unchanged (as a multiset) are no change.
    common = Counter(old) & Counter(new)
    rest_old, rest_new = list((Counter(old) - common).elements()), list((Counter(new) - common).elements())
    pairs: list[tuple[Statement, Statement]] = []
    for statement in list(rest_new):
        match = next((o for o in rest_old if statement.sid and o.sid == statement.sid), None)
        if match is not None:
            pairs.append((match, statement))
            rest_old.remove(match)
            rest_new.remove(statement)
    scored = sorted(((_similarity(a, b), i, j) for i, a in enumerate(rest_old) for j, b in enumerate(rest_new)),
                    reverse=True)
    used_old: set[int] = set()
    used_new: set[int] = set()
    for score, i, j in scored:
        if score < 1.5 or i in used_old or j in used_new:
            continue
        used_old.add(i)
        used_new.add(j)
        pairs.append((rest_old[i], rest_new[j]))
    changes = []
    for a, b in pairs:
        found = _pair_changes(a, b)
        if found:
            changes.append(found)
    for j, statement in enumerate(rest_new):
        if j not in used_new:
            changes.append(StatementChange(f"new statement: {statement.describe()}", statement.effect != "Deny"))
    for i, statement in enumerate(rest_old):
        if i not in used_old:
            changes.append(StatementChange(f"statement removed: {statement.describe()}", statement.effect == "Deny"))
    return changes
