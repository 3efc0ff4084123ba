"""Configuration validation: one test per error code, every problem once under its key path, all of them
in one run, a readable failure (exit 2, no traceback) that changes nothing on disk."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperpod_inference_iac import CaptureAlarmsOptions, CaptureStorage, PlatformValue
from hyperpod_inference_iac.foundation.validation import ConfigError
from platform_config import load_config, parse_config, read_stack_outputs
from tests.support.synth import REPO, cli_env, run_cdk_synth

DEFAULT = yaml.safe_load((REPO / "config" / "default.yaml").read_text())


def _with(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    data = copy.deepcopy(DEFAULT)
    change(data)
    return data


def _node(data: Any, parts: list[str]) -> Any:
    for part in parts:
        data = data[int(part)] if part.isdigit() else data[part]
    return data


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = _node(data, parents)
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return change


def _delete(path: str) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        del _node(data, parents)[last]
    return change


def _put(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """Like _set, creating the mappings on the way (sections the default file leaves out)."""
    def change(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return change


def _problems(data: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as caught:
        parse_config(data)
    return [(p.code, p.path) for p in caught.value.problems]


EXISTING_VPC = {"vpcId": "vpc-0123456789abcdef0", "vpcCidr": "10.0.0.0/16", "availabilityZones": ["a", "b"],
                "privateSubnetIds": ["subnet-01234567", "subnet-89abcdef"]}

SIDECAR_RESOURCES = {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}}


def _older_addon(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """_set on a platform on add-on v1.4.0-eksbuild.1 (the vendored CRDs' version), without a gateway (which needs
    v2.0.0-eksbuild.2): one problem, the field's."""
    def change(data: dict[str, Any]) -> None:
        data["operator"]["addonVersion"] = "v1.4.0-eksbuild.1"
        data.pop("gateways", None)
        for model in data["models"]:
            model.pop("gateway", None)
        _set(path, value)(data)
    return change


