"""The fifth speed step (issue 27) changes no output. Each redaction rule is compiled once (google-re2) and searched
over the candidates joined by two private-use characters (`redaction._JOINT`) instead of an Arrow match pass and a
replace pass per rule (`redaction.COMPILED_RULES`); the combined scan is the compiled combined pattern over the rows
joined the same way (`Redactor.scan`); BASE64 is decoded by pybase64 when it is strict (`payloads.FAST_BASE64`).

These tests try to break the joint: values at the very start and end of a row (where the row alone gives `^`/`$` and
the joint gives a boundary character), rows that are nothing but a value, a value cut across two rows, empty rows,
rows holding the joint's own character and the redactor's sentinels, the escapes `\\n` before a value, multi-byte
text, every rule and the rule that is off by default, each against Arrow's own kernels on the same rows."""

from __future__ import annotations

import base64
import binascii
import random
import re
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from capture_core import payloads, redaction
from capture_core.redaction import DEFAULT_RULES, RULES, Redactor

SECRETS = [
    "bob@example.com", "a@b.co", "+44 20 7946 0958", "(415) 555-0100", "415-555-0100", "415 555 0100",
    "AKIAIOSFODNN7EXAMPLE", "Bearer abcdefgh.ijkl", "hf_" + "a" * 30, "sk-" + "B" * 20, "ghp_" + "c" * 36,
    "eyJabcdefgh.eyJabcdefgh.abcdefgh", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "-----BEGIN PRIVATE KEY-----\\nMIIEvQ\\n-----END PRIVATE KEY-----", "-----BEGIN RSA PRIVATE KEY-----abc",
    "4111111111111111", "4111 1111 1111 1111", "3782 822463 10005", "123-45-6789", "DE89370400440532013000",
    "de89 3704 0044 0532 0130 00", "10.0.0.1", "2001:db8::1", "1::", "fe80::1ff:fe23:4567:890a",
]  # fmt: skip
GLUE = ["", " ", ".", "-", "\\n", "\\t", "\\", '"', "x", "7", "é", "\n", ":", "/", "+", "=", "@", "\ue006", "\ue000",
        "\ue002\ue003", "..", "(", "\u00a0"]  # fmt: skip


def _rows(seed: int, count: int = 400) -> list[str | None]:
    """Rows that start and end with secrets and with every kind of boundary character, some empty, some null."""
    rng = random.Random(seed)
    rows: list[str | None] = []
    for _ in range(count):
        if rng.random() < 0.03:
            rows.append(None)
            continue
        parts = []
        for _ in range(rng.randint(0, 4)):
            parts.append(rng.choice(GLUE))
            parts.append(rng.choice(SECRETS) if rng.random() < 0.7 else rng.choice(["word", "12", "99.5", "é"]))
        parts.append(rng.choice(GLUE))
        text = "".join(parts)
        if text and rng.random() < 0.2:  # a value cut across two rows
            cut = rng.randint(0, len(text))
            rows.extend([text[:cut], text[cut:]])
        else:
            rows.append(text)
    return rows


def _arrow_marked(pattern: str, rows: list[str]) -> list[str]:
    return pc.replace_substring_regex(pa.array(rows, pa.string()), pattern, redaction._MARK).to_pylist()  # type: ignore[no-any-return]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("name", sorted(RULES))
def test_each_compiled_rule_marks_what_arrows_replace_marks(name: str, seed: int) -> None:
    redactor = Redactor([name])
    assert redactor._compiled is not None, "google-re2 is a dependency of the processor (pyproject, the Lambda's lock)"
    rows = [row or "" for row in _rows(seed)]
    encoded = [row.encode() for row in rows]
    expected = _arrow_marked(redactor._re2[0], rows)
    positions = list(range(len(rows)))
    marked = dict(redaction._marked(redactor._compiled[0], encoded, positions))
    assert [marked.get(position, rows[position]) for position in positions] == expected
    assert all(expected[position] != rows[position] for position in marked)  # only the rows with a match
    subset = positions[1::3]  # a later pass: only some rows, joined in their own order
    marked = dict(redaction._marked(redactor._compiled[0], encoded, subset))
    assert [marked.get(position, rows[position]) for position in subset] == [expected[p] for p in subset]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("rules", [DEFAULT_RULES, (*DEFAULT_RULES, "ip_address"), ("email",), ("payment_card",)])
