"""Apply a :class:`~hyperpod_inference_iac.charts.plan.WorkloadPlan` to a cluster: one IAM role per planned
identity with exactly the accesses the plan lists for it, the namespace, and one small manifest per
workload (the kubectl provider's request limit is 262 KB), each applied after what it needs.

The roles' grants and the runtimes' settings come from the same plan objects: the prefix a portable
capture sidecar writes is the prefix its role may write, the prefix an NVMe loader reads is the prefix
its role may read.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NoReturn

import cdk8s
from aws_cdk import Annotations, App, AssetStaging, CfnResource, DefaultStackSynthesizer, Stack
from aws_cdk import aws_certificatemanager as acm
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_route53 as route53
from aws_cdk import aws_s3 as s3
from constructs import Construct, IConstruct

from hyperpod_inference_iac.charts.gateway import (
    PlannedGateway,
)
from hyperpod_inference_iac.charts.plan import (
    IdentityPlan,
    ModelWorkload,
    ObjectAccess,
    PlannedGatewayEntry,
    PortableWorkload,
    WorkloadPlan,
    check_grantable_key,
    token_secret_of,
)
from hyperpod_inference_iac.charts.pod_credentials import (
    STS_AUDIENCE,
    CredentialScope,
)
from hyperpod_inference_iac.charts.render import (
    render_workloads,
)
from hyperpod_inference_iac.foundation._package_data import (
    package_dir,
)
from hyperpod_inference_iac.foundation.agreement import (
    GatewayPart,
    WorkloadsPart,
    agree,
)
from hyperpod_inference_iac.foundation.cdk_types import (
    ClusterLike,
)
from hyperpod_inference_iac.foundation.platform_values import (
    AwaitingDeploy,
    PlatformValue,
    PlatformValues,
)
from hyperpod_inference_iac.foundation.props import (
    Props,
    listed,
    prop,
    real_signature,
)
from hyperpod_inference_iac.foundation.risks import (
    RiskWarnings,
    is_private_range,
)
from hyperpod_inference_iac.foundation.validation import (
    PROPS,
    ConfigError,
    KeyPaths,
    Problems,
    is_unresolved,
    join_path,
)
from hyperpod_inference_iac.security.s3_access import (
    bucket_arn,
)
from hyperpod_inference_iac.security.workload_identity import (
    IdentityBinding,
    WorkloadIdentity,
)
from hyperpod_inference_iac.serving.usage_store import UsageStore

SIDECAR_ASSET_EXCLUDES = ["**/__pycache__", "**/*.pyc", ".pytest_cache", "__init__.py"]
SIDECAR_IMAGE_PLATFORM = ecr_assets.Platform.LINUX_AMD64  # the GPU nodes are x86_64


def workloads_part(construct: str, props: InferenceWorkloadsProps) -> WorkloadsPart:
    """What the workloads hold that the operator, the pipeline and the HyperPod cluster must agree with
    (:mod:`~hyperpod_inference_iac.foundation.agreement`): where the plan's workloads write captures (the platform's
    bucket is
    ``capture_bucket``, or its name in ``known_values``), the models' instance types, the gateways."""
    context = props.plan.context
    capture = context.capture
    bucket: Any = None
    if capture is not None:
        bucket = capture.bucket if not isinstance(capture.bucket, PlatformValue) else (
            props.capture_bucket or (props.known_values or {}).get(capture.bucket))
    return WorkloadsPart(
        construct=construct, cluster=props.cluster, capture_bucket=bucket,
        capture_prefix=capture.prefix if capture is not None else None,
        capture_path=join_path(context.key_paths.at("capture"), "prefix"),
        instance_types=tuple((model.name, model.instance_types) for model in props.plan.models),
        gateways=tuple(GatewayPart(name=gateway.name, path=gateway.path) for gateway in props.plan.gateways),
        node_groups_known=bool(context.node_groups))


def sidecar_image_asset(scope: Construct, id: str) -> ecr_assets.DockerImageAsset:
    """The capture sidecar's image asset: the image context shipped in this package, built for x86_64."""
    return ecr_assets.DockerImageAsset(scope, id, directory=str(package_dir("hyperpod_inference_iac.sidecar")),
                                       exclude=SIDECAR_ASSET_EXCLUDES, platform=SIDECAR_IMAGE_PLATFORM)