def _newer_addon(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """_put on a platform whose add-on has every field of charts/crd_overlays/ (v2.0.0-eksbuild.2)."""
    def change(data: dict[str, Any]) -> None:
        data["operator"]["addonVersion"] = "v2.0.0-eksbuild.2"
        *parents, last = path.split(".")
        node: Any = data
        for part in parents:
            node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
        node[last] = value
    return change


# (code, key path, change): each breaks the default file in exactly one place, and that place is reported,
# once, with that code.
CASES = [
    ("Config.WrongType", "environment", _set("environment", ["us-west-2"])),
    ("Config.MissingKey", "environment.account", _delete("environment.account")),
    ("Config.WrongType", "capture.retentionDays", _set("capture.retentionDays", "thirty")),
    ("Config.WrongType", "environment.account", _set("environment.account", 111122223333)),
    ("Config.WrongType", "cluster.kubernetesVersion", _set("cluster.kubernetesVersion", 1.34)),
    ("Config.BadFormat", "environment.account", _set("environment.account", "1234")),
    ("Config.BadFormat", "project", _set("project", "a-very-long-project-n")),
    ("Config.TooFewItems", "cluster.gpuNodeGroups", _set("cluster.gpuNodeGroups", [])),
    ("Config.UnknownKey", "capture.retentionDay", _set("capture.retentionDay", 3)),
    ("Config.UnknownKey", "portable[0].roleArn", _set("portable.0.roleArn", "arn:aws:iam::111122223333:role/x")),
    ("CaptureStorage.RetentionOutOfRange", "capture.retentionDays", _set("capture.retentionDays", 0)),
    ("CaptureStorage.BadReaderRoleArn", "capture.readerRoleArns[0]", _set("capture.readerRoleArns", ["analysts"])),
    ("CaptureStorage.BadReaderRoleArn", "capture.rawReaderRoleArns[0]", _set("capture.rawReaderRoleArns", ["x"])),
    ("CaptureStorage.BadReaderRoleArn", "capture.breakGlassRoleArns[0]", _set("capture.breakGlassRoleArns", ["x"])),
    ("CapturePipeline.ConcurrencyOutOfRange", "capture.processorMaxConcurrency",
     _set("capture.processorMaxConcurrency", 1)),
    ("CapturePipeline.UnknownRedactionRule", "capture.redact[1]", _set("capture.redact", ["email", "ssn"])),
    ("CapturePipeline.InvalidPrefix", "capture.prefix", _set("capture.prefix", "data-capture")),
    ("CapturePipeline.NoPandasLayerForRegion", "capture.pandasLayerArn", _set("environment.region", "eu-west-3")),
    ("CapturePipeline.InvalidLayerArn", "capture.pandasLayerArn", _set("capture.pandasLayerArn", "pandas")),
    ("Network.BothVpcKinds", "network", _set("network.existingVpc", EXISTING_VPC)),
    ("Network.SubnetsPerZone", "network.existingVpc.privateSubnetIds",
     lambda d: d.update(network={"existingVpc": {**EXISTING_VPC, "availabilityZones": ["a", "b", "c"]}})),
    ("Network.BadSubnetId", "network.existingVpc.privateSubnetIds[1]",
     lambda d: d.update(network={"existingVpc": {**EXISTING_VPC, "privateSubnetIds": ["subnet-01234567", "s-1"]}})),
    ("Network.BadVpcId", "network.existingVpc.vpcId",
     lambda d: d.update(network={"existingVpc": {**EXISTING_VPC, "vpcId": "vpc-x"}})),
    ("Network.BadCidr", "network.newVpc.cidr", _set("network.newVpc.cidr", "10.0.0.0/8")),
    ("Network.ZoneCount", "network.newVpc.maxAzs", _set("network.newVpc.maxAzs", 1)),
    ("Network.NatGateways", "network.newVpc.natGateways", _set("network.newVpc.natGateways", 3)),
    ("Network.FlowLogTraffic", "network.flowLogs", _set("network.flowLogs", "REJECTED")),
    ("Network.FlowLogTraffic", "network.flowLogs",
     lambda d: d.update(network={"existingVpc": EXISTING_VPC, "flowLogs": True})),
    ("Logs.RetentionDays", "logging.retentionDays", _set("logging.retentionDays", 100)),
    ("Logs.RetentionDays", "logging.auditRetentionDays", _set("logging.auditRetentionDays", 0)),
    ("Config.WrongType", "cluster.enforceNetworkPolicies", _set("cluster.enforceNetworkPolicies", "yes")),
    ("Config.WrongType", "secrets.customerManagedKey", _set("secrets.customerManagedKey", "yes")),
    ("Config.UnknownKey", "secrets.kmsKeyArn", _set("secrets.kmsKeyArn", "arn:aws:kms:us-west-2:1:key/x")),
    ("ApiKeySync.RotationDaysOutOfRange", "secrets.apiKeyRotationDays", _set("secrets.apiKeyRotationDays", 1001)),
    ("ApiKeySync.RotationDaysOutOfRange", "secrets.apiKeyRotationDays", _set("secrets.apiKeyRotationDays", -1)),
    ("InferenceCluster.UnsupportedKubernetesVersion", "cluster.kubernetesVersion",
     _set("cluster.kubernetesVersion", "1.20")),
    ("InferenceCluster.EndpointAccess", "cluster.endpointAccess", _set("cluster.endpointAccess", "privat")),
    ("InferenceCluster.BadAdminRoleArn", "cluster.adminRoleArns[0]", _set("cluster.adminRoleArns", ["admins"])),
    ("InferenceCluster.BadName", "cluster.name", _set("cluster.name", "-llm")),
    ("InferenceCluster.BadInstanceType", "cluster.systemInstanceType", _set("cluster.systemInstanceType", "large")),
    ("GpuNodeGroup.Sizes", "cluster.gpuNodeGroups[0].desiredSize", _set("cluster.gpuNodeGroups.0.desiredSize", 9)),
    ("GpuNodeGroup.RootVolume", "cluster.gpuNodeGroups[0].rootVolumeGiB",
     _set("cluster.gpuNodeGroups.0.rootVolumeGiB", 10)),
    ("GpuNodeGroup.NoInstanceStore", "cluster.gpuNodeGroups[0].instanceTypes[0]",
     _set("cluster.gpuNodeGroups.0.instanceTypes", ["p3.8xlarge"])),
    ("GpuNodeGroup.BadLabel", "cluster.gpuNodeGroups[0].labels.nvidia.com/gpu.present",
     _set("cluster.gpuNodeGroups.0.labels", {"nvidia.com/gpu.present": "false"})),
    ("Cluster.DuplicateNodeGroup", "cluster.gpuNodeGroups",
     lambda d: d["cluster"]["gpuNodeGroups"].append(copy.deepcopy(d["cluster"]["gpuNodeGroups"][0]))),
    ("HyperPodCluster.DeepHealthCheck", "hyperpod.instanceGroups[0].deepHealthChecks[0]",
     _set("hyperpod.instanceGroups.0.deepHealthChecks", ["Quick"])),
    ("HyperPodCluster.BadInstanceType", "hyperpod.instanceGroups[0].instanceType",
     _set("hyperpod.instanceGroups.0.instanceType", "g5.12xlarge")),
    ("HyperPodCluster.NodeRecovery", "hyperpod.nodeRecovery", _set("hyperpod.nodeRecovery", "Manual")),
    ("HyperPodCluster.BadName", "hyperpod.clusterName", _set("hyperpod.clusterName", "hp_cluster")),
    ("HyperPodCluster.NoInstanceGroups", "hyperpod.instanceGroups", _set("hyperpod.instanceGroups", [])),
    ("InferenceOperator.AddonVersion", "operator.addonVersion", _set("operator.addonVersion", "1.0.0")),
    ("EndpointDomain.Wildcard", "domain.endpointDomains[0]",
     _set("domain.endpointDomains.0", "*.inference.example.com")),
    ("EndpointDomain.OutsideZone", "domain.endpointDomains[0]", _set("domain.endpointDomains.0", "api.other.org")),
    ("EndpointDomain.BadZoneName", "domain.zoneName", _set("domain.zoneName", "Inference")),
    ("Config.BadFormat", "domain.existingCertificateArn", _set("domain.existingCertificateArn", "cert")),
    ("Model.EndpointDomainNotCertified", "models[0].endpointDomain",
     _set("models.0.endpointDomain", "other.inference.example.com")),
    ("HuggingFace.TokenSecretNotSynced", "models[0].spec.modelSourceConfig.huggingFaceModel.tokenSecretRef.name",
     _set("models.0.spec.modelSourceConfig.huggingFaceModel.tokenSecretRef.name", "hugging-face")),
    ("NvmeCache.NoInstanceStore", "models[1].spec.instanceType", _set("models.1.spec.instanceType", "ml.m5.4xlarge")),
    ("JumpStartModel.EulaNotAccepted", "models[2].spec.model.acceptEula",
     _set("models.2.spec.model.acceptEula", False)),
    ("DataCapture.BucketNotGranted", "models[1].spec.dataCapture.s3Uri",
     _set("models.1.spec.dataCapture.s3Uri", "s3://somebody-elses-bucket/captures")),
    ("Portable.HostnameOutsideZone", "portable[0].hostname", _set("portable.0.hostname", "qwen.other.example.org")),
    ("ServiceAccount.Shared", "portable[0].name", _set("portable.0.name", "qwen3-8b")),
    # The add-on must have what the workloads use (operator 3.3's modelCacheConfig here).
    ("OperatorVersion.FeatureUnavailable", "models[1].spec.modelCacheConfig",
     _set("operator.addonVersion", "v1.3.0-eksbuild.1")),
    ("Config.BadFormat", "operator.jumpstartGatedModelDownloadRoleArn",
     _set("operator.jumpstartGatedModelDownloadRoleArn", "gated-download-role")),
    ("AutoScaling.MinAboveMax", "models[1].spec.autoScalingSpec.minReplicaCount",
     _set("models.1.spec.autoScalingSpec.minReplicaCount", 3)),
    ("AutoScaling.TargetValueOutOfRange", "models[1].spec.autoScalingSpec.cloudWatchTriggerList[0].targetValue",
     _set("models.1.spec.autoScalingSpec.cloudWatchTriggerList.0.targetValue", 0)),
    ("ModelCache.WeightsCacheNeedsRemoteSource", "models[1].spec.modelCacheConfig.weightsCache",
     _set("models.1.spec.modelCacheConfig.weightsCache", {"enabled": True})),
    # Operator 3.4-3.7 fields (charts/crd_overlays/, docs/operator-versions.md): each mistake one coded problem.
    ("Model.InstanceTypeNotInCluster", "models[0].spec.instanceType",
     _set("models.0.spec.instanceType", "ml.g6e.12xlarge")),
    ("Model.NoSchedulableGroup", "models[0].spec.instanceType",
     _set("hyperpod.instanceGroups.0.kubernetesTaints", [{"key": "dedicated", "value": "training",
                                                          "effect": "NoSchedule"}])),
    ("OperatorVersion.FeatureUnavailable", "models[0].spec.metricsSidecarResources",
     _older_addon("models.0.spec.metricsSidecarResources", SIDECAR_RESOURCES)),
    ("Model.ResourceQuantityInvalid", "models[2].spec.s3UploaderResources.requests.memory",
     _newer_addon("models.2.spec.s3UploaderResources", {**SIDECAR_RESOURCES, "requests": {"memory": "lots"}})),
    ("Model.SidecarResourcesIncomplete", "models[0].spec.metricsCollectorResources.requests",
     _newer_addon("models.0.spec.metricsCollectorResources", {"limits": {"cpu": "1", "memory": "256Mi"}})),
    ("Kubernetes.AnnotationInvalid", "models[1].spec.kubernetes.podTemplateAnnotations.not a key",
     _newer_addon("models.1.spec.kubernetes.podTemplateAnnotations", {"not a key": "x"})),
    ("JumpStartModel.KubernetesUnsupported", "models[2].spec.kubernetes",
     _newer_addon("models.2.spec.kubernetes", {"podTemplateAnnotations": {"example.com/team": "search"}})),
    ("Model.TolerationsPathUnknown", "models[0].spec.tolerations",
     _set("models.0.spec.tolerations", [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])),
    ("Model.TolerationsPathUnknown", "models[2].extraSpec.tolerations",
     _set("models.2.extraSpec", {"tolerations": [{"key": "dedicated", "operator": "Exists"}]})),
    ("Model.LmcachePathUnknown", "models[2].spec.lmcache", _set("models.2.spec.lmcache", {"mode": "MultiProcess"})),
    ("ModelCache.NodeAffinityPathUnknown", "models[0].extraSpec.modelCacheConfig.weightsCache.nodeAffinity",
     _newer_addon("models.0.extraSpec", {"modelCacheConfig": {"weightsCache": {"nodeAffinity": {}}}})),
    ("AlarmTopic.BadEmail", "alarms.subscribers.emails[0]", _set("alarms.subscribers.emails", ["oncall"])),
    ("AlarmTopic.DuplicateSubscriber", "alarms.subscribers.emails[1]",
     _set("alarms.subscribers.emails", ["a@example.com", "a@example.com"])),
    ("AlarmTopic.BadHttpsEndpoint", "alarms.subscribers.httpsEndpoints[0]",
     _set("alarms.subscribers.httpsEndpoints", ["http://events.example.com/sns"])),
    ("AlarmTopic.BadLambdaArn", "alarms.subscribers.lambdaFunctionArns[0]",
     _set("alarms.subscribers.lambdaFunctionArns", ["alarm-router"])),
    ("AlarmTopic.BadTopicArn", "alarms.subscribers.topicArns[0]", _set("alarms.subscribers.topicArns", ["ops"])),
    ("CaptureAlarms.BadRunbookUrl", "alarms.runbookUrl", _set("alarms.runbookUrl", "docs/alarms.md")),
    ("CaptureAlarms.ThresholdOutOfRange", "alarms.capture.durationNearTimeout.threshold",
     _put("alarms.capture.durationNearTimeout", {"threshold": 120})),
    ("CaptureAlarms.AlarmPeriod", "alarms.capture.quarantinedLines.periodMinutes",
     _put("alarms.capture.quarantinedLines", {"periodMinutes": 0})),
    ("CaptureAlarms.EvaluationPeriods", "alarms.capture.throttles.evaluationPeriods",
     _put("alarms.capture.throttles", {"evaluationPeriods": 0})),
    ("CaptureAlarms.DatapointsToAlarm", "alarms.capture.throttles.datapointsToAlarm",
     _put("alarms.capture.throttles", {"datapointsToAlarm": 4})),
    ("CaptureAlarms.EvaluationRange", "alarms.capture.noCuratedOutput.evaluationPeriods",
     _put("alarms.capture.noCuratedOutput", {"evaluationPeriods": 200})),
    ("CertificateAlarms.ThresholdOutOfRange", "alarms.certificate.daysToExpiry.threshold",
     _put("alarms.certificate.daysToExpiry", {"threshold": 0})),
    # The certificate's region is EndpointDomain's rule (the load balancers'); the alarm's is not reported again.
    ("EndpointDomain.CertificateOtherRegion", "domain.existingCertificateArn", _set(
        "domain.existingCertificateArn",
        "arn:aws:acm:us-east-1:111122223333:certificate/6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f")),
    ("EndpointDomain.CertificateOtherAccount", "domain.existingCertificateArn", _set(
        "domain.existingCertificateArn",
        "arn:aws:acm:us-west-2:444455556666:certificate/6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f")),
    ("CaptureSidecarMetrics.ThresholdOutOfRange", "alarms.sidecar.droppedRecords.threshold",
     _put("alarms.sidecar.droppedRecords", {"threshold": -1})),
    ("CaptureSidecarMetrics.ThresholdOutOfRange", "alarms.sidecar.noMetrics.threshold",
     _put("alarms.sidecar.noMetrics", {"threshold": 0})),
    ("CaptureSidecarMetrics.EvaluationRange", "alarms.sidecar.failedUploads.evaluationPeriods",
     _put("alarms.sidecar.failedUploads", {"evaluationPeriods": 300})),
    ("Config.UnknownKey", "alarms.capture.deadLetters", _put("alarms.capture.deadLetters", {"threshold": 1})),
    ("Config.WrongType", "alarms.sidecar.cloudWatchAgent", _put("alarms.sidecar.cloudWatchAgent", "yes")),
    ("Config.WrongType", "alarms.capture.backlogAge.threshold", _put("alarms.capture.backlogAge", {"threshold": "1h"})),
    ("Portable.HostnameNotCertified", "portable[0].hostname",
     _set("portable.0.hostname", "uncertified.inference.example.com")),
    ("Portable.SourceRangeInvalid", "portable[0].allowedSourceRanges[0]",
     _set("portable.0.allowedSourceRanges", ["10.42.0.1/16"])),
    ("Portable.SourceRangesWithoutHostname", "portable[0].allowedSourceRanges",
     lambda data: (_set("portable.0.allowedSourceRanges", ["10.42.0.0/16"])(data),
                   _delete("portable.0.hostname")(data))),
    ("Portable.RequestBodyCapOutOfRange", "portable[0].maxRequestBodyKB", _set("portable.0.maxRequestBodyKB", 0)),
    ("Portable.ApiKeyClientRoleInvalid", "portable[0].apiKey.clientRoleArns[0]",
     _set("portable.0.apiKey.clientRoleArns", ["inference-clients"])),
    ("Config.WrongType", "portable[0].apiKey", _set("portable.0.apiKey", True)),
    ("Config.BadFormat", "acknowledgedWarnings[0].id", _set("acknowledgedWarnings.0.id", "imageNotPinnedByDigest")),
    ("Config.BadFormat", "acknowledgedWarnings[0].reason", _set("acknowledgedWarnings.0.reason", "ok")),
    ("Config.MissingKey", "acknowledgedWarnings[0].reason", _delete("acknowledgedWarnings.0.reason")),
    ("Config.UnknownKey", "portable[0].apiKey.clients", _set("portable.0.apiKey.clients", [])),
    # Issue 17: tags, the region at its own key, an explicitly empty capture prefix.
    ("Tags.TooMany", "tags", _set("tags", {f"k{i}": "v" for i in range(51)})),
    ("Tags.BadKey", "tags.cost#center", _set("tags", {"cost#center": "ml"})),
    ("Tags.BadKey", "tags." + "k" * 129, _set("tags", {"k" * 129: "ml"})),
    ("Tags.ReservedPrefix", "tags.AWS:CostCenter", _set("tags", {"AWS:CostCenter": "ml"})),
    ("Tags.BadValue", "tags.Owner", _set("tags.Owner", "v" * 257)),
    ("Tags.BadValue", "tags.Owner", _set("tags.Owner", "platform\tteam")),
    ("Config.WrongType", "tags.CostCenter", _set("tags.CostCenter", 42)),
    ("Config.WrongType", "tags", _set("tags", ["Owner=platform-team"])),
    ("Region.Unknown", "environment.region", _set("environment.region", "us-wset-2")),
    ("CapturePipeline.EmptyPrefix", "capture.prefix", _set("capture.prefix", "")),
    # Issue 17: a break-glass role of another account; an explicit "" where a key has a default.
    ("CaptureStorage.BreakGlassOtherAccount", "capture.breakGlassRoleArns[0]",
     _set("capture.breakGlassRoleArns", ["arn:aws:iam::444455556666:role/incident-response"])),
    # Issue 27: the erasure role's principals.
    ("CaptureEraser.BadPrincipalArn", "capture.eraserPrincipals[0]", _set("capture.eraserPrincipals", ["privacy"])),
    ("CaptureEraser.PrincipalOtherAccount", "capture.eraserPrincipals[0]",
     _set("capture.eraserPrincipals", ["arn:aws:iam::444455556666:role/privacy-officers"])),
    ("Config.WrongType", "capture.eraserPrincipals", _set("capture.eraserPrincipals", "arn:aws:iam::1:role/x")),
    ("Config.EmptyString", "cluster.kubernetesVersion", _set("cluster.kubernetesVersion", "")),
    ("Config.EmptyString", "operator.inferenceNamespace", _set("operator.inferenceNamespace", "")),
    ("Config.EmptyString", "cluster.name", _set("cluster.name", "")),
]


@pytest.mark.parametrize(("code", "path", "change"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_each_error_code_names_key_path(code: str, path: str, change: Callable[[dict[str, Any]], None]) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(_with(change))
    matching = [p for p in caught.value.problems if p.code == code and p.path == path]
    assert len(matching) == 1, str(caught.value)
    assert f"[{code}] {path}:" in str(caught.value)


def test_plan_problems_name_the_config_files_keys() -> None:
    """The plan's own rules on the platform (the add-on version) speak the file's keys to the app's user."""
    with pytest.raises(ConfigError) as caught:
        parse_config(_with(_set("operator.addonVersion", "v1.3.0-eksbuild.1")))
    found = [p for p in caught.value.problems if p.code == "OperatorVersion.FeatureUnavailable"]
    assert found, str(caught.value)
    for problem in found:  # (the gateway, and a model's modelCacheConfig)
        assert "raise operator.addonVersion " in problem.message and "PlatformContext" not in problem.message


def test_default_config_is_valid() -> None:
    config = load_config(REPO / "config" / "default.yaml")
    assert config.tls_bucket_name.startswith("hyperpod-tls")
    assert len(config.workloads.models) == 3


def test_portable_servers_are_scoped_to_the_vpc_of_either_kind() -> None:
    (portable,) = load_config(REPO / "config" / "default.yaml").workloads.portable
    assert portable.vpc_cidr == DEFAULT["network"]["newVpc"]["cidr"]
    assert portable.source_ranges == (DEFAULT["network"]["newVpc"]["cidr"],)

    def existing(data: dict[str, Any]) -> None:
        data["network"] = {"existingVpc": EXISTING_VPC}

    (portable,) = parse_config(_with(existing)).workloads.portable
    assert portable.vpc_cidr == EXISTING_VPC["vpcCidr"]


@pytest.mark.parametrize("version", ["1.33", "1.34", "1.35"])
def test_every_documented_kubernetes_version_is_accepted(version: str) -> None:
    assert parse_config(_with(_set("cluster.kubernetesVersion", version))).cluster.kubernetes_version == version


def test_log_retentions_and_network_policies_default_as_documented() -> None:
    data = _with(_delete("logging"))
    del data["cluster"]["enforceNetworkPolicies"]
    config = parse_config(data)
    assert (config.logging.retention_days, config.logging.audit_retention_days) == (90, 365)
    assert config.cluster.enforce_network_policies is True


def test_secrets_get_a_customer_managed_key_unless_turned_off() -> None:
    assert parse_config(_with(_delete("secrets"))).secrets.customer_managed_key is True
    off = parse_config(_with(_set("secrets.customerManagedKey", False)))
    assert off.secrets.customer_managed_key is False
    assert off.secrets_key_alias == "alias/llm-platform/secrets"


def test_api_keys_rotate_every_30_days_unless_turned_off() -> None:
    config = parse_config(_with(_delete("secrets")))
    assert config.secrets.api_key_rotation_days == 30
    assert config.api_key_rotation_role_name("qwen3-8b-portable") == "llm-platform-qwen3-8b-portable-api-key-rotation"
    assert parse_config(_with(_set("secrets.apiKeyRotationDays", 0))).secrets.api_key_rotation_days == 0
    assert parse_config(_with(_set("secrets.apiKeyRotationDays", 7))).secrets.api_key_rotation_days == 7


@pytest.mark.parametrize(("network", "traffic"), [
    ({"newVpc": {}}, "ALL"),  # the default of a new VPC
    ({"newVpc": {}, "flowLogs": "REJECT"}, "REJECT"),
    ({"newVpc": {}, "flowLogs": False}, None),  # YAML's unquoted off
    ({"newVpc": {}, "flowLogs": "off"}, None),
    ({"existingVpc": EXISTING_VPC}, None),  # an existing VPC: off unless asked
    ({"existingVpc": EXISTING_VPC, "flowLogs": "ACCEPT"}, "ACCEPT"),
])
def test_flow_logs_per_vpc_kind(network: dict[str, Any], traffic: str | None) -> None:
    config = parse_config(_with(lambda d: d.update(network=network)))
    assert config.vpc.flow_log_traffic == traffic


def test_yaml_off_means_no_flow_log() -> None:
    text = (REPO / "config" / "default.yaml").read_text().replace("flowLogs: ALL", "flowLogs: off")
    assert parse_config(yaml.safe_load(text)).vpc.flow_log_traffic is None


WORKLOAD_MISTAKES = [
    ("models.0.spec.dataCapture.modelPod.initialSamplingPercentage", 150),
    ("models.0.spec.modelSourceConfig.huggingFaceModel.commitSHA", "e0bc86c"),
    ("models.0.spec.dataCapture.modelPod.bufferConfig.batchSize", 5000),
    ("models.0.spec.dataCapture.modelPod.bufferConfig.flushIntervalSeconds", 5),
    ("models.0.spec.dataCapture.modelPod.payloadConfig.maxPayloadSizeKB", 99999),
    ("portable.0.dataCapture.modelPod.initialSamplingPercentage", 150),
]


@pytest.mark.parametrize(("path", "value"), WORKLOAD_MISTAKES, ids=[m[0] for m in WORKLOAD_MISTAKES])
def test_one_workload_mistake_is_one_problem(path: str, value: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(_with(_set(path, value)))
    assert len(caught.value.problems) == 1, str(caught.value)
    assert str(caught.value).startswith("1 problem(s)")


def test_an_error_in_models_1_is_reported_under_models_1_even_when_models_0_does_not_parse() -> None:
    data = _with(_set("models.0.kind", "InferenceService"))
    data["models"][1]["spec"]["dataCapture"]["modelPod"]["initialSamplingPercentage"] = 150
    assert sorted(_problems(data)) == [
        ("DataCapture.SamplingOutOfRange", "models[1].spec.dataCapture.modelPod.initialSamplingPercentage"),
        ("Model.KindInvalid", "models[0].kind"),
    ]


def test_model_errors_are_reported_with_platform_errors_in_the_same_run() -> None:
    data = _with(_set("capture.retentionDays", -1))
    data["environment"]["region"] = "mars-1"
    data["models"][0]["spec"]["replicas"] = -1
    data["models"][2]["spec"]["model"]["acceptEula"] = False
    data["portable"][0]["gpuCount"] = 0
    assert sorted(_problems(data)) == sorted([
        ("CaptureStorage.RetentionOutOfRange", "capture.retentionDays"),
        ("Config.BadFormat", "environment.region"),
        ("InferenceEndpoint.ReplicasOutOfRange", "models[0].spec.replicas"),
        ("JumpStartModel.EulaNotAccepted", "models[2].spec.model.acceptEula"),
        ("Portable.GpuCountOutOfRange", "portable[0].gpuCount"),
    ])


def test_invalid_yaml_reports_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("project: x\nenvironment: [unclosed\n")
    with pytest.raises(ConfigError) as caught:
        load_config(bad)
    assert caught.value.codes == ["Config.InvalidYaml"]
    assert caught.value.problems[0].path.startswith("line 3")


def test_missing_file_says_how_to_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot be read.*CONFIG="):
        load_config(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [({"tls_bucket_name": "my-certs"}, "CaptureStorage.TlsBucketPrefix"),
     ({"retention_days": 0}, "CaptureStorage.RetentionOutOfRange"),
     ({"capture_bucket_name": "Captures"}, "CaptureStorage.BadBucketName")],
)
def test_capture_storage_props_are_validated_by_the_same_rules(kwargs: dict[str, Any], code: str) -> None:
    from aws_cdk import App, Stack

    with pytest.raises(ConfigError) as caught:
        CaptureStorage(Stack(App(), "S"), "Storage", **kwargs)
    assert caught.value.codes == [code]


# -- stack outputs -------------------------------------------------------------------------------------------
def _created_domain() -> Any:
    data = _with(_delete("domain.existingCertificateArn"))
    return parse_config(data)


@pytest.mark.parametrize(("content", "code"), [
    ("not json", "Outputs.BadFile"),
    ("[1, 2]", "Outputs.BadFile"),
    ('{"other-stack": {"CertificateArn": "x"}}', "Outputs.StackMissing"),
    ('{"llm-platform-cluster": {"HostedZoneId": "Z999"}}', "Outputs.Conflict"),
    ('{"llm-platform-cluster": {"CertificateArn": 5}}', "Outputs.BadValue"),
])
def test_outputs_file_mistakes_are_refused(tmp_path: Path, content: str, code: str) -> None:
    outputs = tmp_path / "cdk-outputs.json"
    outputs.write_text(content)
    with pytest.raises(ConfigError) as caught:
        read_stack_outputs(_created_domain(), outputs)
    assert caught.value.codes == [code]


def test_outputs_fill_only_what_the_config_does_not_know(tmp_path: Path) -> None:
    certificate = "arn:aws:acm:us-west-2:111122223333:certificate/11111111-2222-3333-4444-555555555555"
    outputs = tmp_path / "cdk-outputs.json"
    zone = DEFAULT["domain"]["existingHostedZoneId"]
    outputs.write_text(json.dumps({"llm-platform-cluster": {"CertificateArn": certificate, "HostedZoneId": zone}}))
    values = read_stack_outputs(_created_domain(), outputs)
    assert values[PlatformValue.CERTIFICATE_ARN] == certificate


# -- the command line: exit 2, no traceback, nothing changed ---------------------------------------------
@pytest.mark.slow
def test_config_check_command_exits_2_with_every_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_with(_set("capture.retentionDays", 99999))))
    result = subprocess.run([sys.executable, "-m", "platform_config", str(bad)], cwd=REPO, capture_output=True,
                            text=True, check=False, env=cli_env())
    assert result.returncode == 2
    assert "[CaptureStorage.RetentionOutOfRange] capture.retentionDays: must be an integer from 1 to 3650" \
        in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.slow
def test_cdk_synth_with_bad_config_fails_readably_and_changes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "dist").mkdir(parents=True)
    (out / "dist" / "model-old.k8s.yaml").write_text("kept: true\n")
    (out / "old.template.json").write_text("{}")
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_with(_set("capture.retentionDays", 99999))))
    result = run_cdk_synth(out, config=bad)
    assert result.returncode != 0
    assert "[CaptureStorage.RetentionOutOfRange] capture.retentionDays: must be an integer from 1 to 3650" \
        in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    after = {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != "cdk.out"}
    assert {p: b for p, b in after.items() if p in before} == before
    assert not list(out.glob("*.template.json"))[1:], "no half-written output"


