"""Valid inputs shared by the chart tests: the YAML shape of a ``models:`` list, and a portable
server. Tests copy and break them one field at a time."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from hyperpod_inference_iac.charts import (
    DataCapture,
    ModelPodCapture,
    ModelServerRuntime,
    NvmeModelCache,
    PlatformContext,
    PortableDeployment,
    PortableModelServer,
    PortableWorkload,
    WorkloadServiceAccount,
    plan_workloads,
)
from hyperpod_inference_iac.foundation.platform_values import PlatformValue, PlatformValues
from hyperpod_inference_iac.foundation.validation import Problems

NAMESPACE = "inference"
CLUSTER_NAME = "gpu-cluster"
ACCOUNT = "123456789012"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
CERTIFICATE_ARN = f"arn:aws:acm:us-east-1:{ACCOUNT}:certificate/1a2b3c4d-0000-1111-2222-333344445555"
KMS_KEY_ARN = f"arn:aws:kms:us-east-1:{ACCOUNT}:key/1a2b3c4d-0000-1111-2222-333344445555"
AMP_WORKSPACE_URL = "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-0123abcd-4567-89ef-0123-456789abcdef"

MODELS_YAML = f"""
- kind: InferenceEndpointConfig          # models[0]: NVMe cache with S3 fallback, all tiers, custom domain
  name: qwen3-8b
  nvmeCache:
    modelKey: qwen3-8b
    sourceS3Uri: s3://example-model-weights/qwen3-8b/
  spec:
    modelName: Qwen3-8B
    endpointName: qwen3-8b
    instanceType: ml.g5.12xlarge
    replicas: 2
    invocationEndpoint: v1/chat/completions
    modelSourceConfig:
      modelSourceType: kubernetesVolume
    kubernetes:
      serviceAccountName: qwen3-8b-inference
    worker:
      image: vllm/vllm-openai:v0.11.0
      args: [/opt/ml/model, --max-model-len, "8192"]
      modelInvocationPort: {{containerPort: 8000, name: http}}
      modelVolumeMount: {{name: model-weights}}
      environmentVariables:
        - {{name: VLLM_LOGGING_LEVEL, value: INFO}}
      resources:
        limits: {{nvidia.com/gpu: "1"}}
        requests: {{cpu: "6", memory: 30Gi, nvidia.com/gpu: "1"}}
      probes:
        readinessProbe:
          httpGet: {{path: /health, port: 8000}}
      requestLimits: {{maxConcurrentRequests: 32, maxQueueSize: 64, overflowStatusCode: 429}}
    dataCapture:
      s3Uri: s3://example-capture/inference
      sagemakerEndpoint:
        enabled: true
        captureOptions: [{{captureMode: Input}}, {{captureMode: Output}}]
        initialSamplingPercentage: 10
        kmsKeyId: {KMS_KEY_ARN}
        captureContentTypeHeader:
          jsonContentTypes: [application/json]
      loadBalancer:
        enabled: true
      modelPod:
        enabled: true
        initialSamplingPercentage: 5
        kmsKeyId: {KMS_KEY_ARN}
        bufferConfig: {{batchSize: 50, flushIntervalSeconds: 30}}
        payloadConfig: {{maxPayloadSizeKB: 512}}
    tlsConfig:
      customCertificateConfig:
        acmArn: {CERTIFICATE_ARN}
        domainName: qwen3.inference.example.com
      tlsCertificateOutputS3Uri: s3://hyperpod-tls-example/certs
    dnsConfig:
      hostedZoneId: Z0123456789ABCDEFGHIJ
    loadBalancer:
      healthCheckPath: /health
      routingAlgorithm: least_outstanding_requests
      idleTimeoutSeconds: 300
    metrics:
      enabled: true
      metricsScrapeIntervalSeconds: 30
      modelMetrics: {{path: /metrics, port: 8000}}
    autoScalingSpec:
      minReplicaCount: 0
      maxReplicaCount: 4
      pollingInterval: 15
      cooldownPeriod: 600
      scaleDownStabilizationTime: 300
      cloudWatchTriggerList:
        - name: qwen3-8b-invocations
          namespace: AWS/SageMaker
          metricName: Invocations
          metricStat: Sum
          metricType: Average
          targetValue: 10
          activationTargetValue: 1
          metricCollectionPeriod: 60
          metricCollectionStartTime: 300
          dimensions:
            - {{name: EndpointName, value: qwen3-8b}}
            - {{name: VariantName, value: AllTraffic}}
    modelCacheConfig:
      imageCache: {{enabled: true}}
    maxDeployTimeInSeconds: 2400
    tags:
      - {{name: team, value: ml-platform}}