@functools.cache
def sidecar_image_hash() -> str:
    """The hash of the capture sidecar image asset :class:`InferenceWorkloads` builds: computed by CDK itself, for
    the same asset in a scratch app without staging, so whoever needs the image's URI (GitOps manifests) gets it
    from here, never from a construct of the platform (tests check the two agree)."""
    scratch = Stack(App(context={"aws:cdk:disable-asset-staging": True}), "SidecarImageHash")
    asset_hash = sidecar_image_asset(scratch, "Image").asset_hash
    # CDK keeps a process-wide cache of staged assets, keyed by source and options: the scratch app's unstaged
    # entry (the source's absolute path) would otherwise be reused by the real asset, and cdk.out would name a path
    # of this machine instead of its own staged copy.
    AssetStaging.clear_asset_hash_cache()
    return asset_hash


def sidecar_image_reference(account: str, region: str, asset_hash: str | None = None) -> str:
    """The sidecar image's URI in the CDK bootstrap's container asset repository (default qualifier) of ``account``
    and ``region``: what the cluster's manifests name, known before any deploy."""
    qualifier = DefaultStackSynthesizer.DEFAULT_QUALIFIER
    return (f"{account}.dkr.ecr.{region}.amazonaws.com/cdk-{qualifier}-container-assets-{account}-{region}:"
            f"{asset_hash or sidecar_image_hash()}")


def sidecar_image_uri(stack: Stack, asset: ecr_assets.DockerImageAsset) -> str:
    """The image asset's URI without a token when the stack's account and region are known
    (:func:`sidecar_image_reference`), else the asset's own (a token)."""
    if is_unresolved(stack.account) or is_unresolved(stack.region):
        return asset.image_uri
    return sidecar_image_reference(stack.account, stack.region, asset.asset_hash)


@dataclass(frozen=True, kw_only=True)
class InferenceWorkloadsProps(Props):
    """:class:`InferenceWorkloads`' properties (only Python code passes them; the app's come from its config and its
    other constructs). The plan was checked by ``plan_workloads``; what the construct adds is in :meth:`check`."""

    CONSTRUCT: ClassVar[str] = "InferenceWorkloads"

    cluster: ClusterLike = prop(config=False, doc="The `aws_eks_v2` cluster, an `eks.Cluster` or `eks.ICluster` (its "
                                                  "kubectl provider applies the manifests).")
    plan: WorkloadPlan = prop(config=False, doc="What to deploy, from `plan_workloads`.")
    capture_bucket: s3.IBucket | None = prop(None, config=False, default_doc="none",
                                             doc="The platform's capture bucket, when the plan captures into it "
                                                 "(`PlatformValue.CAPTURE_BUCKET`).")
    capture_key: kms.IKey | None = prop(None, config=False, default_doc="none",
                                        doc="The key of that bucket (`PlatformValue.CAPTURE_KEY_ID`, rendered as its "
                                            "key ARN).")
    tls_bucket: s3.IBucket | None = prop(None, config=False, default_doc="none",
                                         doc="The operator's TLS output bucket, when the plan uses `endpointDomain`.")
    certificate: acm.ICertificate | None = prop(None, config=False, default_doc="none",
                                                doc="The platform certificate, when the plan uses `endpointDomain`.")
    hosted_zone: route53.IHostedZone | None = prop(None, config=False, default_doc="none",
                                                   doc="The platform zone, when the plan uses `endpointDomain`.")
    known_values: Mapping[PlatformValue, str] | None = prop(
        None, config=False, default_doc="none",
        doc="Platform values known before deploy (deterministic names). They win over the tokens of the objects "
            "above, so the applied manifests equal the GitOps ones.")
    sidecar_image: str | None = prop(
        None, config=False,
        default_doc="an image asset built at deploy time from the package's `hyperpod_inference_iac.sidecar` context, "
                    "when the plan needs one",
        doc="The capture sidecar's image URI.")
    apply_workloads: bool = prop(
        True, config=False,
        doc="Apply the workloads' manifests (models, portable servers, gateways). `False` when GitOps owns them "
            "(`WorkloadOwner.GITOPS`): the construct still creates their identities and applies the namespace, and "
            "`manifests` is empty.")
    binding: IdentityBinding = prop(IdentityBinding.IRSA, config=False,
                                    doc="How identities bind to service accounts. Container-scoped identities (an NVMe "
                                        "loader, a capture sidecar) need `IRSA`.")
    depends_on: Sequence[IConstruct] = prop((), config=False,
                                            doc="What the namespace manifest, and so every manifest, waits for (the "
                                                "operator add-on, the device plugin, nodes).")
    external_dns: IConstruct | None = prop(None, config=False, default_doc="none",
                                           doc="Waited for by manifests whose Service publishes a hostname: the "
                                               "[ExternalDns](external-dns.md) construct (its releases are its "
                                               "children).")
    secret_sync: IConstruct | None = prop(None, config=False, default_doc="none",
                                          doc="Waited for by models whose Hugging Face source reads a token Secret.")
    namespace_labels: Mapping[str, str] | None = prop(None, config=False, default_doc="none",
                                                      doc="Labels of the namespace.")
    usage_store: UsageStore | None = prop(
        None, config=False, default_doc="none",
        doc="The platform's budget store ([UsageStore](usage-store.md)), when the plan's context names one "
            "(`PlatformContext.usage_store`, the same `ref`): its address reaches the sidecars that use it "
            "(`PlatformValue.USAGE_STORE_ENDPOINT`) and each of those sidecars' own roles, no other, is granted "
            "`elasticache:Connect` on it.")
    monitored_namespaces: Sequence[str] | None = prop(
        None, config=False, default_doc="not checked",
        doc="Where a [CaptureSidecarMetrics](capture-sidecar-metrics.md) agent watches capture sidecars. A capturing "
            "portable server or gateway capture entry in another namespace is warned (`captureNotMonitored`): its "
            "lost records and 5xx would not be alarmed.")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        """A container-scoped identity needs IRSA (each problem at the identity's role name); the plan's budget
        store is the one given."""
        self._check_usage_store(problems, at)
        binding = self.binding
        if binding in IdentityBinding._value2member_map_ and IdentityBinding(binding) is IdentityBinding.IRSA:
            return
        for identity in self.plan.identities:
            if identity.scope is CredentialScope.POD:
                continue
            problems.add("InferenceWorkloads.ContainerIdentityNeedsIrsa", identity.role_name,
                         f"the {identity.scope.value} of {identity.service_account} has a role of its own, which only "
                         "IRSA can give one container of a pod (EKS Pod Identity gives every container, the model "
                         "server among them, the same role): use IdentityBinding.IRSA", str(binding))

    def _check_usage_store(self, problems: Problems, at: KeyPaths) -> None:
        users = self.plan.usage_store_users
        if users and self.usage_store is None:
            problems.add("InferenceWorkloads.UsageStoreMissing", at.at("usage_store"),
                         f"the plan's sidecars {', '.join(w.name for w in users)} share budgets through the "
                         "platform's store (PlatformContext.usage_store): pass the UsageStore that creates it")
        elif users and self.usage_store is not None and self.plan.context.usage_store != self.usage_store.ref:
            problems.add("InferenceWorkloads.UsageStoreMismatch", at.at("usage_store"),
                         f"is the store {self.usage_store.ref.cache_name}, but the plan's sidecars were planned for "
                         f"{self.plan.context.usage_store}: build the plan's context with usage_store=store.ref")