ALARM_CASES = [case for case in CASES if case[1].startswith("alarms.") or case[0].startswith("CertificateAlarms")]
# Issue 17's rules: each mistake is one problem, none of its consequences reported again under other keys.
ONE_PROBLEM_CASES = [case for case in CASES if case[0].split(".")[0] in ("Tags", "Region")
                     or case[0].startswith("EndpointDomain.Certificate")
                     or case[0] in ("CapturePipeline.EmptyPrefix", "CaptureStorage.BreakGlassOtherAccount",
                                    "Config.EmptyString")]


@pytest.mark.parametrize(("code", "path", "change"), ONE_PROBLEM_CASES,
                         ids=[f"{c[0]}-{c[1][:40]}" for c in ONE_PROBLEM_CASES])
def test_one_tag_region_certificate_or_prefix_mistake_is_one_problem(
        code: str, path: str, change: Callable[[dict[str, Any]], None]) -> None:
    assert _problems(_with(change)) == [(code, path)]


def test_a_region_typo_names_the_close_regions_and_an_empty_prefix_the_default() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(_with(lambda d: (_set("environment.region", "us-wset-2")(d), _set("capture.prefix", "")(d))))
    region, prefix = caught.value.problems
    assert "did you mean us-west-2 or us-west-1" in region.message and "aws partition" in region.message
    assert "'data-capture/'" in prefix.message


