"""Key routing and ALB line parsing, the parts with the most edge cases, on their own."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from capture_core.alb_format import MalformedAlbLineError, parse_alb_line, parse_request_line
from capture_core.routing import Tier, route_object

SKIP = ("curated/", "quarantine/")


@pytest.mark.parametrize(
    ("key", "tier", "deployment_hash", "key_time"),
    [
        (
            "dc/abc123/sme/ep/AllTraffic/2026/11/30/10/05-00-000-u.jsonl",
            Tier.SME,
            "abc123",
            datetime(2026, 11, 30, 10, tzinfo=UTC),
        ),
        ("dc/abc123/pod/batch-0001.jsonl.gz", Tier.POD, "abc123", None),
        ("sme/x.jsonl", Tier.SME, None, None),
        (
            "dc/h/alb/AWSLogs/123456789012/elasticloadbalancing/us-east-2/2014/02/16/"
            "123456789012_elasticloadbalancing_us-east-2_app.lb.1a_20140216T0000Z_10.0.0.1_x.log.gz",
            Tier.ALB,
            "h",
            datetime(2014, 2, 15, 23, 59, 59, 999999, tzinfo=UTC),  # the file ending at 00:00 covers 23:55-00:00
        ),
        (
            "logs/AWSLogs/1/elasticloadbalancing/eu-west-1/2026/01/01/f_20260101T1005Z_ip_x.log",
            Tier.ALB,
            None,
            datetime(2026, 1, 1, 10, 4, 59, 999999, tzinfo=UTC),
        ),
    ],
)
def test_routes_by_path_segment(key: str, tier: Tier, deployment_hash: str | None, key_time: datetime | None) -> None:
    route = route_object(key, skip_prefixes=SKIP)

    assert (route.tier, route.deployment_hash, route.key_time) == (tier, deployment_hash, key_time)


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("curated/tier=sme/dt=2026-11-30/hour=10/part-1.parquet", "our own output"),
        ("quarantine/tier=sme/part-1.jsonl", "our own output"),
        ("dc/h/alb/AWSLogs/123456789012/ELBAccessLogTestFile", "not an access log file"),
        ("dc/h/smell/x.jsonl", "no sme/pod/alb path segment"),
        ("dc/h/x.sme", "no sme/pod/alb path segment"),  # the file name is not a directory
    ],
)
def test_skips_with_a_reason(key: str, reason: str) -> None:
    route = route_object(key, skip_prefixes=SKIP)

    assert route.tier is None and reason in (route.skip_reason or "")


DOC_ENTRY = (
    "h2 2018-07-02T22:23:00.186641Z app/my-loadbalancer/50dc6c495c0c9188 [2601:1:2::3]:50599 - -1 -1 -1 "
    '460 - 0 0 "POST https://api.example.com:443/v1/chat?user=a%40b.c&x=1 HTTP/2.0" "Mozilla/5.0 (X11; \\"q\\")" '
    'ECDHE-RSA-AES128-GCM-SHA256 TLSv1.2 - "Root=1-5" "api.example.com" "session-reused" -1 '
    '2018-07-02T22:22:48.364000Z "waf" "-" "WAFConnectionError" "-" "-" "Ambiguous" "AmbiguousUri"'
)


def test_parses_ipv6_clients_timeouts_quotes_and_missing_targets() -> None:
    row, extra = parse_alb_line(DOC_ENTRY)

    assert extra == 0
    assert (row["client_ip"], row["client_port"]) == ("[2601:1:2::3]", 50599)
    assert (row["target_ip"], row["target_port"], row["target_status_code"]) == (None, None, None)
    assert (row["request_processing_time"], row["matched_rule_priority"]) == (-1.0, -1)
    assert row["user_agent"] == 'Mozilla/5.0 (X11; \\"q\\")'
    assert (row["request_path"], row["request_query"]) == ("/v1/chat", "user=a%40b.c&x=1")
    assert (row["classification"], row["classification_reason"]) == ("Ambiguous", "AmbiguousUri")
    assert row["conn_trace_id"] is None


def test_counts_fields_newer_than_the_parser() -> None:
    row, extra = parse_alb_line(DOC_ENTRY + ' TID_1 "h" "/u" "OriginalRetrieved" 10.0.0.9 more')

    assert (row["conn_trace_id"], row["request_transform_status"], extra) == ("TID_1", "OriginalRetrieved", 2)


def test_rejects_lines_with_missing_fields_or_bad_numbers() -> None:
    with pytest.raises(MalformedAlbLineError, match="expected at least 29 fields, got 3"):
        parse_alb_line("http 2018-07-02T22:23:00Z app/x")
    with pytest.raises(MalformedAlbLineError, match="client:port must be ip:port"):
        parse_alb_line(DOC_ENTRY.replace("[2601:1:2::3]:50599", "nowhere"))


@pytest.mark.parametrize(
    ("request_line", "expected"),
    [
        (
            "GET http://www.example.com:80/ HTTP/1.1",
            ("GET", "http://www.example.com:80/", "HTTP/1.1", "www.example.com", 80, "/", None),
        ),
        (
            "- http://www.example.com:80- -",
            (None, "http://www.example.com:80-", None, "www.example.com", None, None, None),
        ),
        ("garbage", (None, "garbage", None, None, None, None, None)),
    ],
)
def test_request_line_is_split(request_line: str, expected: tuple) -> None:
    parsed = parse_request_line(request_line)

    assert (parsed.verb, parsed.url, parsed.proto, parsed.host, parsed.port, parsed.path, parsed.query) == expected