@real_signature
class InferenceWorkloads(Construct):
    """The workloads of one plan on ``cluster``.

    Properties: :class:`InferenceWorkloadsProps` (each with its type, default and meaning); ``props`` keeps them.

    Container-scoped identities (a portable server's loader and sidecar, an operator model's NVMe loader) trust
    their own token audience; on a cluster built in this app (``aws_eks_v2.Cluster``) the audiences are added to its
    OIDC provider's client IDs, on an imported one a warning names them (:func:`register_token_audiences`). They need
    IRSA: EKS Pod Identity gives every container of a pod the same role.

    Attributes: ``identities`` (role name -> :class:`~hyperpod_inference_iac.WorkloadIdentity`),
    ``namespace_manifest``, ``manifests`` (chart id -> ``KubernetesManifest``), ``values`` (what the
    manifests were rendered with), ``sidecar_image`` (the asset, when built here).
    """

    PROPS: ClassVar[type[Props]] = InferenceWorkloadsProps

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: ClusterLike,
        plan: WorkloadPlan,
        capture_bucket: s3.IBucket | None = InferenceWorkloadsProps.capture_bucket,
        capture_key: kms.IKey | None = InferenceWorkloadsProps.capture_key,
        tls_bucket: s3.IBucket | None = InferenceWorkloadsProps.tls_bucket,
        certificate: acm.ICertificate | None = InferenceWorkloadsProps.certificate,
        hosted_zone: route53.IHostedZone | None = InferenceWorkloadsProps.hosted_zone,
        known_values: Mapping[PlatformValue, str] | None = InferenceWorkloadsProps.known_values,
        sidecar_image: str | None = InferenceWorkloadsProps.sidecar_image,
        apply_workloads: bool = InferenceWorkloadsProps.apply_workloads,
        binding: IdentityBinding = InferenceWorkloadsProps.binding,
        depends_on: Sequence[IConstruct] = InferenceWorkloadsProps.depends_on,
        external_dns: IConstruct | None = InferenceWorkloadsProps.external_dns,
        secret_sync: IConstruct | None = InferenceWorkloadsProps.secret_sync,
        namespace_labels: Mapping[str, str] | None = InferenceWorkloadsProps.namespace_labels,
        usage_store: UsageStore | None = InferenceWorkloadsProps.usage_store,
        monitored_namespaces: Sequence[str] | None = InferenceWorkloadsProps.monitored_namespaces,
    ) -> None:
        """Create the construct. Its properties (:class:`InferenceWorkloadsProps`, kept as ``self.props``):

        :param cluster: The `aws_eks_v2` cluster, an `eks.Cluster` or `eks.ICluster` (its kubectl provider
            applies the manifests). Default: required.
        :param plan: What to deploy, from `plan_workloads`. Default: required.
        :param capture_bucket: The platform's capture bucket, when the plan captures into it
            (`PlatformValue.CAPTURE_BUCKET`). Default: ``None`` (none).
        :param capture_key: The key of that bucket (`PlatformValue.CAPTURE_KEY_ID`, rendered as its key ARN).
            Default: ``None`` (none).
        :param tls_bucket: The operator's TLS output bucket, when the plan uses `endpointDomain`. Default:
            ``None`` (none).
        :param certificate: The platform certificate, when the plan uses `endpointDomain`. Default: ``None``
            (none).
        :param hosted_zone: The platform zone, when the plan uses `endpointDomain`. Default: ``None`` (none).
        :param known_values: Platform values known before deploy (deterministic names). They win over the tokens
            of the objects above, so the applied manifests equal the GitOps ones. Default: ``None`` (none).
        :param sidecar_image: The capture sidecar's image URI. Default: ``None`` (an image asset built at deploy
            time from the package's ``hyperpod_inference_iac.sidecar`` context, when the plan needs one).
        :param apply_workloads: Apply the workloads' manifests (models, portable servers, gateways). `False`
            when GitOps owns them (`WorkloadOwner.GITOPS`): the construct still creates their identities and
            applies the namespace, and `manifests` is empty. Default: ``True``.
        :param binding: How identities bind to service accounts. Container-scoped identities (an NVMe loader, a
            capture sidecar) need `IRSA`. Default: ``IdentityBinding.IRSA``.
        :param depends_on: What the namespace manifest, and so every manifest, waits for (the operator add-on,
            the device plugin, nodes). Default: ``()``.
        :param external_dns: Waited for by manifests whose Service publishes a hostname: the
            [ExternalDns](external-dns.md) construct (its releases are its children). Default: ``None`` (none).
        :param secret_sync: Waited for by models whose Hugging Face source reads a token Secret. Default:
            ``None`` (none).
        :param namespace_labels: Labels of the namespace. Default: ``None`` (none).
        :param usage_store: The platform's budget store ([UsageStore](usage-store.md)), when the plan's context
            names one (`PlatformContext.usage_store`, the same `ref`): its address reaches the sidecars that use
            it (`PlatformValue.USAGE_STORE_ENDPOINT`) and each of those sidecars' own roles, no other, is
            granted `elasticache:Connect` on it. Default: ``None`` (none).
        :param monitored_namespaces: Where a [CaptureSidecarMetrics](capture-sidecar-metrics.md) agent watches
            capture sidecars. A capturing portable server or gateway capture entry in another namespace is
            warned (`captureNotMonitored`): its lost records and 5xx would not be alarmed. Default: ``None``
            (not checked).
        """
        super().__init__(scope, id)
        self.props = props = InferenceWorkloadsProps(
            cluster=cluster, plan=plan, capture_bucket=capture_bucket, capture_key=capture_key, tls_bucket=tls_bucket,
            certificate=certificate, hosted_zone=hosted_zone, known_values=known_values, sidecar_image=sidecar_image,
            apply_workloads=apply_workloads, binding=binding, depends_on=listed(depends_on),
            external_dns=external_dns, secret_sync=secret_sync, namespace_labels=namespace_labels,
            usage_store=usage_store, monitored_namespaces=listed(monitored_namespaces))
        props.raise_if_invalid(f"InferenceWorkloads {self.node.path}")
        agree(self, workloads_part(f"InferenceWorkloads {self.node.path}", props))
        stack = Stack.of(self)
        self.plan = plan
        self._capture_bucket, self._capture_key = capture_bucket, capture_key
        self.sidecar_image: ecr_assets.DockerImageAsset | None = None
        if sidecar_image is None and plan.needs_sidecar_image:
            # linux/amd64 whatever builds it: the sidecar runs beside the model server on the GPU nodes, which are
            # x86_64 (GpuNodeGroup); an arm64 laptop would otherwise build an image those nodes cannot run.
            self.sidecar_image = sidecar_image_asset(self, "CaptureSidecarImage")
            sidecar_image = sidecar_image_uri(stack, self.sidecar_image)
        from_objects: dict[PlatformValue, str] = {}
        for value, source in ((PlatformValue.CAPTURE_BUCKET, capture_bucket and capture_bucket.bucket_name),
                              (PlatformValue.CAPTURE_KEY_ID, capture_key and capture_key.key_arn),
                              (PlatformValue.TLS_BUCKET, tls_bucket and tls_bucket.bucket_name),
                              (PlatformValue.CERTIFICATE_ARN, certificate and certificate.certificate_arn),
                              (PlatformValue.HOSTED_ZONE_ID, hosted_zone and hosted_zone.hosted_zone_id),
                              (PlatformValue.SIDECAR_IMAGE, sidecar_image),
                              (PlatformValue.USAGE_STORE_ENDPOINT, usage_store and usage_store.endpoint)):
            if source:
                from_objects[value] = source
        self.values = PlatformValues(dict(known_values or {})).merged(from_objects)

        container_scoped = [i for i in plan.identities if i.scope is not CredentialScope.POD]
        if container_scoped:  # (each with IRSA: InferenceWorkloadsProps.check)
            register_token_audiences(self, cluster, sorted({i.audience for i in container_scoped}))
        self.identities = {identity.role_name: self._identity(cluster, identity, binding)
                           for identity in plan.identities}
        # The budget store: each sidecar that uses it may connect, with its own role (no other role of the plan).
        for store_user in plan.usage_store_users if usage_store is not None else ():
            # (the plan: a portable user captures; an entry always does)
            assert usage_store is not None and store_user.capture_identity is not None
            usage_store.grant_connect(self.identities[store_user.capture_identity.role_name].role)
        app = cdk8s.App()
        rendered = render_workloads(app, plan, self.values, namespace_labels=namespace_labels)
        if rendered.waiting:
            _missing_resources(self, {chart: awaiting.missing for chart, awaiting in rendered.waiting.items()})
        self.namespace_manifest = cluster.add_cdk8s_chart("Namespace", rendered.namespace)
        for dependency in depends_on:
            self.namespace_manifest.node.add_dependency(dependency)
        self.manifests: dict[str, eks.KubernetesManifest] = {}
        for chart_id, chart in rendered.charts.items() if apply_workloads else ():
            manifest = cluster.add_cdk8s_chart(chart_id, chart)
            manifest.node.add_dependency(self.namespace_manifest)
            if chart_id in rendered.gateways:  # (after the models behind it: the operator merges their entries)
                gateway = rendered.gateways[chart_id]
                for model in gateway.models:
                    if (behind := self.manifests.get(f"model-{model.name}")) is not None:
                        manifest.node.add_dependency(behind)
                self.manifests[chart_id] = manifest
                gateway_warnings = RiskWarnings()
                warn_gateway(gateway_warnings, gateway)
                gateway_warnings.annotate(manifest)
                continue
            if (entry := rendered.entries.get(chart_id)) is not None:  # a gateway's capture entry: its role, its name
                manifest.node.add_dependency(self.identities[entry.identity.role_name])
                if external_dns is not None:
                    manifest.node.add_dependency(external_dns)
                self.manifests[chart_id] = manifest
                entry_warnings = RiskWarnings()
                warn_entry(entry_warnings, entry, monitored_namespaces=monitored_namespaces)
                entry_warnings.annotate(manifest)
                continue
            workload = rendered.workloads[chart_id]
            for identity in workload.identities:
                manifest.node.add_dependency(self.identities[identity.role_name])
            hostname = getattr(getattr(workload, "server", None), "hostname", None)
            if hostname and external_dns is not None:
                manifest.node.add_dependency(external_dns)
            if secret_sync is not None and isinstance(workload, ModelWorkload) \
                    and token_secret_of(workload.workload) is not None:
                manifest.node.add_dependency(secret_sync)
            self.manifests[chart_id] = manifest
            warnings = RiskWarnings()
            warn_workload(warnings, workload, sidecar_image=self._sidecar_image_by_tag(workload),
                          monitored_namespaces=monitored_namespaces)
            warnings.annotate(manifest)

    def _sidecar_image_by_tag(self, workload: ModelWorkload | PortableWorkload) -> str | None:
        """The capture sidecar's image when it is named by a tag someone could move. The image built here is not:
        its tag is the asset's content hash, in the bootstrap's container asset repository, whose tags are
        immutable."""
        if not isinstance(workload, PortableWorkload) or workload.capture is None or self.sidecar_image is not None:
            return None
        image = self.values.known.get(PlatformValue.SIDECAR_IMAGE)
        if image is None or is_unresolved(image) or _pinned_by_digest(image):
            return None
        return image

    def warn_about_replacements(self, replacements: Mapping[str, Sequence[str]]) -> None:
        """Warn on each workload whose custom resource changed in a way the operator refuses to apply in place
        (``StagedManifests.replacements`` of the GitOps rendering): deploying it fails until the resource is
        deleted and created again, which takes the endpoint down meanwhile."""
        for chart_id, reasons in sorted(replacements.items()):
            manifest = self.manifests.get(chart_id)
            if manifest is None:
                continue
            Annotations.of(manifest).add_warning_v2(
                "@hyperpod-inference-iac/InferenceWorkloads:needsReplacement",
                f"{chart_id}: {'; '.join(reasons)}. The operator applies this only to a new resource: delete the "
                "workload and deploy it again (its endpoint is down in between), or keep the previous setting")

    def _identity(self, cluster: ClusterLike, identity: IdentityPlan, binding: IdentityBinding) -> WorkloadIdentity:
        workload_identity = WorkloadIdentity(
            self, f"Identity-{identity.service_account}{identity.construct_suffix}", cluster=cluster,
            namespace=identity.namespace or self.plan.context.namespace, service_account=identity.service_account,
            role_name=identity.role_name, binding=binding, audience=identity.audience)
        for access in identity.accesses:
            arn, key = self._bucket_arn(access), self._key(identity, access)
            if access.write:
                workload_identity.grant_write_objects(bucket_arn=arn, prefix=access.location.prefix, key=key)
            else:
                workload_identity.grant_read_objects(bucket_arn=arn, prefix=access.location.prefix, key=key)
        return workload_identity

    def _bucket_arn(self, access: ObjectAccess) -> str:
        bucket = access.location.bucket
        if bucket is PlatformValue.CAPTURE_BUCKET:
            if self._capture_bucket is None:
                _missing_resources(self, {access.purpose: (bucket,)})
            return bucket_arn(self._capture_bucket)
        if isinstance(bucket, PlatformValue):
            _missing_resources(self, {access.purpose: (bucket,)})
        return f"arn:{Stack.of(self).partition}:s3:::{bucket}"

    def _key(self, identity: IdentityPlan, access: ObjectAccess) -> kms.IKey | None:
        key = access.key
        if key is None:
            return None
        if key is PlatformValue.CAPTURE_KEY_ID:
            if self._capture_key is None:
                _missing_resources(self, {access.purpose: (key,)})
            return self._capture_key
        problems = Problems()
        check_grantable_key(problems, access.purpose, key)  # (the plan's rule: a plan made without it)
        problems.raise_if_any(f"InferenceWorkloads {self.node.path}")
        assert isinstance(key, str)  # (a platform value other than the capture key is not grantable: refused above)
        return kms.Key.from_key_arn(self, f"Key-{identity.service_account}-{len(self.node.children)}", key)