def test_a_python_consumer_gets_the_same_tag_and_certificate_rules() -> None:
    from aws_cdk import App, Stack
    from aws_cdk import aws_certificatemanager as acm

    from hyperpod_inference_iac import EndpointDomain, apply_tags

    with pytest.raises(ConfigError) as caught:
        apply_tags(App(), {"aws:owner": "x", "ok": "v" * 300})
    assert caught.value.codes == ["Tags.ReservedPrefix", "Tags.BadValue"]
    stack = Stack(App(), "S", env={"account": "111122223333", "region": "us-west-2"})
    other = "arn:aws:acm:eu-west-1:444455556666:certificate/6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
    with pytest.raises(ConfigError) as caught:
        EndpointDomain(stack, "Domain", zone_name="inference.example.com",
                       endpoint_domains=["a.inference.example.com"],
                       certificate=acm.Certificate.from_certificate_arn(stack, "Cert", other))
    assert caught.value.codes == ["EndpointDomain.CertificateOtherAccount", "EndpointDomain.CertificateOtherRegion"]


@pytest.mark.parametrize(("code", "path", "change"), ALARM_CASES, ids=[f"{c[0]}-{c[1]}" for c in ALARM_CASES])
def test_one_alarm_mistake_is_one_problem(code: str, path: str, change: Callable[[dict[str, Any]], None]) -> None:
    assert _problems(_with(change)) == [(code, path)]


