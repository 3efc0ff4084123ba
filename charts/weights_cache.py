"""``ModelWeightsCacheConfig`` (``inference.sagemaker.aws.amazon.com/v1``, operator 3.3): model weights kept on
host-local NVMe by the operator, on every node that matches, independently of any deployment.

``modelCacheConfig.weightsCache`` on an InferenceEndpointConfig or JumpStartModel caches one deployment's
weights on the nodes it is scheduled to. This kind caches a model source on a chosen set of nodes
(``node_selector`` / ``node_affinity``) ahead of any deployment, for example on the nodes a model scales out
to from zero. The operator populates the cache with a DaemonSet and reports ``readyNodes`` / ``targetNodes``.
The CRD's own text is the reference: "When false, the controller takes no action"; with ``jumpStartModel``
"the controller uses JumpStart model resolution regardless of modelSourceType".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

from hyperpod_inference_iac.charts._spec_fields import SpecBlock, crd_field, deep_merge
from hyperpod_inference_iac.charts.inference_endpoint import API_VERSION
from hyperpod_inference_iac.charts.jumpstart import JumpStartModelRef
from hyperpod_inference_iac.charts.model_cache import host_path_field
from hyperpod_inference_iac.charts.model_source import ModelSourceConfig, ModelSourceType
from hyperpod_inference_iac.foundation.patterns import DNS1123_LABEL
from hyperpod_inference_iac.foundation.validation import Problems, join_path


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelWeightsCacheSpec(SpecBlock):
    """``model_source_config`` is required by the CRD even with ``jump_start_model`` (which then wins)."""

    model_source_config: ModelSourceConfig
    enabled: bool | None = None
    host_path: str | None = host_path_field("WeightsCache.HostPathInvalid")
    jump_start_model: JumpStartModelRef | None = None
    node_affinity: Mapping[str, Any] | None = None  # core/v1 NodeAffinity
    node_selector: Mapping[str, str] | None = None

    def check_rules(self, path: str, problems: Problems) -> None:
        source_type = self.model_source_config.model_source_type
        if source_type == ModelSourceType.KUBERNETES_VOLUME and self.jump_start_model is None:
            problems.add("WeightsCache.SourceUnsupported", join_path(path, "modelSourceConfig.modelSourceType"),
                         "must name a remote source (s3, fsx, huggingface) or a jumpStartModel: a kubernetesVolume "
                         "is already on the node, there is nothing to cache", source_type)
        if self.node_selector is None and self.node_affinity is None:
            problems.add("WeightsCache.NoTargetNodes", path,
                         "give nodeSelector or nodeAffinity: without them the operator fills the NVMe of every node "
                         "in the cluster")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelWeightsCacheConfig(SpecBlock):
    """One ``ModelWeightsCacheConfig`` custom resource; ``extra_spec`` as on InferenceEndpointConfig."""

    KIND: ClassVar[str] = "ModelWeightsCacheConfig"

    name: str = crd_field(code="WeightsCache.NameInvalid", pattern=DNS1123_LABEL.pattern, max_length=63,
                          hint="a DNS-1123 label (lowercase letters, digits, '-')")
    spec: ModelWeightsCacheSpec
    extra_spec: Mapping[str, Any] | None = None

    @property
    def service_account_name(self) -> None:
        return None

    def manifest(self, *, namespace: str) -> dict[str, Any]:
        spec = self.spec.to_dict()
        if self.extra_spec:
            spec = deep_merge(spec, self.extra_spec)
        return {"apiVersion": API_VERSION, "kind": self.KIND, "metadata": {"name": self.name, "namespace": namespace},
                "spec": spec}


__all__ = ["ModelWeightsCacheConfig", "ModelWeightsCacheSpec"]
