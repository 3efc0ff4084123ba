"""One test per problem code: a valid input broken in exactly one place must fail with that code
at that key path, through the same path a user takes (YAML ``models:`` entries or the charts)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import cdk8s
import pytest

from hyperpod_inference_iac.charts import (
    ApiKeyCaller,
    InferenceChart,
    ModelDeployment,
    NodeGroupPlacement,
    PortableApiKey,
    PortableDeployment,
    WorkloadServiceAccount,
    parse_models,
    plan_workloads,
)
from hyperpod_inference_iac.charts.capture import LoadBalancerCapture, ModelPodCapture
from hyperpod_inference_iac.charts.placement import preferred_instance_types
from hyperpod_inference_iac.charts.usage_limits import CallerLimit, UsageLimits
from hyperpod_inference_iac.foundation.platform_values import S3Location
from hyperpod_inference_iac.foundation.validation import ConfigError, Problems
from tests.charts import samples
from tests.charts.test_gateway import GATEWAY_CASES
from tests.charts.test_gateway_entry import ENTRY_CASES
from tests.charts.test_usage_limits import USAGE_LIMITS_CASES

DELETE = object()
_ROOT = Path(__file__).resolve().parents[2]


def _set(entry: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    node = entry
    for key in parents:
        node = node.setdefault(key, {})
    if value is DELETE:
        del node[last]
    else:
        node[last] = value


def _load(entries: list[Any], *, custom_service_accounts_enabled: bool = True, **context: Any) -> None:
    """The path of a config file's ``models:`` list: parse (shape), then plan (every rule, once)."""
    problems = Problems()
    models = [ModelDeployment(workload, path=path) for path, workload in parse_models(entries, problems=problems)]
    plan_workloads(samples.context(custom_service_accounts_enabled=custom_service_accounts_enabled, **context),
                   models=models, problems=problems)
    problems.raise_if_any(source="config.yaml")


def _problems_of(error: ConfigError) -> list[tuple[str, str]]:
    return [(problem.code, problem.path) for problem in error.problems]


_ENTRIES = samples.model_entries()
_CLOUDWATCH = _ENTRIES[0]["spec"]["autoScalingSpec"]["cloudWatchTriggerList"][0]
_PROMETHEUS = _ENTRIES[2]["spec"]["autoScalingSpec"]["prometheusTriggerList"][0]
_CW_LIST = "spec.autoScalingSpec.cloudWatchTriggerList"
_CW_PATH = "models[0].spec.autoScalingSpec.cloudWatchTriggerList[0]"
_PROM_LIST = "spec.autoScalingSpec.prometheusTriggerList"
_PROM_PATH = "models[2].spec.autoScalingSpec.prometheusTriggerList[0]"


def _cloudwatch(**changes: Any) -> dict[str, Any]:
    return {_CW_LIST: [{**_CLOUDWATCH, **changes}]}


def _prometheus(**changes: Any) -> dict[str, Any]:
    return {_PROM_LIST: [{**_PROMETHEUS, **changes}]}