def test_alarm_blocks_override_only_the_keys_they_name_and_can_switch_an_alarm_off() -> None:
    data = _with(_put("alarms.capture", {"noCuratedOutput": {"evaluationPeriods": 24},
                                         "throttles": {"enabled": False}}))
    _put("alarms.sidecar", {"cloudWatchAgent": False})(data)
    alarms = parse_config(data).alarms
    no_output = alarms.capture.no_curated_output
    assert no_output is not None
    assert (no_output.threshold, no_output.period.to_seconds(), no_output.evaluation_periods) == (1, 3600, 24)
    assert alarms.capture.throttles is None
    # The others keep the construct's defaults.
    assert alarms.capture.replace(no_curated_output=None, throttles=None) == \
        CaptureAlarmsOptions(no_curated_output=None, throttles=None)
    assert alarms.sidecar.cloud_watch_agent is False
    assert alarms.subscribers.emails == ("ml-platform-oncall@example.com",)


def test_capture_tiers_are_the_tiers_some_workload_turns_on() -> None:
    config = load_config(REPO / "config" / "default.yaml")
    assert config.capture_tiers == ("sme", "pod", "alb")
    data = _with(_delete("portable"))
    for model in data["models"]:
        model["spec"].pop("dataCapture", None)
    assert parse_config(data).capture_tiers == ()