- kind: InferenceEndpointConfig          # models[1]: Hugging Face, pinned commit
  name: mistral-7b
  spec:
    modelName: mistral-7b
    instanceTypes: [ml.g5.24xlarge, ml.g6e.12xlarge]
    modelSourceConfig:
      modelSourceType: huggingface
      prefetchEnabled: true
      huggingFaceModel:
        modelId: mistralai/Mistral-7B-Instruct-v0.3
        commitSHA: {COMMIT}
        tokenSecretRef: {{name: hf-token, key: token}}
    worker:
      image: ghcr.io/huggingface/text-generation-inference:3.3.6
      modelInvocationPort: {{containerPort: 8080}}
      modelVolumeMount: {{name: model}}
      resources: {{limits: {{nvidia.com/gpu: "4"}}}}
- kind: InferenceEndpointConfig          # models[2]: S3 source, node affinity, pod-tier capture only
  name: llama-s3
  spec:
    modelName: llama-s3
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchExpressions:
              - {{key: node.kubernetes.io/instance-type, operator: In, values: [ml.g5.8xlarge]}}
    modelSourceConfig:
      modelSourceType: s3
      s3Storage: {{bucketName: example-model-weights, region: us-east-1}}
      modelLocation: llama-3-1-8b
    worker:
      image: vllm/vllm-openai:v0.11.0
      modelInvocationPort: {{containerPort: 8000}}
      modelVolumeMount: {{name: model, mountPath: /opt/ml/model}}
      resources: {{limits: {{nvidia.com/gpu: "1"}}}}
    dataCapture:
      modelPod: {{enabled: true}}
    tlsConfig:
      tlsCertificateOutputS3Uri: s3://hyperpod-tls-example
    modelCacheConfig:
      weightsCache: {{enabled: true, hostPath: /opt/dlami/nvme}}
    kvCacheSpec:
      enableL2Cache: true
      l2CacheSpec: {{l2CacheBackend: redis, l2CacheLocalUrl: "redis://kv-cache.inference.svc:6379"}}
    autoScalingSpec:
      minReplicaCount: 1
      maxReplicaCount: 3
      prometheusTriggerList:
        - name: llama-s3-queue
          serverAddress: {AMP_WORKSPACE_URL}
          query: sum(vllm:num_requests_waiting{{model_name="llama-s3"}})
          targetValue: 8
          metricType: Value
- kind: InferenceEndpointConfig          # models[3]: FSx for Lustre source
  name: deepseek-fsx
  spec:
    modelName: deepseek-fsx
    instanceType: ml.p5.48xlarge
    modelSourceConfig:
      modelSourceType: fsx
      fsxStorage: {{fileSystemId: fs-0123456789abcdef0, dnsName: fs.example.internal, mountName: abcdefgh}}
      modelLocation: deepseek-r1
    worker:
      image: vllm/vllm-openai@sha256:{"a" * 64}
      modelInvocationPort: {{containerPort: 8000}}
      modelVolumeMount: {{name: model}}
      resources: {{limits: {{nvidia.com/gpu: "8"}}}}
