"""Every field and add-on key this library applies on the word of prose rather than a published schema, in one table.

The operator's CRDs for chart 2.3.0 are vendored (``charts/crds/``); what newer operators added is written from the
developer guide, the release notes and the chart's pull requests (``charts/crd_overlays/``), and the add-on's
configuration keys are written from the developer guide. The API server applies custom resources with strict field
validation and the add-on checks its configuration against its own schema, so one difference between the prose and
the installed version fails the deploy half-way through. The preflight (:mod:`hyperpod_inference_iac.preflight`)
confirms every row against the installed version before a deploy: CRD rows against the cluster's own CRD (and a
server-side dry run of every manifest), add-on rows against ``eks:DescribeAddonConfiguration``.

``tests/unit/test_prose_fields.py`` keeps this table whole: every overlay field, every overlay kind and every key of
:attr:`InferenceOperator.configuration <hyperpod_inference_iac.InferenceOperator>` has a row. Once a real CRD
replaces an overlay (``docs/deploying.md``, "Replacing the overlays"), its rows go with it.
"""

from __future__ import annotations

import dataclasses
import enum

from hyperpod_inference_iac.charts.crd_schema import GROUP, PLURALS, SCHEMA_VERSIONS

ADDON = "amazon-sagemaker-hyperpod-inference"
_GUIDE_SETUP = ('developer guide "Setting up your HyperPod clusters for model deployment" (add-on configuration '
                "values)")
_GUIDE_GATEWAY = 'developer guide "Inference Gateway for Amazon SageMaker HyperPod Inference"'
_PR_461 = "https://github.com/aws/sagemaker-hyperpod-cli/pull/461 (chart 2.6.0, operator 3.6)"
_NOTES_34 = "https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-inference-release-notes.html (v3.4)"


class ConfirmedBy(enum.Enum):
    """What the preflight asks the installed version to confirm a row with."""

    ADDON_SCHEMA = "eks:DescribeAddonConfiguration (the add-on version's configuration schema)"
    CLUSTER_CRD = "the cluster's CRD (GET customresourcedefinitions) and a server-side dry run (fieldValidation=Strict)"


@dataclasses.dataclass(frozen=True)
class ProseField:
    """One field (``kind`` a custom resource kind) or add-on configuration key (``kind`` the add-on's name) resting on
    prose. ``path`` from the object's root (``spec.inferenceGateway``) or the configuration document's; an empty
    path is the kind itself."""

    kind: str
    path: tuple[str, ...]
    source: str
    confirmed_by: ConfirmedBy

    @property
    def dotted(self) -> str:
        return ".".join(self.path) or "(the kind)"

    @property
    def crd_name(self) -> str | None:
        """``<plural>.<group>`` of a custom resource row, for ``kubectl get crd``."""
        return f"{PLURALS[self.kind]}.{GROUP}" if self.kind in PLURALS else None

    @property
    def version(self) -> str | None:
        return SCHEMA_VERSIONS.get(self.kind)


def _addon(path: str, source: str = _GUIDE_SETUP) -> ProseField:
    return ProseField(ADDON, tuple(path.split(".")), source, ConfirmedBy.ADDON_SCHEMA)


def _crd(kinds: tuple[str, ...], path: str, source: str) -> tuple[ProseField, ...]:
    return tuple(ProseField(kind, tuple(path.split(".")) if path else (), source, ConfirmedBy.CLUSTER_CRD)
                 for kind in kinds)


_MODELS = ("InferenceEndpointConfig", "JumpStartModel")
PROSE_FIELDS: tuple[ProseField, ...] = (
    # The add-on's configuration keys InferenceOperator sets (its `configuration`).
    _addon("executionRoleArn"),
    _addon("tlsCertificateS3Bucket"),
    _addon("hyperpodClusterArn"),
    _addon("enableCustomServiceAccounts"),
    _addon("alb.enabled"),
    _addon("alb.serviceAccount.create"),
    _addon("alb.serviceAccount.roleArn"),
    _addon("keda.enabled"),
    _addon("keda.auth.aws.irsa.enabled"),
    _addon("keda.auth.aws.irsa.roleArn"),
    _addon("jumpstartGatedModelDownloadRoleArn"),
    _addon("inferenceGateway.enabled", _GUIDE_GATEWAY),
    _addon("inferenceGateway.serviceAccount.roleArn", _GUIDE_GATEWAY),
    # The custom resource fields of charts/crd_overlays/ (one row per kind and field).
    *_crd(("InferenceGatewayConfig",), "", f"{_GUIDE_GATEWAY}, its CRD reference"),
    *_crd(_MODELS, "spec.inferenceGateway", _PR_461),
    *_crd(_MODELS, "status.inferenceGateway", _PR_461),
    *_crd(("InferenceEndpointConfig",), "spec.kubernetes.podTemplateAnnotations", _PR_461),
    *_crd(_MODELS, "spec.metricsSidecarResources", _NOTES_34),
    *_crd(_MODELS, "spec.metricsCollectorResources", _NOTES_34),
    *_crd(_MODELS, "spec.s3UploaderResources", _NOTES_34),
)


def addon_rows() -> tuple[ProseField, ...]:
    return tuple(row for row in PROSE_FIELDS if row.confirmed_by is ConfirmedBy.ADDON_SCHEMA)


def crd_rows() -> tuple[ProseField, ...]:
    return tuple(row for row in PROSE_FIELDS if row.confirmed_by is ConfirmedBy.CLUSTER_CRD)


__all__ = ["ADDON", "PROSE_FIELDS", "ConfirmedBy", "ProseField", "addon_rows", "crd_rows"]