def test_a_weights_cache_among_the_models_has_no_capture_tier_and_no_metrics() -> None:
    """A ``ModelWeightsCacheConfig`` serves nothing: no capture, no scrape (the type check found that
    ``capture_tiers`` read its spec's ``dataCapture``, which it has none of)."""
    data = json.loads(json.dumps(DEFAULT))
    data["models"].append(_WEIGHTS_CACHE)
    config = parse_config(data)
    assert config.capture_tiers == load_config(REPO / "config" / "default.yaml").capture_tiers
    agent = config.model_metrics_agent
    assert agent is None or "llama-weights" not in [model.name for model in agent.models]


_WEIGHTS_CACHE = {"kind": "ModelWeightsCacheConfig", "name": "llama-weights", "spec": {
    "modelSourceConfig": {"modelSourceType": "s3", "modelLocation": "llama-3-1-8b",
                          "s3Storage": {"bucketName": "example-model-weights", "region": "us-west-2"}},
    "nodeSelector": {"node.kubernetes.io/instance-type": "ml.g5.8xlarge"}}}


def test_dist_readme_checks_the_crd_of_every_kind_the_plan_renders() -> None:
    data = json.loads(json.dumps(DEFAULT))
    assert parse_config(data).workloads.crd_names == [
        "inferenceendpointconfigs.inference.sagemaker.aws.amazon.com",
        "jumpstartmodels.inference.sagemaker.aws.amazon.com",
        "inferencegatewayconfigs.inference.sagemaker.aws.amazon.com"]
    data["models"].append(_WEIGHTS_CACHE)
    assert "modelweightscacheconfigs.inference.sagemaker.aws.amazon.com" in parse_config(data).workloads.crd_names


# -- issue 17: an explicit "" is never a key's default -------------------------------------------------------------
def _put_path(data: dict[str, Any], path: str, value: Any) -> None:
    """Set ``cluster.gpuNodeGroups[0].name`` (a key path as problems name it), creating missing mappings."""
    parts = [int(part) if part.isdigit() else part for part in re.findall(r"[^.\[\]]+", path)]
    node: Any = data
    for part in parts[:-1]:
        node = node[part] if isinstance(part, int) or part in node else node.setdefault(part, {})
    node[parts[-1]] = value


def _string_keys() -> dict[str, str | None]:
    """Every key the loader reads as a string, with its default (None: required, or no default of its own), found
    by reading the default file and one with an existing VPC through a spy on Section.string: a key added later is
    enumerated without anyone remembering to list it."""
    from platform_config import reader

    found: dict[str, str | None] = {}
    original = reader.Section.string

    def spy(self: reader.Section, key: str, **kwargs: Any) -> str | None:
        found[self.at(key)] = kwargs.get("default")
        return original(self, key, **kwargs)

    reader.Section.string = spy  # type: ignore[method-assign]
    try:
        parse_config(_with(lambda d: None))
        parse_config(_with(lambda d: d.update(network={"existingVpc": EXISTING_VPC})))
    finally:
        reader.Section.string = original  # type: ignore[method-assign]
    return found


STRING_KEYS = _string_keys()
# Keys whose "" is refused by the rule of the value itself (one rule, the same code for a Python consumer).
EMPTY_VALUE_CODES = {"capture.prefix": "CapturePipeline.EmptyPrefix", "network.flowLogs": "Network.FlowLogTraffic",
                     "portable[0].hostname": "Portable.HostnameInvalid"}


def test_the_string_keys_with_a_default_are_the_documented_ones() -> None:
    """A new key with a default shows up here (and is refused empty by the test below) before it ships."""
    assert sorted(key for key, default in STRING_KEYS.items() if default is not None) == [
        "capture.auditLockMode", "capture.prefix", "capture.tableReaders[0].columns", "cluster.endpointAccess",
        "cluster.gpuNodeGroups[0].localStorageStrategy", "cluster.kubernetesVersion", "cluster.systemInstanceType",
        # (the gateway's, read through its props since issue 30)
        "gateways[0].jwt.callerClaim", "gateways[0].jwt.providerName", "gateways[0].jwt.requiredClaims[0].valueType",
        "gateways[0].schedulers.qwen3-8b.scheduler",
        "hyperpod.instanceGroups[0].capacityType",
        "hyperpod.nodeRecovery", "network.newVpc.cidr", "operator.addonVersion", "operator.inferenceNamespace",
        "workloads.owner"]


@pytest.mark.parametrize("path", [*STRING_KEYS, *(key for key in EMPTY_VALUE_CODES if key not in STRING_KEYS)])
def test_an_explicit_empty_string_is_one_problem_never_the_default(path: str) -> None:
    data = _with(lambda d: d.update(network={"existingVpc": dict(EXISTING_VPC)}) if "existingVpc" in path else None)
    _put_path(data, path, "")
    code = EMPTY_VALUE_CODES.get(path, "Config.EmptyString")
    with pytest.raises(ConfigError) as caught:
        parse_config(data)
    assert [(p.code, p.path) for p in caught.value.problems] == [(code, path)], str(caught.value)
    if code == "Config.EmptyString" and STRING_KEYS.get(path) is not None:
        assert f"leave the key out for the default {STRING_KEYS[path]!r}" in caught.value.problems[0].message


# -- issue 18: every rule a construct applies is applied by the config check, under the config key ---------------
@pytest.mark.parametrize("prefix", ["/data-capture/", "data*/", "data-capture", "donn\u00e9es/", "", "curated/x/"])
def test_a_capture_prefix_either_construct_refuses_is_refused_at_the_config_check(prefix: str) -> None:
    """One prefix rule: what CaptureStorage or CapturePipeline would refuse at synth, `python -m platform_config`
    refuses at capture.prefix, once."""
    from aws_cdk import App, Stack
    from aws_cdk import aws_s3 as s3

    from hyperpod_inference_iac import CapturePipeline

    with pytest.raises(ConfigError) as storage:
        CaptureStorage(Stack(App(), "S"), "Storage", capture_prefix=prefix)
    stack = Stack(App(), "P", env={"account": "111122223333", "region": "us-west-2"})
    with pytest.raises(ConfigError) as pipeline:
        CapturePipeline(stack, "Pipeline", bucket=s3.Bucket(stack, "B"), encryption_key=None,
                        capture_prefixes=[prefix])
    refused_by = (storage.value.codes, pipeline.value.codes)
    problems = _problems(_with(_set("capture.prefix", prefix)))
    assert len(problems) == 1 and problems[0][1] == "capture.prefix", problems
    # (the pipeline's code for the prefix's form, as before; the storage's for an overlap with curated/)
    assert problems[0][0] in refused_by[0] + refused_by[1], (problems, refused_by)