def register_token_audiences(scope: Construct, cluster: ClusterLike, audiences: Sequence[str]) -> None:
    """Let the cluster's OIDC provider accept tokens of ``audiences`` (container-scoped identities' own), besides
    ``sts.amazonaws.com``. The provider of an ``aws_eks_v2.Cluster`` of this app gets them in its client ID list
    (the native ``AWS::IAM::OIDCProvider`` and the older custom resource alike); an imported cluster's provider is
    not this app's to change, so a warning names the client IDs to add
    (``aws iam add-client-id-to-open-id-connect-provider``)."""
    provider = cluster.open_id_connect_provider if isinstance(cluster, eks.Cluster) else None
    resources = [child for child in provider.node.find_all() if isinstance(child, CfnResource)] if provider else []
    native = [r for r in resources if isinstance(r, iam.CfnOIDCProvider)]
    custom = [r for r in resources if r.cfn_resource_type.startswith("Custom::") and not native]
    if native or custom:
        for resource in native or custom:
            resource.add_property_override("ClientIdList" if native else "ClientIDList", [STS_AUDIENCE, *audiences])
        return
    Annotations.of(scope).add_warning_v2(
        "@hyperpod-inference-iac/InferenceWorkloads:registerTokenAudiences",
        f"the cluster's OIDC provider must accept the token audiences {', '.join(audiences)} (the NVMe loaders' and "
        "capture sidecars' own): add each as a client ID (aws iam add-client-id-to-open-id-connect-provider), then "
        "acknowledge this warning")


