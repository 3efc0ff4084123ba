"""The processor's settings that were never run end to end (settings.py), each through the real handler against moto.

What the other tests already run through the handler: REDACT=phone and REDACT=none on the pod tier
(test_handler.py), OUTPUT_BUCKET with OUTPUT_PREFIX (test_handler.py), OUTPUT_KMS_KEY_ID (test_handler.py),
MAX_OBJECT_BYTES (test_llm_traffic.py), CURATED_OUTPUT=iceberg and both with the default table names and
ICEBERG_COMMIT_RETRIES (test_iceberg_tables.py, test_erasure.py), ICEBERG_CATALOG_ID (test_erasure_grant.py).

What was never run end to end, and is here: the opt-in rule (`ip_address`) and a REDACT list with spaces and a
repeated rule, on the capture tiers and the ALB tier; REDACT=none on the ALB tier; a QUARANTINE_PREFIX of one's own;
ICEBERG_CAPTURE_TABLE and ICEBERG_ALB_TABLE named otherwise, with CURATED_OUTPUT=both on the ALB tier;
ICEBERG_MAX_COMMIT_BYTES, past which an invocation commits more than once.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.capture_processor.conftest import Pipeline
from tests.capture_processor.test_iceberg_tables import database, put_capture, rows  # noqa: F401  (a fixture)
from tests.capture_processor.test_llm_traffic import ALB_KEY, alb_line, record, side

POD_KEY = "h/pod/2026/11/30/10/00-00-000-x.jsonl"


def test_the_opt_in_rule_and_a_loose_rule_list_run_end_to_end_on_each_tier(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REDACT", " email , ip_address,email ")
    prompt = json.dumps({"messages": [{"role": "user", "content": "from 10.0.0.1\nand 2001:db8::1, 1:: too"}],
                         "note": "mail a@b.co\n"})
    pipeline.put(POD_KEY, (record("pod", side(prompt), side('{"choices": []}')) + "\n").encode())
    alb = alb_line("GET https://api.example.com:443/v1/chat?from=10.0.0.2&note=a%20b&mail=c%40d.co HTTP/1.1",
                   client="192.0.2.10:50599")
    pipeline.put(ALB_KEY, (alb + "\n").encode())

    assert pipeline.run(POD_KEY, ALB_KEY) == {"batchItemFailures": []}

    by_tier = {("alb" if row.get("client_ip") else "pod"): row for row in pipeline.rows()}
    pod, alb_row = by_tier["pod"], by_tier["alb"]
    content = json.loads(pod["input_text"])["messages"][0]["content"]
    assert content == "from [REDACTED:ip_address]\nand [REDACTED:ip_address], [REDACTED:ip_address] too"
    assert sorted(pod["redaction_rules"]) == ["email", "ip_address"]
    assert alb_row["request_query"] == "from=[REDACTED:ip_address]&note=a%20b&mail=[REDACTED:email]"
    # The client's own address is a column of the ALB table, not redacted by the rule (docs: "Redaction").
    assert alb_row["client_ip"] == "192.0.2.10"
    metrics = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    assert sum(doc.get("Redactions_ip_address", 0) for doc in metrics) == 3 + 2  # request_url and request_query
    assert all("Redactions_phone" not in doc for doc in metrics)  # only the rules listed


def test_no_redaction_keeps_the_alb_tier_as_logged(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDACT", "none")
    url = "https://api.example.com:443/v1/chat?mail=c%40d.co&auth=Bearer%20abcdefgh12345678"
    pipeline.put(ALB_KEY, (alb_line(f"GET {url} HTTP/1.1", user_agent="bot (a@b.co)") + "\n").encode())

    assert pipeline.run(ALB_KEY) == {"batchItemFailures": []}

    [row] = pipeline.rows()
    assert row["request_url"] == url and row["user_agent"] == "bot (a@b.co)"


def test_a_quarantine_prefix_of_ones_own_receives_the_rejected_lines(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OUTPUT_PREFIX", "parquet/")
    monkeypatch.setenv("QUARANTINE_PREFIX", "rejected/lines/")
    good = record("good", side('{"prompt": "mail a@b.co"}'), None)
    pipeline.put(POD_KEY, (good + "\n{not json, mail c@d.co\n").encode())

    assert pipeline.run(POD_KEY) == {"batchItemFailures": []}

    assert pipeline.keys("quarantine/") == [] and pipeline.keys("curated/") == []
    [entry_key] = pipeline.keys("rejected/lines/")
    body = pipeline.s3.get_object(Bucket=pipeline.bucket, Key=entry_key)["Body"].read().decode()
    assert "c@d.co" not in body and "[REDACTED:email]" in body
    [row] = pipeline.rows("parquet/")
    assert row["event_id"] == "good" and "a@b.co" not in row["input_text"]


def test_tables_named_otherwise_and_both_outputs_on_the_alb_tier(
    pipeline: Pipeline, database: str, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    from capture_core.capture_tables import SPECS, create_table
    from tests.capture_processor.test_iceberg_tables import handler_catalog

    monkeypatch.setenv("CURATED_OUTPUT", "both")
    monkeypatch.setenv("ICEBERG_CAPTURE_TABLE", "llm_exchanges")
    monkeypatch.setenv("ICEBERG_ALB_TABLE", "edge_requests")
    catalog = handler_catalog(database, moto_endpoint)
    create_table(catalog, database, "llm_exchanges", SPECS["capture"], pipeline.bucket)
    create_table(catalog, database, "edge_requests", SPECS["alb"], pipeline.bucket)
    capture = put_capture(pipeline, "named", ["team-a", "team-b"])
    pipeline.put(ALB_KEY, (alb_line() + "\n").encode())

    assert pipeline.run(capture, ALB_KEY) == {"batchItemFailures": []}

    assert rows(catalog, database, "llm_exchanges").num_rows == 2
    assert rows(catalog, database, "edge_requests").num_rows == 1
    assert sorted(key.split("/")[1] for key in pipeline.keys("curated/")) == ["tier=alb", "tier=pod"]
    assert len(pipeline.rows()) == 3


def test_past_the_commit_bytes_an_invocation_commits_again(
    pipeline: Pipeline, database: str, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    from capture_core.capture_tables import SPECS, create_table
    from tests.capture_processor.test_iceberg_tables import handler_catalog

    monkeypatch.setenv("ICEBERG_MAX_COMMIT_BYTES", str(1 << 20))  # the least allowed
    catalog = handler_catalog(database, moto_endpoint)
    create_table(catalog, database, "capture_records", SPECS["capture"], pipeline.bucket)
    big = "word " * 120_000  # 600 KB of text per row: two objects pass 1 MiB
    keys = [pipeline.put(f"h/pod/2026/11/30/10/big-{n}.jsonl",
                         (record(f"big-{n}", side(json.dumps({"prompt": big})), None) + "\n").encode())
            for n in range(3)]

    assert pipeline.run(*keys) == {"batchItemFailures": []}

    table: Any = catalog.load_table((database, "capture_records"))
    appends = [s for s in table.snapshots() if s.summary["capture.source-objects"]]
    assert len(appends) >= 2  # committed past the bound, then the rest
    assert sum(len(s.summary["capture.source-objects"].split(",")) for s in appends) == 3
    assert rows(catalog, database).num_rows == 3
