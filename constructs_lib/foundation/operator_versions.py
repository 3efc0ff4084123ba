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

* ``CLI_PULLS``: the pull requests of ``aws/sagemaker-hyperpod-cli`` that bumped the operator's Helm chart (2.5.0 /
  operator 3.5: #455; 2.6.0 / 3.6: #461; 2.7.0 / 3.7: #464, #466): which fields each release added to the CRDs.
* ``GATEWAY_GUIDE``: the developer guide "Inference Gateway for Amazon SageMaker HyperPod Inference": the
  ``InferenceGatewayConfig`` kind and the add-on build the gateway needs (``v2.0.0-eksbuild.2``).

Operator 3.1 (April 3, 2026) is the first release whose notes name no add-on version. Its features (the
``kubernetes`` pod customization, custom certificates, request limits) are therefore given the first add-on
version the notes tie to an operator 3.1.x, ``v1.2.0-eksbuild.1`` (operator 3.1.2): stricter than the add-on
may need, never looser. Operators 3.5, 3.6 and 3.7 are Helm chart releases the stored notes tie to no add-on build
either; their features are given ``v2.0.0-eksbuild.2``, the first add-on build known to include them (the Inference
Gateway needs operator 3.6 and that build), again stricter, never looser. ``DEFAULT_ADDON_VERSION`` stays the build
the vendored CRDs describe; fields of newer operators validate against ``charts/crd_overlays/`` and are refused by
this check on the default add-on.
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
CLI_PULLS = "https://github.com/aws/sagemaker-hyperpod-cli/pull/"
GATEWAY_GUIDE = 'developer guide "Inference Gateway for Amazon SageMaker HyperPod Inference"'
GATEWAY_TUTORIAL = ("https://awslabs.github.io/ai-on-sagemaker-hyperpod/docs/eks-orchestration/inference/"
                    "inference-gateway/overview")

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
SIDECAR_RESOURCES = OperatorFeature("metricsSidecarResources / metricsCollectorResources / s3UploaderResources",
                                    "3.4", "v1.5.0-eksbuild.1", f"{RELEASE_NOTES} (v3.4)")
_V2_0 = "v2.0.0-eksbuild.2"  # 3.5-3.7: no add-on build named; the first one known to include them (module docstring)
_NO_3X_BUILD = "no add-on build named: the first known to include it (the gateway's)"


def _chart_release(name: str, operator: str, pull: int, chart: str, guide: bool = False) -> OperatorFeature:
    """A feature of operators 3.5-3.7, which the stored notes tie to no add-on build: gated at ``_V2_0``."""
    source = f"{CLI_PULLS}{pull} (chart {chart})" + (f"; {GATEWAY_GUIDE}" if guide else "")
    return OperatorFeature(name, operator, _V2_0, source,
                           "the gateway needs at least this build" if guide else _NO_3X_BUILD)


WEIGHTS_CACHE_NODE_AFFINITY = _chart_release("weights-cache node affinity (path not stated: refused)", "3.5", 455,
                                             "2.5.0")
INFERENCE_GATEWAY = _chart_release("Inference Gateway (InferenceGatewayConfig kind, spec.inferenceGateway)", "3.6",
                                   461, "2.6.0", guide=True)
POD_TEMPLATE_ANNOTATIONS = _chart_release("kubernetes.podTemplateAnnotations", "3.6", 461, "2.6.0")
TOLERATIONS = _chart_release("tolerations (path not stated: refused)", "3.7", 464, "2.7.0")
LMCACHE_MODE = _chart_release("lmcache.mode (parent path not stated: refused)", "3.7", 464, "2.7.0")

FEATURES: tuple[OperatorFeature, ...] = (
    FIRST_ADDON, INSTANCE_TYPES, NODE_AFFINITY, AUTOSCALING, KV_CACHE, INTELLIGENT_ROUTING, POD_CUSTOMIZATION,
    CUSTOM_CERTIFICATE, REQUEST_LIMITS, DATA_CAPTURE, HUGGING_FACE, DNS, KUBERNETES_VOLUME, CUSTOM_SERVICE_ACCOUNT,
    DISAGGREGATED_PREFILL, MODEL_CACHE, WEIGHTS_CACHE_KIND, ALB_IDLE_TIMEOUT, SIDECAR_RESOURCES,
    WEIGHTS_CACHE_NODE_AFFINITY, INFERENCE_GATEWAY, POD_TEMPLATE_ANNOTATIONS, TOLERATIONS, LMCACHE_MODE,
)
# The features newer than the vendored CRDs (charts/crds, chart 2.3.0): their fields validate against an overlay
# (charts/crd_overlays/) or, where no source states their path, are refused (UNPLACED_FIELDS).
BEYOND_VENDORED_CRDS: tuple[OperatorFeature, ...] = (
    SIDECAR_RESOURCES, WEIGHTS_CACHE_NODE_AFFINITY, INFERENCE_GATEWAY, POD_TEMPLATE_ANNOTATIONS, TOLERATIONS,
    LMCACHE_MODE,
)

