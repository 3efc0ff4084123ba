"""Rehearsal of the gateway's capture entry (the capture sidecar in JWT mode in front of an Inference Gateway, the
default platform's main path: both operator models sit behind it): the real process, with the environment the
rendered manifest (``dist/gateway-entry-*.k8s.yaml``) gives its container, under the temporary credentials of the role
that container runs under (its own ``AWS_ROLE_ARN``, a projected token of its own audience), writing to moto with IAM
enforced. Requests carry real RS256 tokens signed by a test key whose JWKS is served on loopback, with the rendered
issuer, audience and required claims.

Only the stand-ins are this machine's: the gateway behind it (``UPSTREAM_URL``: the stand-in model server), the
issuer's keys (``JWT_JWKS_URI``), the budget store when the manifest names one (a local redis-server), ports and the
``/tmp`` emptyDir (a folder here). ``CAPTURE_S3_URI``, ``KMS_KEY_ID``, the issuer, audiences, required claims, caller
claim, sampling and batch size are the manifest's.

Proves: the entry's role allows the PutObject calls the entry really makes under its rendered ``CAPTURE_S3_URI``, the
objects are SSE-KMS with the manifest's key, every record names the token's subject as the caller and the capture
processor (under its own role) turns it into ``caller_id``; the same entry pointed at another workload's prefix is
refused by IAM (visible in its upload metrics and log); a request without a token is answered 401 and nothing of it
is captured. Cannot prove (docs/rehearsal.md): the web identity trust (IRSA, the token's audience), the bucket
policy, the policy's conditions (``aws:ResourceAccount``, ``kms:ViaService``, the encryption context), the KMS call
S3 makes (moto makes none: checked with moto's evaluator on the key's ARN instead), the real issuer."""

from __future__ import annotations

import base64
import io
import json
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.capture_processor import transcripts
from tests.capture_processor.conftest import s3_notification
from tests.capture_processor.test_llm_traffic import ANSWER
from tests.capture_processor.transcripts import split
from tests.rehearsal.conftest import RehearsedSidecar, capture_sidecars, record_timing, start_sidecar
from tests.rehearsal.test_capture_processor import invoke
from tests.sidecar.test_jwt_caller import SUBJECTS, token
from tests.sidecar.test_jwt_caller import jwks_uri as jwks_uri  # (the JWKS of the test key, on loopback)
from tests.support.redis_server import redis_server
from tests.support.rehearsal import ContainerRuntime, Rehearsal, container_runtimes, function_runtimes, split_s3_uri
from tests.support.synth import Assembly
from tests.support.waiting import SIDECAR_STORE_SAFETY_TIMEOUT, eventually

pytestmark = [pytest.mark.xdist_group("rehearsal"), pytest.mark.slow]

MODEL = "qwen3-8b"
REFUSED_MARKER = "no-token-request-must-never-be-captured"
# What the rehearsal replaces: the stand-ins' addresses, and what a pod has of its own.
LOCAL = {"UPSTREAM_URL", "LISTEN_PORT", "METRICS_PORT", "SPOOL_DIR", "JWT_JWKS_URI", "LIMITS_STORE_URL",
         "LIMITS_STORE_TIMEOUT_SECONDS"}


def gateway_entries(assembly: Assembly) -> list[ContainerRuntime]:
    """Every container the manifests configure as a gateway's capture entry: a capture sidecar in JWT mode."""
    return [runtime for runtime in container_runtimes(assembly.manifests)
            if "CAPTURE_S3_URI" in runtime.env and "JWT_ISSUER" in runtime.env]


@pytest.fixture(scope="module")
def entry_runtime(assembly: Assembly) -> ContainerRuntime:
    found = gateway_entries(assembly)
    assert found, "the default platform renders no gateway entry (config/default.yaml: gateways[].entry)"
    return found[0]


def entry_token(env: dict[str, str], subject: str | None) -> str:
    """A real RS256 token of the test key for the entry as rendered: its issuer, its first audience, and a value of
    every required claim (a ``StringArray`` claim as a list holding the first value, a ``String`` claim that value)."""
    claims: dict[str, Any] = {"iss": env["JWT_ISSUER"], "aud": env["JWT_AUDIENCES"].split(",")[0].strip()}
    for rule in json.loads(env.get("JWT_REQUIRED_CLAIMS") or "[]"):
        value = rule["values"][0]
        claims[rule["name"]] = [value] if rule.get("valueType") == "StringArray" else value
    caller_claim = env.get("JWT_CALLER_CLAIM", "sub")
    if caller_claim != "sub":
        claims[caller_claim] = subject
    return token(subject, **claims)


