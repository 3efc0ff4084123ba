"""The checkov gate bites: deliberately bad infrastructure is reported and is not covered by any acceptance.

The real scan of the synthesized app is tests/platform/test_checkov.py (it reuses the session's synth)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.security.gate import cloudformation_findings, kubernetes_findings, load_accepted, report, unaccepted

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("checkov-gate")]  # the scanner runs

# Named like a resource of the app, so only the rule (never the location) can keep it out of the report.
PUBLIC_BUCKET = {
    "Resources": {
        "Public": {
            "Type": "AWS::S3::Bucket",
            "Properties": {
                "AccessControl": "PublicRead",
                "PublicAccessBlockConfiguration": {"BlockPublicAcls": False, "BlockPublicPolicy": False,
                                                   "IgnorePublicAcls": False, "RestrictPublicBuckets": False},
            },
            "Metadata": {"aws:cdk:path": "llm-platform-storage/CaptureStorage/AccessLogBucket/Resource"},
        },
    },
}

PRIVILEGED = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "qwen3-8b-portable", "namespace": "inference"},
    "spec": {
        "selector": {"matchLabels": {"app": "x"}},
        "template": {
            "metadata": {"labels": {"app": "x"}},
            "spec": {"containers": [{"name": "model-server", "image": "vllm/vllm-openai:latest",
                                     "securityContext": {"privileged": True}}]},
        },
    },
}


def test_a_public_bucket_fails_the_gate(tmp_path: Path) -> None:
    template = tmp_path / "llm-platform-storage.template.json"
    template.write_text(json.dumps(PUBLIC_BUCKET))
    findings, summary = cloudformation_findings([template])
    assert summary["resource_count"] == 1 and summary["parsing_errors"] == 0
    new = unaccepted(findings, load_accepted())
    rules = {f.rule for f in new}
    # Public access block switched off (53-56) and a public-read ACL (20).
    assert {"CKV_AWS_20", "CKV_AWS_53", "CKV_AWS_54", "CKV_AWS_55", "CKV_AWS_56"} <= rules, report(new)


def test_a_privileged_pod_fails_the_gate(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    dist.mkdir()
    (dist / "portable-qwen3-8b-portable.k8s.yaml").write_text(yaml.safe_dump(PRIVILEGED))
    findings, summary = kubernetes_findings(dist)
    assert summary["resource_count"] >= 1 and summary["parsing_errors"] == 0
    new = unaccepted(findings, load_accepted())
    assert "CKV_K8S_16" in {f.rule for f in new}, report(new)  # privileged container
    assert any(f.location == "portable-qwen3-8b-portable.k8s.yaml:Deployment.inference.qwen3-8b-portable"
               for f in new if f.rule == "CKV_K8S_16")


def test_an_inline_skip_does_not_hide_a_finding(tmp_path: Path) -> None:
    bucket = json.loads(json.dumps(PUBLIC_BUCKET))
    bucket["Resources"]["Public"]["Metadata"]["checkov"] = {
        "skip": [{"id": "CKV_AWS_20", "comment": "looks harmless"}]}
    template = tmp_path / "llm-platform-storage.template.json"
    template.write_text(json.dumps(bucket))
    findings, _ = cloudformation_findings([template])
    assert "CKV_AWS_20" in {f.rule for f in unaccepted(findings, load_accepted())}
