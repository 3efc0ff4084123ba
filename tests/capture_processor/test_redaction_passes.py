"""The redactor's passes (issue 27, third speed step) change no output. The candidate scan is one RE2 match pass over
the column; the per-document budget (MAX_CANDIDATES_PER_DOCUMENT) is counted only for documents whose matched rows
are long enough to exceed it, since no match is shorter than its rule's `least_chars` and matches do not overlap
(`redaction.BUDGET_BY_LENGTH`, off in the plain path). These tests try to break that bound: every rule's least
width, documents one candidate either side of the budget, a document long enough to be counted that stays under it,
documents whose candidates are spread over many pieces, and multi-byte text, each through both paths."""

from __future__ import annotations

import random
import re
from typing import Any

import pyarrow as pa
import pytest

from capture_core import documents, redaction
from capture_core.documents import DocumentBatch
from capture_core.redaction import (
    DEFAULT_RULES,
    MAX_CANDIDATES_PER_DOCUMENT,
    OVER_BUDGET_MARKER,
    RULES,
    Redactor,
)


def _least_width(pattern: str) -> int:
    parser = re._parser  # type: ignore[attr-defined]  # CPython's own parse of the pattern: (least, most) width
    least: int = parser.parse(pattern, re.ASCII).getwidth()[0]
    return least


@pytest.mark.parametrize("name", sorted(RULES))
def test_each_rule_declares_its_least_width(name: str) -> None:
    assert RULES[name].least_chars == _least_width(RULES[name].pattern) >= 1


def test_a_redactor_bounds_by_its_shortest_rule() -> None:
    assert Redactor(DEFAULT_RULES).least_chars == 6 == _least_width(Redactor(DEFAULT_RULES).any_rule)
    assert Redactor([*DEFAULT_RULES, "ip_address"]).least_chars == 3  # "1::" is an IPv6 address
    assert Redactor(["aws_secret_key", "us_ssn"]).least_chars == 11
    assert Redactor(["email"]).redact_text("a@b.co") == "[REDACTED:email]"  # the bound is a real match's length


def _documents() -> tuple[list[str], list[int]]:
    emails = [f"u{index}@e.co" for index in range(MAX_CANDIDATES_PER_DOCUMENT + 1)]
    pieces: list[str] = []
    owners: list[int] = []

    def add(owner: int, *texts: str) -> None:
        pieces.extend(texts)
        owners.extend([owner] * len(texts))

    add(0, " ".join(emails))  # one over the budget, in one piece
    add(1, " ".join(emails[:-1]))  # exactly the budget: long enough to be counted, not over
    half = len(emails) // 2
    add(2, " ".join(emails[:half]), "clean text", " ".join(emails[half:]))  # one over, across pieces
    add(3, "x" * 400_000 + " bob@example.com " + "y" * 10)  # long enough to be counted, one candidate
    add(4, "é" * 200_000 + " 415-555-0100 " + "ü" * 10)  # multi-byte: more bytes than characters
    add(5, "nothing here", "mail carol@example.org")  # short documents: never counted
    add(6, " ".join(f"{index:03d}-45-6789" for index in range(100, 999)) * 60)  # SSNs: 53,940 of them
    # IPv6 "1::", 3 characters, when that rule is on: 60,000 of them in 299,998 bytes, which a bound of 6 characters
    # (the default rules' shortest match) would take for too short to exceed the budget.
    add(7, "  ".join(f"{index % 9 + 1}::" for index in range(MAX_CANDIDATES_PER_DOCUMENT + 10_000)))
    return pieces, owners


