"""End to end: a streamed chat through the real sidecar (two callers, each with its own API key),
recorded to moto, curated by the real capture processor: attributed, timed, reassembled, redacted.

The model server's answer is a recorded vLLM stream replayed in 7-byte writes, so events and the
secrets in them are split across TCP chunks as well as across deltas."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.capture_processor import transcripts
from tests.capture_processor.test_llm_traffic import ANSWER, EXPECTED_ANSWER, assert_no_secret
from tests.capture_processor.transcripts import SECRETS, split
from tests.sidecar.conftest import BUCKET, object_keys, read_records

RUNTIME_DIR = Path(__file__).resolve().parents[2] / "lambda" / "capture_processor"
KEYS = {"team-a": "team-a-key-0123456789abcdef", "team-b": "team-b-key-fedcba9876543210"}


def test_streamed_chats_reach_curated_attributed_and_redacted(
    start_sidecar, s3, tmp_path: Path, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys_file = tmp_path / "api-keys"
    keys_file.write_text("".join(f"{caller}:{key}\n" for caller, key in KEYS.items()))
    sidecar = start_sidecar(API_KEYS_FILE=str(keys_file), MODEL_NAME="served-model", BATCH_SIZE="2")
    prompt = "Here is my .env:\n" + "\n".join(SECRETS.values()) + "\nWhat should I rotate?"
    for caller, pieces in (("team-a", 5), ("team-b", 14)):
        stream = transcripts.vllm_chat(split(ANSWER, pieces), model="served-model")
        body = transcripts.chat_request(prompt, model="served-model").encode()
        headers = {
            "Authorization": f"Bearer {KEYS[caller]}",
            "Content-Type": "application/json",
            "X-Replay": base64.b64encode(stream.encode()).decode(),
            "X-Chunk-Bytes": "7",
        }
        result = sidecar.call("POST", "/v1/chat/completions", body, headers)
        assert result.status == 200 and result.body.decode() == stream
    assert sidecar.call("POST", "/v1/chat/completions", b"{}", {"Authorization": "Bearer wrong"}).status == 401
    records = read_records(s3, sidecar.prefix, 2)
    assert len(records) == 2
    raw_objects = b"".join(
        s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() for key in object_keys(s3, sidecar.prefix)
    )
    assert not any(key.encode() in raw_objects for key in KEYS.values())  # the keys themselves are never recorded

    rows = _curate(s3, sidecar.prefix, moto_endpoint, monkeypatch)

    assert_no_secret(rows)
    assert sorted(row["caller_id"] for row in rows) == ["team-a", "team-b"]
    for row in rows:
        assert json.loads(row["output_text"])["choices"][0]["message"]["content"] == EXPECTED_ANSWER
        assert (row["gen_ai_operation_name"], row["gen_ai_request_model"], row["streamed"]) == (
            "chat",
            "served-model",
            True,
        )
        assert (row["http_response_status_code"], row["request_path"], row["partial"]) == (
            200,
            "/v1/chat/completions",
            False,
        )
        assert 0 <= row["time_to_first_chunk_ms"] <= row["request_duration_ms"]
        assert row["gen_ai_usage_input_tokens"] == 25 and row["gen_ai_usage_output_tokens"] == 40
        assert "[REDACTED:private_key]" in json.loads(row["input_text"])["messages"][1]["content"]


def _curate(s3, prefix: str, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """The real processor's handler on an S3 notification per captured object; the curated rows."""
    monkeypatch.syspath_prepend(str(RUNTIME_DIR))
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    for name in ("OUTPUT_BUCKET", "OUTPUT_PREFIX", "QUARANTINE_PREFIX", "REDACT", "OUTPUT_KMS_KEY_ID"):
        monkeypatch.delenv(name, raising=False)
    from handler import handler

    from tests.capture_processor.conftest import s3_notification, sqs_event

    keys = object_keys(s3, prefix)
    assert handler(sqs_event(*(s3_notification(BUCKET, key) for key in keys)), None) == {"batchItemFailures": []}
    rows = [
        row
        for key in object_keys(s3, "curated/tier=pod/")
        for row in pq.read_table(io.BytesIO(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())).to_pylist()
        if row["source_key"].startswith(prefix)
    ]
    quarantined = [
        json.loads(line)
        for key in object_keys(s3, "quarantine/tier=pod/")
        for line in s3.get_object(Bucket=BUCKET, Key=key)["Body"].read().splitlines()
    ]
    assert not [entry for entry in quarantined if entry["source_key"].startswith(prefix)]
    return rows