@pytest.mark.slow
def test_the_config_check_command_refuses_a_prefix_the_storage_would_refuse(tmp_path: Path) -> None:
    """Before, `python -m platform_config` passed '/data-capture/' (the pipeline's rule) and the synth failed in
    CaptureStorage at a prop name."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_with(_set("capture.prefix", "/data-capture/"))))
    result = subprocess.run([sys.executable, "-m", "platform_config", str(bad)], cwd=REPO, capture_output=True,
                            text=True, check=False, env=cli_env())
    assert result.returncode == 2, result.stdout + result.stderr
    assert "[CapturePipeline.InvalidPrefix] capture.prefix: must be an S3 key prefix" in result.stderr


def test_a_portable_capture_key_that_is_an_alias_is_refused_at_the_config_check() -> None:
    """The sidecar's role is granted its kmsKeyId: an alias cannot be granted. The plan refuses it under the key path
    (the same rule InferenceWorkloads applies to a Python consumer's plan)."""
    key = "portable.0.dataCapture.modelPod.kmsKeyId"
    assert _problems(_with(_set(key, "alias/captures"))) == [
        ("InferenceWorkloads.KeyNotGrantable", "portable[0].dataCapture.modelPod.kmsKeyId")]
    arn = "arn:aws:kms:us-west-2:111122223333:key/11111111-2222-3333-4444-555555555555"
    (portable,) = parse_config(_with(_set(key, arn))).workloads.portable
    assert portable.capture_key == arn


# -- issue 17: risky choices are said out loud (warned, acknowledgeable) ------------------------------------------
FOREIGN = "arn:aws:iam::444455556666:role/"

# (warning, key path, change): each makes the default file risky in exactly one place, and that place is warned,
# once, with that warning's id; the file stays valid.
RISKY = [
    ("CapturePipeline:redactionOff", "capture.redact", _set("capture.redact", [])),
    ("CaptureStorage:readerInOtherAccount", "capture.readerRoleArns[1]",
     lambda d: d["capture"]["readerRoleArns"].append(FOREIGN + "data-lake-analysts")),
    ("CaptureStorage:rawReaderInOtherAccount", "capture.rawReaderRoleArns[0]",
     _set("capture.rawReaderRoleArns", [FOREIGN + "privacy-review"])),
    ("InferenceWorkloads:noApiKey", "portable[0].apiKey.enabled", _set("portable.0.apiKey.enabled", False)),
    ("InferenceWorkloads:noApiKey", "portable[0].apiKey", _delete("portable.0.apiKey")),
    ("InferenceWorkloads:sourceRangeOpenToAll", "portable[0].allowedSourceRanges[0]",
     _set("portable.0.allowedSourceRanges", ["0.0.0.0/0"])),
    ("InferenceWorkloads:sourceRangeOpenToAll", "portable[0].allowedSourceRanges[1]",
     _set("portable.0.allowedSourceRanges", ["10.42.0.0/16", "::/0"])),
    ("InferenceWorkloads:sourceRangeNotPrivate", "portable[0].allowedSourceRanges[0]",
     _set("portable.0.allowedSourceRanges", ["8.0.0.0/8"])),
    ("InferenceWorkloads:sourceRangeNotPrivate", "portable[0].allowedSourceRanges[0]",  # 10/8 and 11/8
     _set("portable.0.allowedSourceRanges", ["10.0.0.0/7"])),
    ("InferenceWorkloads:sourceRangeNotPrivate", "portable[0].allowedSourceRanges[0]",
     _set("portable.0.allowedSourceRanges", ["2001:db8::/32"])),
    ("InferenceCluster:publicEndpoint", "cluster.endpointAccess", _set("cluster.endpointAccess", "public_and_private")),
    ("AlarmTopic:noSubscribers", "alarms.subscribers", _set("alarms.subscribers.emails", [])),
    ("CertificateAlarms:beforeManagedRenewal", "alarms.certificate.daysToExpiry.threshold",
     _put("alarms.certificate", {"daysToExpiry": {"threshold": 61}})),
    ("InferenceWorkloads:fullSampling", "models[0].spec.dataCapture.modelPod.initialSamplingPercentage",
     _set("models.0.spec.dataCapture.modelPod.initialSamplingPercentage", 100)),
    # (InferenceWorkloads:captureNotMonitored: the app runs an agent in every capturing namespace, so it never warns it;
    # warn_entry and warn_workload still do for one agent a consumer builds: tests/charts/test_gateway_entry.py)
]


def _gateway_elsewhere(data: dict[str, Any]) -> None:
    """The gateway (with its entry) and the models behind it in a namespace of their own (a model that reads the synced
    Hugging Face token stays in the platform's namespace, off the gateway)."""
    data["gateways"][0]["namespace"] = "team-models"
    for model in data["models"]:
        if model.get("gateway") == data["gateways"][0]["name"]:
            if "tokenSecretRef" in json.dumps(model):
                del model["gateway"]
            else:
                model["namespace"] = "team-models"


def _unacknowledged(data: dict[str, Any]) -> list[tuple[str, str]]:
    from platform_config.acknowledgments import review_warnings

    return [(w.id, w.path) for w in review_warnings(parse_config(data)).unacknowledged]


def test_a_capture_entry_in_a_namespace_of_its_own_is_watched_not_warned() -> None:
    """The app gives the gateway's namespace a capture sidecar metrics agent of its own (captureNotMonitored stays the
    library's warning for one agent a consumer builds)."""
    data = _with(_gateway_elsewhere)
    assert _unacknowledged(data) == []
    assert parse_config(data).monitored_namespaces == ("inference", "team-models")


@pytest.mark.parametrize(("warning", "path", "change"), RISKY, ids=[f"{c[0]}-{c[1]}" for c in RISKY])
def test_each_risky_choice_is_warned_at_its_key_path(warning: str, path: str,
                                                     change: Callable[[dict[str, Any]], None]) -> None:
    assert _unacknowledged(_with(change)) == [(f"@hyperpod-inference-iac/{warning}", path)]


@pytest.mark.parametrize(("warning", "path", "change"), RISKY, ids=[f"{c[0]}-{c[1]}" for c in RISKY])
def test_each_risky_choice_is_silenced_by_an_acknowledgment_with_its_reason(
        warning: str, path: str, change: Callable[[dict[str, Any]], None]) -> None:
    from platform_config.acknowledgments import review_warnings

    data = _with(change)
    data["acknowledgedWarnings"].append({"id": f"@hyperpod-inference-iac/{warning}", "reason": "reviewed: a reason"})
    review = review_warnings(parse_config(data))
    assert review.unacknowledged == () and review.stale == ()
    (line,) = [line for line in review.accepted_lines() if warning in line]
    assert f"{path}: acknowledged at acknowledgedWarnings[1]: reviewed: a reason" in line


def test_the_default_file_warns_about_nothing_it_does_not_acknowledge() -> None:
    from platform_config.acknowledgments import review_warnings

    review = review_warnings(load_config(REPO / "config" / "default.yaml"))
    assert review.unacknowledged == () and review.stale == () and review.decided_at_synth == ()
    ((ack, warnings),) = review.acknowledged
    assert ack.id.endswith("imageNotPinnedByDigest")
    assert [w.path for w in warnings] == ["models[0]", "models[1]", "portable[0]"]


@pytest.mark.parametrize("ranges", [["10.42.0.0/24"], ["172.16.0.0/12", "192.168.1.0/24"], ["100.64.0.0/16"],
                                    ["fd00::/8"]])
def test_private_source_ranges_are_not_warned(ranges: list[str]) -> None:
    assert _unacknowledged(_with(_set("portable.0.allowedSourceRanges", ranges))) == []


def test_a_source_range_inside_a_public_vpc_cidr_is_not_warned() -> None:
    """A VPC may own public address space (BYOIP): its own CIDR is the default source range, never a risk."""
    data = _with(_set("network.newVpc.cidr", "52.10.0.0/16"))
    _set("portable.0.allowedSourceRanges", ["52.10.1.0/24"])(data)
    assert _unacknowledged(data) == []


def test_reader_roles_of_the_platform_account_are_not_warned_and_a_bad_account_is_one_problem() -> None:
    assert _unacknowledged(_with(_set("capture.rawReaderRoleArns", ["arn:aws:iam::111122223333:role/x"]))) == []
    data = _with(_set("environment.account", "1234"))
    _set("capture.breakGlassRoleArns", [FOREIGN + "incident-response"])(data)
    assert _problems(data) == [("Config.BadFormat", "environment.account")]  # not compared with a bad account


def test_stale_misspelt_and_repeated_acknowledgments_are_reported() -> None:
    from platform_config.acknowledgments import review_warnings

    data = _with(lambda d: None)
    ours = "@hyperpod-inference-iac/"
    data["acknowledgedWarnings"] += [
        {"id": ours + "InferenceCluster:publicEndpoint", "reason": "the endpoint used to be public"},
        {"id": ours + "InferenceWorkloads:imageNotPinnedByDigst", "reason": "a typo in the warning name"},
        {"id": ours + "InferenceWorkloads:imageNotPinnedByDigest", "reason": "acknowledged a second time"},
        {"id": ours + "InferenceWorkloads:needsReplacement", "reason": "we accept the downtime of a redeploy"},
    ]
    review = review_warnings(parse_config(data))
    assert [str(stale) for stale in review.stale] == [
        f"acknowledgedWarnings[1]: {ours}InferenceCluster:publicEndpoint is not raised by anything in this file; "
        "remove the acknowledgment",
        f"acknowledgedWarnings[2]: {ours}InferenceWorkloads:imageNotPinnedByDigst is no warning of this library "
        "(misspelt, or removed in an upgrade); remove the acknowledgment",
        f"acknowledgedWarnings[3]: {ours}InferenceWorkloads:imageNotPinnedByDigest is acknowledged already at "
        "acknowledgedWarnings[0]; remove the acknowledgment"]
    # Decided against the previous dist/, at synth: kept, not judged from the file.
    assert [ack.path for ack in review.decided_at_synth] == ["acknowledgedWarnings[4]"]


@pytest.mark.slow
def test_config_check_command_prints_warnings_and_acknowledgments_and_exits_0(tmp_path: Path) -> None:
    risky = _with(_set("capture.redact", []))
    _set("portable.0.allowedSourceRanges", ["0.0.0.0/0"])(risky)
    risky["acknowledgedWarnings"].append(
        {"id": "@hyperpod-inference-iac/InferenceCluster:publicEndpoint", "reason": "it used to be public"})
    path = tmp_path / "risky.yaml"
    path.write_text(yaml.safe_dump(risky))
    result = subprocess.run([sys.executable, "-m", "platform_config", str(path)], cwd=REPO, capture_output=True,
                            text=True, check=False, env=cli_env())
    assert result.returncode == 0, result.stderr
    assert f"{path}: valid" in result.stdout
    assert ("[@hyperpod-inference-iac/InferenceWorkloads:imageNotPinnedByDigest] models[0], models[1], portable[0]: "
            "acknowledged at acknowledgedWarnings[0]: example platform") in result.stdout
    assert f"Warning: 2 risky choice(s) in {path} not acknowledged:" in result.stderr
    assert "  - [@hyperpod-inference-iac/CapturePipeline:redactionOff] capture.redact: redaction is off" \
        in result.stderr
    assert ("  - [@hyperpod-inference-iac/InferenceWorkloads:sourceRangeOpenToAll] portable[0].allowedSourceRanges[0]: "
            "0.0.0.0/0 admits every address") in result.stderr
    assert '      - id: "@hyperpod-inference-iac/CapturePipeline:redactionOff"\n        reason: ' in result.stderr
    assert (f"Warning: 1 stale acknowledgment(s) in {path}:\n  - acknowledgedWarnings[1]: "
            "@hyperpod-inference-iac/InferenceCluster:publicEndpoint is not raised by anything") in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.slow
def test_config_check_command_refuses_a_foreign_break_glass_role(tmp_path: Path) -> None:
    path = tmp_path / "foreign.yaml"
    path.write_text(yaml.safe_dump(_with(_set("capture.breakGlassRoleArns", [FOREIGN + "incident-response"]))))
    result = subprocess.run([sys.executable, "-m", "platform_config", str(path)], cwd=REPO, capture_output=True,
                            text=True, check=False, env=cli_env())
    assert result.returncode == 2
    assert ("[CaptureStorage.BreakGlassOtherAccount] capture.breakGlassRoleArns[0]: must be a role of this account "
            "(111122223333), not of 444455556666") in result.stderr
    assert "create the incident-response role in this account" in result.stderr


def test_the_overlay_fields_are_accepted_and_emitted_on_a_newer_addon() -> None:
    """With add-on v2.0.0-eksbuild.2 the sidecar resources, pod template annotations and the gateway opt-in (through
    extraSpec: the opt-in is not typed here) validate against charts/crd_overlays/ and reach the custom resource."""
    def change(data: dict[str, Any]) -> None:
        _newer_addon("models.0.spec.metricsSidecarResources", SIDECAR_RESOURCES)(data)
        _newer_addon("models.1.spec.kubernetes.podTemplateAnnotations", {"example.com/team": "search"})(data)
        _newer_addon("models.2.spec.s3UploaderResources", SIDECAR_RESOURCES)(data)
        _newer_addon("models.2.extraSpec", {"inferenceGateway": {"enabled": True, "name": "shared"}})(data)
    models = parse_config(_with(change)).workloads.models
    specs = [model.workload.manifest(namespace="inference")["spec"] for model in models]
    assert specs[0]["metricsSidecarResources"] == SIDECAR_RESOURCES
    assert specs[1]["kubernetes"]["podTemplateAnnotations"] == {"example.com/team": "search"}
    assert specs[2]["s3UploaderResources"] == SIDECAR_RESOURCES
    assert specs[2]["inferenceGateway"] == {"enabled": True, "name": "shared"}


@pytest.mark.parametrize("endpoint_domains", [None, [], ["Not_A_Name"]])
def test_missing_or_broken_endpoint_domains_are_one_problem_not_one_per_workload(endpoint_domains: Any) -> None:
    """With no usable domain.endpointDomains no model, gateway or portable hostname can be one of them: the names
    they give are compared once the key is right, not reported again per workload (issue 18's cascade)."""
    data = json.loads(json.dumps(DEFAULT))
    if endpoint_domains is None:
        del data["domain"]["endpointDomains"]
    else:
        data["domain"]["endpointDomains"] = endpoint_domains
    with pytest.raises(ConfigError) as caught:
        parse_config(data)
    codes = [(p.code, p.path) for p in caught.value.problems]
    assert all(path.startswith("domain.endpointDomains") for _, path in codes), codes
    assert len(codes) == 1, codes