def test_the_compiled_scan_flags_the_rows_arrow_flags(rules: tuple[str, ...], seed: int) -> None:
    redactor = Redactor(rules)
    column = pa.array(_rows(seed), pa.string())
    expected = pc.fill_null(pc.match_substring_regex(column, redactor.any_rule), False).to_pylist()
    assert redactor.scan(column).to_pylist() == expected
    assert redactor.scan(column.slice(7, 50)).to_pylist() == expected[7:57]
    assert redactor.scan(pa.array([], pa.string())).to_pylist() == []


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("rules", [DEFAULT_RULES, (*DEFAULT_RULES, "ip_address")])
def test_compiled_and_arrow_rule_passes_redact_alike(
    rules: tuple[str, ...], seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    column = pa.array(_rows(seed), pa.string())

    def redacted() -> tuple[Any, ...]:
        redactor = Redactor(rules)
        texts, hits, over = redactor.redact_owned(column)
        return texts.to_pylist(), hits, over, redactor.counts

    fast = redacted()
    monkeypatch.setattr(redaction, "COMPILED_RULES", False)
    plain = redacted()
    assert fast == plain
    assert sum(fast[3].values()) > 100  # the rows held secrets, and they were redacted


def test_spans_are_finditers_spans() -> None:
    redactor = Redactor(DEFAULT_RULES)
    text = "\ue006\ue006".join(row or "" for row in _rows(1)).encode()
    for compiled in (*(redactor._compiled or ()), redactor._any):
        assert redaction._spans(compiled, text) == [match.span() for match in compiled.finditer(text)]


def test_the_joint_is_a_boundary_no_rule_takes_more_than_once() -> None:
    """No rule's value holds a joint character: a match takes at most one at its start (its `before`, where the row
    alone gives `^`) and one at its end (its `after`, for `$`), so it never reaches from one row into the next."""
    redactor = Redactor([*DEFAULT_RULES, "ip_address"])
    assert redactor._compiled is not None
    for compiled in redactor._compiled:
        for secret in SECRETS:
            joined = redaction._JOINT + secret.encode() + redaction._JOINT
            for begin, end in redaction._spans(compiled, joined):
                one = "\ue006".encode()
                inner = joined[begin:end].removeprefix(one).removesuffix(one)
                assert one not in inner, (secret, inner)


def _strict_or_error(text: str, validate: bool) -> bytes | str:
    try:
        return base64.b64decode(text, validate=validate)
    except (binascii.Error, ValueError):
        return "error"


def test_pybase64_accepts_only_what_binascii_decodes_alike() -> None:
    """What pybase64's strict decode accepts, binascii decodes to the same bytes strict and lenient (a truncated
    payload is decoded leniently); what it refuses takes binascii's path, errors and all."""
    rng = random.Random(5)
    alphabet = "AQgw/+=b\n -_é"
    accepted = 0
    for _ in range(40_000):
        text = "".join(rng.choice(alphabet if rng.random() < 0.3 else "AQgw/+=") for _ in range(rng.randint(0, 14)))
        fast = payloads._strict_base64(text)
        if fast is None:
            continue
        accepted += 1
        assert fast == _strict_or_error(text, True) == _strict_or_error(text, False), text
    assert accepted > 1000
    assert payloads._strict_base64(base64.b64encode(bytes(range(256)) * 9).decode()) == bytes(range(256)) * 9


@pytest.mark.parametrize(
    ("data", "truncated"),
    [("aGVsbG8=", False), ("aGVsbG8", False), ("aGVsbG8", True), ("aGVs bG8=", False), ("aGVs\nbG8=", True),
     ("aGVsbG8==", False), ("=aGVsbG8", False), ("aGVsbG8=aGVs", False), ("", False), ("é", False), ("H4sI", True)],
)  # fmt: skip
def test_base64_payloads_decode_alike_with_and_without_pybase64(
    data: str, truncated: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    def outcome() -> Any:
        try:
            return payloads._decoded_base64(data, "text/plain; charset=utf-8", truncated)
        except payloads.UndecodablePayload as error:
            return ("undecodable", str(error))

    fast = outcome()
    monkeypatch.setattr(payloads, "FAST_BASE64", False)
    assert outcome() == fast


_PARSER: Any = re._parser  # type: ignore[attr-defined]  # CPython's own parse of a pattern
_C: Any = re._constants  # type: ignore[attr-defined]


def _char_set(item: tuple[Any, Any], ignore_case: bool) -> set[str] | None:
    """The characters one parsed item can match, when it matches exactly one character from a known set."""
    op, arg = item
    if op is _C.LITERAL:
        return None if ignore_case else {chr(arg)}
    if op is _C.IN:
        chars: set[str] = set()
        for inner, value in arg:
            if inner is _C.LITERAL and not ignore_case:
                chars.add(chr(value))
            elif inner is _C.RANGE and not ignore_case:
                chars.update(chr(code) for code in range(value[0], value[1] + 1))
            elif inner is _C.CATEGORY and value is _C.CATEGORY_DIGIT:
                chars.update("0123456789")  # ASCII \d (RE2's, and Python's in ASCII mode)
            else:
                return None  # a negated set, another category: unknown
        return chars
    return None


def _always_holds(items: list[Any], needs: tuple[str, ...], ignore_case: bool = False) -> bool:
    """True when every match of the parsed sequence `items` holds one of `needs`: one of its items always matches one
    character that is a need (the needs are single characters), or a run of its literals spells a need, or a group,
    a branch (every alternative) or a repeat at least once does so itself."""
    run = ""
    for op, arg in items:
        if op is _C.LITERAL and not ignore_case:
            run += chr(arg)
            if any(need in run for need in needs):
                return True
        else:
            run = ""
        chars = _char_set((op, arg), ignore_case)
        if chars is not None and chars <= set(needs):
            return True
        if _inner_holds(op, arg, needs, ignore_case):
            return True
    return False


def _inner_holds(op: Any, arg: Any, needs: tuple[str, ...], ignore_case: bool) -> bool:
    if op is _C.SUBPATTERN:
        _, add_flags, _, pattern = arg
        return _always_holds(list(pattern), needs, ignore_case or bool(add_flags & _C.SRE_FLAG_IGNORECASE))
    if op is _C.BRANCH:
        return all(_always_holds(list(branch), needs, ignore_case) for branch in arg[1])
    if op in (_C.MAX_REPEAT, _C.MIN_REPEAT):
        return bool(arg[0] >= 1 and _always_holds(list(arg[2]), needs, ignore_case))
    return False


@pytest.mark.parametrize("name", sorted(name for name, rule in RULES.items() if rule.needs))
def test_every_match_of_a_rule_holds_one_of_its_needs(name: str) -> None:
    rule = RULES[name]
    assert _always_holds(list(_PARSER.parse(rule.pattern, re.ASCII)), rule.needs)
    assert all(len(need) == 1 for need in rule.needs) or len(rule.needs) == 1  # what the proof reads


def test_the_proof_refuses_what_does_not_hold() -> None:
    def holds(pattern: str, needs: tuple[str, ...]) -> bool:
        return _always_holds(list(_PARSER.parse(pattern, re.ASCII)), needs)

    assert holds(r"a@b", ("@",)) and holds(r"x\d", tuple("0123456789")) and holds(r"(?:a|b\d)+c", ("a", "1", "c"))
    assert not holds(r"a@?b", ("@",))  # optional
    assert not holds(r"(?:@|b)", ("@",))  # one alternative without it
    assert not holds(r"(?i:bearer)", ("bearer",))  # case-insensitive: other spellings match
    assert not holds(r"[^a]", ("b",)) and not holds(r"\w", tuple("0123456789")) and not holds(r"a*@{0,3}", ("@",))
    assert not holds(r"-----BEG", ("-----BEGIN",))
    for name, rule in RULES.items():
        if not rule.needs:
            assert not holds(rule.pattern, ("@",)), name  # the rules without needs indeed have none so simple


@pytest.mark.parametrize("seed", range(4))
def test_rules_searched_only_where_their_needs_are_redact_alike(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    extra = ["5" * 16, "4111111111111111@x.co", "[REDACTED:email]:1::", "no digits at all", "@", "-----BEGIN"]
    rows = [*_rows(seed), *extra]
    column = pa.array(rows, pa.string())

    def redacted() -> tuple[Any, ...]:
        redactor = Redactor([*DEFAULT_RULES, "ip_address"])
        texts, hits, over = redactor.redact_owned(column)
        return texts.to_pylist(), hits, over, redactor.counts

    fast = redacted()
    monkeypatch.setattr(redaction, "REQUIRED_TEXTS", False)
    assert redacted() == fast
    monkeypatch.setattr(redaction, "COMPILED_RULES", False)
    assert redacted() == fast