def warn_workload(warnings: RiskWarnings, workload: ModelWorkload | PortableWorkload, *,
                  sidecar_image: str | None = None, monitored_namespaces: Sequence[str] | None = None) -> None:
    """The risky but legal choices of one planned workload, under the path it was planned from (``models[0]``,
    ``portable[1]``: a config file's key paths). :class:`InferenceWorkloads` puts them on the workload's manifest,
    where an acknowledgment of their id silences them; a config loader prints them. ``sidecar_image``: the capture
    sidecar's image when it is named by a tag someone could move (None: built here, or pinned).
    ``monitored_namespaces``: where a capture sidecar metrics agent watches (None: not checked)."""
    _warn_about_capture(warnings, workload)
    _warn_about_images(warnings, workload, sidecar_image)
    if isinstance(workload, PortableWorkload):
        _warn_about_exposure(warnings, workload)
        if monitored_namespaces is not None and workload.capture is not None \
                and workload.namespace not in monitored_namespaces:
            warnings.add("InferenceWorkloads:captureNotMonitored", join_path(workload.path, "namespace"),
                         f"the capture sidecar metrics agent watches {', '.join(monitored_namespaces)} only: lost "
                         f"records, upload failures and 5xx of {workload.name} in {workload.namespace} are not "
                         "alarmed; run it in a watched namespace, or add a CaptureSidecarMetrics for its namespace")


