"""Which version of the inference operator's EKS add-on has which feature the charts can emit.

The operator is installed as the EKS add-on ``amazon-sagemaker-hyperpod-inference``; its release notes tie
each operator release to an add-on version and list the custom-resource fields it added. A custom resource
that uses a field the installed operator does not know is not refused by the API server when the CRD lacks
the field: it is pruned, and the workload runs without it (no capture, no cache, no DNS record). So the
plan checks every workload against the configured add-on version (:func:`check_operator_features`), and a
feature the add-on lacks is a coded error naming the feature, the workload, the configured version and the
minimum.

Every row cites its source. Sources, read from stored copies:

* ``RELEASE_NOTES``: "Amazon SageMaker HyperPod Inference release notes" (AWS documentation), one section per
  operator release; sections v3.1.2, v3.2, v3.3 and v3.4 name the add-on version to upgrade to.
* ``SETUP``: "Setting up your HyperPod clusters for model deployment": "Install the inference operator add-on
  (minimum version: v1.0.0-eksbuild.1)", the first add-on, which came with operator 3.0.
* ``CRD_HISTORY``: the git history of the operator's CRD folder in ``aws/sagemaker-hyperpod-cli`` (see
  ``charts/crds/PROVENANCE.md`` and the research notes): when a field first appears in a CRD.

Operator 3.1 (April 3, 2026) is the one release whose notes name no add-on version. Its features (the
``kubernetes`` pod customization, custom certificates, request limits) are therefore given the first add-on
version the notes tie to an operator 3.1.x, ``v1.2.0-eksbuild.1`` (operator 3.1.2): stricter than the add-on
may need, never looser.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Mapping
from typing import Any

RELEASE_NOTES = "https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-inference-release-notes.html"
SETUP = "https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-model-deployment-setup.html"
CRD_HISTORY = ("https://github.com/aws/sagemaker-hyperpod-cli/commits/main/helm_chart/HyperPodHelmChart/charts/"
               "inference-operator/config/crd")

_VERSION = re.compile(r"^v(\d+)\.(\d+)\.(\d+)-eksbuild\.(\d+)$")


@dataclasses.dataclass(frozen=True, order=True)
class AddonVersion:
    """``vMAJOR.MINOR.PATCH-eksbuild.BUILD``, ordered as numbers (``v1.10.0`` is newer than ``v1.9.0``)."""

    major: int
    minor: int
    patch: int
    build: int

    @classmethod
    def parse(cls, text: str) -> AddonVersion | None:
        match = _VERSION.match(text)
        return cls(*(int(part) for part in match.groups())) if match else None

    def __str__(self) -> str:
        return f"v{self.major}.{self.minor}.{self.patch}-eksbuild.{self.build}"


@dataclasses.dataclass(frozen=True)
class OperatorFeature:
    """One feature the charts can emit, the first add-on version that has it, and where that is written."""

    name: str
    operator: str
    minimum: str
    source: str
    note: str = ""

    @property
    def minimum_version(self) -> AddonVersion:
        version = AddonVersion.parse(self.minimum)
        assert version is not None, self.minimum
        return version



_FIRST_ADDON = "v1.0.0-eksbuild.1"
_V3_1 = "v1.2.0-eksbuild.1"  # 3.1's notes name no add-on version: the first 3.1.x one (see the module docstring)
_NO_3_1_BUILD = "3.1's notes name no add-on version"
_OLDER = "in the CRD of every add-on version"

FIRST_ADDON = OperatorFeature("the EKS add-on", "3.0", _FIRST_ADDON, f"{RELEASE_NOTES} (v3.0); {SETUP}")
INSTANCE_TYPES = OperatorFeature("instanceTypes (multi instance types)", "2.3", _FIRST_ADDON,
                                 f"{RELEASE_NOTES} (v2.3)", "before the add-on existed")
NODE_AFFINITY = OperatorFeature("nodeAffinity", "3.0", _FIRST_ADDON, f"{RELEASE_NOTES} (v3.0)")
AUTOSCALING = OperatorFeature("autoScalingSpec (KEDA triggers, scale from zero)", "before 3.0", _FIRST_ADDON,
                              CRD_HISTORY, _OLDER)
KV_CACHE = OperatorFeature("kvCacheSpec (L1/L2 KV cache)", "before 3.0", _FIRST_ADDON,
                           f"{CRD_HISTORY} (commit 3d2049b, 2025-10-28)", _OLDER)
INTELLIGENT_ROUTING = OperatorFeature("intelligentRoutingSpec", "before 3.0", _FIRST_ADDON,
                                      f"{CRD_HISTORY} (commit 3d2049b, 2025-10-28)", _OLDER)
POD_CUSTOMIZATION = OperatorFeature("kubernetes.initContainers / volumes / schedulerName", "3.1", _V3_1,
                                    f"{RELEASE_NOTES} (v3.1, v3.1.2)", _NO_3_1_BUILD)
CUSTOM_CERTIFICATE = OperatorFeature("tlsConfig.customCertificateConfig", "3.1", _V3_1,
                                     f"{RELEASE_NOTES} (v3.1, v3.1.2)", _NO_3_1_BUILD)
REQUEST_LIMITS = OperatorFeature("worker.requestLimits", "3.1", _V3_1, f"{RELEASE_NOTES} (v3.1, v3.1.2)",
                                 _NO_3_1_BUILD)
DATA_CAPTURE = OperatorFeature("dataCapture", "3.1.2", "v1.2.0-eksbuild.1", f"{RELEASE_NOTES} (v3.1.2)")
HUGGING_FACE = OperatorFeature("modelSourceType huggingface", "3.1.2", "v1.2.0-eksbuild.1",
                               f"{RELEASE_NOTES} (v3.1.2)")
DNS = OperatorFeature("dnsConfig (Route 53 records)", "3.1.2", "v1.2.0-eksbuild.1", f"{RELEASE_NOTES} (v3.1.2)")
KUBERNETES_VOLUME = OperatorFeature("modelSourceType kubernetesVolume (local NVMe)", "3.1.2", "v1.2.0-eksbuild.1",
                                    f"{RELEASE_NOTES} (v3.1.2)")
CUSTOM_SERVICE_ACCOUNT = OperatorFeature("kubernetes.serviceAccountName (custom service accounts)", "3.1.2",
                                         "v1.2.0-eksbuild.1", f"{RELEASE_NOTES} (v3.1.2)")
DISAGGREGATED_PREFILL = OperatorFeature("pdSpec (disaggregated prefill and decode)", "3.2", "v1.3.0-eksbuild.1",
                                        f"{RELEASE_NOTES} (v3.2)")
MODEL_CACHE = OperatorFeature("modelCacheConfig (model weights and image caching)", "3.3", "v1.4.0-eksbuild.1",
                              f"{RELEASE_NOTES} (v3.3)")
WEIGHTS_CACHE_KIND = OperatorFeature("the ModelWeightsCacheConfig kind", "3.3", "v1.4.0-eksbuild.1",
                                     f"{RELEASE_NOTES} (v3.3); CRD new in chart 2.3.0")
ALB_IDLE_TIMEOUT = OperatorFeature("loadBalancer.idleTimeoutSeconds", "3.3", "v1.4.0-eksbuild.1",
                                   f"{RELEASE_NOTES} (v3.3)")

FEATURES: tuple[OperatorFeature, ...] = (
    FIRST_ADDON, INSTANCE_TYPES, NODE_AFFINITY, AUTOSCALING, KV_CACHE, INTELLIGENT_ROUTING, POD_CUSTOMIZATION,
    CUSTOM_CERTIFICATE, REQUEST_LIMITS, DATA_CAPTURE, HUGGING_FACE, DNS, KUBERNETES_VOLUME, CUSTOM_SERVICE_ACCOUNT,
    DISAGGREGATED_PREFILL, MODEL_CACHE, WEIGHTS_CACHE_KIND, ALB_IDLE_TIMEOUT,
)

# The newest add-on version whose features the CRDs in charts/crds describe (chart 2.3.0, operator 3.3).
# Operator 3.4 (add-on v1.5.0-eksbuild.1) adds fields those CRDs lack; see docs/operator-versions.md.
DEFAULT_ADDON_VERSION = "v1.4.0-eksbuild.1"


@dataclasses.dataclass(frozen=True)
class RoleAddition:
    """Execution-role permissions an operator release asks for (its release notes' "Prerequisites")."""

    operator: str
    actions: tuple[str, ...]
    source: str


EXECUTION_ROLE_ADDITIONS: tuple[RoleAddition, ...] = (
    RoleAddition("3.0", ("acm:AddTagsToCertificate", "s3:PutObjectTagging"), f"{RELEASE_NOTES} (v3.0, Prerequisites)"),
    RoleAddition("3.1", ("acm:DescribeCertificate", "acm:GetCertificate"), f"{RELEASE_NOTES} (v3.1, Prerequisites)"),
)

_SOURCE_TYPE_FEATURES = {"huggingface": HUGGING_FACE, "kubernetesVolume": KUBERNETES_VOLUME}


def _present(spec: Mapping[str, Any], *keys: str) -> bool:
    node: Any = spec
    for key in keys:
        if not isinstance(node, Mapping) or node.get(key) is None:
            return False
        node = node[key]
    return True


def features_used(kind: str, spec: Mapping[str, Any]) -> Iterator[tuple[OperatorFeature, tuple[str, ...]]]:
    """Each feature an emitted custom resource uses, with the key path in its ``spec`` that uses it."""
    if kind == "ModelWeightsCacheConfig":
        yield WEIGHTS_CACHE_KIND, ()
        return
    by_key = [
        (("instanceTypes",), INSTANCE_TYPES), (("nodeAffinity",), NODE_AFFINITY),
        (("autoScalingSpec",), AUTOSCALING), (("kvCacheSpec",), KV_CACHE),
        (("intelligentRoutingSpec",), INTELLIGENT_ROUTING),
        (("kubernetes", "initContainers"), POD_CUSTOMIZATION), (("kubernetes", "volumes"), POD_CUSTOMIZATION),
        (("kubernetes", "schedulerName"), POD_CUSTOMIZATION),
        (("kubernetes", "serviceAccountName"), CUSTOM_SERVICE_ACCOUNT),
        (("tlsConfig", "customCertificateConfig"), CUSTOM_CERTIFICATE), (("worker", "requestLimits"), REQUEST_LIMITS),
        (("dataCapture",), DATA_CAPTURE), (("dnsConfig",), DNS), (("pdSpec",), DISAGGREGATED_PREFILL),
        (("modelCacheConfig",), MODEL_CACHE), (("loadBalancer", "idleTimeoutSeconds"), ALB_IDLE_TIMEOUT),
    ]
    for keys, feature in by_key:
        if _present(spec, *keys):
            yield feature, keys
    source_type = spec.get("modelSourceConfig", {}).get("modelSourceType") if isinstance(
        spec.get("modelSourceConfig"), Mapping) else None
    if source_type in _SOURCE_TYPE_FEATURES:
        yield _SOURCE_TYPE_FEATURES[source_type], ("modelSourceConfig", "modelSourceType")


def missing_features(kind: str, spec: Mapping[str, Any],
                     addon_version: str) -> Iterator[tuple[OperatorFeature, tuple[str, ...]]]:
    """The features of :func:`features_used` that ``addon_version`` lacks, each once (none when the version does
    not parse: its format is :func:`~hyperpod_inference_iac.check_inference_operator`'s rule)."""
    configured = AddonVersion.parse(addon_version)
    if configured is None:
        return
    reported: set[OperatorFeature] = set()
    for feature, keys in features_used(kind, spec):
        if configured < feature.minimum_version and feature not in reported:
            reported.add(feature)  # once, at the first field that uses it
            yield feature, keys


__all__ = [
    "DEFAULT_ADDON_VERSION",
    "EXECUTION_ROLE_ADDITIONS",
    "FEATURES",
    "AddonVersion",
    "OperatorFeature",
    "RoleAddition",
    "features_used",
    "missing_features",
]
