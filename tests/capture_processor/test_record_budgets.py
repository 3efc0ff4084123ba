"""Bounded work per record (issue 27): one small hostile body must not sink the object it sits in.

- a gzip body is inflated up to the sidecar's own request bound (8 MiB); past it the record is over its budget:
  its text is left out, its line goes to the quarantine, and the object's other rows land;
- a document with more candidate matches than the budget is not read value by value: the field is replaced
  whole and the row flagged (`redaction_rules` and `decode_error` say so);
- a document too fragmented to split (more string literals than the budget) is replaced whole the same way;
- many tiny rejected lines are quarantined as one run: one entry naming every line (test_quarantine_runs.py).

Time and memory are measured in benchmarks/capture_processor_hostile_bench.py, not asserted here.
"""

from __future__ import annotations

import base64
import gzip
import json

import pytest

from capture_core import documents, payloads
from capture_core.redaction import MAX_CANDIDATES_PER_DOCUMENT, OVER_BUDGET, OVER_BUDGET_MARKER
from tests.capture_processor import transcripts
from tests.capture_processor.conftest import REPO_ROOT, Pipeline
from tests.capture_processor.test_llm_traffic import assert_no_secret, record, run, side


def good(event_id: str) -> str:
    content = f"hello from {event_id}, mail alice.smith@example.com"
    return record(event_id, side(transcripts.chat_request(content, stream=False)), side('{"choices": []}'))


def emails(count: int) -> str:
    return " ".join(f"user{index}.name@example{index % 97}.com" for index in range(count))


def metric(capsys: pytest.CaptureFixture[str], name: str) -> int:
    """The value of an EMF metric in the handler's per-object log line."""
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    return sum(int(line[name]) for line in lines if name in line)


def test_the_inflate_limit_is_the_sidecars_request_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO_ROOT / "sidecar"))
    from capture_sidecar.proxy import MAX_CAPTURED_BODY_BYTES
    from capture_sidecar.settings import DEFAULT_MAX_REQUEST_BODY_BYTES

    assert payloads.MAX_INFLATED_BYTES == DEFAULT_MAX_REQUEST_BODY_BYTES == MAX_CAPTURED_BODY_BYTES


def test_a_gzip_body_past_the_inflate_limit_is_quarantined_and_the_other_rows_land(pipeline: Pipeline) -> None:
    body = json.dumps({"messages": [{"role": "user", "content": emails(420_000)}]}).encode()  # ~12 MiB
    assert len(body) > payloads.MAX_INFLATED_BYTES
    bomb = side(base64.b64encode(gzip.compress(body, 9, mtime=0)).decode(), encoding="BASE64")
    lines = [good("before"), record("bomb", bomb, side('{"choices": []}')), good("after")]

    rows = run(pipeline, *lines)

    assert_no_secret(rows)
    assert rows["bomb"]["input_text"] is None
    assert "inflates to more than 8388608 bytes" in rows["bomb"]["decode_error"]
    assert "[REDACTED:email]" in rows["before"]["input_text"] and "[REDACTED:email]" in rows["after"]["input_text"]
    (entry,) = pipeline.quarantine()
    assert entry["line_number"] == 2 and "payload not decodable (input)" in entry["reason"]


@pytest.mark.parametrize("encoding", ["JSON", "BASE64"])
def test_a_document_over_the_match_budget_is_replaced_whole_and_flagged(
    pipeline: Pipeline, encoding: str, capsys: pytest.CaptureFixture[str]
) -> None:
    content = emails(MAX_CANDIDATES_PER_DOCUMENT + 10)
    data = json.dumps({"messages": [{"role": "user", "content": content}]})
    if encoding == "BASE64":
        data = base64.b64encode(data.encode()).decode()
    lines = [good("before"), record("many", side(data, encoding=encoding), side('{"choices": []}')), good("after")]

    rows = run(pipeline, *lines)

    assert_no_secret(rows, also=("user1.name@", "example96.com"))
    many = rows["many"]
    assert many["input_text"] == OVER_BUDGET_MARKER and OVER_BUDGET in many["redaction_rules"]
    assert "input: more than 50000 candidate matches" in many["decode_error"]
    assert json.loads(many["output_text"]) == {"choices": []}  # the other side is its own document
    assert metric(capsys, "FieldsOverRedactionBudget") == 1
    assert rows["before"]["redaction_rules"] == ["email"] and rows["after"]["decode_error"] is None


def test_a_document_just_under_the_budget_is_redacted_value_by_value(pipeline: Pipeline) -> None:
    content = emails(2_000)
    rows = run(pipeline, record("some", side(json.dumps({"prompt": content})), side('{"choices": []}')))

    prompt = json.loads(rows["some"]["input_text"])["prompt"]
    assert prompt == " ".join(["[REDACTED:email]"] * 2_000) and rows["some"]["redaction_rules"] == ["email"]


def test_a_document_too_fragmented_to_split_is_replaced_whole(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(documents, "MAX_LITERALS_PER_DOCUMENT", 1_000)
    values = [f"line\n{index}" for index in range(1_200)] + ["mail\nalice.smith@example.com"]
    rows = run(pipeline, record("frag", side(json.dumps({"v": values})), side('{"choices": []}')), good("other"))

    assert_no_secret(rows)
    assert rows["frag"]["input_text"] == OVER_BUDGET_MARKER and OVER_BUDGET in rows["frag"]["redaction_rules"]
    assert rows["other"]["redaction_rules"] == ["email"]


def test_many_tiny_rejected_lines_are_one_run_entry_and_the_good_rows_land(pipeline: Pipeline) -> None:
    tiny = ["{}"] * 20_000
    lines = [good("first"), *tiny, '{"mail": "alice.smith@example.com"}', good("last")]

    rows = run(pipeline, *lines)

    assert set(rows) == {"first", "last"}
    run_entry, single = pipeline.quarantine()
    assert (run_entry["line_number"], run_entry["line_ranges"], run_entry["count"]) == (2, [[2, 20_001]], 20_000)
    assert run_entry["raw"] == "{}" and run_entry["reason"] == single["reason"] == (
        "not a capture record: no captureData.endpointInput or endpointOutput object"
    )
    assert single["line_number"] == 20_002 and "count" not in single and "line_ranges" not in single
    assert single["raw"] == '{"mail": "[REDACTED:email]"}'