@pytest.fixture(scope="module")
def store_overrides(entry_runtime: ContainerRuntime) -> Iterator[dict[str, str]]:
    """The budget store, when the manifest gives the entry one: a local redis-server in its place (as the sidecar's
    own e2e test does), with the sidecar's largest store timeout (a loaded machine's loopback call)."""
    with ExitStack() as stack:
        if "LIMITS_STORE_URL" not in entry_runtime.env:
            yield {}
            return
        url = stack.enter_context(redis_server())
        yield {"LIMITS_STORE_URL": url, "LIMITS_STORE_TIMEOUT_SECONDS": SIDECAR_STORE_SAFETY_TIMEOUT}


def start_entry(rehearsal: Rehearsal, runtime: ContainerRuntime, standin_port: int, jwks: str,
                store: dict[str, str], workdir: Path, **overrides: str) -> RehearsedSidecar:
    """The entry as its manifest configures it, under its role's credentials; until it has the issuer's keys (503
    before)."""
    entry = start_sidecar(rehearsal, runtime, rehearsal.credentials(runtime.role_arn), standin_port, workdir,
                          JWT_JWKS_URI=jwks, **store, **overrides)
    bearer = {"Authorization": f"Bearer {entry_token(runtime.env, SUBJECTS[0])}"}
    if not eventually(lambda: entry.call("GET", "/v1/models", None, bearer).status != 503):
        entry.terminate()
        raise AssertionError(f"the entry never had the issuer's keys:\n{entry.log()}")
    return entry


def send_one_batch(entry: RehearsedSidecar, env: dict[str, str], *, max_requests: int = 2000) -> dict[int, str]:
    """Chat completions with the subjects' tokens in turn until the entry has captured one batch (the manifest's
    sampling and batch size), then until it has tried to upload it; request index -> the subject that sent it."""
    tokens = {subject: entry_token(env, subject) for subject in SUBJECTS}
    stream = transcripts.vllm_chat(split(ANSWER, 4), model=MODEL)
    replay = base64.b64encode(stream.encode()).decode()
    sent: dict[int, str] = {}
    batch_size = int(env["BATCH_SIZE"])
    while len(sent) < max_requests:
        index = len(sent)
        subject = SUBJECTS[index % len(SUBJECTS)]
        body = transcripts.chat_request(f"Request {index}: what is the capital of France?", model=MODEL).encode()
        result = entry.call("POST", "/v1/chat/completions", body, {
            "Authorization": f"Bearer {tokens[subject]}", "Content-Type": "application/json", "X-Replay": replay})
        assert result.status == 200 and result.body.decode() == stream, (result.status, entry.log())
        sent[index] = subject
        if entry.metrics().get("capture_sidecar_records_captured_total", 0) >= batch_size:
            break

    def tried() -> bool:
        samples = entry.metrics()
        return samples['capture_sidecar_uploads_total{result="ok"}'] + samples[
            'capture_sidecar_uploads_total{result="failed"}'] >= 1

    assert eventually(tried), entry.log()
    return sent


def request_text(record: dict[str, Any]) -> str:
    """The request body a capture record holds (SageMaker's ``endpointInput``: JSON text or BASE64)."""
    captured = record["captureData"]["endpointInput"]
    data: str = captured["data"]
    return base64.b64decode(data).decode() if captured["encoding"] == "BASE64" else data


def request_index(text: str) -> int:
    """The index ``send_one_batch`` wrote into a request's prompt."""
    return int(text.split("Request ", 1)[1].split(":", 1)[0])


@dataclass(frozen=True)
class EntryRun:
    """The entry's run under its own role, with the manifest's settings: what it answered and what it wrote."""

    runtime: ContainerRuntime
    env: dict[str, str]
    bucket: str
    prefix: str
    sent: dict[int, str]
    refused_status: int
    captured_before_refusal: float
    metrics: dict[str, float]
    keys: list[str]
    records: list[dict[str, Any]]
    exit_code: int
    log: str