# (code, model index, {dotted key: new value or DELETE}, expected path)
MODEL_CASES: list[tuple[str, int, dict[str, Any], str]] = [
    ("InferenceEndpoint.NameInvalid", 1, {"name": "Mistral_7B"}, "models[1].name"),
    ("InferenceEndpoint.ModelNameInvalid", 1, {"spec.modelName": "-mistral"}, "models[1].spec.modelName"),
    ("InferenceEndpoint.EndpointNameInvalid", 0, {"spec.endpointName": "qwen_3"}, "models[0].spec.endpointName"),
    ("InferenceEndpoint.InstanceTypeInvalid", 0, {"spec.instanceType": "g5.12xlarge"}, "models[0].spec.instanceType"),
    (
        "InferenceEndpoint.InstanceTypeInvalid",
        1,
        {"spec.instanceTypes": ["ml.g5.24xlarge", "p5.48xlarge"]},
        "models[1].spec.instanceTypes[1]",
    ),
    (
        "InferenceEndpoint.PlacementNotExactlyOne",
        0,
        {"spec.instanceTypes": ["ml.g5.24xlarge"]},
        "models[0].spec",
    ),
    ("InferenceEndpoint.PlacementNotExactlyOne", 3, {"spec.instanceType": DELETE}, "models[3].spec"),
    ("InferenceEndpoint.ReplicasOutOfRange", 0, {"spec.replicas": -1}, "models[0].spec.replicas"),
    (
        "Worker.ContainerPortOutOfRange",
        1,
        {"spec.worker.modelInvocationPort.containerPort": 70000},
        "models[1].spec.worker.modelInvocationPort.containerPort",
    ),
    (
        "Worker.PortNameInvalid",
        0,
        {"spec.worker.modelInvocationPort.name": "https"},
        "models[0].spec.worker.modelInvocationPort.name",
    ),
    ("Worker.ImageNotPinned", 1, {"spec.worker.image": "vllm/vllm-openai:latest"}, "models[1].spec.worker.image"),
    ("Worker.ImageNotPinned", 1, {"spec.worker.image": "vllm/vllm-openai"}, "models[1].spec.worker.image"),
    (
        "Kubernetes.ServiceAccountNameInvalid",
        0,
        {"spec.kubernetes.serviceAccountName": "Qwen_SA"},
        "models[0].spec.kubernetes.serviceAccountName",
    ),
    (
        "ModelSource.TypeInvalid",
        3,
        {"spec.modelSourceConfig.modelSourceType": "nfs", "spec.modelSourceConfig.fsxStorage": DELETE},
        "models[3].spec.modelSourceConfig.modelSourceType",
    ),
    (
        "ModelSource.S3StorageMissing",
        2,
        {"spec.modelSourceConfig.s3Storage": DELETE},
        "models[2].spec.modelSourceConfig.s3Storage",
    ),
    (
        "ModelSource.S3BucketNameInvalid",
        2,
        {"spec.modelSourceConfig.s3Storage.bucketName": "Example_Weights"},
        "models[2].spec.modelSourceConfig.s3Storage.bucketName",
    ),
    (
        "ModelSource.FsxStorageMissing",
        3,
        {"spec.modelSourceConfig.fsxStorage": DELETE},
        "models[3].spec.modelSourceConfig.fsxStorage",
    ),
    (
        "ModelSource.HuggingFaceModelMissing",
        1,
        {"spec.modelSourceConfig.huggingFaceModel": DELETE},
        "models[1].spec.modelSourceConfig.huggingFaceModel",
    ),
    (
        "ModelSource.StorageMismatch",
        2,
        {"spec.modelSourceConfig.fsxStorage": {"fileSystemId": "fs-0123456789abcdef0"}},
        "models[2].spec.modelSourceConfig.fsxStorage",
    ),
    (
        "ModelSource.VolumeNotDeclared",
        0,
        {"nvmeCache": DELETE, "spec.kubernetes.volumes": [{"name": "other", "emptyDir": {}}]},
        "models[0].spec.worker.modelVolumeMount.name",
    ),
    (
        "HuggingFace.ModelIdInvalid",
        1,
        {"spec.modelSourceConfig.huggingFaceModel.modelId": "mistral-7b"},
        "models[1].spec.modelSourceConfig.huggingFaceModel.modelId",
    ),
    (
        "HuggingFace.CommitNotPinned",
        1,
        {"spec.modelSourceConfig.huggingFaceModel.commitSHA": DELETE},
        "models[1].spec.modelSourceConfig.huggingFaceModel.commitSHA",
    ),
    (
        "HuggingFace.CommitNotPinned",
        1,
        {"spec.modelSourceConfig.huggingFaceModel.commitSHA": "main"},
        "models[1].spec.modelSourceConfig.huggingFaceModel.commitSHA",
    ),
    (
        "HuggingFace.CommitNotPinned",
        1,
        {"spec.modelSourceConfig.huggingFaceModel.commitSHA": samples.COMMIT.upper()},
        "models[1].spec.modelSourceConfig.huggingFaceModel.commitSHA",
    ),
    (
        "HuggingFace.TokenSecretRefMissing",
        1,
        {"spec.modelSourceConfig.huggingFaceModel.tokenSecretRef": DELETE},
        "models[1].spec.modelSourceConfig.huggingFaceModel.tokenSecretRef",
    ),
    (
        "HuggingFace.TokenSecretRefInvalid",
        1,
        {"spec.modelSourceConfig.huggingFaceModel.tokenSecretRef.name": "HF_Token"},
        "models[1].spec.modelSourceConfig.huggingFaceModel.tokenSecretRef.name",
    ),
    (
        "DataCapture.SamplingOutOfRange",
        0,
        {"spec.dataCapture.modelPod.initialSamplingPercentage": 150},
        "models[0].spec.dataCapture.modelPod.initialSamplingPercentage",
    ),
    (
        "DataCapture.SamplingOutOfRange",
        4,
        {"spec.dataCapture.sagemakerEndpoint.initialSamplingPercentage": -1},
        "models[4].spec.dataCapture.sagemakerEndpoint.initialSamplingPercentage",
    ),
    (
        "DataCapture.BatchSizeOutOfRange",
        0,
        {"spec.dataCapture.modelPod.bufferConfig.batchSize": 1001},
        "models[0].spec.dataCapture.modelPod.bufferConfig.batchSize",
    ),
    (
        "DataCapture.FlushIntervalOutOfRange",
        0,
        {"spec.dataCapture.modelPod.bufferConfig.flushIntervalSeconds": 5},
        "models[0].spec.dataCapture.modelPod.bufferConfig.flushIntervalSeconds",
    ),
    (
        "DataCapture.PayloadSizeOutOfRange",
        0,
        {"spec.dataCapture.modelPod.payloadConfig.maxPayloadSizeKB": 10241},
        "models[0].spec.dataCapture.modelPod.payloadConfig.maxPayloadSizeKB",
    ),
    (
        "DataCapture.CaptureOptionsInvalid",
        0,
        {"spec.dataCapture.modelPod.captureOptions": []},
        "models[0].spec.dataCapture.modelPod.captureOptions",
    ),
    (
        "DataCapture.CaptureOptionsInvalid",
        0,
        {"spec.dataCapture.sagemakerEndpoint.captureOptions": [{"captureMode": "Both"}]},
        "models[0].spec.dataCapture.sagemakerEndpoint.captureOptions[0]",
    ),
    (
        "DataCapture.KmsKeyIdInvalid",
        0,
        {"spec.dataCapture.modelPod.kmsKeyId": "my key"},
        "models[0].spec.dataCapture.modelPod.kmsKeyId",
    ),
    ("DataCapture.S3UriInvalid", 0, {"spec.dataCapture.s3Uri": "https://bucket/x"}, "models[0].spec.dataCapture.s3Uri"),
    (
        "DataCapture.ContentTypesCount",
        0,
        {"spec.dataCapture.sagemakerEndpoint.captureContentTypeHeader.jsonContentTypes": []},
        "models[0].spec.dataCapture.sagemakerEndpoint.captureContentTypeHeader.jsonContentTypes",
    ),
    (
        "DataCapture.EndpointTierNeedsEndpoint",
        0,
        {"spec.endpointName": DELETE},
        "models[0].spec.dataCapture.sagemakerEndpoint",
    ),
    (
        "DataCapture.EndpointTierNeedsEndpoint",
        4,
        {"spec.sageMakerEndpoint": DELETE},
        "models[4].spec.dataCapture.sagemakerEndpoint",
    ),
    ("DataCapture.NoDestination", 2, {"spec.tlsConfig": DELETE}, "models[2].spec.dataCapture.s3Uri"),
    (
        "Tls.AcmArnInvalid",
        0,
        {"spec.tlsConfig.customCertificateConfig.acmArn": "arn:aws:acm:us-east-1:123:certificate/x"},
        "models[0].spec.tlsConfig.customCertificateConfig.acmArn",
    ),
    (
        "Tls.DomainNameInvalid",
        0,
        {"spec.tlsConfig.customCertificateConfig.domainName": "*.inference.example.com"},
        "models[0].spec.tlsConfig.customCertificateConfig.domainName",
    ),
    (
        "Tls.CertificateIncomplete",
        4,
        {"spec.tlsConfig.customCertificateConfig.domainName": DELETE},
        "models[4].spec.tlsConfig.customCertificateConfig",
    ),
    (
        "Tls.OutputS3UriInvalid",
        2,
        {"spec.tlsConfig.tlsCertificateOutputS3Uri": "hyperpod-tls-example"},
        "models[2].spec.tlsConfig.tlsCertificateOutputS3Uri",
    ),
    (
        "Dns.HostedZoneIdInvalid",
        0,
        {"spec.dnsConfig.hostedZoneId": "z0123abc"},
        "models[0].spec.dnsConfig.hostedZoneId",
    ),
    ("Dns.NeedsCustomCertificate", 4, {"spec.tlsConfig": DELETE}, "models[4].spec.dnsConfig"),
    (
        "LoadBalancer.HealthCheckPathInvalid",
        0,
        {"spec.loadBalancer.healthCheckPath": "health"},
        "models[0].spec.loadBalancer.healthCheckPath",
    ),
    (
        "LoadBalancer.RoutingAlgorithmInvalid",
        4,
        {"spec.loadBalancer.routingAlgorithm": "random"},
        "models[4].spec.loadBalancer.routingAlgorithm",
    ),
    (
        "LoadBalancer.IdleTimeoutOutOfRange",
        0,
        {"spec.loadBalancer.idleTimeoutSeconds": 4001},
        "models[0].spec.loadBalancer.idleTimeoutSeconds",
    ),
    (
        "Metrics.PathInvalid",
        0,
        {"spec.metrics.modelMetrics.path": "metrics"},
        "models[0].spec.metrics.modelMetrics.path",
    ),
    ("Metrics.PortOutOfRange", 0, {"spec.metrics.modelMetrics.port": 80}, "models[0].spec.metrics.modelMetrics.port"),
    (
        "Metrics.ScrapeIntervalOutOfRange",
        0,
        {"spec.metrics.metricsScrapeIntervalSeconds": 1},
        "models[0].spec.metrics.metricsScrapeIntervalSeconds",
    ),
    ("NvmeCache.ModelKeyInvalid", 0, {"nvmeCache.modelKey": "Qwen3/8B"}, "models[0].nvmeCache.modelKey"),
    ("NvmeCache.SourceS3UriInvalid", 0, {"nvmeCache.sourceS3Uri": "/local/weights"}, "models[0].nvmeCache.sourceS3Uri"),
    ("NvmeCache.HostRootInvalid", 0, {"nvmeCache.hostRoot": "opt/dlami/nvme"}, "models[0].nvmeCache.hostRoot"),
    ("NvmeCache.VolumeNameInvalid", 0, {"nvmeCache.volumeName": "Model_Weights"}, "models[0].nvmeCache.volumeName"),
    (
        "NvmeCache.ImageNotPinned",
        0,
        {"nvmeCache.awsCliImage": "public.ecr.aws/aws-cli/aws-cli:latest"},
        "models[0].nvmeCache.awsCliImage",
    ),
    (
        "NvmeCache.ManifestSha256Invalid",
        0,
        {"nvmeCache.manifestSha256": "sha256:0123"},
        "models[0].nvmeCache.manifestSha256",
    ),
    (
        "NvmeCache.ServiceAccountMissing",
        0,
        {"spec.kubernetes": DELETE},
        "models[0].spec.kubernetes.serviceAccountName",
    ),
    (
        "NvmeCache.SourceTypeMismatch",
        0,
        {
            "spec.modelSourceConfig": {
                "modelSourceType": "s3",
                "s3Storage": {"bucketName": "weights", "region": "us-east-1"},
            }
        },
        "models[0].spec.modelSourceConfig.modelSourceType",
    ),
    (
        "NvmeCache.MountNameMismatch",
        0,
        {"spec.worker.modelVolumeMount.name": "weights"},
        "models[0].spec.worker.modelVolumeMount.name",
    ),
    ("JumpStartModel.NameInvalid", 4, {"name": "Llama3"}, "models[4].name"),
    ("JumpStartModel.ModelIdInvalid", 4, {"spec.model.modelId": "meta/llama"}, "models[4].spec.model.modelId"),
    ("JumpStartModel.ModelVersionInvalid", 4, {"spec.model.modelVersion": "2.1"}, "models[4].spec.model.modelVersion"),
    (
        "JumpStartModel.ModelHubNameInvalid",
        4,
        {"spec.model.modelHubName": "my_hub"},
        "models[4].spec.model.modelHubName",
    ),
    (
        "JumpStartModel.RoleArnInvalid",
        4,
        {"spec.server.executionRole": "SageMakerHyperPodInference-js"},
        "models[4].spec.server.executionRole",
    ),
    (
        "JumpStartModel.RoleArnInvalid",
        4,
        {"spec.model.gatedModelDownloadRole": "arn:aws:iam::1:role/x"},
        "models[4].spec.model.gatedModelDownloadRole",
    ),
    (
        "JumpStartModel.InstanceTypeInvalid",
        4,
        {"spec.server.instanceType": "g5.12xlarge"},
        "models[4].spec.server.instanceType",
    ),
    (
        "JumpStartModel.AcceleratorPartitionInvalid",
        4,
        {"spec.server.acceleratorPartitionType": "1g.10gb"},
        "models[4].spec.server.acceleratorPartitionType",
    ),
    (
        "JumpStartModel.EndpointNameInvalid",
        4,
        {"spec.sageMakerEndpoint.name": "llama_3"},
        "models[4].spec.sageMakerEndpoint.name",
    ),
    (
        "JumpStartModel.TooManyEnvironmentVariables",
        4,
        {"spec.environmentVariables": [{"name": f"V{i}", "value": "x"} for i in range(101)]},
        "models[4].spec.environmentVariables",
    ),
    ("JumpStartModel.ReplicasOutOfRange", 4, {"spec.replicas": -2}, "models[4].spec.replicas"),
    ("Model.KindInvalid", 2, {"kind": "InferenceService"}, "models[2].kind"),
    ("Model.DuplicateName", 2, {"name": "mistral-7b"}, "models[2].name"),
    ("Config.WrongType", 0, {"spec.replicas": "two"}, "models[0].spec.replicas"),
    (
        "Config.WrongType",
        1,
        {"spec.modelSourceConfig.prefetchEnabled": "yes"},
        "models[1].spec.modelSourceConfig.prefetchEnabled",
    ),
    ("Config.MissingKey", 1, {"spec.worker.image": DELETE}, "models[1].spec.worker.image"),
    ("Config.UnknownKey", 1, {"spec.worker.imagePullPolicy": "Always"}, "models[1].spec.worker.imagePullPolicy"),
    ("JumpStartModel.EulaNotAccepted", 4, {"spec.model.acceptEula": False}, "models[4].spec.model.acceptEula"),
    (
        "HuggingFace.TokenSecretNotSynced",
        1,
        {"spec.modelSourceConfig.huggingFaceModel.tokenSecretRef.name": "my-token"},
        "models[1].spec.modelSourceConfig.huggingFaceModel.tokenSecretRef.name",
    ),
    (
        "HuggingFace.TokenSecretKeyMissing",
        1,
        {"spec.modelSourceConfig.huggingFaceModel.tokenSecretRef.key": "value"},
        "models[1].spec.modelSourceConfig.huggingFaceModel.tokenSecretRef.key",
    ),
    ("NvmeCache.NoInstanceStore", 0, {"spec.instanceType": "ml.m5.12xlarge"}, "models[0].spec.instanceType"),
    ("Model.CrdSchemaViolation", 3, {"extraSpec": {"kvCacheSpec": {"enableL1Cache": "yes"}}},
     "models[3].extraSpec.kvCacheSpec.enableL1Cache"),
    ("Model.CrdSchemaViolation", 3, {"extraSpec": {"workerr": {}}}, "models[3].extraSpec.workerr"),
    # autoScalingSpec (both kinds)
    ("AutoScaling.MetricStatInvalid", 0, _cloudwatch(metricStat="Total"), f"{_CW_PATH}.metricStat"),
    ("AutoScaling.MetricTypeInvalid", 0, _cloudwatch(metricType="AverageValue"), f"{_CW_PATH}.metricType"),
    ("AutoScaling.ActivationValueOutOfRange", 0, _cloudwatch(activationTargetValue=-1),
     f"{_CW_PATH}.activationTargetValue"),
    ("AutoScaling.TargetValueOutOfRange", 0, _cloudwatch(targetValue=0), f"{_CW_PATH}.targetValue"),
    ("AutoScaling.TargetValueOutOfRange", 2, _prometheus(targetValue=-1.5), f"{_PROM_PATH}.targetValue"),
    ("AutoScaling.CollectionPeriodInvalid", 0, _cloudwatch(metricCollectionPeriod=45),
     f"{_CW_PATH}.metricCollectionPeriod"),
    ("AutoScaling.CollectionStartTooShort", 0, _cloudwatch(metricCollectionPeriod=600),
     f"{_CW_PATH}.metricCollectionStartTime"),
    ("AutoScaling.PrometheusServerInvalid", 2, _prometheus(serverAddress="http://prometheus.monitoring:9090"),
     f"{_PROM_PATH}.serverAddress"),
    ("AutoScaling.PrometheusQueryEmpty", 2, _prometheus(query=" "), f"{_PROM_PATH}.query"),
    ("Config.MissingKey", 0, {_CW_LIST: [{k: v for k, v in _CLOUDWATCH.items() if k != "targetValue"}]},
     f"{_CW_PATH}.targetValue"),
    ("Config.WrongType", 0, _cloudwatch(targetValue="ten"), f"{_CW_PATH}.targetValue"),
    ("AutoScaling.ReplicasOutOfRange", 0, {"spec.autoScalingSpec.minReplicaCount": -1},
     "models[0].spec.autoScalingSpec.minReplicaCount"),
    ("AutoScaling.ReplicasOutOfRange", 0, {"spec.autoScalingSpec.maxReplicaCount": 0},
     "models[0].spec.autoScalingSpec.maxReplicaCount"),
    ("AutoScaling.IntervalOutOfRange", 0, {"spec.autoScalingSpec.pollingInterval": -5},
     "models[0].spec.autoScalingSpec.pollingInterval"),
    ("AutoScaling.StabilizationOutOfRange", 0, {"spec.autoScalingSpec.scaleDownStabilizationTime": 7200},
     "models[0].spec.autoScalingSpec.scaleDownStabilizationTime"),
    ("AutoScaling.TriggerCountInvalid", 0, {_CW_LIST: []}, "models[0].spec.autoScalingSpec.cloudWatchTriggerList"),
    ("AutoScaling.NoTrigger", 0, {_CW_LIST: DELETE}, "models[0].spec.autoScalingSpec"),
    ("AutoScaling.TriggerShadowed", 0, {"spec.autoScalingSpec.cloudWatchTrigger": _CLOUDWATCH},
     "models[0].spec.autoScalingSpec.cloudWatchTrigger"),
    ("AutoScaling.MinAboveMax", 0, {"spec.autoScalingSpec.minReplicaCount": 5},
     "models[0].spec.autoScalingSpec.minReplicaCount"),
    ("AutoScaling.MinAboveMax", 2, {"spec.autoScalingSpec.maxReplicaCount": DELETE,
                                    "spec.autoScalingSpec.minReplicaCount": 6},
     "models[2].spec.autoScalingSpec.minReplicaCount"),
    ("AutoScaling.ReplicasOutsideRange", 0, {"spec.replicas": 6}, "models[0].spec.replicas"),
    ("AutoScaling.ReplicasOutsideRange", 4, {"spec.autoScalingSpec": {"minReplicaCount": 2, "cloudWatchTriggerList": [
        _CLOUDWATCH]}}, "models[4].spec.replicas"),
    # modelCacheConfig, kvCacheSpec, intelligentRoutingSpec, requestLimits, maxDeployTimeInSeconds
    ("ModelCache.HostPathInvalid", 2, {"spec.modelCacheConfig.weightsCache.hostPath": "opt/dlami/nvme"},
     "models[2].spec.modelCacheConfig.weightsCache.hostPath"),
    ("ModelCache.WeightsCacheNeedsRemoteSource", 0, {"spec.modelCacheConfig.weightsCache": {"enabled": True}},
     "models[0].spec.modelCacheConfig.weightsCache"),
    ("ModelCache.NoInstanceStore", 4, {"spec.modelCacheConfig": {"weightsCache": {"enabled": True}},
                                       "spec.server.instanceType": "ml.m5.2xlarge"},
     "models[4].spec.server.instanceType"),
    ("KvCache.BackendInvalid", 2, {"spec.kvCacheSpec.l2CacheSpec.l2CacheBackend": "memcached"},
     "models[2].spec.kvCacheSpec.l2CacheSpec.l2CacheBackend"),
    ("KvCache.RedisUrlInvalid", 2, {"spec.kvCacheSpec.l2CacheSpec.l2CacheLocalUrl": "kv-cache:6379"},
     "models[2].spec.kvCacheSpec.l2CacheSpec.l2CacheLocalUrl"),
    ("KvCache.RedisUrlMissing", 2, {"spec.kvCacheSpec.l2CacheSpec.l2CacheLocalUrl": DELETE},
     "models[2].spec.kvCacheSpec.l2CacheSpec.l2CacheLocalUrl"),
    ("KvCache.L2BackendMissing", 2, {"spec.kvCacheSpec.l2CacheSpec": DELETE}, "models[2].spec.kvCacheSpec.l2CacheSpec"),
    ("KvCache.L2BackendMissing", 4, {"spec.kvCacheSpec.enableL2Cache": False},
     "models[4].spec.kvCacheSpec.enableL2Cache"),
    ("IntelligentRouting.StrategyInvalid", 4, {"spec.intelligentRoutingSpec.routingStrategy": "leastload"},
     "models[4].spec.intelligentRoutingSpec.routingStrategy"),
    ("Worker.RequestLimitOutOfRange", 0, {"spec.worker.requestLimits.maxConcurrentRequests": 0},
     "models[0].spec.worker.requestLimits.maxConcurrentRequests"),
    ("Worker.RequestLimitOutOfRange", 0, {"spec.worker.requestLimits.maxQueueSize": -1},
     "models[0].spec.worker.requestLimits.maxQueueSize"),
    ("Worker.OverflowStatusOutOfRange", 0, {"spec.worker.requestLimits.overflowStatusCode": 200},
     "models[0].spec.worker.requestLimits.overflowStatusCode"),
    ("InferenceEndpoint.MaxDeployTimeOutOfRange", 0, {"spec.maxDeployTimeInSeconds": 0},
     "models[0].spec.maxDeployTimeInSeconds"),
    ("JumpStartModel.MaxDeployTimeOutOfRange", 4, {"spec.maxDeployTimeInSeconds": -60},
     "models[4].spec.maxDeployTimeInSeconds"),
    # ModelWeightsCacheConfig
    ("WeightsCache.NameInvalid", 5, {"name": "Llama_Weights"}, "models[5].name"),
    ("WeightsCache.HostPathInvalid", 5, {"spec.hostPath": "nvme"}, "models[5].spec.hostPath"),
    ("WeightsCache.SourceUnsupported", 5, {"spec.modelSourceConfig": {"modelSourceType": "kubernetesVolume"}},
     "models[5].spec.modelSourceConfig.modelSourceType"),
    ("WeightsCache.NoTargetNodes", 5, {"spec.nodeSelector": DELETE}, "models[5].spec"),
    ("ModelSource.S3StorageMissing", 5, {"spec.modelSourceConfig.s3Storage": DELETE},
     "models[5].spec.modelSourceConfig.s3Storage"),
    ("Model.CrdSchemaViolation", 5, {"extraSpec": {"hostPaths": ["/a"]}}, "models[5].extraSpec.hostPaths"),
    # Fields of operators 3.4-3.7 (charts/crd_overlays/)
    ("Model.SidecarResourcesIncomplete", 4, {"spec.metricsSidecarResources": {"limits": {"cpu": "1"}}},
     "models[4].spec.metricsSidecarResources.requests"),
    ("Model.ResourceQuantityInvalid", 1,
     {"spec.s3UploaderResources": {"requests": {"cpu": "1"}, "limits": {"cpu": "one"}}},
     "models[1].spec.s3UploaderResources.limits.cpu"),
    ("Kubernetes.AnnotationInvalid", 0, {"spec.kubernetes.podTemplateAnnotations": {"-x": "y"}},
     "models[0].spec.kubernetes.podTemplateAnnotations.-x"),
    ("JumpStartModel.KubernetesUnsupported", 4, {"extraSpec": {"kubernetes": {"podTemplateAnnotations": {}}}},
     "models[4].extraSpec.kubernetes"),
]


