"""The parts agree: every runtime the manifests configure is allowed, by the role it runs under in the
synthesized templates, to do exactly what it is configured to do (tests/support/composition.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support.composition import Templates, accesses, allowed, credential_holders, denied
from tests.support.synth import Assembly

ACCOUNT, REGION = "111122223333", "us-west-2"
OPERATOR_ROLE = "SageMakerHyperPodInference-llm-platform"


@pytest.fixture(scope="module")
def templates(assembly: Assembly) -> Templates:
    return Templates(assembly.templates, ACCOUNT, REGION)


def test_every_runtime_may_do_what_it_is_configured_to(assembly: Assembly, templates: Templates) -> None:
    found = accesses(assembly.manifests, templates, operator_role=OPERATOR_ROLE)
    runtimes = {access.runtime for access in found}
    assert {"qwen3-8b-portable/capture-sidecar", "qwen3-8b-portable/nvme-weights-loader",
            "models-entry/capture-sidecar", "qwen3-8b/nvme-weights-loader", "mistral-7b operator (modelPod)",
            "mistral-7b operator (TLS)", "llama3-8b operator (sagemakerEndpoint)"} <= runtimes
    assert denied(found, templates) == []


def test_only_the_loaders_and_the_sidecar_hold_credentials_each_with_a_token_its_role_trusts(
        assembly: Assembly, templates: Templates) -> None:
    """No model server holds a role: the loaders and the capture sidecar each mount a token of their own audience,
    which their role's trust requires, so one cannot assume another's role with its token."""
    found = credential_holders(assembly.manifests)
    # Each metrics agent is a pod of its own, one container: the service account's role is its alone.
    agent = [h for h in found if h.runtime in ("capture-metrics-agent/cloudwatch-agent",
                                               "model-metrics-agent/cloudwatch-agent")]
    assert [h.audience for h in agent] == ["sts.amazonaws.com", "sts.amazonaws.com"]
    holders = [h for h in found if h not in agent]
    assert sorted(h.runtime for h in holders) == [
        "models-entry/capture-sidecar", "qwen3-8b-portable/capture-sidecar", "qwen3-8b-portable/nvme-weights-loader",
        "qwen3-8b/nvme-weights-loader"]
    for holder in holders:
        assert holder.audience.startswith("hyperpod-inference-iac/"), holder
        assert templates.trusted_audience(holder.role_name) == holder.audience, holder
    assert len({h.role_name for h in holders}) == len(holders)  # each its own role


def test_the_check_fails_when_a_role_cannot_do_what_its_runtime_does(assembly: Assembly) -> None:
    """Without the portable server's capture grant (the bug this check exists for), the sidecar is refused."""
    broken = copy.deepcopy(assembly.templates)
    cluster = next(t for name, t in broken.items() if name.endswith("-cluster"))
    for resource in cluster["Resources"].values():
        if resource["Type"] == "AWS::IAM::Policy" and "portablecapture" in str(resource["Properties"]["Roles"]).lower():
            statements = resource["Properties"]["PolicyDocument"]["Statement"]
            statements[:] = [s for s in statements if "s3:PutObject" not in _actions(s)]
    templates = Templates(broken, ACCOUNT, REGION)
    found = accesses(assembly.manifests, templates, operator_role=OPERATOR_ROLE)
    assert [(a.runtime, a.action) for a in denied(found, templates)] == [
        ("qwen3-8b-portable/capture-sidecar", "s3:PutObject")]


def test_the_gateway_entry_may_write_its_own_captures_only(assembly: Assembly, templates: Templates) -> None:
    """The entry's role (synthesized) allows the prefix its sidecar is rendered with, and not the portable server's."""
    found = accesses(assembly.manifests, templates, operator_role=OPERATOR_ROLE)
    (write,) = [a for a in found if a.runtime == "models-entry/capture-sidecar" and a.action == "s3:PutObject"]
    assert write.resource.endswith("/pod/<object>") and "/data-capture/" in write.resource
    (portable,) = [a for a in found if a.runtime == "qwen3-8b-portable/capture-sidecar" and a.action == "s3:PutObject"]
    assert not allowed(templates.role_statements(write.role_name), "s3:PutObject", portable.resource)


def test_the_check_fails_when_a_runtime_is_pointed_elsewhere(assembly: Assembly, templates: Templates) -> None:
    manifests = copy.deepcopy(assembly.manifests)
    for obj in manifests["portable-qwen3-8b-portable.k8s.yaml"]:
        if obj["kind"] == "Deployment":
            for container in obj["spec"]["template"]["spec"]["initContainers"]:
                for item in container.get("env", []):
                    if item["name"] == "CAPTURE_S3_URI":
                        item["value"] = item["value"].replace("/pod/", "/other-workload/")
    found = accesses(manifests, templates, operator_role=OPERATOR_ROLE)
    assert [(a.runtime, a.action) for a in denied(found, templates)] == [
        ("qwen3-8b-portable/capture-sidecar", "s3:PutObject")]


def _actions(statement: dict[str, Any]) -> list[str]:
    return statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
