"""Hugging Face token: kept in AWS Secrets Manager, synced into the Kubernetes Secret the operator
reads (``tokenSecretRef``) by the External Secrets Operator. The token value never appears in a
template, a manifest, an environment variable in ``dist/`` or a log line.

Flow: ``aws secretsmanager put-secret-value --secret-id <name> --secret-string hf_...`` (once, by a
person or a pipeline with that right) -> ESO's ``SecretStore`` in the inference namespace
authenticates as the reader service account (IRSA, ``GetSecretValue`` on this one secret only) ->
``ExternalSecret`` writes the Secret ``tokenSecretRef`` names, key ``token``.

The Kubernetes objects come from :meth:`SecretSync.manifests`, which both the construct (applied by the
kubectl provider) and the GitOps hand-off (``dist/``) render.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from aws_cdk import RemovalPolicy, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from hyperpod_inference_iac.foundation.cdk_types import ClusterLike
from hyperpod_inference_iac.foundation.helm import HelmRelease
from hyperpod_inference_iac.foundation.nag import acknowledge
from hyperpod_inference_iac.foundation.patterns import iam_role_arn
from hyperpod_inference_iac.foundation.props import Props, prop, real_signature
from hyperpod_inference_iac.security.secrets_key import encrypt_secret, grant_secret_read
from hyperpod_inference_iac.security.workload_identity import service_account_principal

EXTERNAL_SECRETS = HelmRelease(
    release="external-secrets", chart="external-secrets", repository="https://charts.external-secrets.io",
    version="0.19.2", namespace="external-secrets", create_namespace=True, values={"installCRDs": True},
    purpose="syncs the Hugging Face token from Secrets Manager into the inference namespace",
)
SECRET_STORE = "aws-secrets-manager"
#: The versions a rotated key's ``keys_file`` lists (``SecretSync``), by the name of their entry: the current one,
#: the one a rotation is about to make current (the sidecars accept it before clients can read it), the one it
#: replaced (clients that read it before the rotation keep working until the next).
ROTATED_STAGES = {"current": "AWSCURRENT", "pending": "AWSPENDING", "previous": "AWSPREVIOUS"}


@dataclass(frozen=True)
class SyncedCaller:
    """One caller of a ``keys_file`` with several callers (:class:`SecretSync`'s ``keys_file_callers``): its id
    (every line of its keys, whatever their version) and the Secrets Manager secret that holds its key.
    ``client_role_arns``: who may read that key (:class:`~hyperpod_inference_iac.ApiKeySync`). ``revoked``: its
    secret is kept but none of its lines are synced."""

    caller_id: str
    secrets_manager_name: str
    client_role_arns: tuple[str, ...] = ()
    revoked: bool = False


@dataclass(frozen=True, kw_only=True)
class SecretSync(Props):
    """One Secrets Manager secret kept in sync as one Kubernetes Secret (:class:`HuggingFaceTokenSync`'s ``sync``,
    and each of :class:`~hyperpod_inference_iac.ApiKeySync`'s)."""

    namespace: str = prop(config=False, doc="Where the Secret (and the workloads reading it) live.")
    secrets_manager_name: str = prop(config=False, doc="The Secrets Manager secret's name.")
    kubernetes_secret_name: str = prop("hf-token", config=False,
                                       doc="The Kubernetes Secret `tokenSecretRef.name` names; also the "
                                           "`ExternalSecret`'s name.")
    key: str = prop("token", config=False, doc="The key in that Secret (`tokenSecretRef.key`).")
    reader_service_account: str = prop("hf-token-reader", config=False,
                                       doc="The service account External Secrets authenticates as.")
    reader_role_name: str | None = prop(None, config=False, default_doc="generated",
                                        doc="The reader role's name; fixed so GitOps manifests can name it.")
    refresh_interval_seconds: int = prop(3600, config=False,
                                         doc="How often External Secrets re-reads the secret (`refreshInterval: "
                                             "<n>s`).")
    secret_store_name: str = prop(SECRET_STORE, config=False,
                                  doc="The `SecretStore` the `ExternalSecret` reads through. Each sync authenticates "
                                      "as its own reader, so each needs a store of its own "
                                      "([ApiKeySync](api-key-sync.md) names one per server).")
    keys_file: str | None = prop(
        None, config=False, default_doc="none",
        doc="A second key of the Secret that lists every version a client may hold as `caller_id:key` lines (the "
            "format of the capture sidecar's `API_KEYS_FILE`): the current one, and while a rotation runs or after "
            "it the pending and the previous one (`ROTATED_STAGES`). `key` still holds the current version alone. "
            "Stages Secrets Manager does not have are left out.")
    keys_file_caller_id: str | None = prop(
        None, config=False, default_doc="`kubernetes_secret_name`",
        doc="The caller id of every line of `keys_file`: one id for the key, whatever its version, so records name "
            "the caller the same way across rotations.")
    keys_file_callers: tuple[SyncedCaller, ...] = prop(
        (), config=False, default_doc="one: `keys_file_caller_id`, the secret `secrets_manager_name`",
        doc="Several callers in one `keys_file`, each with a secret of its own (`SyncedCaller`): every caller's "
            "current, pending and previous key as `caller_id:key` lines, a caller whose secret is missing or "
            "deleted left out alone; `key` holds the first synced caller's current key. Revoked callers are not "
            "read at all.")

    def callers(self) -> tuple[SyncedCaller, ...]:
        """Every caller of the keys file, revoked ones included (without ``keys_file_callers``: the one caller of
        ``secrets_manager_name``)."""
        return self.keys_file_callers or (SyncedCaller(self.keys_file_caller_id or self.kubernetes_secret_name,
                                                       self.secrets_manager_name),)

    @property
    def synced_callers(self) -> tuple[SyncedCaller, ...]:
        return tuple(caller for caller in self.callers() if not caller.revoked)

    def manifests(self, *, region: str, reader_role_arn: str) -> list[dict[str, Any]]:
        """ServiceAccount (IRSA), SecretStore and ExternalSecret."""
        target: dict[str, Any] = {"name": self.kubernetes_secret_name, "creationPolicy": "Owner"}
        data: list[dict[str, Any]] = [{"secretKey": self.key, "remoteRef": {"key": self.secrets_manager_name}}]
        if self.keys_file is not None:
            target, data = self._with_callers(target) if self.keys_file_callers else self._with_keys_file(target)
        return [
            {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": self.reader_service_account, "namespace": self.namespace,
                          "annotations": {"eks.amazonaws.com/role-arn": reader_role_arn}}},
            {"apiVersion": "external-secrets.io/v1", "kind": "SecretStore",
             "metadata": {"name": self.secret_store_name, "namespace": self.namespace},
             "spec": {"provider": {"aws": {
                 "service": "SecretsManager", "region": region,
                 "auth": {"jwt": {"serviceAccountRef": {"name": self.reader_service_account}}}}}}},
            {"apiVersion": "external-secrets.io/v1", "kind": "ExternalSecret",
             "metadata": {"name": self.kubernetes_secret_name, "namespace": self.namespace},
             "spec": {"refreshInterval": f"{self.refresh_interval_seconds}s",
                      "secretStoreRef": {"name": self.secret_store_name, "kind": "SecretStore"},
                      "target": target, "data": data}},
        ]

    def _with_keys_file(self, target: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Every stage of :data:`ROTATED_STAGES` read as its own entry, and a template that writes ``key`` (the
        current version) and ``keys_file`` (one line per distinct version). A stage Secrets Manager does not have
        (no rotation yet: no previous; none running: no pending) is skipped, not an error, with
        ``deletionPolicy: Delete`` (External Secrets skips a missing entry unless the policy is ``Retain``; only
        when every entry is missing, the secret itself, is the Kubernetes Secret deleted)."""
        assert self.keys_file is not None
        caller = self.keys_file_caller_id or self.kubernetes_secret_name
        data = [{"secretKey": name, "remoteRef": {"key": self.secrets_manager_name, "version": stage}}
                for name, stage in ROTATED_STAGES.items()]
        # Go text/template (External Secrets' engine v2, missingkey=error): `index` yields "" for an entry that was
        # skipped where `.pending` would fail; a stage that holds the current version is not listed twice.
        other = ('\n{{{{- with index . "{name}" }}}}{{{{ if ne . $.current }}}}'
                 '\n{caller}:{{{{ . }}}}{{{{ end }}}}{{{{ end }}}}')
        lines = f"{caller}:{{{{ .current }}}}" + "".join(
            other.format(name=name, caller=caller) for name in ROTATED_STAGES if name != "current") + "\n"
        template = {"engineVersion": "v2", "mergePolicy": "Replace",
                    "data": {self.key: "{{ .current }}", self.keys_file: lines}}
        return {**target, "deletionPolicy": "Delete", "template": template}, data

    def _with_callers(self, target: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Several callers (``keys_file_callers``): each synced caller's stages read as entries ``<caller>.<stage>``,
        and a template that writes each caller's distinct versions as ``<caller>:<key>`` lines. Every entry, the
        current one included, is read with ``index`` inside ``with``: a caller whose secret is gone (External
        Secrets skips its entries with ``deletionPolicy: Delete``) loses its lines and no other caller's."""
        assert self.keys_file is not None
        callers = self.synced_callers
        data = [{"secretKey": f"{caller.caller_id}.{name}",
                 "remoteRef": {"key": caller.secrets_manager_name, "version": stage}}
                for caller in callers for name, stage in ROTATED_STAGES.items()]
        # Go text/template (engine v2, missingkey=error): `index` of a skipped entry yields "", which `with` skips.
        current = '{{{{- with index . "{id}.current" }}}}{id}:{{{{ . }}}}\n{{{{ end }}}}'
        other = ('{{{{- with index . "{id}.{name}" }}}}{{{{ if ne . (index $ "{id}.current") }}}}{id}:{{{{ . }}}}\n'
                 '{{{{ end }}}}{{{{ end }}}}')
        lines = "".join(current.format(id=caller.caller_id) + "".join(
            other.format(id=caller.caller_id, name=name) for name in ROTATED_STAGES if name != "current")
            for caller in callers)
        template = {"engineVersion": "v2", "mergePolicy": "Replace",
                    "data": {self.key: f'{{{{ index . "{callers[0].caller_id}.current" }}}}', self.keys_file: lines}}
        return {**target, "deletionPolicy": "Delete", "template": template}, data


@dataclass(frozen=True, kw_only=True)
class HuggingFaceTokenSyncProps(Props):
    """:class:`HuggingFaceTokenSync`'s properties (only Python code passes them; the app's sync is
    ``PlatformConfig.hugging_face_sync``). No rule of their own: the plan checks the workloads that read the token
    (``HuggingFace.TokenSecretNotSynced``, ``HuggingFace.TokenSecretKeyMissing``)."""

    CONSTRUCT: ClassVar[str] = "HuggingFaceTokenSync"

    cluster: ClusterLike = prop(config=False, doc="The `aws_eks_v2` cluster to sync into (with its OIDC provider): an "
                                "`eks.Cluster` or an imported `eks.ICluster`.")
    sync: SecretSync = prop(config=False, doc="What to sync where (`SecretSync`).")
    install_operator: bool = prop(True, config=False,
                                  doc="Install External Secrets Operator with Helm (`EXTERNAL_SECRETS`, with "
                                      "`wait=True`). Turn it off if the cluster runs it already.")
    encryption_key: kms.IKey | None = prop(
        None, config=False, default_doc="Secrets Manager's `aws/secretsmanager`",
        doc="A customer managed key for the secret, usually a [SecretsKey](secrets-key.md)'s `key`: the secret is "
            "registered on its policy and the reader may decrypt it through Secrets Manager only. Another key is "
            "warned about (`SecretsKey:unmanagedKeyPolicy`): its policy must allow that itself.")


@real_signature
class HuggingFaceTokenSync(Construct):
    """The Secrets Manager secret (created empty: you put the value), the reader's role and the sync objects.

    Properties: :class:`HuggingFaceTokenSyncProps` (each with its type, default and meaning); ``props`` keeps them.

    Attributes: ``secret``, ``reader_role``, ``operator_chart`` (None when not installed), ``manifest``,
    ``encryption_key``.
    The secret's missing rotation (a Hugging Face token rotates in the Hugging Face account) is
    acknowledged for cdk-nag here.
    """

    PROPS: ClassVar[type[Props]] = HuggingFaceTokenSyncProps

    def __init__(self, scope: Construct, id: str, *, cluster: ClusterLike, sync: SecretSync,
                 install_operator: bool = HuggingFaceTokenSyncProps.install_operator,
                 encryption_key: kms.IKey | None = HuggingFaceTokenSyncProps.encryption_key) -> None:
        """Create the construct. Its properties (:class:`HuggingFaceTokenSyncProps`, kept as ``self.props``):

        :param cluster: The `aws_eks_v2` cluster to sync into (with its OIDC provider): an `eks.Cluster` or an
            imported `eks.ICluster`. Default: required.
        :param sync: What to sync where (`SecretSync`). Default: required.
        :param install_operator: Install External Secrets Operator with Helm (`EXTERNAL_SECRETS`, with
            `wait=True`). Turn it off if the cluster runs it already. Default: ``True``.
        :param encryption_key: A customer managed key for the secret, usually a [SecretsKey](secrets-key.md)'s
            `key`: the secret is registered on its policy and the reader may decrypt it through Secrets Manager
            only. Another key is warned about (`SecretsKey:unmanagedKeyPolicy`): its policy must allow that
            itself. Default: ``None`` (Secrets Manager's ``aws/secretsmanager``).
        """
        super().__init__(scope, id)
        self.props = props = HuggingFaceTokenSyncProps(cluster=cluster, sync=sync, install_operator=install_operator,
                                                       encryption_key=encryption_key)
        props.raise_if_invalid(f"HuggingFaceTokenSync {self.node.path}")
        cluster, sync, encryption_key = props.cluster, props.sync, props.encryption_key
        self.sync = sync
        self.kubernetes_secret_name = sync.kubernetes_secret_name
        self.encryption_key = encryption_key
        self.secret = secretsmanager.Secret(
            self, "Secret", secret_name=sync.secrets_manager_name, removal_policy=RemovalPolicy.RETAIN,
            description="Hugging Face access token for model downloads; set the value with "
                        "`aws secretsmanager put-secret-value` (never in code or config)",
            encryption_key=encryption_key,
        )
        if encryption_key is not None:
            encrypt_secret(self, encryption_key, sync.secrets_manager_name)
        self.reader_role = sync_reader_role(self, cluster=cluster, sync=sync, secret=self.secret,
                                            purpose="read the Hugging Face token", encryption_key=encryption_key)
        self.operator_chart = EXTERNAL_SECRETS.install(cluster, "ExternalSecretsOperator", wait=True) \
            if props.install_operator else None
        self.manifest = apply_sync(cluster, "TokenSync", sync=sync, reader_role=self.reader_role,
                                   operator_chart=self.operator_chart)
        acknowledge(self.secret, "hugging-face-token-rotation")


def sync_reader_role(scope: Construct, *, cluster: ClusterLike, sync: SecretSync, secret: secretsmanager.ISecret,
                     purpose: str, encryption_key: kms.IKey | None = None, secret_name: str | None = None) -> iam.Role:
    """The role External Secrets authenticates as: IRSA, trusted by exactly the reader service account, allowed to
    read ``secret`` (named ``secret_name``, by default the sync's) and nothing else (with ``encryption_key``: to
    decrypt it through Secrets Manager only)."""
    role = iam.Role(
        scope, "ReaderRole", role_name=sync.reader_role_name,
        assumed_by=service_account_principal(scope, "ReaderTrust", cluster=cluster, namespace=sync.namespace,
                                             service_account=sync.reader_service_account),
        description=f"External Secrets: {purpose} into {sync.namespace}",
    )
    grant_secret_read(role, secret, secret_name or sync.secrets_manager_name, encryption_key)
    return role


def apply_sync(cluster: ClusterLike, id: str, *, sync: SecretSync, reader_role: iam.IRole,
               operator_chart: Construct | None = None) -> eks.KubernetesManifest:
    """The sync objects (:meth:`SecretSync.manifests`) on ``cluster``, after the reader role and the operator's
    chart (its CRDs). A fixed ``reader_role_name`` is written as an ARN without a token, as GitOps renders it."""
    stack = Stack.of(reader_role)
    role_arn = iam_role_arn(stack.partition, stack.account, sync.reader_role_name) \
        if sync.reader_role_name else reader_role.role_arn
    manifest = cluster.add_manifest(id, *sync.manifests(region=stack.region, reader_role_arn=role_arn))
    manifest.node.add_dependency(reader_role)
    if operator_chart is not None:
        manifest.node.add_dependency(operator_chart)
    return manifest
