"""One plan for every workload on the cluster: made once, checked once, rendered twice.

:func:`plan_workloads` takes typed workloads (operator custom resources and portable model servers)
and what they need to know about the platform (:class:`PlatformContext`), and returns a
:class:`WorkloadPlan` in which each workload carries, from the same object:

* its runtime configuration (the custom resource, or the Deployment's settings: the sidecar's capture
  prefix, the loader's weights prefix, the key it encrypts with), with the platform's own values as
  :class:`~hyperpod_inference_iac.foundation.platform_values.PlatformValue` references;
* its identity (:class:`IdentityPlan`): one role for its service account, allowed exactly the S3
  prefixes and keys that runtime configuration names (:class:`ObjectAccess`), nothing else.

A role therefore cannot disagree with what its runtime does. Every problem is reported once, under the
path the workload came from (``models[1].spec...``), all of them in one run.

The CDK app renders the plan through :class:`~hyperpod_inference_iac.InferenceWorkloads` (identities and
manifests applied by the kubectl provider) and :func:`~hyperpod_inference_iac.serving.gitops.stage_manifests`
renders the same plan into ``dist/``.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any

from hyperpod_inference_iac.charts.autoscaling import AutoScalingSpec
from hyperpod_inference_iac.charts.capture import DataCapture
from hyperpod_inference_iac.charts.crd_schema import GROUP, PLURALS, schema_errors
from hyperpod_inference_iac.charts.endpoint_blocks import CustomCertificateConfig, DnsConfig, TlsConfig
from hyperpod_inference_iac.charts.gateway import (
    GATEWAY_MINIMUM_ADDON,
    MAX_SCHEDULERS,
    GatewayModel,
    InferenceGateway,
    PlannedGateway,
    SchedulerOptions,
    check_engine_version,
    engine_of_image,
    gateway_available,
)
from hyperpod_inference_iac.charts.gateway import (
    PLURAL as GATEWAY_PLURAL,
)
from hyperpod_inference_iac.charts.gateway_entry import (
    MAX_GATEWAY_NAME_WITH_ENTRY,
    GatewayEntryOptions,
    entry_name,
)
from hyperpod_inference_iac.charts.inference_endpoint import InferenceEndpointConfig
from hyperpod_inference_iac.charts.jumpstart import JUMPSTART_KUBERNETES_REFUSAL, JumpStartModel
from hyperpod_inference_iac.charts.model_source import ModelSourceType, SecretKeyRef
from hyperpod_inference_iac.charts.nvme_cache import NvmeModelCache
from hyperpod_inference_iac.charts.pod_credentials import ContainerCredentials, CredentialScope
from hyperpod_inference_iac.charts.portable_server import API_KEY_SECRET_KEY, PortableModelServer, capture_prefix_hash
from hyperpod_inference_iac.charts.usage_limits import UsageStoreRef
from hyperpod_inference_iac.charts.weights_cache import ModelWeightsCacheConfig
from hyperpod_inference_iac.foundation.instance_store import families_with_nvme, has_instance_store_nvme
from hyperpod_inference_iac.foundation.operator_versions import DEFAULT_ADDON_VERSION, missing_features, unplaced_field
from hyperpod_inference_iac.foundation.patterns import DNS1123_LABEL, iam_role_arn, iam_role_name
from hyperpod_inference_iac.foundation.platform_values import PlatformValue, PlatformValues, S3Location, S3Uri
from hyperpod_inference_iac.foundation.scaling_metrics import ScalingMetrics
from hyperpod_inference_iac.foundation.validation import KeyPaths, Problems, is_unresolved, join_path

Workload = InferenceEndpointConfig | JumpStartModel | ModelWeightsCacheConfig

# Stand-ins that satisfy the CRDs' patterns, used only to check the emitted objects against the CRD
# schema before any real value exists (the real values are the platform's own, checked where made).
_SCHEMA_CHECK_VALUES = PlatformValues({
    PlatformValue.CAPTURE_BUCKET: "capture-bucket",
    PlatformValue.CAPTURE_KEY_ID: "arn:aws:kms:us-east-1:000000000000:alias/capture",
    PlatformValue.TLS_BUCKET: "hyperpod-tls-bucket",
    PlatformValue.CERTIFICATE_ARN: "arn:aws:acm:us-east-1:000000000000:certificate/00000000-0000-0000-0000-0000",
    PlatformValue.HOSTED_ZONE_ID: "Z0000000000000000000",
    PlatformValue.SIDECAR_IMAGE: "capture-sidecar:0",
})


@dataclasses.dataclass(frozen=True, kw_only=True)
class NodeGroupPlacement:
    """A group of nodes the operator's models may land on: its name, instance type and the taints a pod without a
    toleration for them is kept off by (``NoSchedule``, ``NoExecute``; each as ``key=value:Effect``).
    :meth:`~hyperpod_inference_iac.InstanceGroup.placement` makes one from a HyperPod instance group."""

    name: str
    instance_type: str
    blocking_taints: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlatformContext:
    """What the workloads need to know about the platform they run on.

    :param cluster_name: the EKS cluster (part of the portable capture hash).
    :param namespace: where the workloads and their service accounts live unless a workload names its own
        (``ModelDeployment.namespace``, ``PortableModelServer.namespace``): the platform's namespace, the only one
        the synced Secrets are in.
    :param account: the AWS account of the workload roles (their ARNs are derived, so manifests
        outside CDK can name them).
    :param partition: the AWS partition. @default ``aws``
    :param role_name_prefix: each workload role is ``<prefix>-<service account>``; a longer name than IAM's 64
        characters is cut to 55 and given a hash of the whole (``patterns.iam_role_name``), so names never collide.
    :param capture: where captured data goes when a workload's ``dataCapture`` names no ``s3Uri``; the
        operator's execution role may write there. @default none: every capture block needs its own s3Uri
    :param capture_key: the key captures are encrypted with when a tier names none. @default none
    :param tls_output: the operator's TLS certificate output location (``endpointDomain`` shortcut).
    :param endpoint_domains: the names the platform certificate covers (``endpointDomain`` must be one). ``None``: not
        known (a config loader whose own list has a problem), so no name is compared with them.
    :param zone_name: the Route 53 zone of the endpoint names and of portable hostnames.
    :param custom_service_accounts_enabled: the operator add-on's ``enableCustomServiceAccounts``.
    :param synced_secrets: Kubernetes Secrets the platform keeps in the namespace, by name, with their
        keys (``tokenSecretRef`` must name one of them).
    :param known_values: platform values already known (deterministic bucket names), used to tell whether
        a URI a workload writes is the platform's. @default none
    :param operator_addon_version: the version of the cluster's inference operator add-on; a workload may use
        only the features that version has (``operator_versions``). ``None`` skips the check (an operator
        installed outside this library, whose version the platform does not know).
        @default ``DEFAULT_ADDON_VERSION``, the version :class:`~hyperpod_inference_iac.InferenceOperator` installs
    :param vpc_cidr: the cluster VPC's IPv4 CIDR. Portable servers admit their metrics port (scrapers, kubelet
        probes) from it only, and their load balancers default to it as the allowed source range; needed by a
        portable server that captures or has a hostname. @default none
    :param region: the AWS Region the workloads' SDKs call STS and S3 in (``AWS_REGION`` of the containers that hold
        credentials). @default none: the SDKs' defaults (the global STS endpoint)
    :param node_groups: the HyperPod instance groups the operator's models are scheduled onto (by instance type), with
        their blocking taints: a model whose every matching group is tainted is refused, since the operator's models
        cannot carry tolerations yet (their field's path is not documented: docs/operator-versions.md), and so is a
        model whose instance types no group has (its pods would stay Pending).
        @default none: not checked
    :param usage_store: the platform's budget store (an ElastiCache Serverless cache for Valkey that
        :class:`~hyperpod_inference_iac.UsageStore` creates): a portable server whose ``usageLimits`` hold token
        budgets and name no ``storeUrl`` of their own uses it, its sidecar authenticating with an IAM token as the
        store's user. @default none: such limits need a ``storeUrl`` (``UsageLimits.NoStore``)
    :param key_paths: how problems name this context's own fields (``operator_addon_version``, ``vpc_cidr``): a
        config loader passes its file's keys (the app: ``operator.addonVersion``). @default
        ``PlatformContext.<field>``, for a context built in Python
    """

    cluster_name: str
    namespace: str
    account: str
    partition: str = "aws"
    role_name_prefix: str
    capture: S3Location | None = None
    capture_key: str | PlatformValue | None = None
    tls_output: S3Location | None = None
    endpoint_domains: tuple[str, ...] | None = ()
    zone_name: str | None = None
    custom_service_accounts_enabled: bool = False
    synced_secrets: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    known_values: Mapping[PlatformValue, str] = dataclasses.field(default_factory=dict)
    operator_addon_version: str | None = DEFAULT_ADDON_VERSION
    vpc_cidr: str | None = None
    region: str | None = None
    node_groups: tuple[NodeGroupPlacement, ...] = ()
    usage_store: UsageStoreRef | None = None
    key_paths: KeyPaths = dataclasses.field(default_factory=lambda: KeyPaths("PlatformContext"), compare=False,
                                            repr=False)

    def role_name(self, service_account: str) -> str:
        """``<prefix>-<service account>``: unique, since names and service accounts are unique across the plan's
        namespaces (they also name Secrets, alarms and charts)."""
        return iam_role_name(f"{self.role_name_prefix}-{service_account}")

    def role_arn(self, role_name: str) -> str:
        return iam_role_arn(self.partition, self.account, role_name)


@dataclasses.dataclass(frozen=True)
class ModelDeployment:
    """One operator custom resource to plan, with the platform shortcut ``endpoint_domain`` (TLS with the
    platform certificate and DNS in the platform zone), the path it came from (for problems), its own
    ``namespace`` (None: the platform's, ``PlatformContext.namespace``) and the ``gateway`` it is served behind
    (an :class:`~hyperpod_inference_iac.charts.gateway.InferenceGateway` of the plan, by name; None: none)."""

    workload: Workload
    endpoint_domain: str | None = None
    path: str = ""
    namespace: str | None = None
    gateway: str | None = None


@dataclasses.dataclass(frozen=True)
class PortableDeployment:
    server: PortableModelServer
    path: str = ""


@dataclasses.dataclass(frozen=True)
class ObjectAccess:
    """What one runtime does with one S3 prefix: read it, or write to it (with ``key``)."""

    location: S3Location
    write: bool
    purpose: str
    key: str | PlatformValue | None = None


def grantable_key(key: str | PlatformValue | None) -> bool:
    """Whether a role can be granted ``key``: the platform's own key, or a key ARN (``arn:...:key/<id>``). An alias
    names no key a policy could grant, a bare key id no key in any account."""
    if key is None or key is PlatformValue.CAPTURE_KEY_ID:
        return True
    return not isinstance(key, PlatformValue) and isinstance(key, str) and ":key/" in key


def check_grantable_key(problems: Problems, path: str, key: str | PlatformValue | None) -> None:
    """``InferenceWorkloads.KeyNotGrantable``: the one rule of a workload's own ``kmsKeyId`` that its role is granted
    (a portable server's capture sidecar writes with it). The plan applies it under the key path, so a config file is
    refused at its config check; :class:`~hyperpod_inference_iac.InferenceWorkloads` applies it again to the plan it
    is given (a Python consumer's plan made without it)."""
    if not grantable_key(key):
        problems.add("InferenceWorkloads.KeyNotGrantable", path,
                     "a workload's own kmsKeyId must be a key ARN (arn:...:key/<id>) so its role can be granted "
                     "that key; an alias cannot be granted", key)


@dataclasses.dataclass(frozen=True)
class IdentityPlan:
    """One role of a service account's pods, who in the pod holds it, and exactly the object accesses they need.

    ``scope`` :attr:`~CredentialScope.POD`: every container (the service account's IRSA annotation); otherwise one
    container only, through a token of its own audience (:mod:`charts.pod_credentials`), so the other containers of
    the pod, the model server among them, hold no credentials at all.
    """

    service_account: str
    role_name: str
    role_arn: str
    accesses: tuple[ObjectAccess, ...] = ()
    scope: CredentialScope = CredentialScope.POD
    namespace: str = ""  # the service account's; "" in plans made before namespaces per workload: the platform's

    @property
    def audience(self) -> str:
        """The token audience the role's trust requires (``<issuer>:aud``)."""
        return self.scope.audience

    @property
    def construct_suffix(self) -> str:
        """Distinguishes a service account's second role in construct ids (the first keeps the plain id, so a role
        that existed before never changes its logical id)."""
        return "" if self.scope in (CredentialScope.POD, CredentialScope.WEIGHTS_LOADER) else f"-{self.scope.value}"

    def credentials(self, region: str | None) -> ContainerCredentials:
        return ContainerCredentials(self.role_arn, self.scope, region)


@dataclasses.dataclass(frozen=True)
class ModelWorkload:
    path: str
    workload: Workload
    identity: IdentityPlan | None = None
    namespace: str = ""
    gateway: str | None = None

    @property
    def name(self) -> str:
        return self.workload.name

    @property
    def chart_id(self) -> str:
        return f"model-{self.workload.name}"

    @property
    def instance_types(self) -> tuple[tuple[str, str], ...]:
        """Each instance type the model may run on, with its key path (none for a weights cache)."""
        return tuple(_instance_types(self.workload, self.path))

    @property
    def identities(self) -> tuple[IdentityPlan, ...]:
        return (self.identity,) if self.identity is not None else ()


@dataclasses.dataclass(frozen=True)
class PortableWorkload:
    """One portable server as planned. ``loader_identity``: the NVMe loader's role (read of ``weights``).
    ``capture``/``capture_key``: where its sidecar writes (None: no capture), with ``capture_identity`` the sidecar's
    role (write there only). The model server holds no role. ``vpc_cidr``: where its metrics port is open to.
    ``certificate``: the TLS listener's certificate and ``source_ranges`` who may connect (hostname only).
    ``api_key``: the synced Secret holding its key. ``region``: where its containers' SDKs call STS.
    ``usage_store``: the platform's budget store its sidecar shares budgets through (None: none, or the server's own
    ``usageLimits.storeUrl``); its sidecar's role (``capture_identity``) is the one granted to connect."""

    path: str
    server: PortableModelServer
    loader_identity: IdentityPlan
    weights: S3Location
    capture: S3Location | None = None
    capture_key: str | PlatformValue | None = None
    capture_identity: IdentityPlan | None = None
    vpc_cidr: str | None = None
    certificate: str | PlatformValue | None = None
    source_ranges: tuple[str, ...] = ()
    api_key: SecretKeyRef | None = None
    region: str | None = None
    namespace: str = ""
    usage_store: UsageStoreRef | None = None

    @property
    def name(self) -> str:
        return self.server.name

    @property
    def service_account(self) -> str:
        return self.loader_identity.service_account

    def loader_container(self) -> dict[str, Any]:
        """The NVMe loader as its pod runs it, with its own credentials: what admission lets write the cache."""
        cache = dataclasses.replace(self.server.model_cache,
                                    credentials=self.loader_identity.credentials(self.region))
        return cache.init_container()

    @property
    def identities(self) -> tuple[IdentityPlan, ...]:
        return (self.loader_identity, *((self.capture_identity,) if self.capture_identity is not None else ()))

    @property
    def chart_id(self) -> str:
        return f"portable-{self.server.name}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlannedGatewayEntry:
    """One gateway's capture entry as planned: where it came from (``path``: ``gateways[i].entry``), the gateway's
    name and namespace, its options, the gateway it forwards to (``upstream_url``), the JWT settings it verifies with
    (the gateway's), where it captures (``capture``, ``capture_key``) and the role that may write there
    (``identity``, the capture sidecar's token audience), the VPC its network policy admits, the certificate of its
    load balancer and who may connect to it, and the region its SDK calls STS in. ``usage_store``: the platform's
    budget store its replicas share budgets through, as a portable server's sidecar (None: none, or the limits' own
    ``storeUrl``); its role (``identity``) is the one granted to connect."""

    path: str
    gateway: str
    namespace: str
    options: GatewayEntryOptions
    upstream_url: str
    jwt_environment: Mapping[str, str]
    capture: S3Location
    capture_key: str | PlatformValue | None
    identity: IdentityPlan
    vpc_cidr: str
    certificate: str | PlatformValue = PlatformValue.CERTIFICATE_ARN
    source_ranges: tuple[str, ...] = ()
    region: str | None = None
    usage_store: UsageStoreRef | None = None

    @property
    def name(self) -> str:
        return entry_name(self.gateway)

    @property
    def capture_identity(self) -> IdentityPlan:
        """The role its capture sidecar runs with (``identity``), as a portable server's ``capture_identity``: the one
        that may connect to the budget store."""
        return self.identity

    @property
    def chart_id(self) -> str:
        return f"gateway-entry-{self.gateway}"

    @property
    def service_account(self) -> str:
        return self.identity.service_account

    @property
    def identities(self) -> tuple[IdentityPlan, ...]:
        return (self.identity,)

    @property
    def hostname(self) -> str:
        return self.options.endpoint_domain

    @property
    def limits_key_prefix(self) -> str:
        """Where its replicas keep their shared counters in the store (a portable server's are ``budget:<ns>/<name>:``;
        the entry's name cannot be a portable server's: the plan refuses it)."""
        return f"budget:{self.namespace}/{self.name}:"


@dataclasses.dataclass(frozen=True)
class WorkloadPlan:
    context: PlatformContext
    models: tuple[ModelWorkload, ...] = ()
    portable: tuple[PortableWorkload, ...] = ()
    gateways: tuple[PlannedGateway, ...] = ()
    # The platform's capture entries in front of the gateways (gateways[i].entry), one per gateway that has one.
    entries: tuple[PlannedGatewayEntry, ...] = ()

    @property
    def workloads(self) -> tuple[ModelWorkload | PortableWorkload, ...]:
        """The models, then the portable servers."""
        return (*self.models, *self.portable)

    @property
    def usage_store_users(self) -> tuple[PortableWorkload | PlannedGatewayEntry, ...]:
        """The portable servers, then the gateway entries, whose capture sidecars share budgets through the
        platform's store (``context.usage_store``): the platform creates the store when there is one, and each one's
        ``capture_identity`` may connect to it."""
        return (*(workload for workload in self.portable if workload.usage_store is not None),
                *(entry for entry in self.entries if entry.usage_store is not None))

    @property
    def identities(self) -> tuple[IdentityPlan, ...]:
        """Every role of the plan: the workloads', then the gateway entries'."""
        return (*(identity for workload in self.workloads for identity in workload.identities),
                *(entry.identity for entry in self.entries))

    @property
    def namespaces(self) -> tuple[str, ...]:
        """Every namespace the plan's workloads live in: the platform's first (it holds the synced Secrets), then the
        workloads' own, sorted."""
        own = {w.namespace for w in (*self.workloads, *self.entries)} - {self.context.namespace, ""}
        return (self.context.namespace, *sorted(own))

    def in_namespace(self, namespace: str) -> WorkloadPlan:
        """The part of the plan in one namespace."""
        return dataclasses.replace(self, models=tuple(m for m in self.models if m.namespace == namespace),
                                   portable=tuple(p for p in self.portable if p.namespace == namespace),
                                   gateways=tuple(g for g in self.gateways if g.namespace == namespace),
                                   entries=tuple(e for e in self.entries if e.namespace == namespace))

    @property
    def crd_names(self) -> list[str]:
        """The operator CRDs the cluster must have for this plan: the two workload kinds always, and the kind of
        every other custom resource it renders (``ModelWeightsCacheConfig``)."""
        kinds = {"InferenceEndpointConfig", "JumpStartModel"} | {type(m.workload).__name__ for m in self.models}
        gateway_crds = [f"{GATEWAY_PLURAL}.{GROUP}"] if self.gateways else []
        return [f"{PLURALS[kind]}.{GROUP}" for kind in sorted(kinds)] + gateway_crds

    @property
    def needs_external_dns(self) -> bool:
        return any(p.server.hostname for p in self.portable) or bool(self.entries)

    @property
    def published_hostnames(self) -> tuple[str, ...]:
        """The hostnames the portable servers and the gateway entries publish: ExternalDNS may change these records
        (and their TXT ownership records) only."""
        return tuple(dict.fromkeys([*(p.server.hostname for p in self.portable if p.server.hostname),
                                    *(e.hostname for e in self.entries)]))

    @property
    def external_dns_namespaces(self) -> tuple[str, ...]:
        """The namespaces of the portable servers and gateway entries that publish a hostname: ExternalDNS watches
        these only."""
        return tuple(sorted({*(p.namespace or self.context.namespace for p in self.portable if p.server.hostname),
                             *(e.namespace for e in self.entries)}))

    @property
    def captures_load_balancer_logs(self) -> bool:
        """Some model has Tier 2 capture (ALB access logs) into the platform's capture bucket: that bucket must
        then accept ELB log delivery, which writes SSE-S3 only (``CaptureStorage(load_balancer_logs=True)``)."""
        platform = self.context.capture
        if platform is None:
            return False
        known = self.context.known_values.get(platform.bucket) if isinstance(platform.bucket, PlatformValue) else None
        for model in self.models:
            capture = data_capture_of(model.workload)
            if capture is None or capture.load_balancer is None or not capture.load_balancer.enabled:
                continue
            uri = capture.s3_uri
            bucket = uri.location.bucket if isinstance(uri, S3Uri) else S3Location.parse(uri).bucket if uri else None
            if bucket == platform.bucket or (known is not None and bucket == known):
                return True
        return False

    @property
    def needs_sidecar_image(self) -> bool:
        return any(p.capture is not None for p in self.portable) or bool(self.entries)

    @property
    def secret_refs(self) -> tuple[str, ...]:
        return tuple(sorted({name for m in self.models if (name := token_secret_of(m.workload)) is not None}))

    @property
    def scaling_metrics(self) -> ScalingMetrics:
        """What KEDA reads for every autoscaling trigger of the plan: its role is allowed exactly that
        (``InferenceOperator(scaling_metrics=...)``)."""
        metrics = ScalingMetrics()
        for model in self.models:
            for scaling in autoscaling_of(model.workload):
                metrics = metrics.merged(scaling.scaling_metrics())
        return metrics

    @property
    def gated_model_namespaces(self) -> tuple[str, ...]:
        """Where gated JumpStart models download with the add-on's gated-model role (those that name no role of
        their own): ``InferenceOperator(gated_model_namespaces=...)`` creates that role for them."""
        return tuple(sorted({m.namespace for m in self.models
                             if isinstance(m.workload, JumpStartModel) and m.workload.needs_addon_gated_role}))


def plan_workloads(context: PlatformContext, *, models: Sequence[ModelDeployment | Workload] = (),
                   portable: Sequence[PortableDeployment | PortableModelServer] = (),
                   gateways: Sequence[InferenceGateway] = (),
                   problems: Problems | None = None) -> WorkloadPlan:
    """Wire, check and plan every workload.

    With ``problems``, every problem is added there (each once) and the plan is returned regardless (a
    config loader reports them with its own); without, they are raised as one
    :class:`~hyperpod_inference_iac.foundation.validation.ConfigError`. Bare workloads are planned under the paths
    ``models[i]`` and ``portable[i]``.
    """
    collected = Problems() if problems is None else problems
    model_entries = [entry if isinstance(entry, ModelDeployment) else ModelDeployment(entry, path=f"models[{i}]")
                     for i, entry in enumerate(models)]
    portable_entries = [entry if isinstance(entry, PortableDeployment)
                        else PortableDeployment(entry, path=f"portable[{i}]") for i, entry in enumerate(portable)]
    planned_models = [_plan_model(context, entry, collected) for entry in model_entries]
    planned_portable = [_plan_portable(context, entry, collected) for entry in portable_entries]
    _check_across(context, planned_models, planned_portable, collected)
    planned_gateways = _plan_gateways(context, gateways, planned_models, collected)
    entries = _plan_gateway_entries(context, planned_gateways, planned_models, planned_portable, collected)
    if problems is None:
        collected.raise_if_any("plan_workloads")
    return WorkloadPlan(context=context, models=tuple(planned_models), portable=tuple(planned_portable),
                        gateways=planned_gateways, entries=entries)


# -- operator custom resources ---------------------------------------------------------------------
def _plan_model(context: PlatformContext, entry: ModelDeployment, problems: Problems) -> ModelWorkload:
    path = entry.path or join_path("models", entry.workload.name)
    namespace = entry.namespace or context.namespace
    if entry.namespace is not None and (not DNS1123_LABEL.match(entry.namespace) or len(entry.namespace) > 63):
        problems.add("Model.NamespaceInvalid", join_path(path, "namespace"),
                     "must be a DNS-1123 label of at most 63 characters", entry.namespace)
    workload = _wire_model(context, entry, path, problems)
    before = len(problems)
    workload.validate(path, problems)
    _check_model_on_platform(context, workload, path, problems, namespace)
    _check_operator_features(context, workload, path, problems)
    _check_schedulable(context, workload, path, problems)
    if len(problems) == before:
        _check_against_crd(workload, path, problems)
    account = workload.service_account_name
    identity = None
    if account is not None:
        role_name = context.role_name(account)
        weights = _weights_of(workload)
        accesses = (ObjectAccess(weights, write=False, purpose="model weights"),) if weights else ()
        cache = getattr(workload, "nvme_cache", None)
        # With an NVMe cache the weights come from the node, and only its loader reads S3: the role is the loader's
        # alone, and the model server (the operator's worker) holds none. Otherwise the operator's own containers
        # read with the service account's role.
        scope = CredentialScope.WEIGHTS_LOADER if cache is not None else CredentialScope.POD
        identity = IdentityPlan(account, role_name, context.role_arn(role_name), accesses, scope, namespace)
        if isinstance(workload, InferenceEndpointConfig) and cache is not None:
            cache = dataclasses.replace(cache, credentials=identity.credentials(context.region))
            workload = dataclasses.replace(workload, nvme_cache=cache)
    if entry.gateway is not None and not isinstance(workload, ModelWeightsCacheConfig):
        # The opt-in (operator 3.6), added after the checks of what the user wrote: the gateway's own rules and its
        # add-on gate are the plan's (_plan_gateways), reported at models[i].gateway and gateways[i].
        if (workload.extra_spec or {}).get("inferenceGateway") is not None:
            problems.add("Gateway.OptInConflict", join_path(path, "gateway"),
                         "the platform sets spec.inferenceGateway from gateway: remove extraSpec.inferenceGateway")
        opt_in = {"inferenceGateway": {"enabled": True, "name": entry.gateway}}
        workload = dataclasses.replace(workload, extra_spec={**(workload.extra_spec or {}), **opt_in})
    return ModelWorkload(path, workload, identity, namespace, entry.gateway)


def _wire_model(context: PlatformContext, entry: ModelDeployment, path: str, problems: Problems) -> Workload:
    """The platform shortcuts, applied to the typed workload (never silently over what the user wrote)."""
    workload = entry.workload
    if isinstance(workload, ModelWeightsCacheConfig):
        if entry.endpoint_domain is not None:
            problems.add("Model.EndpointDomainNotServed", join_path(path, "endpointDomain"),
                         "a ModelWeightsCacheConfig serves no endpoint: remove endpointDomain", entry.endpoint_domain)
        return workload
    spec = workload.spec
    changes: dict[str, Any] = {}
    if entry.endpoint_domain is not None:
        domain_path = join_path(path, "endpointDomain")
        if context.endpoint_domains is not None and entry.endpoint_domain not in context.endpoint_domains:
            problems.add("Model.EndpointDomainNotCertified", domain_path,
                         f"must be one of the platform's endpoint domains ({', '.join(context.endpoint_domains)}), "
                         "the names its certificate covers", entry.endpoint_domain)
        if spec.tls_config is not None or spec.dns_config is not None:
            problems.add("Model.EndpointDomainConflict", domain_path,
                         "sets tlsConfig and dnsConfig for you: remove spec.tlsConfig and spec.dnsConfig, or remove "
                         "endpointDomain and give both yourself")
        elif context.tls_output is None:
            problems.add("Model.EndpointDomainUnavailable", domain_path,
                         "the platform has no TLS certificate output bucket; give spec.tlsConfig yourself")
        else:
            changes["tls_config"] = TlsConfig(
                custom_certificate_config=CustomCertificateConfig(
                    acm_arn=PlatformValue.CERTIFICATE_ARN, domain_name=entry.endpoint_domain),
                tls_certificate_output_s3_uri=S3Uri(context.tls_output))
            changes["dns_config"] = DnsConfig(hosted_zone_id=PlatformValue.HOSTED_ZONE_ID)
    if spec.data_capture is not None:
        changes["data_capture"] = _wire_capture(context, spec.data_capture, tiers=("sagemaker_endpoint", "model_pod"))
    if not changes:
        return workload
    # (spec is the workload's own kind of spec; mypy checks each kind of workload against either kind of spec)
    return dataclasses.replace(workload, spec=dataclasses.replace(spec, **changes))  # type: ignore[arg-type]


def _wire_capture(context: PlatformContext, capture: DataCapture, *, tiers: Sequence[str]) -> DataCapture:
    """A ``dataCapture`` without ``s3Uri`` captures into the platform location; its enabled tiers without
    ``kmsKeyId`` encrypt with the platform key."""
    changes: dict[str, Any] = {}
    if capture.s3_uri is None and context.capture is not None:
        changes["s3_uri"] = S3Uri(context.capture)
    for tier in tiers:
        block = getattr(capture, tier)
        if block is not None and block.enabled and block.kms_key_id is None and context.capture_key is not None:
            changes[tier] = dataclasses.replace(block, kms_key_id=context.capture_key)
    return dataclasses.replace(capture, **changes) if changes else capture


def _check_model_on_platform(context: PlatformContext, workload: Workload, path: str, problems: Problems,
                             namespace: str) -> None:
    """Rules between a workload and the platform it runs on (identity, secrets, buckets, nodes)."""
    spec_path = join_path(path, "spec")
    capture = data_capture_of(workload)
    if capture is not None and capture.s3_uri is not None:
        _check_operator_may_write(context, context.capture, capture.s3_uri, join_path(spec_path, "dataCapture.s3Uri"),
                                  "DataCapture.BucketNotGranted", "captures", problems)
    tls = getattr(workload.spec, "tls_config", None)
    if tls is not None and tls.tls_certificate_output_s3_uri is not None and context.tls_output is not None:
        _check_operator_may_write(context, context.tls_output, tls.tls_certificate_output_s3_uri,
                                  join_path(spec_path, "tlsConfig.tlsCertificateOutputS3Uri"),
                                  "Tls.OutputBucketNotGranted", "TLS certificates", problems)
    token = _token_secret_ref(workload)
    secret = token.name if token is not None else None
    synced_here = context.synced_secrets if namespace == context.namespace else {}
    if secret is not None and secret not in synced_here:
        synced = ", ".join(sorted(synced_here)) or "none"
        where = "" if namespace == context.namespace else (
            f"; the platform syncs its Secrets into {context.namespace} only: run this model there")
        problems.add("HuggingFace.TokenSecretNotSynced",
                     join_path(spec_path, "modelSourceConfig.huggingFaceModel.tokenSecretRef.name"),
                     f"names a Secret nothing syncs into namespace {namespace} (synced: {synced}); use the "
                     f"platform's Hugging Face token Secret{where}", secret)
    elif token is not None:
        secret, key = token.name, token.key
        if key not in context.synced_secrets[secret]:
            problems.add("HuggingFace.TokenSecretKeyMissing",
                         join_path(spec_path, "modelSourceConfig.huggingFaceModel.tokenSecretRef.key"),
                         f"Secret {secret} holds only {', '.join(context.synced_secrets[secret])}", key)
    if isinstance(workload, InferenceEndpointConfig) and workload.nvme_cache is not None:
        _check_nvme_nodes(workload, path, problems, "NvmeCache.NoInstanceStore", "the nvmeCache", "nvmeCache")
    cache = getattr(workload.spec, "model_cache_config", None)
    if cache is not None and cache.caches_weights:
        _check_nvme_nodes(workload, path, problems, "ModelCache.NoInstanceStore",
                          "modelCacheConfig.weightsCache (the cache would never warm)", "weightsCache")


def _check_operator_may_write(context: PlatformContext, granted: S3Location | None, uri: str | S3Uri, path: str,
                              code: str, what: str, problems: Problems) -> None:
    """A location the operator writes to must be one its execution role may write: the platform's."""
    if isinstance(uri, S3Uri) or is_unresolved(uri) or granted is None:
        return  # the platform's own location, or no platform location (the caller grants the operator)
    bucket = context.known_values.get(granted.bucket) if isinstance(granted.bucket, PlatformValue) else granted.bucket
    if bucket is not None and S3Location.parse(uri).within(S3Location(bucket, granted.prefix)):
        return
    where = f"s3://{bucket}/{granted.prefix}" if bucket is not None else "the platform's location"
    problems.add(code, path, f"the operator's execution role may write {what} only under {where}; remove the URI "
                 "to use the platform's", uri)


def _instance_types(workload: Workload, path: str) -> list[tuple[str, str]]:
    """Each instance type a workload may run on, with its key path."""
    if isinstance(workload, JumpStartModel):
        return [(join_path(path, "spec.server.instanceType"), workload.spec.server.instance_type)]
    if isinstance(workload, ModelWeightsCacheConfig):
        return []
    spec = workload.spec
    types = [(join_path(path, "spec.instanceType"), spec.instance_type)] if spec.instance_type else []
    types += [(join_path(join_path(path, "spec.instanceTypes"), i), t) for i, t in enumerate(spec.instance_types or ())]
    return types


def _check_schedulable(context: PlatformContext, workload: Workload, path: str, problems: Problems) -> None:
    """A model whose every node group of its instance types is tainted would stay Pending: the operator's models take
    no tolerations yet (the field's path is not documented), so none of them tolerates any taint."""
    if not context.node_groups:
        return
    placements = [(type_path, instance_type, [g for g in context.node_groups if g.instance_type == instance_type])
                  for type_path, instance_type in _instance_types(workload, path)]
    matched = [(type_path, instance_type, groups) for type_path, instance_type, groups in placements if groups]
    known = [(type_path, instance_type) for type_path, instance_type, _ in placements
             if not is_unresolved(instance_type)]
    if not matched and known:
        type_path, instance_type = known[0]
        groups = ", ".join(f"{g.name}: {g.instance_type}" for g in context.node_groups)
        problems.add("Model.InstanceTypeNotInCluster", type_path,
                     f"must be the instance type of one of the cluster's node groups ({groups}): no node of this type "
                     "joins the cluster, so its pods would stay Pending; add a group of this type or use one of theirs",
                     instance_type)
        return
    if not matched or any(not group.blocking_taints for _, _, groups in matched for group in groups):
        return  # (one untainted group: it can run there)
    type_path, instance_type, _groups = matched[0]
    taints = "; ".join(f"{g.name}: {', '.join(g.blocking_taints[:3])}"
                       f"{f' and {len(g.blocking_taints) - 3} more' if len(g.blocking_taints) > 3 else ''}"
                       for _, _, gs in matched for g in gs)
    problems.add("Model.NoSchedulableGroup", type_path,
                 f"every node group of its instance types is tainted ({taints}) and the operator's models cannot carry "
                 "tolerations yet (the field's path is not documented): leave one group of this type untainted for "
                 "inference (taint the training groups instead), or place the model on another instance type",
                 instance_type)


def _check_nvme_nodes(workload: Workload, path: str, problems: Problems, code: str, what: str, remove: str) -> None:
    for type_path, instance_type in _instance_types(workload, path):
        if not is_unresolved(instance_type) and not has_instance_store_nvme(instance_type):
            problems.add(code, type_path,
                         f"{instance_type} has no instance-store NVMe for {what}; use a type of a family with NVMe "
                         f"({families_with_nvme()}) or remove {remove}", instance_type)


def _check_operator_features(context: PlatformContext, workload: Workload, path: str, problems: Problems) -> None:
    """A workload may use only the features the cluster's operator add-on has: the API server would prune a
    field its CRD lacks, and the workload would run without it (docs/operator-versions.md)."""
    version = context.operator_addon_version
    if version is None or is_unresolved(version):
        return
    spec = workload.manifest(namespace=context.namespace).get("spec", {})
    for feature, keys in missing_features(workload.KIND, spec, version):
        problems.add("OperatorVersion.FeatureUnavailable", _spec_path(workload, path, keys),
                     f"{feature.name} needs the inference operator add-on {feature.minimum} (operator "
                     f"{feature.operator}) or newer, and {workload.name} would run on {version}: raise "
                     f"{context.key_paths.at('operator_addon_version')} (docs/operator-versions.md says what an "
                     "upgrade brings) or remove it", version)


def _spec_path(workload: Workload, path: str, location: Sequence[str | int]) -> str:
    """Where a key of the emitted ``spec`` came from: ``extraSpec`` when that set it, else ``spec``."""
    extra = set((workload.extra_spec or {}).keys())
    spec_path = join_path(path, "extraSpec" if location and str(location[0]) in extra else "spec")
    for part in location:
        spec_path = join_path(spec_path, part if isinstance(part, int) else str(part))
    return spec_path


def _check_against_crd(workload: Workload, path: str, problems: Problems) -> None:
    """The emitted object against the CRD's own schema (catches what the types leave open: extraSpec)."""
    manifest = _SCHEMA_CHECK_VALUES.resolve(workload.manifest(namespace="schema-check"))
    for location, message, value in schema_errors(manifest):
        if location[:1] != ("spec",) or is_unresolved(value):
            continue  # tokens are checked by the API server at deploy time
        error_path = _spec_path(workload, path, location[1:])
        if problems.has_at_or_below(error_path):
            continue
        unknown = message.startswith("is not a field")
        unplaced = unplaced_field(workload.KIND, location[1:]) if unknown else None
        if unplaced is not None:  # announced by a release, at a path no source states
            problems.add(unplaced.code, error_path, unplaced.message)
        elif unknown and workload.KIND == JumpStartModel.KIND and location[1:] == ("kubernetes",):
            problems.add(*JUMPSTART_KUBERNETES_REFUSAL[:1], error_path, JUMPSTART_KUBERNETES_REFUSAL[1])
        else:
            problems.add("Model.CrdSchemaViolation", error_path, f"the operator's CRD refuses this: {message}")


def _weights_of(workload: Workload) -> S3Location | None:
    cache = getattr(workload, "nvme_cache", None)
    if isinstance(cache, NvmeModelCache):
        return S3Location.parse(cache.source_s3_uri)
    source = getattr(workload.spec, "model_source_config", None)
    storage = getattr(source, "s3_storage", None)
    if source is not None and storage is not None:
        location = (source.model_location or "").strip("/")
        return S3Location(storage.bucket_name, f"{location}/" if location else "")
    return None


def data_capture_of(workload: Workload) -> DataCapture | None:
    return getattr(workload.spec, "data_capture", None)


def autoscaling_of(workload: Workload) -> list[AutoScalingSpec]:
    """The workload's autoscaling blocks: its own and its router's (intelligent routing scales separately)."""
    spec = workload.spec
    found = [getattr(spec, "auto_scaling_spec", None)]
    routing = getattr(spec, "intelligent_routing_spec", None)
    if routing is not None:
        found.append(routing.auto_scaling_spec)
    return [scaling for scaling in found if scaling is not None]


def token_secret_of(workload: Workload) -> str | None:
    """The Secret a workload's Hugging Face source reads its token from, if any."""
    token = _token_secret_ref(workload)
    return token.name if token is not None else None


def _token_secret_ref(workload: Workload) -> SecretKeyRef | None:
    source = getattr(workload.spec, "model_source_config", None)
    if source is None or source.model_source_type != ModelSourceType.HUGGING_FACE:
        return None
    model = source.hugging_face_model
    token: SecretKeyRef | None = model.token_secret_ref if model is not None else None
    return token


# -- portable model servers --------------------------------------------------------------------------
def _plan_portable(context: PlatformContext, entry: PortableDeployment, problems: Problems) -> PortableWorkload:
    path = entry.path or join_path("portable", entry.server.name)
    server = entry.server
    namespace = server.namespace or context.namespace
    if server.data_capture is not None:
        server = dataclasses.replace(server, data_capture=_wire_capture(context, server.data_capture,
                                                                         tiers=("model_pod",)))
    server.validate(path, problems)
    limits = server.usage_limits
    if limits is not None:
        limits.check_store(join_path(path, "usageLimits"), problems, platform_store=context.usage_store is not None)
    _check_hostname(context, server, path, problems)
    _check_vpc_cidr(context, server, path, problems)
    # Two roles, one per container that needs AWS, each with its own token audience; the model server gets none.
    weights = S3Location.parse(server.model_cache.source_s3_uri)
    loader_role = context.role_name(server.name)
    loader = IdentityPlan(server.name, loader_role, context.role_arn(loader_role),
                          (ObjectAccess(weights, write=False, purpose="model weights (NVMe cache loader)"),),
                          CredentialScope.WEIGHTS_LOADER, namespace)
    capture_location, capture_key, sidecar = None, None, None
    pod = server.pod_capture
    if pod is not None and server.data_capture is not None and server.data_capture.s3_uri is not None:
        uri = server.data_capture.s3_uri
        base = uri.location if isinstance(uri, S3Uri) else S3Location.parse(uri)
        digest = capture_prefix_hash(cluster_name=context.cluster_name, namespace=namespace, name=server.name)
        capture_location = base.child(digest, "pod")
        capture_key = pod.kms_key_id
        check_grantable_key(problems, join_path(path, "dataCapture.modelPod.kmsKeyId"), capture_key)
        capture_role = context.role_name(f"{server.name}-capture")
        sidecar = IdentityPlan(server.name, capture_role, context.role_arn(capture_role),
                               (ObjectAccess(capture_location, write=True, purpose="captures (capture sidecar)",
                                             key=capture_key),),
                               CredentialScope.CAPTURE_SIDECAR, namespace)
    has_hostname = server.hostname is not None
    source_ranges = server.allowed_source_ranges or ((context.vpc_cidr,) if context.vpc_cidr else ())
    return PortableWorkload(
        path, server, loader, weights, capture_location, capture_key, sidecar, vpc_cidr=context.vpc_cidr,
        certificate=PlatformValue.CERTIFICATE_ARN if has_hostname else None,
        source_ranges=tuple(source_ranges) if has_hostname else (),
        api_key=SecretKeyRef(name=api_key_secret_name(server.name), key=API_KEY_SECRET_KEY)
        if server.api_key_enabled else None,
        region=context.region, namespace=namespace,
        usage_store=limits.uses_platform_store(context.usage_store) if sidecar is not None and limits is not None
        else None)


def api_key_secret_name(server_name: str) -> str:
    """The Kubernetes Secret a portable server's API key is synced into."""
    return f"{server_name}-api-key"


def _check_hostname(context: PlatformContext, server: PortableModelServer, path: str, problems: Problems) -> None:
    """A hostname is published in the platform zone and served with the platform certificate: both must cover it."""
    hostname = server.hostname
    if hostname is None or is_unresolved(hostname) or problems.has_at_or_below(join_path(path, "hostname")):
        return  # (a hostname that is no DNS name, "" included, is one problem: Portable.HostnameInvalid)
    if context.zone_name is not None and not hostname.endswith("." + context.zone_name):
        problems.add("Portable.HostnameOutsideZone", join_path(path, "hostname"),
                     f"must be a name in the platform zone {context.zone_name}: ExternalDNS may change records "
                     "there only", hostname)
    if context.endpoint_domains is not None and hostname not in context.endpoint_domains:
        covered = ", ".join(context.endpoint_domains) or "none"
        problems.add("Portable.HostnameNotCertified", join_path(path, "hostname"),
                     f"must be one of the platform's endpoint domains, the names its certificate covers (covered: "
                     f"{covered}); the load balancer's TLS listener uses that certificate", hostname)


def _check_vpc_cidr(context: PlatformContext, server: PortableModelServer, path: str, problems: Problems) -> None:
    """The VPC CIDR bounds the metrics port (capture) and is the default source range (hostname)."""
    needs_for = []
    if server.pod_capture is not None:
        needs_for.append("its NetworkPolicy admits the sidecar's metrics port from the VPC only")
    if server.hostname is not None and server.allowed_source_ranges is None:
        needs_for.append("its load balancer admits the VPC by default (or set allowedSourceRanges)")
    if needs_for and context.vpc_cidr is None:
        problems.add("Portable.VpcCidrMissing", path,
                     f"needs the platform's VPC CIDR ({context.key_paths.at('vpc_cidr')}): {'; '.join(needs_for)}")


# -- across workloads ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class NamedWorkload:
    """What the rules across workloads look at: where it came from, its kind, name and service account."""

    path: str
    kind: str
    name: str
    service_account: str | None
    custom_account: bool  # named in spec.kubernetes.serviceAccountName (needs the operator's flag)
    namespace: str = ""


def check_workload_set(workloads: Sequence[NamedWorkload], *, namespace: str, custom_service_accounts_enabled: bool,
                       problems: Problems) -> None:
    """Rules across the workloads of one namespace (the plan and :class:`InferenceChart` both apply them)."""
    if not DNS1123_LABEL.match(namespace) or len(namespace) > 63:
        problems.add("Chart.NamespaceInvalid", "namespace", "must be a DNS-1123 label", namespace)
    names: dict[str, str] = {}
    accounts: dict[str, str] = {}
    for item in workloads:
        key = f"{item.kind}/{item.name}"
        if key in names:
            problems.add("Model.DuplicateName", join_path(item.path, "name"),
                         f"is already used by {names[key]}; names are unique across the platform's namespaces "
                         "(they also name roles, secrets and alarms)", item.name)
        names.setdefault(key, item.path)
        if item.service_account is None:
            continue
        account_path = join_path(item.path, "spec.kubernetes.serviceAccountName" if item.custom_account else "name")
        if item.custom_account and not custom_service_accounts_enabled:
            problems.add("ServiceAccount.CustomAccountsDisabled", account_path,
                         "the cluster's inference operator has enableCustomServiceAccounts off; enable it in the "
                         "add-on configuration or remove serviceAccountName", item.service_account)
        if item.service_account in accounts:
            problems.add("ServiceAccount.Shared", account_path,
                         f"service account {item.service_account} is already used by {accounts[item.service_account]}; "
                         "give each workload its own service account so each role stays scoped to one model's data",
                         item.service_account)
        accounts.setdefault(item.service_account, item.path)


def named(path: str, workload: Workload | PortableModelServer, namespace: str = "") -> NamedWorkload:
    if isinstance(workload, PortableModelServer):
        return NamedWorkload(path, "Deployment", workload.name, workload.name, custom_account=False,
                             namespace=namespace)
    account = workload.service_account_name
    return NamedWorkload(path, workload.KIND, workload.name, account, custom_account=account is not None,
                         namespace=namespace)


def _check_across(context: PlatformContext, models: Sequence[ModelWorkload], portable: Sequence[PortableWorkload],
                  problems: Problems) -> None:
    if context.vpc_cidr is not None and not is_unresolved(context.vpc_cidr):
        try:
            ipaddress.IPv4Network(context.vpc_cidr, strict=True)
        except ValueError:
            problems.add("Portable.VpcCidrInvalid", context.key_paths.at("vpc_cidr"),
                         "must be an IPv4 CIDR block, e.g. 10.42.0.0/16", context.vpc_cidr)
    entries = [*(named(m.path, m.workload, m.namespace) for m in models),
               *(named(p.path, p.server, p.namespace) for p in portable)]
    # Names and service accounts are unique across every namespace of the plan: they also name roles, Secrets in
    # Secrets Manager, alarms and charts. (A workload's own namespace is checked at its own key.)
    check_workload_set(entries, namespace=context.namespace,
                       custom_service_accounts_enabled=context.custom_service_accounts_enabled, problems=problems)
    workloads: list[ModelWorkload | PortableWorkload] = [*models, *portable]
    _check_role_names([(w.path, identity) for w in workloads for identity in w.identities], problems)


def _check_role_names(identities: Sequence[tuple[str, IdentityPlan]], problems: Problems) -> None:
    """Two identities never share a role (a portable server ``a-capture`` next to ``a``'s capture role, say): the
    second would hold the first one's rights."""
    owners: dict[str, tuple[str, str]] = {}
    for path, identity in identities:
        account = identity.service_account
        owner, owner_account = owners.setdefault(identity.role_name, (path, account))
        # One service account for two workloads is ServiceAccount.Shared, reported already.
        if owner != path and owner_account != account:
            problems.add("Plan.RoleNameCollision", join_path(path, "name"),
                         f"its role {identity.role_name} is already the role of {owner}; rename one of them",
                         identity.service_account)


# -- the Inference Gateway --------------------------------------------------------------------------------
def _plan_gateways(context: PlatformContext, gateways: Sequence[InferenceGateway], models: Sequence[ModelWorkload],
                   problems: Problems) -> tuple[PlannedGateway, ...]:
    """Each gateway with the models that opted into it, and the rules between them (the developer guide's)."""
    by_name: dict[str, tuple[str, InferenceGateway]] = {}
    unnamed = False
    for index, gateway in enumerate(gateways):
        path = join_path("gateways", index)
        # The gateway's own rules, under a config file's keys. A gateway read from one was checked as it was read:
        # a key whose value could not be read holds a stand-in there, already a problem, not judged again.
        own = Problems()
        gateway.check(own, InferenceGateway.key_paths(path))
        problems.extend([problem for problem in own if not problems.has_at_or_below(problem.path)])
        if not gateway.name:  # (no name, a problem already: the models that name it cannot be told from a typo)
            unnamed = True
            continue
        if gateway.name in by_name:
            problems.add("Gateway.NameDuplicate", join_path(path, "name"),
                         f"another gateway ({by_name[gateway.name][0]}) has this name", gateway.name)
            continue
        by_name[gateway.name] = (path, gateway)
        version = context.operator_addon_version
        if version is not None and not is_unresolved(version) and not gateway_available(version):
            problems.add("OperatorVersion.FeatureUnavailable", path,
                         f"the Inference Gateway (InferenceGatewayConfig) needs the inference operator add-on "
                         f"{GATEWAY_MINIMUM_ADDON} or newer, and the cluster's is {version}: raise "
                         f"{context.key_paths.at('operator_addon_version')} (docs/operator-versions.md says what an "
                         "upgrade brings) or remove it", version)
        if gateway.endpoint_domain is None or context.endpoint_domains is None:
            pass  # (missing: the gateway's own problem; the names unknown: compared once they are right)
        elif context.endpoint_domains and gateway.endpoint_domain not in context.endpoint_domains:
            problems.add("Gateway.EndpointDomainNotCertified", join_path(path, "endpointDomain"),
                         f"must be one of the platform's endpoint domains ({', '.join(context.endpoint_domains)}), the "
                         "names its certificate covers", gateway.endpoint_domain)
        elif not context.endpoint_domains:
            problems.add("Gateway.EndpointDomainNotCertified", join_path(path, "endpointDomain"),
                         "the platform has no certificate for the gateway to serve: add the name to the platform's "
                         "endpoint domains", gateway.endpoint_domain)
    members: dict[str, list[GatewayModel]] = {name: [] for name in by_name}
    for model in models:
        if model.gateway is None:
            continue
        at = join_path(model.path, "gateway")
        found = by_name.get(model.gateway)
        if found is None:
            if unnamed:
                continue
            problems.add("Gateway.Unknown", at, f"must name one of the platform's gateways ("
                         f"{', '.join(by_name) or 'none: add one under gateways'})", model.gateway)
            continue
        _, gateway = found
        if isinstance(model.workload, ModelWeightsCacheConfig):
            problems.add("Gateway.NotAModel", at, "a ModelWeightsCacheConfig serves no requests: remove gateway")
            continue
        namespace = gateway.namespace or context.namespace
        if model.namespace != namespace:
            problems.add("Gateway.NamespaceMismatch", at,
                         f"the gateway lives in namespace {namespace} and this model in {model.namespace}: a gateway "
                         "schedules the models of its own namespace (set the gateway's namespace, or the model's)")
        member = _gateway_model(model, gateway.schedulers.get(model.name, SchedulerOptions()), at, problems)
        if member is not None:
            members[gateway.name].append(member)
    for name, options in ((n, g.schedulers) for n, (_, g) in by_name.items()):
        opted = {m.name for m in members[name]}
        for model_name in options:
            if model_name not in opted and not problems.has_at_or_below(by_name[name][0]):
                problems.add("Gateway.SchedulerForNoModel", join_path(join_path(by_name[name][0], "schedulers"),
                                                                      model_name),
                             "no model of this name is behind the gateway (its gateway: names another, or none)")
    planned = []
    for name, (path, gateway) in by_name.items():
        listed = members[name]
        if not listed and not problems.has_at_or_below(path):
            problems.add("Gateway.NoModels", path,
                         "no model names this gateway (models[i].gateway): it would have no scheduler to route to")
        if len(listed) > MAX_SCHEDULERS:
            problems.add("Gateway.TooManyModels", path, f"at most {MAX_SCHEDULERS} models behind one gateway (one "
                         "scheduler each)", len(listed))
        served: dict[str, str] = {}
        for member in listed:
            if member.model_name in served:
                problems.add("Gateway.ModelNameDuplicate", path,
                             f"{served[member.model_name]} and {member.name} are both served as model "
                             f"{member.model_name!r}: clients pick a model by that name, so it must be unique",
                             member.model_name)
            served[member.model_name] = member.name
        planned.append(PlannedGateway(path=path, gateway=gateway, namespace=gateway.namespace or context.namespace,
                                      models=tuple(listed)))
    return tuple(planned)


def _gateway_model(model: ModelWorkload, options: SchedulerOptions, at: str,
                   problems: Problems) -> GatewayModel | None:
    """What the gateway needs of one model, and the guide's rules on it."""
    workload = model.workload
    routing = getattr(workload.spec, "intelligent_routing_spec", None)
    if routing is not None and routing.enabled:
        problems.add("Gateway.IntelligentRoutingConflict", at,
                     "a model behind the gateway cannot also use intelligentRoutingSpec (the operator refuses both): "
                     "remove spec.intelligentRoutingSpec or gateway")
    engine, version, port = options.engine_type, None, 8000
    args: tuple[str, ...] = ()
    if isinstance(workload, InferenceEndpointConfig):
        worker = workload.spec.worker
        found, version = engine_of_image(worker.image)
        engine = engine or found
        args = tuple(worker.args or ())
        port = worker.model_invocation_port.container_port
        served_name = workload.spec.model_name
    else:
        served_name = workload.name
    if engine is None:
        problems.add("Gateway.EngineUnknown", at,
                     "the gateway's scheduler must know the model server's engine, and it cannot be read from this "
                     f"model's image: set gateways[].schedulers.{workload.name}.engineType (vllm or sglang)")
        return None
    if engine in ("vllm", "sglang"):
        check_engine_version(engine, version if options.engine_type in (None, engine) else None, args, at, problems)
    return GatewayModel(name=workload.name, model_name=served_name, target_port=port, engine_type=engine,
                        options=options)


# -- the capture entry in front of a gateway ----------------------------------------------------------------
def _plan_gateway_entries(context: PlatformContext, gateways: Sequence[PlannedGateway],
                          models: Sequence[ModelWorkload], portable: Sequence[PortableWorkload],
                          problems: Problems) -> tuple[PlannedGatewayEntry, ...]:
    """Each gateway's capture entry (``gateways[i].entry``): its rules against the gateway and the platform, and its
    role, from the same location its sidecar is given (docs/gateway.md, "The capture entry")."""
    workloads: list[ModelWorkload | PortableWorkload] = [*models, *portable]
    taken = {name: workload.path for workload in workloads
             for name in {workload.name, *(i.service_account for i in workload.identities)}}
    entries = []
    for gateway in gateways:
        options = gateway.gateway.entry
        if options is None:
            continue
        entry = _plan_gateway_entry(context, gateway, options, taken, problems)
        if entry is not None:
            entries.append(entry)
    _check_role_names([(e.path, e.identity) for e in entries] + [(w.path, i) for w in workloads for i in w.identities],
                      problems)
    return tuple(entries)


def _plan_gateway_entry(context: PlatformContext, gateway: PlannedGateway, options: GatewayEntryOptions,
                        taken: Mapping[str, str], problems: Problems) -> PlannedGatewayEntry | None:
    path = join_path(gateway.path, "entry")
    at = GatewayEntryOptions.key_paths(path)
    # The options' own rules (a Python consumer's), except at a key a reader already reported: one mistake, one problem.
    found = Problems()
    options.check(found, at)
    problems.extend(p for p in found if not problems.has_at_or_below(p.path))
    if options.usage_limits is not None:
        options.usage_limits.validate(join_path(path, "usageLimits"), problems)
        # Token budgets without a storeUrl share the platform's store, as a portable server's (usage_store below).
        options.usage_limits.check_store(join_path(path, "usageLimits"), problems,
                                         platform_store=context.usage_store is not None)
    name, jwt, domain = entry_name(gateway.name), gateway.gateway.jwt, options.endpoint_domain
    if len(gateway.name) > MAX_GATEWAY_NAME_WITH_ENTRY:
        problems.add("GatewayEntry.GatewayNameTooLong", join_path(gateway.path, "name"),
                     f"a gateway with an entry has a name of at most {MAX_GATEWAY_NAME_WITH_ENTRY} characters (its "
                     f"entry's Services are <name>-entry and <name>-entry-metrics)", gateway.name)
    if name in taken:
        problems.add("GatewayEntry.NameTaken", join_path(gateway.path, "name"),
                     f"the gateway's entry is named {name}, which {taken[name]} already uses (names also name roles "
                     "and service accounts): rename one of them", gateway.name)
    if jwt is None:
        problems.add("GatewayEntry.NeedsJwt", path,
                     "the entry records the caller from the gateway's token: give the gateway jwt, or remove entry")
    _check_entry_domain(context, gateway, domain, at.at("endpoint_domain"), problems)
    if context.capture is None:
        problems.add("GatewayEntry.NoCaptureDestination", path,
                     f"the entry captures into the platform's capture location ({context.key_paths.at('capture')}), "
                     "and the platform has none")
    if context.vpc_cidr is None:
        problems.add("GatewayEntry.VpcCidrMissing", path,
                     f"needs the platform's VPC CIDR ({context.key_paths.at('vpc_cidr')}): its network policy and its "
                     "load balancer admit the VPC")
    if jwt is None or context.capture is None or context.vpc_cidr is None or gateway.gateway.endpoint_domain is None:
        return None
    digest = capture_prefix_hash(cluster_name=context.cluster_name, namespace=gateway.namespace, name=name)
    capture = context.capture.child(digest, "pod")
    key = context.capture_key
    role_name = context.role_name(name)
    identity = IdentityPlan(name, role_name, context.role_arn(role_name),
                            (ObjectAccess(capture, write=True, purpose="captures (gateway entry)", key=key),),
                            CredentialScope.CAPTURE_SIDECAR, gateway.namespace)
    source_ranges = options.allowed_source_ranges or (context.vpc_cidr,)
    limits = options.usage_limits
    return PlannedGatewayEntry(
        path=path, gateway=gateway.name, namespace=gateway.namespace, options=options,
        upstream_url=f"https://{gateway.gateway.endpoint_domain}", jwt_environment=jwt.capture_environment(),
        capture=capture, capture_key=key, identity=identity, vpc_cidr=context.vpc_cidr,
        source_ranges=tuple(source_ranges), region=context.region,
        usage_store=limits.uses_platform_store(context.usage_store) if limits is not None else None)


def _check_entry_domain(context: PlatformContext, gateway: PlannedGateway, domain: str, at: str,
                        problems: Problems) -> None:
    """The entry's name: the certificate's (its TLS listener serves it), in the zone (ExternalDNS publishes it), and
    not the gateway's own (that is its upstream)."""
    if is_unresolved(domain) or problems.has_at_or_below(at):
        return
    if domain == gateway.gateway.endpoint_domain:
        problems.add("GatewayEntry.SameDomainAsGateway", at,
                     "must be a name of its own: the gateway's endpointDomain is where the entry forwards to", domain)
    if context.zone_name is not None and not domain.endswith("." + context.zone_name):
        problems.add("GatewayEntry.EndpointDomainOutsideZone", at,
                     f"must be a name in the platform zone {context.zone_name}: ExternalDNS may change records there "
                     "only", domain)
    if context.endpoint_domains is not None and domain not in context.endpoint_domains:
        covered = ", ".join(context.endpoint_domains) or "none"
        problems.add("GatewayEntry.EndpointDomainNotCertified", at,
                     f"must be one of the platform's endpoint domains, the names its certificate covers (covered: "
                     f"{covered}); the entry's load balancer serves TLS with that certificate", domain)
