"""The accepted-findings file is well formed: every entry names its tool, rule and resources, and says why."""

from __future__ import annotations

from collections import Counter

from tests.security.gate import ACCEPTED_FILE, Finding, load_accepted, stale, unaccepted


def test_every_entry_is_well_formed_and_open_ones_say_what_to_fix() -> None:
    accepted = load_accepted()
    assert accepted, f"{ACCEPTED_FILE} lists nothing"
    for entry in accepted:
        if entry.reason.upper().startswith("OPEN"):
            assert entry.reason.startswith("OPEN: ") and len(entry.reason) > 60, entry
    keys = Counter((a.tool, a.rule, pattern) for a in accepted for pattern in a.resources)
    assert not [k for k, n in keys.items() if n > 1], "the same pattern is accepted twice"


def test_patterns_match_whole_locations_only() -> None:
    accepted = load_accepted()
    probe = Finding("checkov", "CKV_AWS_18", "llm-platform-storage/CaptureStorage/AccessLogBucket/Resource/Extra")
    assert unaccepted([probe], accepted) == [probe]
    other_rule = Finding("checkov", "CKV_AWS_20", "llm-platform-storage/CaptureStorage/AccessLogBucket/Resource")
    assert unaccepted([other_rule], accepted) == [other_rule]


def test_stale_reports_a_pattern_that_covers_nothing() -> None:
    assert stale([], load_accepted(), tool="checkov")  # with no finding at all, every checkov entry is stale