@pytest.mark.parametrize(
    ("code", "index", "changes", "path"), MODEL_CASES, ids=[c[0] + f"-{c[1]}" for c in MODEL_CASES]
)
def test_model_entry_problem(code: str, index: int, changes: dict[str, Any], path: str) -> None:
    entries = samples.model_entries()
    for dotted, value in changes.items():
        _set(entries[index], dotted, value)
    with pytest.raises(ConfigError) as raised:
        _load(entries)
    assert (code, path) in _problems_of(raised.value), str(raised.value)
    assert code in str(raised.value) and path in str(raised.value)


PLATFORM = {
    "capture": S3Location("platform-capture", "data-capture/"),
    "tls_output": S3Location("hyperpod-tls-platform", "certificates/"),
    "endpoint_domains": ("qwen3.inference.example.com", "llama3.inference.example.com"),
    "zone_name": "inference.example.com",
}
# (code, model index, changes, expected path, platform context changes): rules between a workload and the
# platform it runs on.
PLAN_CASES: list[tuple[str, int, dict[str, Any], str, dict[str, Any]]] = [
    ("Model.EndpointDomainNotCertified", 1, {"endpointDomain": "mistral.inference.example.com"},
     "models[1].endpointDomain", PLATFORM),
    ("Model.EndpointDomainConflict", 0, {"endpointDomain": "qwen3.inference.example.com"},
     "models[0].endpointDomain", PLATFORM),
    ("Model.EndpointDomainUnavailable", 1, {"endpointDomain": "qwen3.inference.example.com"},
     "models[1].endpointDomain", {**PLATFORM, "tls_output": None}),
    ("DataCapture.BucketNotGranted", 0, {}, "models[0].spec.dataCapture.s3Uri", PLATFORM),
    ("Tls.OutputBucketNotGranted", 2, {}, "models[2].spec.tlsConfig.tlsCertificateOutputS3Uri", PLATFORM),
    ("Model.EndpointDomainNotServed", 5, {"endpointDomain": "qwen3.inference.example.com"},
     "models[5].endpointDomain", PLATFORM),
    ("Model.InstanceTypeNotInCluster", 0, {}, "models[0].spec.instanceType", {"node_groups": (
        NodeGroupPlacement(name="p5", instance_type="ml.p5.48xlarge"),)}),
    ("Model.NoSchedulableGroup", 0, {}, "models[0].spec.instanceType", {"node_groups": (
        NodeGroupPlacement(name="g5", instance_type="ml.g5.12xlarge",
                           blocking_taints=("dedicated=training:NoSchedule",)),
        NodeGroupPlacement(name="p5", instance_type="ml.p5.48xlarge"))}),
    ("OperatorVersion.FeatureUnavailable", 2, {}, "models[2].spec.modelCacheConfig",
     {"operator_addon_version": "v1.3.0-eksbuild.1"}),
    ("OperatorVersion.FeatureUnavailable", 5, {}, "models[5].spec", {"operator_addon_version": "v1.3.0-eksbuild.1"}),
    ("OperatorVersion.FeatureUnavailable", 1, {}, "models[1].spec.modelSourceConfig.modelSourceType",
     {"operator_addon_version": "v1.0.0-eksbuild.1"}),
    ("OperatorVersion.FeatureUnavailable", 3, {"extraSpec": {"pdSpec": {
        "prefillSpec": {"replicas": 1}, "decodingSpec": {"replicas": 1}}}}, "models[3].extraSpec.pdSpec",
     {"operator_addon_version": "v1.2.0-eksbuild.1"}),
]