def warn_entry(warnings: RiskWarnings, entry: PlannedGatewayEntry, *,
               monitored_namespaces: Sequence[str] | None = None) -> None:
    """A gateway's capture entry (``gateways[i].entry``) in a namespace no capture sidecar metrics agent watches
    (``monitored_namespaces``; None: not checked): its sidecar's lost records, upload failures and 5xx would not be
    alarmed, as a portable server's would not be there (``captureNotMonitored``)."""
    if monitored_namespaces is not None and entry.namespace not in monitored_namespaces:
        warnings.add("InferenceWorkloads:captureNotMonitored", entry.path,
                     f"the capture sidecar metrics agent watches {', '.join(monitored_namespaces)} only: lost records, "
                     f"upload failures and 5xx of gateway {entry.gateway}'s capture entry in {entry.namespace} are "
                     "not alarmed; run the gateway in a watched namespace, or add a CaptureSidecarMetrics for its "
                     "namespace")


def warn_gateway(warnings: RiskWarnings, gateway: PlannedGateway) -> None:
    """An Inference Gateway that accepts requests without a token (allowed only with a reason, and still said)."""
    if gateway.gateway.jwt is None:
        warnings.add("InferenceWorkloads:gatewayUnauthenticated", join_path(gateway.path, "unauthenticatedReason"),
                     f"gateway {gateway.name} accepts every request that reaches it (no spec.auth.jwt): anyone who can "
                     f"reach its load balancer can call {', '.join(m.name for m in gateway.models)} and be captured "
                     "without a caller; give it a JWT provider")