@pytest.fixture(scope="module")
def entry_run(rehearsal: Rehearsal, entry_runtime: ContainerRuntime, standin_port: int, jwks_uri: str,
              store_overrides: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> EntryRun:
    started = time.monotonic()
    entry = start_entry(rehearsal, entry_runtime, standin_port, jwks_uri, store_overrides,
                        tmp_path_factory.mktemp("gateway-entry"))
    try:
        sent = send_one_batch(entry, entry_runtime.env)
        captured = entry.metrics()["capture_sidecar_records_captured_total"]
        refused = entry.call("POST", "/v1/chat/completions", json.dumps(
            {"model": MODEL, "messages": [{"role": "user", "content": REFUSED_MARKER}]}).encode(),
            {"Content-Type": "application/json"})
        metrics = entry.metrics()
    finally:
        exit_code = entry.terminate()  # drains: whatever was captured after the batch is uploaded too
    bucket, prefix = split_s3_uri(entry_runtime.env["CAPTURE_S3_URI"])
    s3 = rehearsal.client("s3")
    keys = sorted(item["Key"] for item in s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", []))
    records = [json.loads(line) for key in keys
               for line in s3.get_object(Bucket=bucket, Key=key)["Body"].read().splitlines()]
    record_timing("gateway entry: start, one batch, a refusal, drain", time.monotonic() - started)
    return EntryRun(entry_runtime, entry.env, bucket, prefix, sent, refused.status, captured, metrics, keys, records,
                    exit_code, entry.log())


def test_the_entry_runs_under_its_own_role_with_the_manifests_settings(entry_run: EntryRun,
                                                                       rehearsal: Rehearsal) -> None:
    """The role is the container's own (``AWS_ROLE_ARN`` of the rendered container, a role of the templates), and the
    rehearsal changed only what must be this machine's."""
    container_env = {item["name"]: item.get("value") for item in entry_run.runtime.container["env"]}
    assert entry_run.runtime.role_arn == container_env["AWS_ROLE_ARN"]
    assert rehearsal.role(entry_run.runtime.role_arn)
    manifest = entry_run.runtime.env
    assert {k: v for k, v in manifest.items() if k not in LOCAL} == {
        k: entry_run.env[k] for k in manifest if k not in LOCAL}
    assert entry_run.env["SPOOL_DIR"].endswith(manifest["SPOOL_DIR"].removeprefix("/tmp"))
    assert entry_run.env["AWS_ACCESS_KEY_ID"].startswith("ASIA")  # temporary credentials of an assumed role
    assert "AWS_WEB_IDENTITY_TOKEN_FILE" not in entry_run.env


def test_the_batch_lands_under_the_manifests_capture_uri(entry_run: EntryRun) -> None:
    assert entry_run.exit_code == 0, entry_run.log
    metrics = entry_run.metrics
    assert metrics['capture_sidecar_uploads_total{result="failed"}'] == 0, entry_run.log
    assert metrics['capture_sidecar_uploads_total{result="ok"}'] >= 1, entry_run.log
    assert metrics["capture_sidecar_records_uploaded_total"] >= int(entry_run.runtime.env["BATCH_SIZE"])
    assert entry_run.keys and all(key.startswith(entry_run.prefix) for key in entry_run.keys)
    assert len(entry_run.records) == metrics["capture_sidecar_records_captured_total"]


def test_the_objects_are_encrypted_with_the_manifests_key(entry_run: EntryRun, rehearsal: Rehearsal) -> None:
    s3 = rehearsal.client("s3")
    kms_key_id = entry_run.runtime.env["KMS_KEY_ID"]
    assert entry_run.keys, entry_run.log
    for key in entry_run.keys:
        head = s3.head_object(Bucket=entry_run.bucket, Key=key)
        assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", kms_key_id)
    # moto's S3 never calls KMS: S3's kms:GenerateDataKey on the entry's behalf, by moto's own evaluator.
    key_arn = rehearsal.key_arn(kms_key_id)
    assert key_arn in rehearsal.created.keys
    assert rehearsal.identity_allows(entry_run.runtime.role_arn, "kms:GenerateDataKey", key_arn)


def test_every_record_names_the_subject_of_the_token_that_sent_it(entry_run: EntryRun) -> None:
    by_index = {request_index(request_text(record)): record["eventMetadata"]["callerId"]
                for record in entry_run.records}
    assert by_index == {index: entry_run.sent[index] for index in by_index}
    assert set(by_index.values()) == set(SUBJECTS)
    assert "eyJ" not in json.dumps(entry_run.records)  # no token (nor a piece of one) is recorded


def test_a_request_without_a_token_is_refused_and_not_captured(entry_run: EntryRun) -> None:
    assert entry_run.refused_status == 401
    assert entry_run.metrics["capture_sidecar_records_captured_total"] == entry_run.captured_before_refusal
    assert entry_run.metrics["capture_sidecar_requests_unauthorized_total"] >= 1
    assert REFUSED_MARKER not in "".join(request_text(record) for record in entry_run.records)


def test_the_processor_under_its_role_records_the_subject_as_caller_id(
    entry_run: EntryRun, rehearsal: Rehearsal, assembly: Assembly, tmp_path: Path
) -> None:
    """The capture processor's handler (the staged asset, its template's environment, its role's credentials) on a
    notification for each of the entry's objects: every row's ``caller_id`` is its token's subject."""
    [processor] = [f for f in function_runtimes(rehearsal.resolver) if f.queue_arns]
    event = {"Records": [{"messageId": f"entry-{index}", "body": s3_notification(entry_run.bucket, key)}
                         for index, key in enumerate(entry_run.keys)]}
    answer, log = invoke(rehearsal, processor, assembly, event, tmp_path, CURATED_OUTPUT="parquet")
    assert answer == {"batchItemFailures": []}, log
    s3 = rehearsal.client("s3")
    listed = s3.list_objects_v2(Bucket=entry_run.bucket, Prefix=processor.environment["OUTPUT_PREFIX"])
    rows = [row for item in listed.get("Contents", []) if item["Key"].endswith(".parquet")
            for row in pq.read_table(io.BytesIO(
                s3.get_object(Bucket=entry_run.bucket, Key=item["Key"])["Body"].read())).to_pylist()
            if row["source_key"].startswith(entry_run.prefix)]
    assert len(rows) == len(entry_run.records)
    assert {request_index(row["input_text"]): row["caller_id"] for row in rows} == entry_run.sent


def test_the_entry_pointed_at_another_workloads_prefix_is_refused(
    rehearsal: Rehearsal, assembly: Assembly, entry_runtime: ContainerRuntime, standin_port: int, jwks_uri: str,
    store_overrides: dict[str, str], tmp_path: Path
) -> None:
    """The negative rehearsal: the same entry, role and key, but CAPTURE_S3_URI rewritten to the portable server's
    capture prefix (another workload's, whose own sidecar may write there). IAM refuses the uploads, loudly: failed
    uploads in its metrics, the records spooled, ``HTTP 403 AccessDenied`` in its log; nothing appears there."""
    other = capture_sidecars(assembly)[0].env["CAPTURE_S3_URI"]
    bucket, prefix = split_s3_uri(other)
    assert other != entry_runtime.env["CAPTURE_S3_URI"]
    assert not rehearsal.identity_allows(entry_runtime.role_arn, "s3:PutObject", f"arn:aws:s3:::{bucket}/{prefix}x")
    s3 = rehearsal.client("s3")

    def keys() -> set[str]:
        return {item["Key"] for item in s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])}

    before = keys()
    entry = start_entry(rehearsal, entry_runtime, standin_port, jwks_uri, store_overrides, tmp_path,
                        CAPTURE_S3_URI=other)
    try:
        send_one_batch(entry, entry_runtime.env)
        metrics = entry.metrics()
    finally:
        entry.terminate()
    assert metrics['capture_sidecar_uploads_total{result="failed"}'] >= 1, entry.log()
    assert metrics['capture_sidecar_uploads_total{result="ok"}'] == 0
    assert metrics["capture_sidecar_records_uploaded_total"] == 0
    assert metrics["capture_sidecar_records_spooled_total"] >= int(entry_runtime.env["BATCH_SIZE"])
    assert "HTTP 403 AccessDenied" in entry.log(), entry.log()
    assert keys() == before
