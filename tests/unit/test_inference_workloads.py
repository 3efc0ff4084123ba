"""InferenceWorkloads on its own: identities from the plan, what it refuses, what it warns about."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from aws_cdk import Annotations as CdkAnnotations
from aws_cdk import App, Environment, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Annotations, Match, Template

from hyperpod_inference_iac import InferenceWorkloads, PlatformValue, S3Location
from hyperpod_inference_iac.charts import (
    DataCapture,
    ModelPodCapture,
    ModelServerRuntime,
    NvmeModelCache,
    PlatformContext,
    PortableApiKey,
    PortableModelServer,
    plan_workloads,
)
from hyperpod_inference_iac.foundation.validation import ConfigError, Problems
from hyperpod_inference_iac.security.workload_identity import IdentityBinding

ACCOUNT = "123456789012"


def _stack() -> tuple[Stack, eks.ICluster]:
    stack = Stack(App(), "Workloads", env=Environment(account=ACCOUNT, region="us-west-2"))
    cluster = eks.Cluster.from_cluster_attributes(
        stack, "Cluster", cluster_name="c",
        kubectl_provider=eks.KubectlProvider.from_kubectl_provider_attributes(
            stack, "Kubectl", service_token="arn:aws:lambda:us-west-2:123456789012:function:k",
            role=iam.Role.from_role_arn(stack, "KubectlRole", "arn:aws:iam::123456789012:role/k")),
        open_id_connect_provider=iam.OpenIdConnectProvider.from_open_id_connect_provider_arn(
            stack, "Oidc", "arn:aws:iam::123456789012:oidc-provider/oidc.eks.us-west-2.amazonaws.com/id/EXAMPLE"))
    return stack, cluster


def _plan(capture: ModelPodCapture, problems: Problems | None = None, **context: Any) -> Any:
    server = PortableModelServer(
        name="qwen", runtime=ModelServerRuntime.VLLM,
        model_cache=NvmeModelCache(model_key="qwen", source_s3_uri="s3://weights-bucket/qwen/"),
        data_capture=DataCapture(model_pod=capture))
    base = {"cluster_name": "c", "namespace": "inference", "account": ACCOUNT, "role_name_prefix": "t",
            "capture": S3Location(PlatformValue.CAPTURE_BUCKET, "data-capture/"), "vpc_cidr": "10.0.0.0/16"}
    return plan_workloads(PlatformContext(**{**base, **context}), portable=[server], problems=problems)


def test_the_sidecar_role_writes_exactly_the_planned_prefix_with_the_planned_key() -> None:
    stack, cluster = _stack()
    key = kms.Key.from_key_arn(stack, "Key", "arn:aws:kms:us-west-2:123456789012:key/1111-2222")
    plan = _plan(ModelPodCapture(initial_sampling_percentage=5), capture_key=PlatformValue.CAPTURE_KEY_ID)
    workloads = InferenceWorkloads(stack, "W", cluster=cluster, plan=plan, capture_key=key,
                                   capture_bucket=s3.Bucket.from_bucket_name(stack, "B", "captures"),
                                   sidecar_image="registry.example/sidecar:1")
    (portable,) = plan.portable
    assert list(workloads.identities) == ["t-qwen", "t-qwen-capture"]  # the loader's role and the sidecar's
    template = Template.from_stack(stack)
    loader, sidecar = (_statements_of(template, name) for name in workloads.identities)
    # (the partition is a literal only under the app flag @aws-cdk/core:enablePartitionLiterals)
    assert f":s3:::captures/{portable.capture.prefix}*" in sidecar
    assert "arn:aws:kms:us-west-2:123456789012:key/1111-2222" in sidecar
    assert "weights-bucket" not in sidecar and "s3:GetObject" not in sidecar
    assert ":s3:::weights-bucket/qwen/*" in loader
    assert "captures" not in loader and "s3:PutObject" not in loader and "kms:" not in loader


def _statements_of(template: Template, role_name: str) -> str:
    roles = template.find_resources("AWS::IAM::Role", {"Properties": {"RoleName": role_name}})
    (role_id,) = roles
    policies = [p for p in template.find_resources("AWS::IAM::Policy").values()
                if {"Ref": role_id} in p["Properties"]["Roles"]]
    return json.dumps(policies)


def test_each_container_role_trusts_its_own_token_audience_only() -> None:
    """The loader's token cannot assume the sidecar's role, nor the reverse: same service account, other audience."""
    stack, cluster = _stack()
    InferenceWorkloads(stack, "W", cluster=cluster, plan=_plan(ModelPodCapture(initial_sampling_percentage=5)),
                       capture_bucket=s3.Bucket.from_bucket_name(stack, "B", "captures"),
                       sidecar_image="registry.example/sidecar:1")
    template = Template.from_stack(stack)
    conditions = {json.dumps(r["Properties"]["Value"])
                  for r in template.find_resources("Custom::AWSCDKCfnJson").values()}
    (loader,) = [c for c in conditions if "hyperpod-inference-iac/weights-loader" in c]
    (sidecar,) = [c for c in conditions if "hyperpod-inference-iac/capture-sidecar" in c]
    assert loader != sidecar
    assert not any("sts.amazonaws.com" in c for c in conditions)  # the webhook's audience trusts no workload role
    # An imported cluster's OIDC provider is not this app's to change: a warning names the client IDs to add.
    Annotations.from_stack(stack).has_warning("*", Match.string_like_regexp(
        ".*must accept the token audiences hyperpod-inference-iac/capture-sidecar, "
        "hyperpod-inference-iac/weights-loader.*"))


def test_container_roles_need_irsa() -> None:
    stack, cluster = _stack()
    with pytest.raises(ConfigError) as caught:
        InferenceWorkloads(stack, "W", cluster=cluster, plan=_plan(ModelPodCapture()),
                           capture_bucket=s3.Bucket.from_bucket_name(stack, "B", "captures"),
                           sidecar_image="registry.example/sidecar:1", binding=IdentityBinding.POD_IDENTITY)
    assert caught.value.codes == ["InferenceWorkloads.ContainerIdentityNeedsIrsa"] * 2


def test_a_plan_that_needs_the_capture_bucket_refuses_to_build_without_it() -> None:
    stack, cluster = _stack()
    with pytest.raises(ConfigError) as caught:
        InferenceWorkloads(stack, "W", cluster=cluster, plan=_plan(ModelPodCapture()),
                           sidecar_image="registry.example/sidecar:1")
    assert caught.value.codes == ["InferenceWorkloads.MissingPlatformResource"]


def test_a_workload_key_must_be_a_key_arn_to_be_granted() -> None:
    """The plan refuses it under its key path (so a config file's check does); the construct applies the same rule to
    a plan it is given regardless."""
    stack, cluster = _stack()
    planned = Problems()
    plan = _plan(ModelPodCapture(kms_key_id="alias/captures"), planned)
    assert [(p.code, p.path) for p in planned] == [
        ("InferenceWorkloads.KeyNotGrantable", "portable[0].dataCapture.modelPod.kmsKeyId")]
    with pytest.raises(ConfigError) as caught:
        InferenceWorkloads(stack, "W", cluster=cluster, plan=plan, sidecar_image="registry.example/sidecar:1",
                           capture_bucket=s3.Bucket.from_bucket_name(stack, "B", "captures"))
    assert caught.value.codes == ["InferenceWorkloads.KeyNotGrantable"]


def test_capture_without_a_key_and_full_sampling_are_warned() -> None:
    stack, cluster = _stack()
    InferenceWorkloads(stack, "W", cluster=cluster, plan=_plan(ModelPodCapture()),
                       capture_bucket=s3.Bucket.from_bucket_name(stack, "B", "captures"),
                       sidecar_image="registry.example/sidecar:1")
    annotations = Annotations.from_stack(stack)
    annotations.has_warning("*", Match.string_like_regexp(".*has no kmsKeyId.*"))
    annotations.has_warning("*", Match.string_like_regexp(".*keeps every request.*"))


DIGEST = "@sha256:" + "0" * 64
IMAGE_WARNING = "@hyperpod-inference-iac/InferenceWorkloads:imageNotPinnedByDigest"


def _image_warnings(stack: Stack) -> list[str]:
    return [str(w.entry.data) for w in Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp(
        ".*named by tag only.*"))]


def _portable_plan(image: str | None, aws_cli_image: str) -> Any:
    server = PortableModelServer(
        name="qwen", runtime=ModelServerRuntime.VLLM, image=image,
        model_cache=NvmeModelCache(model_key="qwen", source_s3_uri="s3://weights-bucket/qwen/",
                                   aws_cli_image=aws_cli_image),
        data_capture=DataCapture(model_pod=ModelPodCapture(initial_sampling_percentage=5)))
    context = PlatformContext(cluster_name="c", namespace="inference", account=ACCOUNT, role_name_prefix="t",
                              capture=S3Location(PlatformValue.CAPTURE_BUCKET, "data-capture/"),
                              capture_key=PlatformValue.CAPTURE_KEY_ID, vpc_cidr="10.0.0.0/16")
    return plan_workloads(context, portable=[server])


def _workloads_with(plan: Any, sidecar_image: str | None) -> tuple[Stack, InferenceWorkloads]:
    stack, cluster = _stack()
    workloads = InferenceWorkloads(
        stack, "W", cluster=cluster, plan=plan, sidecar_image=sidecar_image,
        capture_bucket=s3.Bucket.from_bucket_name(stack, "B", "captures"),
        capture_key=kms.Key.from_key_arn(stack, "Key", "arn:aws:kms:us-west-2:123456789012:key/1111-2222"))
    return stack, workloads


def test_images_named_by_tag_are_warned_once_per_workload_each_named() -> None:
    stack, _ = _workloads_with(_portable_plan(None, "public.ecr.aws/aws-cli/aws-cli:2.32.9"),
                               sidecar_image="registry.example/sidecar:1")
    (warning,) = _image_warnings(stack)
    for image in ("vllm/vllm-openai:v0.11.0", "public.ecr.aws/aws-cli/aws-cli:2.32.9", "registry.example/sidecar:1"):
        assert image in warning
    assert IMAGE_WARNING in warning


def test_images_pinned_by_digest_and_the_sidecar_built_here_are_not_warned() -> None:
    plan = _portable_plan(f"vllm/vllm-openai{DIGEST}", f"public.ecr.aws/aws-cli/aws-cli{DIGEST}")
    stack, workloads = _workloads_with(plan, sidecar_image=None)  # built as an asset: immutable content-hash tag
    assert workloads.sidecar_image is not None
    assert _image_warnings(stack) == []
    stack, _ = _workloads_with(plan, sidecar_image=f"registry.example/sidecar{DIGEST}")
    assert _image_warnings(stack) == []


def test_the_image_warning_is_acknowledged_on_the_workload_s_manifest() -> None:
    stack, workloads = _workloads_with(_portable_plan(None, "public.ecr.aws/aws-cli/aws-cli:2.32.9"),
                                       sidecar_image="registry.example/sidecar:1")
    CdkAnnotations.of(workloads.manifests["portable-qwen"]).acknowledge_warning(
        IMAGE_WARNING, "our mirror's tags are immutable")
    assert _image_warnings(stack) == []


# -- issue 17: who reaches a portable server is said out loud ------------------------------------------------------
OURS = "@hyperpod-inference-iac/InferenceWorkloads:"


CERTIFICATE = "arn:aws:acm:us-west-2:123456789012:certificate/6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"


def _exposure_warnings(acknowledged: tuple[str, ...] = (), **server: Any) -> list[str]:
    """The exposure warnings InferenceWorkloads leaves on a portable server's manifest with a hostname (after
    ``acknowledged`` warning names are acknowledged on the stack)."""
    server = {"name": "qwen", "runtime": ModelServerRuntime.VLLM, "hostname": "qwen.inference.example.com",
              "model_cache": NvmeModelCache(model_key="qwen", source_s3_uri="s3://weights-bucket/qwen/"), **server}
    context = PlatformContext(cluster_name="c", namespace="inference", account=ACCOUNT, role_name_prefix="t",
                              vpc_cidr="10.0.0.0/16", zone_name="inference.example.com",
                              endpoint_domains=("qwen.inference.example.com",))
    stack, cluster = _stack()
    for name in acknowledged:
        CdkAnnotations.of(stack).acknowledge_warning(OURS + name, "reviewed: a mesh authenticates in front")
    InferenceWorkloads(stack, "W", cluster=cluster, sidecar_image="registry.example/sidecar:1",
                       known_values={PlatformValue.CERTIFICATE_ARN: CERTIFICATE},
                       plan=plan_workloads(context, portable=[PortableModelServer(**server)]))
    return [str(w.entry.data) for w in Annotations.from_stack(stack).find_warning(
        "*", Match.string_like_regexp(".*(noApiKey|sourceRangeOpenToAll|sourceRangeNotPrivate).*"))]


def test_a_portable_server_without_an_api_key_is_warned_whichever_way_it_lacks_one() -> None:
    (absent,) = _exposure_warnings()
    assert absent.startswith("portable[0].apiKey: qwen has no API key: any pod of the cluster and every client its "
                             "load balancer admits is served without authentication")
    assert absent.endswith(f"[ack: {OURS}noApiKey]")
    (disabled,) = _exposure_warnings(api_key=PortableApiKey(enabled=False))
    assert disabled.startswith("portable[0].apiKey.enabled: qwen has no API key")
    assert _exposure_warnings(api_key=PortableApiKey()) == []


@pytest.mark.parametrize(("ranges", "expected"), [
    (("0.0.0.0/0",), [("0", "sourceRangeOpenToAll")]),
    (("10.1.0.0/16", "::/0"), [("1", "sourceRangeOpenToAll")]),
    (("8.0.0.0/8", "192.168.0.0/16"), [("0", "sourceRangeNotPrivate")]),
    (("10.0.0.0/7",), [("0", "sourceRangeNotPrivate")]),  # 10/8 and 11/8: not all of it private
    (("10.0.0.0/16", "172.16.0.0/12", "100.64.0.0/10", "fd00::/8"), []),
])
def test_open_and_public_source_ranges_are_warned_each_at_its_index(
        ranges: tuple[str, ...], expected: list[tuple[str, str]]) -> None:
    warnings = _exposure_warnings(api_key=PortableApiKey(), allowed_source_ranges=ranges)
    found = [(re.match(r"portable\[0\]\.allowedSourceRanges\[(\d+)\]: ", w), re.search(r":(\w+)\]$", w))
             for w in warnings]
    assert [(index[1], name[1]) for index, name in found if index and name] == expected
    assert len(found) == len(expected)


def test_exposure_warnings_are_acknowledged_like_any_construct_warning() -> None:
    assert len(_exposure_warnings(allowed_source_ranges=("0.0.0.0/0",))) == 2
    assert _exposure_warnings(("noApiKey", "sourceRangeOpenToAll"), allowed_source_ranges=("0.0.0.0/0",)) == []
