"""A CI deploy that fits (issue 26, 5): a prebuilt sidecar image by digest instead of the Docker image asset, and one
owner of the workloads (``workloads.owner``), in the config, the construct and the dist/ README."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Template

from hyperpod_inference_iac import ConfigError, PlatformValue, PlatformValues, WorkloadOwner, stage_manifests
from platform_config import parse_config
from tests.unit.test_config import _put, _with
from tests.unit.test_inference_workloads import _portable_plan, _stack

DIGEST = "@sha256:" + "0123456789abcdef" * 4
IMAGE = f"111122223333.dkr.ecr.us-west-2.amazonaws.com/capture-sidecar{DIGEST}"


def _problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_config(data)
    return [f"[{p.code}] {p.path}" for p in caught.value.problems]


def test_the_defaults_build_the_asset_and_cdk_owns_the_workloads() -> None:
    config = parse_config(_with(lambda data: None))
    assert config.capture.sidecar_image is None and config.workload_owner is WorkloadOwner.CDK


def test_a_prebuilt_sidecar_image_by_digest_is_read() -> None:
    assert parse_config(_with(_put("capture.sidecarImage", IMAGE))).capture.sidecar_image == IMAGE


@pytest.mark.parametrize("image", [IMAGE.split("@")[0] + ":1.0", IMAGE.split("@")[0], "sidecar@sha256:abc"])
def test_a_sidecar_image_without_a_digest_is_refused(image: str) -> None:
    assert _problems(_with(_put("capture.sidecarImage", image))) == ["[Config.BadFormat] capture.sidecarImage"]


def test_gitops_owner_is_read_and_a_third_owner_refused() -> None:
    assert parse_config(_with(_put("workloads.owner", "gitops"))).workload_owner is WorkloadOwner.GITOPS
    assert _problems(_with(_put("workloads.owner", "helm"))) == ["[Config.BadFormat] workloads.owner"]
    assert _problems(_with(_put("workloads.color", "blue"))) == ["[Config.UnknownKey] workloads.color"]


def _workloads(apply_workloads: bool, sidecar_image: str | None) -> tuple[Any, Template]:
    from aws_cdk import aws_kms as kms
    from aws_cdk import aws_s3 as s3

    from hyperpod_inference_iac import InferenceWorkloads

    stack, cluster = _stack()
    workloads = InferenceWorkloads(
        stack, "W", cluster=cluster, plan=_portable_plan(None, "public.ecr.aws/aws-cli/aws-cli:2.32.9"),
        sidecar_image=sidecar_image, apply_workloads=apply_workloads,
        capture_bucket=s3.Bucket.from_bucket_name(stack, "B", "captures"),
        capture_key=kms.Key.from_key_arn(stack, "Key", "arn:aws:kms:us-west-2:123456789012:key/1111-2222"))
    return workloads, Template.from_stack(stack)


def test_with_gitops_the_construct_applies_no_workload_but_creates_their_identities() -> None:
    workloads, template = _workloads(apply_workloads=False, sidecar_image=IMAGE)
    assert workloads.manifests == {} and workloads.identities
    manifests = template.find_resources("Custom::AWSCDK-EKS-KubernetesResource")
    assert len(manifests) == 1 and "Namespace" in str(manifests)  # the namespace only
    assert template.find_resources("AWS::IAM::Role")


def test_a_prebuilt_image_needs_no_asset_and_reaches_the_pod() -> None:
    workloads, template = _workloads(apply_workloads=True, sidecar_image=IMAGE)
    assert workloads.sidecar_image is None  # no DockerImageAsset: no Docker at deploy time
    assert IMAGE in str(template.find_resources("Custom::AWSCDK-EKS-KubernetesResource"))


@pytest.mark.parametrize(("owner", "says"), [(WorkloadOwner.CDK, "**Do not apply these.**"),
                                            (WorkloadOwner.GITOPS, "**Apply these with your GitOps tool**")])
def test_the_dist_readme_says_who_applies(owner: WorkloadOwner, says: str, tmp_path: Path) -> None:
    plan = _portable_plan(None, "public.ecr.aws/aws-cli/aws-cli:2.32.9")
    values = PlatformValues({PlatformValue.CAPTURE_BUCKET: "captures", PlatformValue.SIDECAR_IMAGE: IMAGE,
                             PlatformValue.CAPTURE_KEY_ID: "arn:aws:kms:us-west-2:123456789012:key/1111-2222"})
    staged = stage_manifests(plan, outdir=tmp_path / "dist", values=values, owner=owner)
    staged.commit()
    readme = (tmp_path / "dist" / "README.md").read_text()
    assert says in readme and f"workloads.owner: {owner.value}" in readme