@pytest.mark.parametrize(("code", "index", "changes", "path", "platform"), PLAN_CASES, ids=[c[0] for c in PLAN_CASES])
def test_model_on_platform_problem(code: str, index: int, changes: dict[str, Any], path: str,
                                   platform: dict[str, Any]) -> None:
    entries = samples.model_entries()
    entries[index].update(changes)
    problems = Problems()
    models = [ModelDeployment(workload, endpoint_domain=entries[int(entry_path[7:-1])].get("endpointDomain"),
                              path=entry_path) for entry_path, workload in parse_models(entries, problems=problems)]
    plan_workloads(samples.context(**platform), models=models, problems=problems)
    with pytest.raises(ConfigError) as raised:
        problems.raise_if_any()
    assert (code, path) in _problems_of(raised.value), str(raised.value)


def test_a_python_caller_is_told_the_platform_context_field_not_a_config_key() -> None:
    """A plan built in Python names PlatformContext's field (the config loader gives its own keys: test_config)."""
    problems = Problems()
    models = [ModelDeployment(workload, path=path) for path, workload in
              parse_models(samples.model_entries(), problems=problems)]
    plan_workloads(samples.context(**{**PLATFORM, "operator_addon_version": "v1.3.0-eksbuild.1"}), models=models,
                   problems=problems)
    messages = [str(p) for p in problems if p.code == "OperatorVersion.FeatureUnavailable"]
    assert messages and all("raise PlatformContext.operator_addon_version " in m for m in messages), messages
    assert not [m for m in messages if "addonVersion" in m]