@pytest.mark.parametrize("by_length", [True, False])
@pytest.mark.parametrize("rules", [DEFAULT_RULES, (*DEFAULT_RULES, "ip_address")])
def test_the_budget_is_decided_alike_with_and_without_the_length_bound(
    by_length: bool, rules: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    pieces, owners = _documents()
    monkeypatch.setattr(redaction, "BUDGET_BY_LENGTH", by_length)
    redactor = Redactor(rules)
    redacted, hits, over = redactor.redact_owned(pa.array(pieces, pa.string()), owners)
    expected = {0, 2, 6} if "ip_address" not in rules else {0, 2, 6, 7}
    assert over == expected
    assert redactor.over_budget == len(expected)
    texts = redacted.to_pylist()
    for row, owner in enumerate(owners):
        if owner in over and pieces[row] != "clean text":  # the rows with a candidate are replaced whole
            assert texts[row] == OVER_BUDGET_MARKER
    assert "bob@example.com" not in texts[owners.index(3)] and hits[owners.index(3)] == {"email"}
    assert "415-555-0100" not in texts[owners.index(4)] and hits[owners.index(4)] == {"phone"}
    assert texts[owners.index(5) + 1] == "mail [REDACTED:email]" and texts[owners.index(5)] == "nothing here"


@pytest.mark.parametrize("rules", [DEFAULT_RULES, (*DEFAULT_RULES, "ip_address")])
def test_both_paths_give_the_same_column(rules: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    pieces, owners = _documents()
    fast = Redactor(rules).redact_owned(pa.array(pieces, pa.string()), owners)
    monkeypatch.setattr(redaction, "BUDGET_BY_LENGTH", False)
    plain = Redactor(rules).redact_owned(pa.array(pieces, pa.string()), owners)
    assert fast[0].to_pylist() == plain[0].to_pylist()
    assert fast[1:] == plain[1:]


def _batch_results(rules: tuple[str, ...]) -> list[tuple[str, set[str], bool]]:
    emails = " ".join(f"u{index}@e.co" for index in range(MAX_CANDIDATES_PER_DOCUMENT + 1))
    texts: list[tuple[str, bool]] = [
        ("plain, mail bob@example.com", False),  # no escapes: one piece, planned before the scan
        ("plain, nothing", False),
        ('{"messages": [{"content": "line\\nmail carol@example.org\\n"}]}', True),  # escaped, flagged
        ('{"messages": [{"content": "line\\nno secret here at all\\n"}]}', True),  # escaped, not flagged
        ('{"a": "caf\\u00e9 \\u0041KIAIOSFODNN7EXAMPLE", "b": "long enough text"}', True),  # \\u: planned anyway
        ('{"k": "x\\n' + emails + '"}', True),  # escaped, over the budget
        (emails, False),  # plain, over the budget
        ('Here: {"private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEv\\n-----END PRIVATE KEY-----"} ok', False),
        ('{"tool": "{\\"note\\": \\"aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\\"}"}', True),
        ("plain, call 415-555-0100 and 1::", False),
    ]
    batch = DocumentBatch(Redactor(rules))
    ids = [batch.add(text, as_json=as_json) for text, as_json in texts]
    batch.redact()
    return [(*batch.result(document), batch.over_budget(document)) for document in ids]


@pytest.mark.parametrize("rules", [DEFAULT_RULES, (*DEFAULT_RULES, "ip_address")])
def test_one_shared_scan_gives_what_two_scans_give(rules: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    """documents.SHARED_SCAN: the escaped documents' scan takes the pieces planned before it along, and the pieces
    planned after it are all matched rule by rule; the results are those of a scan each."""
    shared = _batch_results(rules)
    monkeypatch.setattr(documents, "SHARED_SCAN", False)
    assert shared == _batch_results(rules)
    assert [over for _, _, over in shared] == [False] * 5 + [True, True] + [False] * 3
    assert "bob@example.com" not in shared[0][0] and "carol@example.org" not in shared[2][0]
    assert "AKIA" not in shared[4][0] and "MIIEv" not in shared[7][0] and "wJalr" not in shared[8][0]
    assert shared[1] == ("plain, nothing", set(), False) and shared[3][1] == set()


def _reference_plan(batch: DocumentBatch, text: str, depth: int) -> Any:
    """The plan as the finditer loop before the split wrote it: the reference the split must equal."""
    node = documents._Node()

    def gap(part: str) -> None:
        if part:
            node.parts.append(batch._piece(part) if len(part) >= documents.MIN_GAP else part)

    position = 0
    for match in documents._LITERAL.finditer(text):
        gap(text[position : match.start()])
        body = match[1]
        position = match.end()
        if len(body) < documents.MIN_GAP:
            node.parts.append(match[0])
            continue
        value = documents.decode_literal(body)
        if depth < documents.MAX_DEPTH and documents.holds_escaped_json(value):
            planned: Any = _reference_plan(batch, value, depth + 1)
        else:
            planned = batch._piece(value)
        node.parts.append(documents._Literal(body, planned, bool(match[2])))
    gap(text[position:])
    return node


def test_the_split_plan_equals_the_finditer_plan() -> None:
    """DocumentBatch._plan_json cuts a document with one re.split call; seeded documents of literals, escapes,
    nested JSON, cut literals and stray quotes give the same pieces, owners and plan as the loop over matches."""
    fragments = ['"', '\\"', "\\\\", "\\n", "\\u00e9", "\\ud83d", " ", ":", ",", "{", "}", "[", "]", "abc", "mail",
                 "bob@example.com", '{\\"k\\": \\"v\\\\n x\\"}', '"long enough value"', '"ab"', "é", "\n", "\\"]
    rng = random.Random(2708)
    for _ in range(400):
        text = "".join(rng.choices(fragments, k=rng.randint(0, 40)))
        split_batch, loop_batch = DocumentBatch(Redactor(DEFAULT_RULES)), DocumentBatch(Redactor(DEFAULT_RULES))
        split_batch._owner = loop_batch._owner = 3
        assert split_batch._plan_json(text, 1) == _reference_plan(loop_batch, text, 1), text
        assert split_batch._pieces == loop_batch._pieces and split_batch._owners == loop_batch._owners, text