# Add-on builds the stored sources name beyond the features' minimums, with what they are known to bring.
KNOWN_ADDON_VERSIONS: dict[str, str] = {
    "v1.5.0-eksbuild.1": f"operator 3.4 ({RELEASE_NOTES}, v3.4)",
    "v2.0.0-eksbuild.2": f"the InferenceGatewayConfig kind; the first build known to carry operators 3.5-3.7 "
                         f"({GATEWAY_GUIDE})",
    "v2.1.0-eksbuild.1": f"nothing stated (seen in {GATEWAY_TUTORIAL}, 2026-09-20)",
}

# The newest add-on version whose features the CRDs in charts/crds describe (chart 2.3.0, operator 3.3).
# Newer operators add fields those CRDs lack (BEYOND_VENDORED_CRDS); see docs/operator-versions.md.
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
    # 3.1.2 to 3.4: the notes have no Prerequisites section. 3.5-3.7 and add-on v2.x: no release notes stored; the
    # gateway's guide asks for a role of the gateway controller's own (AmazonSageMakerHyperPodInferenceGatewayAccess,
    # add-on key inferenceGateway.serviceAccount.roleArn), not for execution-role permissions.
)


@dataclasses.dataclass(frozen=True)
class UnplacedField:
    """A field a release announces without a path the stored sources state: no overlay has it, and a manifest or
    config that asks for it is refused with ``code`` rather than pruned on the cluster. ``key`` is the field's
    name wherever it is written under ``within`` (a key path of ``spec``; empty: anywhere in ``spec``)."""

    key: str
    kinds: tuple[str, ...]
    feature: OperatorFeature
    code: str
    fix: str
    within: tuple[str, ...] = ()

    @property
    def message(self) -> str:
        return (f"{self.feature.name.split(' (')[0]} came with operator {self.feature.operator} "
                f"({self.feature.source}), but no stored source states where in the spec it goes, and the vendored "
                f"CRDs (chart 2.3.0) lack it: the API server would prune it. {self.fix}")


_MODEL_KINDS = ("InferenceEndpointConfig", "JumpStartModel")
UNPLACED_FIELDS: tuple[UnplacedField, ...] = (
    UnplacedField("tolerations", _MODEL_KINDS, TOLERATIONS, "Model.TolerationsPathUnknown",
                  "Place the model with spec.nodeAffinity (InferenceEndpointConfig) or a node selector instead, or "
                  "vendor a CRD that has the field (charts/crds/PROVENANCE.md)"),
    UnplacedField("lmcache", _MODEL_KINDS, LMCACHE_MODE, "Model.LmcachePathUnknown",
                  "Leave it out (LMCache runs in process, as before), or vendor a CRD that has the field "
                  "(charts/crds/PROVENANCE.md)"),
    UnplacedField("nodeAffinity", _MODEL_KINDS, WEIGHTS_CACHE_NODE_AFFINITY, "ModelCache.NodeAffinityPathUnknown",
                  "Cache on chosen nodes with a ModelWeightsCacheConfig (its spec.nodeAffinity), or vendor a CRD "
                  "that has the field (charts/crds/PROVENANCE.md)", within=("modelCacheConfig",)),
)


def unplaced_field(kind: str, location: tuple[str | int, ...]) -> UnplacedField | None:
    """The unplaced field a key at ``location`` (a key path of ``spec``) asks for, if any."""
    if not location:
        return None
    key, parents = location[-1], tuple(str(part) for part in location[:-1])
    for field in UNPLACED_FIELDS:
        if kind in field.kinds and key == field.key and parents[:len(field.within)] == field.within:
            return field
    return None

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
    if kind == "InferenceGatewayConfig":
        yield INFERENCE_GATEWAY, ()
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
        (("metricsSidecarResources",), SIDECAR_RESOURCES), (("metricsCollectorResources",), SIDECAR_RESOURCES),
        (("s3UploaderResources",), SIDECAR_RESOURCES), (("inferenceGateway",), INFERENCE_GATEWAY),
    ]
    if kind == "InferenceEndpointConfig":  # (a JumpStartModel has no spec.kubernetes: no add-on version gives it one)
        by_key.append((("kubernetes", "podTemplateAnnotations"), POD_TEMPLATE_ANNOTATIONS))
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
    "BEYOND_VENDORED_CRDS",
    "DEFAULT_ADDON_VERSION",
    "EXECUTION_ROLE_ADDITIONS",
    "FEATURES",
    "INFERENCE_GATEWAY",
    "KNOWN_ADDON_VERSIONS",
    "UNPLACED_FIELDS",
    "AddonVersion",
    "OperatorFeature",
    "RoleAddition",
    "UnplacedField",
    "features_used",
    "missing_features",
    "unplaced_field",
]