- kind: JumpStartModel                   # models[4]: JumpStart with Tier 1 capture and a custom domain
  name: llama3-8b-js
  spec:
    model:
      modelId: meta-textgeneration-llama-3-8b
      acceptEula: true
      modelVersion: 2.1.0
      modelHubName: SageMakerPublicHub
    server:
      instanceType: ml.g5.12xlarge
      executionRole: arn:aws:iam::{ACCOUNT}:role/SageMakerHyperPodInference-js
    sageMakerEndpoint: {{name: llama3-8b-js}}
    environmentVariables:
      - {{name: SAGEMAKER_MODEL_SERVER_WORKERS, value: "1"}}
    replicas: 1
    dataCapture:
      s3Uri: s3://example-capture/jumpstart
      sagemakerEndpoint: {{enabled: true, initialSamplingPercentage: 20}}
    tlsConfig:
      customCertificateConfig:
        acmArn: {CERTIFICATE_ARN}
        domainName: llama3.inference.example.com
    dnsConfig: {{hostedZoneId: Z0123456789ABCDEFGHIJ}}
    loadBalancer: {{routingAlgorithm: round_robin}}
    kvCacheSpec:
      enableL2Cache: true
      l2CacheSpec: {{l2CacheBackend: tieredstorage}}
    intelligentRoutingSpec: {{enabled: true, routingStrategy: prefixaware}}
    maxDeployTimeInSeconds: 3600
- kind: ModelWeightsCacheConfig          # models[5]: weights kept on the NVMe of the nodes llama-s3 scales to
  name: llama-s3-weights
  spec:
    modelSourceConfig:
      modelSourceType: s3
      s3Storage: {{bucketName: example-model-weights, region: us-east-1}}
      modelLocation: llama-3-1-8b
    hostPath: /opt/dlami/nvme
    nodeSelector: {{node.kubernetes.io/instance-type: ml.g5.8xlarge}}
"""

SERVICE_ACCOUNTS = (
    WorkloadServiceAccount(
        name="qwen3-8b-inference", role_arn=f"arn:aws:iam::{ACCOUNT}:role/inference-qwen3-8b-weights"
    ),
)


def model_entries() -> list[dict[str, Any]]:
    """A fresh copy of the ``models:`` list, safe to change."""
    return copy.deepcopy(_PARSED)


_PARSED: list[dict[str, Any]] = yaml.safe_load(MODELS_YAML)


def portable_server(**changes: Any) -> PortableModelServer:
    base = PortableModelServer(
        name="qwen3-8b",
        runtime=ModelServerRuntime.VLLM,
        model_cache=NvmeModelCache(model_key="qwen3-8b", source_s3_uri="s3://example-model-weights/qwen3-8b/"),
        gpu_count=2,
        hostname=PORTABLE_HOSTNAME,
        node_labels={"node.kubernetes.io/instance-type": "g5.12xlarge"},
        data_capture=DataCapture(
            s3_uri="s3://example-capture/portable",
            model_pod=ModelPodCapture(initial_sampling_percentage=10, kms_key_id=KMS_KEY_ARN),
        ),
    )
    return PortableModelServer(**{**{f: getattr(base, f) for f in base.__dataclass_fields__}, **changes})


PORTABLE_HOSTNAME = "qwen3-8b.portable.example.com"
VPC_CIDR = "10.0.0.0/16"
REGION = "us-east-1"


def context(**changes: Any) -> PlatformContext:
    """A platform without capture bucket of its own (every workload names its destinations), whose certificate
    covers the portable sample's hostname."""
    base: dict[str, Any] = {
        "cluster_name": CLUSTER_NAME, "namespace": NAMESPACE, "account": ACCOUNT, "role_name_prefix": "test",
        "custom_service_accounts_enabled": True, "synced_secrets": {"hf-token": ("token",)},
        "endpoint_domains": (PORTABLE_HOSTNAME,), "vpc_cidr": VPC_CIDR, "region": REGION,
    }
    return PlatformContext(**{**base, **changes})


# What a rendering knows about the platform in these tests: the sidecar image (a reserved TLD, so a manifest
# applied by mistake fails to pull, loudly) and the certificate of the portable hostname.
VALUES = PlatformValues({PlatformValue.SIDECAR_IMAGE: "capture-sidecar.invalid/inference-capture-sidecar:0.1.0",
                         PlatformValue.CERTIFICATE_ARN: CERTIFICATE_ARN})


def planned_portable(server: PortableModelServer) -> PortableWorkload:
    problems = Problems()
    plan = plan_workloads(context(), portable=[PortableDeployment(server, path="server")], problems=problems)
    problems.raise_if_any()
    (workload,) = plan.portable
    return workload