def test_the_valid_samples_load_without_problems() -> None:
    _load(samples.model_entries())


def test_custom_service_account_refused_when_the_cluster_has_them_off() -> None:
    with pytest.raises(ConfigError) as raised:
        _load(samples.model_entries(), custom_service_accounts_enabled=False)
    expected = ("ServiceAccount.CustomAccountsDisabled", "models[0].spec.kubernetes.serviceAccountName")
    assert _problems_of(raised.value) == [expected]


def test_two_workloads_cannot_share_a_service_account() -> None:
    entries = samples.model_entries()
    entries[2]["spec"]["kubernetes"] = {"serviceAccountName": "qwen3-8b-inference"}
    with pytest.raises(ConfigError) as raised:
        _load(entries)
    assert ("ServiceAccount.Shared", "models[2].spec.kubernetes.serviceAccountName") in _problems_of(raised.value)


def test_models_must_be_a_list() -> None:
    with pytest.raises(ConfigError) as raised:
        _load({"qwen": {}})  # type: ignore[arg-type]
    assert _problems_of(raised.value) == [("Config.WrongType", "models")]


def _models() -> list[Any]:
    problems = Problems()
    models = [workload for _, workload in parse_models(samples.model_entries(), problems=problems)]
    problems.raise_if_any()
    return models


