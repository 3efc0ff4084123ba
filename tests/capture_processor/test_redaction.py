"""Each redaction rule on its own: what it replaces, and what it must leave alone."""

from __future__ import annotations

import pyarrow as pa
import pytest

from capture_core.redaction import DEFAULT_RULES, RULES, Redactor


@pytest.mark.parametrize(
    ("rule", "text", "expected"),
    [
        ("email", "write to alice.smith+tag@mail.example.co.uk today", "write to [REDACTED:email] today"),
        ("email", '{"to": "bob@example.com"}', '{"to": "[REDACTED:email]"}'),
        ("phone", "call +1 (415) 555-0100 now", "call [REDACTED:phone] now"),
        ("phone", "ring +44 20 7946 0958.", "ring [REDACTED:phone]."),
        (
            "phone",
            "(415) 555-0100 or 415-555-0199 or 415.555.0123",
            "[REDACTED:phone] or [REDACTED:phone] or [REDACTED:phone]",
        ),
        ("phone", '"phone":"415 555 0100"', '"phone":"[REDACTED:phone]"'),
        ("access_token", "Authorization: Bearer abc.def-ghi_jkl", "Authorization: [REDACTED:access_token]"),
        (
            "access_token",
            "key AKIAIOSFODNN7EXAMPLE and ASIAIOSFODNN7EXAMPLE",
            "key [REDACTED:access_token] and [REDACTED:access_token]",
        ),
        ("access_token", "HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123456789", "HF_TOKEN=[REDACTED:access_token]"),
        ("access_token", "OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwxyz", "OPENAI_API_KEY=[REDACTED:access_token]"),
        (
            "access_token",
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            "jwt [REDACTED:access_token]",
        ),
    ],
)
def test_rule_replaces_its_kind(rule: str, text: str, expected: str) -> None:
    redactor = Redactor((rule,))

    assert redactor.redact_text(text) == expected
    assert redactor.counts[rule] == expected.count(f"[REDACTED:{rule}]")


@pytest.mark.parametrize(
    "text",
    [
        "9,45,45,42,7,5,0",  # CSV features from the SageMaker SDK sample
        "0.302709460258",
        "2019-11-24T07:30:50Z and 2026-11-30 10:15:00",
        "order 12345678901 shipped; id 4155550100",  # bare digit runs are ids, not phones
        "version 1.2.3.4 on port 8080",
        "user@localhost has no top-level domain",
        "the sk-learn model and the skill-based router",
        "a bearer of good news",
        '{"usage": {"prompt_tokens": 100, "completion_tokens": 300}}',
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    redactor = Redactor(DEFAULT_RULES)

    assert redactor.redact_text(text) == text
    assert sum(redactor.counts.values()) == 0


def test_rules_run_on_whole_columns_and_keep_nulls_and_untouched_rows() -> None:
    texts = pa.array(["plain", None, "mail x@example.org", "plain again"], pa.string())
    redactor = Redactor(tuple(RULES))

    redacted = redactor.redact(texts)

    assert redacted.to_pylist() == ["plain", None, "mail [REDACTED:email]", "plain again"]
    assert redactor.counts == dict.fromkeys(RULES, 0) | {"email": 1}


def test_no_rules_returns_the_column_unchanged() -> None:
    texts = pa.array(["mail x@example.org"], pa.string())

    assert Redactor(()).redact(texts) is texts
