"""Rehearsal of the capture sidecar: the real process, with the rendered manifest's environment, under the
temporary credentials of the role its service account is annotated with, writing to moto with IAM enforced.

Proves: the sidecar's role allows the PutObject calls the sidecar really makes (key layout, path-style endpoint,
its own SigV4 signing) under the manifest's CAPTURE_S3_URI, and refuses them elsewhere, with the failure visible
in the sidecar's metrics and log. Cannot prove (docs/rehearsal.md): the kms:GenerateDataKey S3 makes for the
SSE-KMS upload (moto makes none; checked with moto's evaluator on the key's ARN instead), the policy's conditions
(aws:ResourceAccount), the bucket policy, the trust of the role (IRSA)."""

from __future__ import annotations

import re

import pytest

from tests.rehearsal.conftest import (
    SidecarBatch,
    capture_sidecars,
    fill_one_batch,
    start_sidecar,
)
from tests.support.rehearsal import Rehearsal, function_runtimes, split_s3_uri
from tests.support.synth import Assembly

pytestmark = [pytest.mark.xdist_group("rehearsal"), pytest.mark.slow]


def test_the_batch_lands_under_the_manifests_capture_uri(sidecar_batch: SidecarBatch) -> None:
    env = sidecar_batch.runtime.env
    assert sidecar_batch.exit_code == 0, sidecar_batch.log
    metrics = sidecar_batch.metrics
    assert metrics['capture_sidecar_uploads_total{result="failed"}'] == 0, sidecar_batch.log
    assert metrics['capture_sidecar_uploads_total{result="ok"}'] >= 1
    # The manifest's sampling is in force (a 100 % sidecar would skip nothing), and its batch size.
    assert metrics["capture_sidecar_requests_sampled_out_total"] > 0
    assert metrics["capture_sidecar_records_uploaded_total"] >= int(env["BATCH_SIZE"])
    # Everything it captured is in S3, under the prefix its role may write, in SageMaker's layout.
    assert sidecar_batch.records == metrics["capture_sidecar_records_captured_total"]
    assert sidecar_batch.keys
    for key in sidecar_batch.keys:
        assert re.fullmatch(rf"{re.escape(sidecar_batch.prefix)}\d{{4}}/\d\d/\d\d/\d\d/[\w-]+\.jsonl", key), key


def test_the_objects_are_encrypted_with_the_manifests_key(sidecar_batch: SidecarBatch, rehearsal: Rehearsal) -> None:
    s3 = rehearsal.client("s3")
    kms_key_id = sidecar_batch.runtime.env["KMS_KEY_ID"]
    for key in sidecar_batch.keys:
        head = s3.head_object(Bucket=sidecar_batch.bucket, Key=key)
        assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", kms_key_id)


def test_its_role_allows_the_kms_call_s3_makes_for_it(sidecar_batch: SidecarBatch, rehearsal: Rehearsal) -> None:
    """moto's S3 never calls KMS: S3's kms:GenerateDataKey on the sidecar's behalf is checked by moto's own
    evaluator, on the key the manifest's alias names (resolved by moto's KMS, created from the templates)."""
    key_arn = rehearsal.key_arn(sidecar_batch.runtime.env["KMS_KEY_ID"])
    assert key_arn in rehearsal.created.keys
    assert rehearsal.identity_allows(sidecar_batch.runtime.role_arn, "kms:GenerateDataKey", key_arn)


def test_a_sidecar_pointed_at_another_workloads_prefix_is_refused(
    rehearsal: Rehearsal, assembly: Assembly, standin_port: int, tmp_path
) -> None:
    """The negative rehearsal: the same sidecar, role and key, but CAPTURE_S3_URI rewritten to the prefix the
    capture processor publishes curated data under (its OUTPUT_PREFIX in the template). The upload must fail,
    loudly, and nothing may appear there."""
    runtime = capture_sidecars(assembly)[0]
    bucket, _ = split_s3_uri(runtime.env["CAPTURE_S3_URI"])
    [processor] = [f for f in function_runtimes(rehearsal.resolver) if "OUTPUT_PREFIX" in f.environment]
    elsewhere = f"s3://{bucket}/{processor.environment['OUTPUT_PREFIX']}"
    before = _keys(rehearsal, bucket, processor.environment["OUTPUT_PREFIX"])
    sidecar = start_sidecar(rehearsal, runtime, rehearsal.credentials(runtime.role_arn), standin_port, tmp_path,
                            CAPTURE_S3_URI=elsewhere)
    try:
        _assert_refused(sidecar, int(runtime.env["BATCH_SIZE"]))
    finally:
        sidecar.terminate()
    assert _keys(rehearsal, bucket, processor.environment["OUTPUT_PREFIX"]) == before


def _keys(rehearsal: Rehearsal, bucket: str, prefix: str) -> set[str]:
    listed = rehearsal.client("s3").list_objects_v2(Bucket=bucket, Prefix=prefix)
    return {item["Key"] for item in listed.get("Contents", [])}


def test_a_sidecar_whose_role_lacks_the_put_grant_is_refused(
    rehearsal: Rehearsal, assembly: Assembly, standin_port: int, tmp_path
) -> None:
    """The negative rehearsal the other way round: the manifest as rendered, but its role created without the
    statements that allow s3:PutObject (the bug a unit test of either side alone cannot see)."""
    runtime = capture_sidecars(assembly)[0]
    broken = rehearsal.role_variant(runtime.role_arn, "no-put", keep=lambda s: "s3:PutObject" not in _actions(s))
    sidecar = start_sidecar(rehearsal, runtime, rehearsal.credentials(broken), standin_port, tmp_path)
    try:
        _assert_refused(sidecar, int(runtime.env["BATCH_SIZE"]))
    finally:
        sidecar.terminate()


def _assert_refused(sidecar, batch_size: int) -> None:  # type: ignore[no-untyped-def]
    fill_one_batch(sidecar, batch_size)
    metrics = sidecar.metrics()
    assert metrics['capture_sidecar_uploads_total{result="failed"}'] >= 1, sidecar.log()
    assert metrics['capture_sidecar_uploads_total{result="ok"}'] == 0
    assert metrics["capture_sidecar_records_uploaded_total"] == 0
    # Not lost: spooled on the pod's scratch volume for a later retry.
    assert metrics["capture_sidecar_records_spooled_total"] >= batch_size
    assert "HTTP 403 AccessDenied" in sidecar.log(), sidecar.log()


def _actions(statement: dict) -> list[str]:
    actions = statement.get("Action", [])
    return actions if isinstance(actions, list) else [actions]


def test_it_ran_with_the_manifests_settings(sidecar_batch: SidecarBatch) -> None:
    """The rehearsal changed only what must be this machine's: upstream, ports, volume folders, credentials."""
    local = {"UPSTREAM_URL", "LISTEN_PORT", "METRICS_PORT", "SPOOL_DIR", "API_KEYS_FILE"}
    manifest = sidecar_batch.runtime.env
    assert {k: v for k, v in manifest.items() if k not in local} == {
        k: sidecar_batch.env[k] for k in manifest if k not in local}
    assert sidecar_batch.env["SPOOL_DIR"].endswith(manifest["SPOOL_DIR"].removeprefix("/tmp"))
    # The API key's Secret volume (the default platform's portable server has a key): its file, in that folder.
    mount = "/etc/capture-sidecar/api-keys"
    assert sidecar_batch.env["API_KEYS_FILE"].endswith(manifest["API_KEYS_FILE"].removeprefix(mount))
    assert sidecar_batch.env["AWS_ACCESS_KEY_ID"].startswith("ASIA")  # temporary credentials of an assumed role