def _inference_chart(**overrides: Any) -> None:
    arguments: dict[str, Any] = {
        "namespace": samples.NAMESPACE,
        "models": _models(),
        "service_accounts": samples.SERVICE_ACCOUNTS,
        "custom_service_accounts_enabled": True,
        **overrides,
    }
    InferenceChart(cdk8s.Testing.app(), "inference", **arguments)


CHART_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("Chart.NamespaceInvalid", {"namespace": "Inference"}, "namespace"),
    ("ServiceAccount.RoleMissing", {"service_accounts": ()}, "models[0].spec.kubernetes.serviceAccountName"),
    (
        "ServiceAccount.Unused",
        {
            "service_accounts": (
                *samples.SERVICE_ACCOUNTS,
                WorkloadServiceAccount(name="spare", role_arn=f"arn:aws:iam::{samples.ACCOUNT}:role/spare"),
            )
        },
        "serviceAccounts[1].name",
    ),
    (
        "ServiceAccount.NameInvalid",
        {
            "service_accounts": (
                *samples.SERVICE_ACCOUNTS,
                WorkloadServiceAccount(name="Spare_SA", role_arn=f"arn:aws:iam::{samples.ACCOUNT}:role/spare"),
            )
        },
        "serviceAccounts[1].name",
    ),
    (
        "ServiceAccount.RoleArnInvalid",
        {"service_accounts": (WorkloadServiceAccount(name="qwen3-8b-inference", role_arn="inference-qwen3-8b"),)},
        "serviceAccounts[0].roleArn",
    ),
    (
        "ServiceAccount.CustomAccountsDisabled",
        {"custom_service_accounts_enabled": False},
        "models[0].spec.kubernetes.serviceAccountName",
    ),
]


@pytest.mark.parametrize(("code", "overrides", "path"), CHART_CASES, ids=[c[0] for c in CHART_CASES])
def test_inference_chart_problem(code: str, overrides: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError) as raised:
        _inference_chart(**overrides)
    assert (code, path) in _problems_of(raised.value), str(raised.value)


def test_chart_validates_python_built_models_with_the_same_rules() -> None:
    hugging_face = _models()[1]
    source = hugging_face.spec.model_source_config
    unpinned = dataclasses.replace(
        source, hugging_face_model=dataclasses.replace(source.hugging_face_model, commit_sha=None)
    )
    broken = dataclasses.replace(
        hugging_face, spec=dataclasses.replace(hugging_face.spec, model_source_config=unpinned)
    )
    with pytest.raises(ConfigError) as raised:
        _inference_chart(models=[*_models()[:1], broken])
    assert _problems_of(raised.value) == [
        ("HuggingFace.CommitNotPinned", "models[1].spec.modelSourceConfig.huggingFaceModel.commitSHA")
    ]