def _capture_tiers(workload: ModelWorkload | PortableWorkload) -> list[tuple[str, str, Any]]:
    """(tier, its key path, its block) of each capture tier a workload names."""
    if isinstance(workload, PortableWorkload):
        capture = workload.server.data_capture
        return [("modelPod", join_path(workload.path, "dataCapture.modelPod"), capture.model_pod)] \
            if capture is not None and capture.model_pod is not None else []
    capture = getattr(workload.workload.spec, "data_capture", None)
    if capture is None:
        return []
    return [(tier, join_path(workload.path, f"spec.dataCapture.{tier}"), block)
            for tier, block in (("sagemakerEndpoint", capture.sagemaker_endpoint), ("modelPod", capture.model_pod))
            if block is not None]


def _warn_about_capture(warnings: RiskWarnings, workload: ModelWorkload | PortableWorkload) -> None:
    for tier, path, block in _capture_tiers(workload):
        if not block.enabled:
            continue
        if block.kms_key_id is None:
            warnings.add("InferenceWorkloads:captureWithoutKmsKey", join_path(path, "kmsKeyId"),
                         f"{workload.name}: the {tier} capture tier has no kmsKeyId, so captured prompts are "
                         "encrypted with the bucket's default key only; name a customer-managed key (the brief asks "
                         "for one on tiers 1 and 3)")
        sampling = block.initial_sampling_percentage
        if sampling == 100 or (sampling is None and tier == "modelPod"):
            warnings.add("InferenceWorkloads:fullSampling", join_path(path, "initialSamplingPercentage"),
                         f"{workload.name}: the {tier} capture tier keeps every request (initialSamplingPercentage "
                         f"{sampling if sampling is not None else 'unset: 100'}); start production sampling low")


