"""``JumpStartModel`` (``inference.sagemaker.aws.amazon.com/v1``): a SageMaker JumpStart model the
HyperPod Inference Operator deploys by model id, with the image and settings JumpStart chooses."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

from hyperpod_inference_iac.charts._spec_fields import SpecBlock, crd_field, deep_merge
from hyperpod_inference_iac.charts.autoscaling import AutoScalingSpec
from hyperpod_inference_iac.charts.capture import DataCapture
from hyperpod_inference_iac.charts.endpoint_blocks import (
    INSTANCE_TYPE_PATTERN,
    ContainerResources,
    DnsConfig,
    LoadBalancerConfig,
    MetricsConfig,
    NameValue,
    TlsConfig,
    check_dns_needs_certificate,
    max_deploy_time_field,
    tls_output_uri,
)
from hyperpod_inference_iac.charts.inference_endpoint import API_VERSION
from hyperpod_inference_iac.charts.model_cache import ModelCacheConfig
from hyperpod_inference_iac.charts.routing import IntelligentRoutingSpec, KvCacheSpec
from hyperpod_inference_iac.foundation.patterns import (
    DNS1123_LABEL,
    IAM_ROLE_ARN,
    SAGEMAKER_ENDPOINT_NAME,
    SAGEMAKER_NAME,
)
from hyperpod_inference_iac.foundation.validation import Problems, join_path

# A JumpStartModel has no spec.kubernetes: podTemplateAnnotations (operator 3.6) and the other pod customizations are
# InferenceEndpointConfig fields (sagemaker-hyperpod-cli pull request 461).
JUMPSTART_KUBERNETES_REFUSAL = (
    "JumpStartModel.KubernetesUnsupported",
    "a JumpStartModel has no spec.kubernetes: podTemplateAnnotations, serviceAccountName, initContainers and volumes "
    "are InferenceEndpointConfig fields (operator 3.6 added podTemplateAnnotations to InferenceEndpointConfig only, "
    "https://github.com/aws/sagemaker-hyperpod-cli/pull/461); deploy the model as an InferenceEndpointConfig to set "
    "them")


def _role_arn(code: str) -> Any:
    return crd_field(default=None, code=code, pattern=IAM_ROLE_ARN.pattern, max_length=2048)


@dataclasses.dataclass(frozen=True, kw_only=True)
class JumpStartModelRef(SpecBlock):
    """``spec.model``: which JumpStart model, which version, from which hub."""

    model_id: str = crd_field(code="JumpStartModel.ModelIdInvalid", pattern=SAGEMAKER_NAME.pattern, max_length=63)
    accept_eula: bool = False
    model_version: str | None = crd_field(
        default=None,
        code="JumpStartModel.ModelVersionInvalid",
        # The CRD's dots are unescaped; we require real dots, which the CRD pattern also accepts.
        pattern=r"^\d{1,4}\.\d{1,4}\.\d{1,4}$",
        hint="a version such as 1.2.3",
    )
    model_hub_name: str | None = crd_field(
        default=None,
        code="JumpStartModel.ModelHubNameInvalid",
        pattern=SAGEMAKER_NAME.pattern,
        max_length=63,
    )
    gated_model_download_role: str | None = _role_arn("JumpStartModel.RoleArnInvalid")

    def check_rules(self, path: str, problems: Problems) -> None:
        if not self.accept_eula:
            problems.add(
                "JumpStartModel.EulaNotAccepted",
                join_path(path, "acceptEula"),
                "must be true: JumpStart refuses to deploy a model whose end-user licence agreement was not "
                "accepted; review the model's licence, then set acceptEula: true",
                self.accept_eula,
            )


@dataclasses.dataclass(frozen=True, kw_only=True)
class JumpStartServer(SpecBlock):
    instance_type: str = crd_field(code="JumpStartModel.InstanceTypeInvalid", pattern=INSTANCE_TYPE_PATTERN)
    execution_role: str | None = _role_arn("JumpStartModel.RoleArnInvalid")
    accelerator_partition_type: str | None = crd_field(
        default=None, code="JumpStartModel.AcceleratorPartitionInvalid", pattern=r"^mig-.*$"
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class SageMakerEndpoint(SpecBlock):
    name: str = crd_field(
        code="JumpStartModel.EndpointNameInvalid", pattern=SAGEMAKER_ENDPOINT_NAME.pattern, max_length=63
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class JumpStartModelSpec(SpecBlock):
    model: JumpStartModelRef
    server: JumpStartServer
    sage_maker_endpoint: SageMakerEndpoint | None = None
    environment_variables: tuple[NameValue, ...] | None = crd_field(
        default=None, code="JumpStartModel.TooManyEnvironmentVariables", max_items=100
    )
    replicas: int | None = crd_field(default=None, code="JumpStartModel.ReplicasOutOfRange", minimum=0)
    data_capture: DataCapture | None = None
    tls_config: TlsConfig | None = None
    dns_config: DnsConfig | None = None
    load_balancer: LoadBalancerConfig | None = None
    metrics: MetricsConfig | None = None
    auto_scaling_spec: AutoScalingSpec | None = None
    model_cache_config: ModelCacheConfig | None = None
    kv_cache_spec: KvCacheSpec | None = None
    intelligent_routing_spec: IntelligentRoutingSpec | None = None
    max_deploy_time_in_seconds: int | None = max_deploy_time_field("JumpStartModel.MaxDeployTimeOutOfRange")
    # Operator 3.4 (add-on v1.5.0-eksbuild.1): the operator's own containers' resources (charts/crd_overlays/).
    metrics_sidecar_resources: ContainerResources | None = None
    metrics_collector_resources: ContainerResources | None = None
    s3_uploader_resources: ContainerResources | None = None

    UNPLACED_AT = ("JumpStartModel", ())

    @classmethod
    def refused_key(cls, key: str) -> tuple[str, str] | None:
        if key == "kubernetes":
            return JUMPSTART_KUBERNETES_REFUSAL
        return super().refused_key(key)

    def check_rules(self, path: str, problems: Problems) -> None:
        check_dns_needs_certificate(self.dns_config, self.tls_config, path, problems)
        if self.auto_scaling_spec is not None:
            self.auto_scaling_spec.check_replicas(self.replicas, path, problems)
        if self.data_capture is not None:
            self.data_capture.check_destinations(
                join_path(path, "dataCapture"),
                problems,
                has_endpoint_name=bool(self.sage_maker_endpoint and self.sage_maker_endpoint.name),
                tls_output_s3_uri=tls_output_uri(self.tls_config),
            )


@dataclasses.dataclass(frozen=True, kw_only=True)
class JumpStartModel(SpecBlock):
    """One ``JumpStartModel`` custom resource; ``extra_spec`` as on InferenceEndpointConfig.

    A JumpStartModel has no ``spec.kubernetes``, so it cannot take a custom service account.
    ``gated``: the model is a gated JumpStart model (its JumpStart page says so); the operator downloads it with
    ``spec.model.gatedModelDownloadRole`` when given, else with the add-on's
    ``jumpstartGatedModelDownloadRoleArn``, which the platform then provides (``WorkloadPlan.gated_model_namespaces``).
    """

    KIND: ClassVar[str] = "JumpStartModel"

    name: str = crd_field(
        code="JumpStartModel.NameInvalid",
        pattern=DNS1123_LABEL.pattern,
        max_length=63,
        hint="a DNS-1123 label (lowercase letters, digits, '-')",
    )
    spec: JumpStartModelSpec
    gated: bool = False
    extra_spec: Mapping[str, Any] | None = None

    @property
    def service_account_name(self) -> None:
        return None

    @property
    def needs_addon_gated_role(self) -> bool:
        return self.gated and self.spec.model.gated_model_download_role is None

    def manifest(self, *, namespace: str) -> dict[str, Any]:
        spec = self.spec.to_dict()
        if self.extra_spec:
            spec = deep_merge(spec, self.extra_spec)
        return {
            "apiVersion": API_VERSION,
            "kind": self.KIND,
            "metadata": {"name": self.name, "namespace": namespace},
            "spec": spec,
        }