PORTABLE_CASES: list[tuple[str, dict[str, Any], str]] = [
    # usageLimits (docs/usage-and-budgets.md; tests/charts/test_usage_limits.py)
    *USAGE_LIMITS_CASES,
    ("Portable.NameInvalid", {"name": "Qwen"}, "server.name"),
    ("Portable.NamespaceInvalid", {"namespace": "Team_A"}, "server.namespace"),
    ("InferenceWorkloads.KeyNotGrantable",
     {"data_capture": dataclasses.replace(samples.portable_server().data_capture,
                                          model_pod=ModelPodCapture(kms_key_id="alias/captures"))},
     "server.dataCapture.modelPod.kmsKeyId"),
    ("Portable.NameInvalid", {"name": "q" * 56}, "server.name"),  # "<name>-metrics" must fit 63
    ("Portable.HostnameNotCertified", {"hostname": "other.portable.example.com"}, "server.hostname"),
    ("Portable.SourceRangeInvalid", {"allowed_source_ranges": ("10.0.0.1/16",)}, "server.allowedSourceRanges[0]"),
    ("Portable.SourceRangeInvalid", {"allowed_source_ranges": ()}, "server.allowedSourceRanges"),
    ("Portable.SourceRangesWithoutHostname", {"hostname": None, "allowed_source_ranges": ("10.0.0.0/16",)},
     "server.allowedSourceRanges"),
    ("Portable.RequestBodyCapOutOfRange", {"max_request_body_kb": 0}, "server.maxRequestBodyKB"),
    ("Portable.RequestBodyCapOutOfRange", {"max_request_body_kb": 96 * 1024}, "server.maxRequestBodyKB"),
    ("Portable.ApiKeyClientRoleInvalid", {"api_key": PortableApiKey(client_role_arns=("chat-frontend",))},
     "server.apiKey.clientRoleArns[0]"),
    # A key per caller (issue 29.0; tests/unit/test_api_key_callers.py)
    ("Portable.ApiKeyCallerIdInvalid", {"api_key": PortableApiKey(callers=(ApiKeyCaller(id="team a"),))},
     "server.apiKey.callers[0].id"),
    ("Portable.ApiKeyCallerDuplicate",
     {"api_key": PortableApiKey(callers=(ApiKeyCaller(id="team-a"), ApiKeyCaller(id="TEAM-A")))},
     "server.apiKey.callers[1].id"),
    ("Portable.ApiKeyNoCaller", {"api_key": PortableApiKey(callers=())}, "server.apiKey.callers"),
    ("Portable.ApiKeyClientRolesBesideCallers",
     {"api_key": PortableApiKey(client_role_arns=("arn:aws:iam::111122223333:role/a",),
                                callers=(ApiKeyCaller(id="team-a"),))}, "server.apiKey.clientRoleArns"),
    ("UsageLimits.UnknownCaller",
     {"api_key": PortableApiKey(callers=(ApiKeyCaller(id="team-a"),)),
      "usage_limits": UsageLimits(callers=(CallerLimit(caller_id="team-b", concurrent_requests_per_replica=2),))},
     "server.usageLimits.callers[0].callerId"),
    ("Portable.ApiKeyCallersNeedCaptureSidecar",
     {"api_key": PortableApiKey(callers=(ApiKeyCaller(id="team-a"),)), "data_capture": None},
     "server.apiKey.callers"),
    ("Portable.RuntimeInvalid", {"runtime": "triton"}, "server.runtime"),
    ("Portable.ImageNotPinned", {"image": "vllm/vllm-openai:latest"}, "server.image"),
    ("Portable.ImageNotPinned", {"image": "vllm/vllm-openai"}, "server.image"),
    ("Portable.GpuCountOutOfRange", {"gpu_count": 0}, "server.gpuCount"),
    ("Portable.QuantityInvalid", {"memory": "64GB"}, "server.memory"),
    ("Portable.QuantityInvalid", {"cpu": "eight"}, "server.cpu"),
    ("Portable.ReplicasOutOfRange", {"replicas": -1}, "server.replicas"),
    ("Portable.HostnameInvalid", {"hostname": "Qwen.Example.com"}, "server.hostname"),
    (
        "Portable.GracePeriodOutOfRange",
        {"termination_grace_period_seconds": 10},
        "server.terminationGracePeriodSeconds",
    ),
    ("Portable.PreStopOutOfRange", {"pre_stop_sleep_seconds": 601}, "server.preStopSleepSeconds"),
    ("Portable.HostnameOutsideZone", {"hostname": "qwen3.other.example.org"}, "server.hostname"),
    (
        "Portable.TierNotSupported",
        {
            "data_capture": dataclasses.replace(
                samples.portable_server().data_capture, load_balancer=LoadBalancerCapture()
            )
        },
        "server.dataCapture.loadBalancer",
    ),
    (
        "DataCapture.NoDestination",
        {"data_capture": dataclasses.replace(samples.portable_server().data_capture, s3_uri=None)},
        "server.dataCapture.s3Uri",
    ),
    (
        "DataCapture.SamplingOutOfRange",
        {
            "data_capture": dataclasses.replace(
                samples.portable_server().data_capture, model_pod=ModelPodCapture(initial_sampling_percentage=101)
            )
        },
        "server.dataCapture.modelPod.initialSamplingPercentage",
    ),
]


@pytest.mark.parametrize(("code", "changes", "path"), PORTABLE_CASES, ids=[c[0] for c in PORTABLE_CASES])
def test_portable_server_problem(code: str, changes: dict[str, Any], path: str) -> None:
    problems = Problems()
    plan_workloads(samples.context(zone_name="portable.example.com"),
                   portable=[PortableDeployment(samples.portable_server(**changes), path="server")], problems=problems)
    with pytest.raises(ConfigError) as raised:
        problems.raise_if_any()
    assert (code, path) in _problems_of(raised.value), str(raised.value)