def _pinned_by_digest(image: str) -> bool:
    return "@sha256:" in image


def _images_by_tag(workload: ModelWorkload | PortableWorkload) -> list[str]:
    """The images a workload's pods run that are named by tag only (the sidecar's is checked apart)."""
    if isinstance(workload, PortableWorkload):
        server = workload.server
        images = [server.image or server.preset.image, server.model_cache.aws_cli_image]
    else:
        model = workload.workload
        worker = getattr(model.spec, "worker", None)
        cache = getattr(model, "nvme_cache", None)
        images = [image for image in (getattr(worker, "image", None), getattr(cache, "aws_cli_image", None)) if image]
    return [image for image in images if not is_unresolved(image) and not _pinned_by_digest(image)]


def _warn_about_images(warnings: RiskWarnings, workload: ModelWorkload | PortableWorkload,
                       sidecar_image: str | None) -> None:
    """One warning per workload whose images are named by tag only: a registry lets whoever may push move a tag to
    other content, so the same manifest can run other code tomorrow. A digest cannot move."""
    images = [*_images_by_tag(workload), *([sidecar_image] if sidecar_image else [])]
    if images:
        warnings.add(
            "InferenceWorkloads:imageNotPinnedByDigest", workload.path,
            f"{workload.name}: {', '.join(images)} named by tag only; whoever may push to the registry can move a "
            "tag to other content. Pin each image by digest (name@sha256:<digest> of the image you reviewed), or "
            "acknowledge this warning where the tags are immutable (your own mirror with immutable tags)")


def _warn_about_exposure(warnings: RiskWarnings, workload: PortableWorkload) -> None:
    """Who reaches a portable server: without an API key, anyone who reaches its port; a source range outside
    private address space or open to every address widens who that is. Warned, not refused: the load balancer is
    internal (the internet itself never reaches it), and a network may authenticate in front of the server."""
    server, path = workload.server, workload.path
    reached_by = "any pod of the cluster" + (" and every client its load balancer admits" if server.hostname else "")
    if not server.api_key_enabled:
        warnings.add("InferenceWorkloads:noApiKey",
                     join_path(path, "apiKey" if server.api_key is None else "apiKey.enabled"),
                     f"{workload.name} has no API key: {reached_by} is served without authentication, and its "
                     "captures name no caller; set apiKey.enabled: true (the key is generated and synced for you), "
                     "or acknowledge what authenticates in front of it")
    for index, cidr in enumerate(server.allowed_source_ranges or ()):
        if is_unresolved(cidr):
            continue
        try:
            network = ipaddress.ip_network(cidr, strict=True)
        except ValueError:
            continue  # (refused: Portable.SourceRangeInvalid)
        at = join_path(join_path(path, "allowedSourceRanges"), index)
        if network.prefixlen == 0:
            warnings.add("InferenceWorkloads:sourceRangeOpenToAll", at,
                         f"{cidr} admits every address to {workload.name}'s load balancer: it is internal, so not the "
                         "internet itself, but every network routed into the VPC (peered VPCs, VPNs, Direct Connect, "
                         "Transit Gateway) reaches it; list the clients' ranges (leave the key out for the VPC's "
                         "CIDR)")
        elif not is_private_range(cidr, workload.vpc_cidr):
            warnings.add("InferenceWorkloads:sourceRangeNotPrivate", at,
                         f"{cidr} is not private address space (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, "
                         f"100.64.0.0/10, fc00::/7) nor inside the VPC's CIDR {workload.vpc_cidr}: {workload.name}'s "
                         "internal load balancer admits those public addresses wherever a network routes them in "
                         "(a proxy or Direct Connect that keeps client addresses), and a mistyped range admits "
                         "strangers; list private ranges, or acknowledge the public ones with whom they belong to")


def _missing_resources(scope: Construct, needs: Mapping[str, Sequence[PlatformValue]]) -> NoReturn:
    problems = Problems()
    for what, values in needs.items():
        names = ", ".join(value.name.lower() for value in values)
        problems.add("InferenceWorkloads.MissingPlatformResource", what,
                     f"the plan refers to the platform's {names}: pass it to InferenceWorkloads (or known_values)")
    raise ConfigError(problems.items, source=f"InferenceWorkloads {scope.node.path}")


__all__ = ["AwaitingDeploy", "InferenceWorkloads", "InferenceWorkloadsProps", "sidecar_image_hash",
           "sidecar_image_reference", "sidecar_image_uri", "warn_entry", "warn_gateway",
           "warn_workload"]