# (code, server changes, expected path, platform context changes): portable rules that need the platform.
PORTABLE_PLATFORM_CASES: list[tuple[str, dict[str, Any], str, dict[str, Any]]] = [
    ("Portable.VpcCidrMissing", {}, "server", {"vpc_cidr": None}),
    ("Portable.VpcCidrInvalid", {}, "PlatformContext.vpc_cidr", {"vpc_cidr": "10.0.0.1/16"}),
]


@pytest.mark.parametrize(("code", "changes", "path", "platform"), PORTABLE_PLATFORM_CASES,
                         ids=[c[0] for c in PORTABLE_PLATFORM_CASES])
def test_portable_server_on_platform_problem(code: str, changes: dict[str, Any], path: str,
                                            platform: dict[str, Any]) -> None:
    problems = Problems()
    plan_workloads(samples.context(**platform),
                   portable=[PortableDeployment(samples.portable_server(**changes), path="server")], problems=problems)
    with pytest.raises(ConfigError) as raised:
        problems.raise_if_any()
    assert (code, path) in _problems_of(raised.value), str(raised.value)


def test_every_problem_comes_out_in_one_error() -> None:
    entries = samples.model_entries()
    _set(entries[0], "spec.dataCapture.modelPod.initialSamplingPercentage", 150)
    _set(entries[0], "spec.dnsConfig.hostedZoneId", "not-a-zone")
    _set(entries[1], "spec.modelSourceConfig.huggingFaceModel.commitSHA", "main")
    _set(entries[2], "spec.replicas", "two")
    _set(entries[4], "spec.tlsConfig", DELETE)
    with pytest.raises(ConfigError) as raised:
        _load(entries)
    assert sorted(_problems_of(raised.value)) == sorted(
        [
            ("DataCapture.SamplingOutOfRange", "models[0].spec.dataCapture.modelPod.initialSamplingPercentage"),
            ("Dns.HostedZoneIdInvalid", "models[0].spec.dnsConfig.hostedZoneId"),
            ("HuggingFace.CommitNotPinned", "models[1].spec.modelSourceConfig.huggingFaceModel.commitSHA"),
            ("Config.WrongType", "models[2].spec.replicas"),
            ("Dns.NeedsCustomCertificate", "models[4].spec.dnsConfig"),
        ]
    )
    message = str(raised.value)
    assert message.startswith("5 problem(s) in config.yaml:")
    assert "must be an integer from 0 to 100 (got 150)" in message


def test_an_empty_list_says_how_many_items_it_needs() -> None:
    entries = samples.model_entries()
    _set(entries[1], "spec.instanceTypes", [])
    with pytest.raises(ConfigError) as raised:
        _load(entries)
    (problem,) = raised.value.problems
    assert (problem.code, problem.message) == ("InferenceEndpoint.InstanceTypeInvalid", "must have at least 1 item(s)")


def test_values_that_are_unresolved_tokens_are_left_for_deploy_time() -> None:
    entries = samples.model_entries()
    _set(entries[0], "spec.tlsConfig.customCertificateConfig.acmArn", "${Token[TOKEN.123]}")
    _set(entries[0], "spec.dataCapture.s3Uri", "${Token[TOKEN.456]}")
    _load(entries)


def _codes_in(path: Path) -> set[str]:
    return set(re.findall(r'"([A-Z][A-Za-z0-9]+\.[A-Z][A-Za-z0-9]+)"', path.read_text()))


NODE_AFFINITY_CASES: list[tuple[str, list[str], str]] = [
    ("NodeAffinity.NoInstanceTypes", [], "instance_types"),
    ("NodeAffinity.InstanceTypeInvalid", ["ml.g5.12xlarge", "g6e.12xlarge"], "instance_types[1]"),
    ("NodeAffinity.DuplicateInstanceType", ["ml.g5.12xlarge", "ml.g5.12xlarge"], "instance_types[1]"),
]


@pytest.mark.parametrize(("code", "types", "path"), NODE_AFFINITY_CASES, ids=[c[0] for c in NODE_AFFINITY_CASES])
def test_preferred_instance_types_problem(code: str, types: list[str], path: str) -> None:
    with pytest.raises(ConfigError) as raised:
        preferred_instance_types(types)
    assert (code, path) in _problems_of(raised.value), str(raised.value)


def test_every_code_in_the_charts_has_a_test_here_and_a_line_in_the_docs() -> None:
    emitted = set().union(*(_codes_in(p) for p in (_ROOT / "charts").glob("*.py")))
    cases = MODEL_CASES + CHART_CASES + PORTABLE_CASES + PLAN_CASES + NODE_AFFINITY_CASES + PORTABLE_PLATFORM_CASES
    cases += GATEWAY_CASES  # (tests/charts/test_gateway.py)
    cases += ENTRY_CASES  # (tests/charts/test_gateway_entry.py)
    tested = {case[0] for case in cases} | {"ServiceAccount.Shared", "Plan.RoleNameCollision", "Model.NamespaceInvalid",
                                             "GatewayEntry.NameTaken",  # (test_gateway_entry: a server of its name)
                                             "Gateway.TooManyModels"}  # (test_gateway: one hundred and one models)
    assert emitted - tested == set()
    documented = (_ROOT / "docs" / "charts.md").read_text()
    assert sorted(code for code in emitted if f"`{code}`" not in documented) == []


def test_two_workloads_never_share_a_role() -> None:
    """A portable server named like another's capture role ("qwen3-8b-capture") would hold that role's rights."""
    problems = Problems()
    plan_workloads(samples.context(), portable=[
        PortableDeployment(samples.portable_server(), path="portable[0]"),
        PortableDeployment(samples.portable_server(name="qwen3-8b-capture", hostname=None), path="portable[1]")],
        problems=problems)
    with pytest.raises(ConfigError) as raised:
        problems.raise_if_any()
    assert _problems_of(raised.value) == [("Plan.RoleNameCollision", "portable[1].name")]


def test_one_untainted_group_of_a_models_instance_type_is_enough() -> None:
    problems = Problems()
    models = [ModelDeployment(workload, path=path) for path, workload in
              parse_models(samples.model_entries(), problems=problems)]
    plan_workloads(samples.context(node_groups=(
        NodeGroupPlacement(name="g5-training", instance_type="ml.g5.12xlarge",
                           blocking_taints=("job=train:NoExecute",)),
        NodeGroupPlacement(name="g5-inference", instance_type="ml.g5.12xlarge"))), models=models, problems=problems)
    assert "Model.NoSchedulableGroup" not in [p.code for p in problems]
