"""API keys of portable model servers: generated in AWS Secrets Manager, synced into the namespace by the
External Secrets Operator exactly like the Hugging Face token
(:mod:`hyperpod_inference_iac.serving.hugging_face_token`),
and read by the model server and its capture sidecar from that Secret, by reference.

Unlike the Hugging Face token, the value is generated: Secrets Manager draws 48 random letters and digits
when the secret is created (``GenerateSecretString``), so the key exists in Secrets Manager and in the
namespace's Secret only, never in a template, a manifest, ``dist/`` or a log line.

Rotation (``rotation_days``): a rotation function of its own (``lambda/api_key_rotation``) gives the secret a new
version every so many days. External Secrets syncs the current, pending and previous versions into the Secret's
``api-keys`` file, which the capture sidecar re-reads: it accepts a new key from the moment it is pending, before
any client can read it as current, and the old one until the next rotation. Clients re-read the secret on a
``401``; no restart, no moment when a client holding a key that was current is refused.

Who can read it: the secret's resource policy denies ``secretsmanager:GetSecretValue`` to every principal
except the sync's reader role (External Secrets, IRSA for one service account), the rotation function and the
client roles named in the server's ``apiKey.clientRoleArns``, which it allows. Clients fetch it with
``aws secretsmanager get-secret-value --secret-id <name> --query SecretString --output text`` and send
``Authorization: Bearer <key>``. With a customer managed key (``encryption_key``, the app's
:class:`~hyperpod_inference_iac.SecretsKey`), the key policy is a second gate: the reader and the client roles
may decrypt this secret, through Secrets Manager only, and no one else.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from aws_cdk import Annotations, Duration, RemovalPolicy, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from hyperpod_inference_iac.charts.plan import PortableWorkload
from hyperpod_inference_iac.charts.portable import API_KEYS_FILE_SECRET_KEY
from hyperpod_inference_iac.charts.portable_server import legacy_api_key_caller_id
from hyperpod_inference_iac.foundation._package_data import package_dir
from hyperpod_inference_iac.foundation.cdk_types import ClusterLike
from hyperpod_inference_iac.foundation.log_retention import DEFAULT_RETENTION
from hyperpod_inference_iac.foundation.nag import acknowledge
from hyperpod_inference_iac.foundation.patterns import iam_role_arn, iam_role_name
from hyperpod_inference_iac.foundation.props import Props, listed, prop, real_signature
from hyperpod_inference_iac.foundation.validation import PROPS, KeyPaths, Problems, is_unresolved
from hyperpod_inference_iac.security.secrets_key import (
    default_deployer_role_arns,
    encrypt_secret,
    grant_secret_read,
    kms_through_secrets_manager,
    secret_arn_pattern,
)
from hyperpod_inference_iac.serving.hugging_face_token import SecretSync, SyncedCaller, apply_sync, sync_reader_role

API_KEY_LENGTH = 48  # letters and digits: ~285 bits, safe in a header and on a command line
#: How often External Secrets re-reads an API key (three GetSecretValue calls: current, pending, previous).
API_KEY_REFRESH_SECONDS = 120
#: From a Secret's change to the file in the pod: the kubelet's sync period (1 min) and its cache of Secrets (1 min).
KUBELET_SECRET_UPDATE_SECONDS = 120
#: The capture sidecar's API_KEYS_RELOAD_SECONDS (its default) and a margin for External Secrets' own queue.
SIDECAR_RELOAD_SECONDS = 5
PROPAGATION_MARGIN_SECONDS = 35
#: Of the rotation function's time, what is not the wait: a handful of API calls.
ROTATION_CALLS_SECONDS = 120
#: Lambda's longest invocation: the propagation wait must fit in one.
LAMBDA_MAX_TIMEOUT_SECONDS = 900


def propagation_seconds(refresh_interval_seconds: int) -> int:
    """How long a new key stays pending before it becomes current, for a sync refreshed that often: External
    Secrets' refresh, the kubelet's update of the mounted Secret, the sidecar's re-read and a margin; every sidecar
    accepts the key by then."""
    return refresh_interval_seconds + KUBELET_SECRET_UPDATE_SECONDS + SIDECAR_RELOAD_SECONDS \
        + PROPAGATION_MARGIN_SECONDS


#: The wait of ``api_key_sync``'s syncs (refreshed every 120 s): 280 s.
PROPAGATION_SECONDS = propagation_seconds(API_KEY_REFRESH_SECONDS)
ROTATION_RUNTIME = lambda_.Runtime.PYTHON_3_14
DEFAULT_ROTATION_DAYS = 30
#: The namespace the metrics agent writes the capture sidecars' series to (``CaptureSidecarMetrics``).
SIDECAR_METRICS_NAMESPACE = "ContainerInsights/Prometheus"
#: Writes and stage changes of an API key's secret: only its rotation function and the deployer may make them.
SECRET_WRITE_ACTIONS = (
    "secretsmanager:PutSecretValue", "secretsmanager:UpdateSecretVersionStage", "secretsmanager:UpdateSecret",
    "secretsmanager:RotateSecret", "secretsmanager:CancelRotateSecret", "secretsmanager:RestoreSecret",
    "secretsmanager:ReplicateSecretToRegions", "secretsmanager:StopReplicationToReplica",
    "secretsmanager:RemoveRegionsFromReplication", "secretsmanager:DeleteSecret")
#: The rotation function's own metrics (its check mode: ``KeyAgeHours``, ``KeysNotAccepted``), by ``Secret``.
KEY_CHECK_NAMESPACE = "HyperPodInference/ApiKeys"
#: How often the check looks at the key (an EventBridge rule invoking the rotation function).
KEY_CHECK_MINUTES = 15
#: What ``operator_role_arns`` may do of them: rotate now, and take a label off a version (revoke the previous key).
OPERATOR_ACTIONS = ("secretsmanager:RotateSecret", "secretsmanager:UpdateSecretVersionStage")


@dataclass(frozen=True)
class RotationAcceptance:
    """Where the rotation function learns which keys a server's capture sidecars accept: the gauges
    ``capture_sidecar_api_keys`` and ``capture_sidecar_api_key_accepted{fingerprint}`` as the metrics agent
    (:class:`~hyperpod_inference_iac.CaptureSidecarMetrics`) ships them to CloudWatch, with dimensions
    ``ClusterName``, ``Namespace`` and ``Workload`` (the server's name). ``testSecret`` finishes once, over
    ``window_seconds`` ending ``settle_seconds`` ago, every scrape of every sidecar lists the pending key; it polls
    every ``poll_seconds``. Why CloudWatch and not the sidecars themselves: the function runs in Lambda outside the
    cluster's network, and the sidecars' metrics ports admit only the agent (docs/secrets.md)."""

    cluster_name: str
    namespace: str
    workload: str
    window_seconds: int = 180  # three scrapes of the agent (every 60 s)
    settle_seconds: int = 60  # EMF log events become metrics within about a minute
    poll_seconds: int = 30

    def environment(self) -> str:
        """The function's ``ACCEPTANCE`` (``rotation.Acceptance``)."""
        settings = asdict(self)
        return json.dumps({
            "namespace": SIDECAR_METRICS_NAMESPACE,
            "dimensions": {"ClusterName": settings.pop("cluster_name"), "Namespace": settings.pop("namespace"),
                           "Workload": settings.pop("workload")},
            **settings}, sort_keys=True)


def api_key_sync(workload: PortableWorkload, *, namespace: str, secrets_manager_prefix: str,
                 role_name_prefix: str) -> SecretSync:
    """The sync of one server's keys, named after the server: Secrets Manager ``<prefix>/<server>/api-key``, the
    Kubernetes Secret the plan names, a reader service account, role and SecretStore of its own. With
    ``apiKey.callers``, each caller's key is a secret of its own, ``<prefix>/<server>/api-key/<caller>`` (the caller
    ``<server>-api-key`` keeps the single key's ``<prefix>/<server>/api-key``), all in the one keys file."""
    assert workload.api_key is not None, f"{workload.name} has no API key"
    name = workload.name
    base = f"{secrets_manager_prefix}/{name}/api-key"
    api_key = workload.server.api_key
    callers: tuple[SyncedCaller, ...] = ()
    if api_key is not None and api_key.callers is not None:
        legacy = legacy_api_key_caller_id(name)
        callers = tuple(SyncedCaller(caller.id, base if caller.id == legacy else f"{base}/{caller.id}",
                                     tuple(caller.client_role_arns), caller.revoked) for caller in api_key.callers)
    return SecretSync(
        namespace=namespace, secrets_manager_name=base,
        kubernetes_secret_name=workload.api_key.name, key=workload.api_key.key,
        reader_service_account=f"{name}-api-key-reader",
        reader_role_name=iam_role_name(f"{role_name_prefix}-{name}-api-key"),
        secret_store_name=f"{name}-api-key", refresh_interval_seconds=API_KEY_REFRESH_SECONDS,
        # The sidecar's file of accepted keys; one caller id for every version of a caller's key.
        keys_file=API_KEYS_FILE_SECRET_KEY, keys_file_caller_id=workload.api_key.name, keys_file_callers=callers)


def check_rotation_days(problems: Problems, path: str, rotation_days: Any) -> None:
    """The one rule of a rotation period (``ApiKeySync.RotationDaysOutOfRange``): Secrets Manager schedules 1 to
    1000 days."""
    if rotation_days is None or is_unresolved(rotation_days):
        return
    if isinstance(rotation_days, bool) or not isinstance(rotation_days, int) or not 1 <= rotation_days <= 1000:
        problems.add("ApiKeySync.RotationDaysOutOfRange", path, "must be a number of days from 1 to 1000",
                     rotation_days)


def _check_rotation(problems: Problems, at: KeyPaths, rotation_days: int | None, has_keys_file: bool,
                    refresh_interval_seconds: int) -> None:
    """Every rule of a key's rotation: its period, the sync's keys file and a refresh fast enough for the wait."""
    if rotation_days is None or is_unresolved(rotation_days):
        return
    check_rotation_days(problems, at.at("rotation_days"), rotation_days)
    if not has_keys_file:
        problems.add("ApiKeySync.RotationWithoutKeysFile", at.at("rotation_days"),
                     "needs a sync with keys_file (api_key_sync has one): the server learns a new key from it "
                     "before clients can read it")
    longest = LAMBDA_MAX_TIMEOUT_SECONDS - ROTATION_CALLS_SECONDS - propagation_seconds(0)
    if not is_unresolved(refresh_interval_seconds) and refresh_interval_seconds > longest:
        problems.add("ApiKeySync.RotationRefreshTooSlow", at.at("rotation_days"),
                     f"needs a sync refreshed at least every {longest} s (its refresh_interval_seconds): the rotation "
                     "waits for the refresh before it makes the new key current, within one Lambda invocation",
                     refresh_interval_seconds)


@dataclass(frozen=True, kw_only=True)
class SecretsOptions(Props):
    """How a platform keeps its Secrets Manager secrets (the app's ``secrets:``): whether a
    :class:`~hyperpod_inference_iac.SecretsKey` encrypts them, and how often its portable servers' API keys rotate
    (each :class:`ApiKeySync`'s ``rotation_days``: :meth:`rotation_days_of`)."""

    CONSTRUCT: ClassVar[str] = "ApiKeySync"

    customer_managed_key: bool = prop(
        True,
        doc="Encrypt the Hugging Face token and the portable API keys with a customer managed key, a `SecretsKey` "
            "(alias `alias/<project>/secrets` in the app, rotation on) whose policy lets each reader role and client "
            "role decrypt its own secret, through Secrets Manager only; `false`: Secrets Manager's "
            "`aws/secretsmanager` key, which any principal IAM allows `GetSecretValue` can use. Turning it on for a "
            "deployed platform: docs/upgrading.md.")
    api_key_rotation_days: int = prop(
        DEFAULT_ROTATION_DAYS,
        doc="Days between rotations of the portable servers' API keys, 1..1000, by a rotation function of their own, "
            "without downtime: the capture sidecar accepts the new key before clients can read it and the old one "
            "until the next rotation (docs/secrets.md). Only servers with capture are rotated (without capture the "
            "runtime reads its key once, at start). `0`: never rotated; each key is warned about "
            "(`ApiKeySync:notRotated`). Deploying sets the schedule up without rotating: the first rotation comes "
            "this many days later.")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        if self.api_key_rotation_days != 0:  # (0: never)
            check_rotation_days(problems, at.at("api_key_rotation_days"), self.api_key_rotation_days)

    def rotation_days_of(self, *, reads_keys_file: bool) -> int | None:
        """The ``rotation_days`` of one server's :class:`ApiKeySync`: None when rotation is off, or when the server
        cannot take a new key without a restart (it does not read the sync's keys file: no capture sidecar)."""
        return (self.api_key_rotation_days or None) if reads_keys_file else None


@dataclass(frozen=True, kw_only=True)
class ApiKeySyncProps(Props):
    """:class:`ApiKeySync`'s properties (only Python code passes them: the app's ``secrets.*`` are
    :class:`SecretsOptions`, whose ``api_key_rotation_days`` becomes ``rotation_days``)."""

    CONSTRUCT: ClassVar[str] = "ApiKeySync"

    cluster: ClusterLike = prop(config=False, doc="The cluster to sync into; External Secrets Operator must run "
                                                   "there (`HuggingFaceTokenSync` installs it: pass its "
                                                   "`operator_chart`).")
    sync: SecretSync = prop(config=False, doc="What to sync where, usually from `api_key_sync`.")
    client_role_arns: Sequence[str] = prop(
        (), config=False,
        doc="The roles of the server's clients: allowed to read the key (same account: no IAM policy of their own "
            "needed).")
    operator_chart: Construct | None = prop(None, config=False, default_doc="none",
                                            doc="What the sync objects wait for: ESO's Helm chart (its CRDs).")
    encryption_key: kms.IKey | None = prop(
        None, config=False, default_doc="Secrets Manager's `aws/secretsmanager`",
        doc="A customer managed key for the secret, usually a `SecretsKey`'s `key`: the secret is registered on its "
            "policy, the reader (and the rotation function) may decrypt it through Secrets Manager only, and the key "
            "policy names the client roles for this secret (they need no IAM policy of their own for it). Another key "
            "is warned about (`SecretsKey:unmanagedKeyPolicy`).")
    rotation_days: int | None = prop(
        None, config=False, default_doc="not rotated; warned: `ApiKeySync:notRotated`",
        doc="Rotate the key every so many days (1-1000) with the library's rotation function, without downtime for "
            "the server's clients. The server must check the key from the sync's `keys_file`, as the portable chart's "
            "capture sidecar does (a model server that reads its key from an environment variable at start would "
            "refuse the new key until restarted); needs a sync with `keys_file` (`api_key_sync` gives one), refreshed "
            "often enough for the wait to fit in one Lambda invocation.")
    rotation_role_name: str | None = prop(
        None, config=False, default_doc="generated",
        doc="The rotation function's role name, fixed so the secret's and the key's policies and the review show it "
            "by name.")
    log_retention: logs.RetentionDays = prop(DEFAULT_RETENTION, config=False,
                                             doc="How long the rotation function's log group keeps its events.")
    acceptance: RotationAcceptance | None = prop(
        None, config=False, default_doc="none: a fixed wait",
        doc="Where the server's capture sidecars report the keys they accept (`RotationAcceptance`: the metrics "
            "agent's CloudWatch series): `testSecret` then finishes only once every sidecar accepts the pending key, "
            "and fails otherwise (the current key stays current). Without it, the function waits a fixed time "
            "(`propagation_seconds`), which a stalled sync defeats: clients get 401 until it runs again.")
    deployer_role_arns: Sequence[str] | None = prop(
        None, config=False,
        default_doc="the CloudFormation execution role of the stack's `DefaultStackSynthesizer`",
        doc="The roles CloudFormation deploys the secret with. With the rotation function, they are the only "
            "principals the secret's resource policy lets write a value or change a stage (`SECRET_WRITE_ACTIONS`). "
            "None known (another synthesizer): writes are not limited, warned (`ApiKeySync:writesNotLimited`).")
    operator_role_arns: Sequence[str] = prop(
        (), config=False,
        doc="Roles that may rotate the key now and take a label off a version (revoke the previous key: "
            "`RotateSecret`, `UpdateSecretVersionStage`), never write a value.")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        _check_rotation(problems, at, self.rotation_days, self.sync.keys_file is not None,
                        self.sync.refresh_interval_seconds)


@real_signature
class ApiKeySync(Construct):
    """One generated API key in Secrets Manager, readable by its reader and client roles only, synced into the
    namespace.

    Properties: :class:`ApiKeySyncProps` (each with its type, default and meaning); ``props`` keeps them.

    Attributes: ``secret``, ``reader_role``, ``manifest``, ``encryption_key``, ``rotation_function`` and
    ``rotation_schedule`` (None without rotation), ``alarms`` (after
    :func:`~hyperpod_inference_iac.observability.api_key_alarms.add_api_key_alarms`). Without rotation, the
    secret's missing rotation schedule is acknowledged for cdk-nag here (a runbook rotates it, docs/secrets.md).
    """

    PROPS: ClassVar[type[Props]] = ApiKeySyncProps

    def __init__(self, scope: Construct, id: str, *, cluster: ClusterLike, sync: SecretSync,
                 client_role_arns: Sequence[str] = ApiKeySyncProps.client_role_arns,
                 operator_chart: Construct | None = ApiKeySyncProps.operator_chart,
                 encryption_key: kms.IKey | None = ApiKeySyncProps.encryption_key,
                 rotation_days: int | None = ApiKeySyncProps.rotation_days,
                 rotation_role_name: str | None = ApiKeySyncProps.rotation_role_name,
                 log_retention: logs.RetentionDays = ApiKeySyncProps.log_retention,
                 acceptance: RotationAcceptance | None = ApiKeySyncProps.acceptance,
                 deployer_role_arns: Sequence[str] | None = ApiKeySyncProps.deployer_role_arns,
                 operator_role_arns: Sequence[str] = ApiKeySyncProps.operator_role_arns) -> None:
        """Create the construct. Its properties (:class:`ApiKeySyncProps`, kept as ``self.props``):

        :param cluster: The cluster to sync into; External Secrets Operator must run there
            (`HuggingFaceTokenSync` installs it: pass its `operator_chart`). Default: required.
        :param sync: What to sync where, usually from `api_key_sync`. Default: required.
        :param client_role_arns: The roles of the server's clients: allowed to read the key (same account: no
            IAM policy of their own needed). Default: ``()``.
        :param operator_chart: What the sync objects wait for: ESO's Helm chart (its CRDs). Default: ``None``
            (none).
        :param encryption_key: A customer managed key for the secret, usually a `SecretsKey`'s `key`: the secret
            is registered on its policy, the reader (and the rotation function) may decrypt it through Secrets
            Manager only, and the key policy names the client roles for this secret (they need no IAM policy of
            their own for it). Another key is warned about (`SecretsKey:unmanagedKeyPolicy`). Default: ``None``
            (Secrets Manager's ``aws/secretsmanager``).
        :param rotation_days: Rotate the key every so many days (1-1000) with the library's rotation function,
            without downtime for the server's clients. The server must check the key from the sync's
            `keys_file`, as the portable chart's capture sidecar does (a model server that reads its key from an
            environment variable at start would refuse the new key until restarted); needs a sync with
            `keys_file` (`api_key_sync` gives one), refreshed often enough for the wait to fit in one Lambda
            invocation. Default: ``None`` (not rotated; warned: ``ApiKeySync:notRotated``).
        :param rotation_role_name: The rotation function's role name, fixed so the secret's and the key's
            policies and the review show it by name. Default: ``None`` (generated).
        :param log_retention: How long the rotation function's log group keeps its events. Default:
            ``RetentionDays.THREE_MONTHS``.
        :param acceptance: Where the server's capture sidecars report the keys they accept
            (`RotationAcceptance`: the metrics agent's CloudWatch series): `testSecret` then finishes only once
            every sidecar accepts the pending key, and fails otherwise (the current key stays current). Without
            it, the function waits a fixed time (`propagation_seconds`), which a stalled sync defeats: clients
            get 401 until it runs again. Default: ``None`` (none: a fixed wait).
        :param deployer_role_arns: The roles CloudFormation deploys the secret with. With the rotation function,
            they are the only principals the secret's resource policy lets write a value or change a stage
            (`SECRET_WRITE_ACTIONS`). None known (another synthesizer): writes are not limited, warned
            (`ApiKeySync:writesNotLimited`). Default: ``None`` (the CloudFormation execution role of the stack's
            ``DefaultStackSynthesizer``).
        :param operator_role_arns: Roles that may rotate the key now and take a label off a version (revoke the
            previous key: `RotateSecret`, `UpdateSecretVersionStage`), never write a value. Default: ``()``.
        """
        super().__init__(scope, id)
        self.props = props = ApiKeySyncProps(
            cluster=cluster, sync=sync, client_role_arns=listed(client_role_arns), operator_chart=operator_chart,
            encryption_key=encryption_key, rotation_days=rotation_days, rotation_role_name=rotation_role_name,
            log_retention=log_retention, acceptance=acceptance,
            deployer_role_arns=None if deployer_role_arns is None else tuple(deployer_role_arns),
            operator_role_arns=tuple(operator_role_arns))
        props.raise_if_invalid(f"ApiKeySync {self.node.path}")
        self.sync = sync = props.sync
        self.encryption_key = props.encryption_key
        # One secret per caller (the single key: one), each with its own readers, schedule and policies.
        self.secrets: dict[str, secretsmanager.Secret] = {}
        self._callers = sync.callers()
        for caller in self._callers:
            self.secrets[caller.caller_id] = secretsmanager.Secret(
                self, self._id("Secret", caller), secret_name=caller.secrets_manager_name,
                removal_policy=RemovalPolicy.RETAIN,
                description=f"API key of the caller {caller.caller_id} of the model server "
                            f"{sync.kubernetes_secret_name.removesuffix('-api-key')} in {sync.namespace}: it sends it "
                            "as a bearer token" if sync.keys_file_callers else
                            f"API key of the model server {sync.kubernetes_secret_name.removesuffix('-api-key')} "
                            f"in {sync.namespace}: clients send it as a bearer token",
                generate_secret_string=secretsmanager.SecretStringGenerator(
                    password_length=API_KEY_LENGTH, exclude_punctuation=True, include_space=False),
                encryption_key=props.encryption_key,
            )
            if props.encryption_key is not None:
                encrypt_secret(self, props.encryption_key, caller.secrets_manager_name,
                               named_readers=self._client_roles(caller))
        synced = [caller for caller in self._callers if not caller.revoked]
        #: The first synced caller's secret (the single key's: its only one).
        self.secret = self.secrets[synced[0].caller_id]
        self.reader_role = sync_reader_role(self, cluster=props.cluster, sync=sync, secret=self.secret,
                                            purpose="read a model server's API keys" if sync.keys_file_callers
                                            else "read a model server's API key",
                                            encryption_key=props.encryption_key,
                                            secret_name=synced[0].secrets_manager_name)
        for caller in synced[1:]:  # the reader reads exactly the synced callers' secrets
            grant_secret_read(self.reader_role, self.secrets[caller.caller_id], caller.secrets_manager_name,
                              props.encryption_key)
        self.rotation_function: lambda_.Function | None = None
        self.rotation_schedule: secretsmanager.CfnRotationSchedule | None = None
        self.rotation_schedules: dict[str, secretsmanager.CfnRotationSchedule] = {}
        self.alarms: dict[str, cloudwatch.Alarm] = {}  # (observability.api_key_alarms.add_api_key_alarms)
        if props.rotation_days is not None:
            self._rotate(props.rotation_days, props.rotation_role_name, props.log_retention, props.acceptance, synced)
        else:
            for caller in self._callers:
                acknowledge(self.secrets[caller.caller_id], "portable-api-key-rotation")
            Annotations.of(self).add_warning_v2(
                "@hyperpod-inference-iac/ApiKeySync:notRotated",
                f"the API key {sync.secrets_manager_name} is never rotated: a leaked key works until someone "
                "rotates it by hand (docs/secrets.md); give rotation_days (the server must read the sync's keys "
                "file, as the capture sidecar does), or acknowledge with the reason")
        for caller in self._callers:
            # A revoked caller's secret is kept, not rotated: its rotation would wait for sidecars that never take it.
            if caller.revoked and props.rotation_days is not None:
                acknowledge(self.secrets[caller.caller_id], "portable-api-key-rotation")
        self._limit_readers()
        self._limit_writers(list(props.deployer_role_arns) if props.deployer_role_arns is not None
                            else default_deployer_role_arns(self), list(props.operator_role_arns))
        self.manifest = apply_sync(props.cluster, f"ApiKeySync-{sync.kubernetes_secret_name}", sync=sync,
                                   reader_role=self.reader_role, operator_chart=props.operator_chart)

    def _id(self, name: str, caller: SyncedCaller) -> str:
        """A caller's construct id: the single key's secret keeps the ids it always had (no replacement on upgrade),
        every other caller's carries its id."""
        return name if caller.secrets_manager_name == self.sync.secrets_manager_name else f"{name}-{caller.caller_id}"

    def _client_roles(self, caller: SyncedCaller) -> list[str]:
        """Who may read ``caller``'s key: its own client roles and ``client_role_arns`` (every caller's); none for a
        revoked caller."""
        return [] if caller.revoked else list(dict.fromkeys([*self.props.client_role_arns, *caller.client_role_arns]))

    @property
    def secret_names(self) -> dict[str, str]:
        """Each caller's Secrets Manager name, by caller id."""
        return {caller.caller_id: caller.secrets_manager_name for caller in self._callers}

    @property
    def rotated_callers(self) -> tuple[SyncedCaller, ...]:
        """The callers whose keys the rotation function rotates (none without rotation)."""
        return tuple(caller for caller in self._callers if caller.caller_id in self.rotation_schedules)

    def _rotate(self, every_days: int, role_name: str | None, log_retention: logs.RetentionDays,
                acceptance: RotationAcceptance | None, callers: list[SyncedCaller]) -> None:
        """The rotation function (its own role: these secrets only) and one schedule per caller. CloudFormation sets
        the schedules up without rotating (``RotateImmediatelyOnUpdate`` false): an upgraded server's pods that still
        hold the key in an environment variable are replaced before the first rotation, which comes ``every_days``
        later."""
        stack = Stack.of(self)
        wait = propagation_seconds(self.sync.refresh_interval_seconds)
        log_group = logs.LogGroup(self, "RotationLogs", retention=log_retention)
        role = iam.Role(self, "RotationRole", role_name=role_name,
                        assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
                        description=f"Rotates the API key {self.sync.secrets_manager_name}"
                                    + (f" of {len(callers)} callers" if self.sync.keys_file_callers else ""))
        self._rotation_role_name = role_name
        log_group.grant_write(role)
        self.rotation_function = function = lambda_.Function(
            self, "Rotation", runtime=ROTATION_RUNTIME, architecture=lambda_.Architecture.ARM_64,
            handler="rotation.handler", role=role, log_group=log_group, memory_size=128,
            code=lambda_.Code.from_asset(str(package_dir("hyperpod_inference_iac.api_key_rotation")),
                                         exclude=["**/__pycache__", "**/*.pyc", "__init__.py"]),
            # testSecret waits for the sidecars (External Secrets' refresh and the rest); then a few API calls. With
            # acceptance it waits as long as Lambda allows for them to report the key, then fails (retried later).
            timeout=Duration.seconds(LAMBDA_MAX_TIMEOUT_SECONDS if acceptance is not None
                                     else wait + ROTATION_CALLS_SECONDS),
            environment={"PROPAGATION_SECONDS": str(wait), "KEY_LENGTH": str(API_KEY_LENGTH),
                         "ROTATION_DAYS": str(every_days),
                         **({"ACCEPTANCE": acceptance.environment()} if acceptance is not None else {})},
            description=f"Rotates the API key {self.sync.secrets_manager_name}"
                        + (" of each caller" if self.sync.keys_file_callers else "") + " (docs/secrets.md)")
        secrets = [self.secrets[caller.caller_id] for caller in callers]
        for caller, secret in zip(callers, secrets, strict=True):
            grant_secret_read(role, secret, caller.secrets_manager_name, self.encryption_key)
        iam.Grant.add_to_principal(grantee=role, resource_arns=[secret.secret_arn for secret in secrets], actions=[
            "secretsmanager:PutSecretValue", "secretsmanager:UpdateSecretVersionStage",
            "secretsmanager:ListSecretVersionIds"])
        # GetRandomPassword has no resource: it reads no secret.
        iam.Grant.add_to_principal(grantee=role, resource_arns=["*"], actions=["secretsmanager:GetRandomPassword"])
        if acceptance is not None:  # (no resource type either: it reads metrics only)
            iam.Grant.add_to_principal(grantee=role, resource_arns=["*"], actions=["cloudwatch:GetMetricData"])
        if self.encryption_key is not None:  # the new version's data key, for these secrets only
            iam.Grant.add_to_principal(
                grantee=role, actions=["kms:GenerateDataKey"], resource_arns=[self.encryption_key.key_arn],
                conditions=kms_through_secrets_manager(
                    stack.region, [secret_arn_pattern(secret, caller.secrets_manager_name)
                                   for caller, secret in zip(callers, secrets, strict=True)]))
        for caller, secret in zip(callers, secrets, strict=True):
            # Only Secrets Manager, for these secrets, may invoke it.
            permission = self._id("SecretsManagerInvokes", caller)
            function.add_permission(permission, principal=iam.ServicePrincipal("secretsmanager.amazonaws.com"),
                                    source_account=stack.account, source_arn=secret.secret_arn)
            schedule = secretsmanager.CfnRotationSchedule(
                self, self._id("RotationSchedule", caller), secret_id=secret.secret_arn,
                rotation_lambda_arn=function.function_arn, rotate_immediately_on_update=False,
                rotation_rules=secretsmanager.CfnRotationSchedule.RotationRulesProperty(
                    schedule_expression=f"rate({every_days} day{'s' if every_days > 1 else ''})"))
            schedule.node.add_dependency(function.permissions_node.find_child(permission))
            schedule.node.add_dependency(role)
            self.rotation_schedules[caller.caller_id] = schedule
        self.rotation_schedule = self.rotation_schedules[callers[0].caller_id]
        # One reason per finding of a role: with the acceptance check it names both actions on `*`.
        acknowledge(role, "api-key-rotation-metric-data" if acceptance is not None
                    else "api-key-rotation-random-password", "Resource::*")

    def _limit_readers(self) -> None:
        """Each caller's clients may read its key (same account: no IAM policy of their own needed); every other
        principal is denied, whatever its IAM policies allow, except the reader role that syncs it and the rotation
        function."""
        stack = Stack.of(self)
        reader_arn = iam_role_arn(stack.partition, stack.account, self.sync.reader_role_name) \
            if self.sync.reader_role_name else self.reader_role.role_arn
        rotation = self._rotation_role_arns()
        for caller in self._callers:
            secret, clients = self.secrets[caller.caller_id], self._client_roles(caller)
            if clients:
                secret.add_to_resource_policy(iam.PolicyStatement(
                    sid="ClientsReadTheKey", actions=["secretsmanager:GetSecretValue"], resources=["*"],
                    principals=[iam.ArnPrincipal(arn) for arn in clients]))
            secret.add_to_resource_policy(iam.PolicyStatement(
                sid="OnlyReaderAndClients", effect=iam.Effect.DENY, actions=["secretsmanager:GetSecretValue"],
                resources=["*"], principals=[iam.AnyPrincipal()],
                conditions={"StringNotEquals": {"aws:PrincipalArn": [reader_arn, *rotation, *clients]}}))

    def _rotation_role_arns(self) -> list[str]:
        """The rotation function's role, by its fixed name when it has one (the policies then show it by name)."""
        if self.rotation_function is None or self.rotation_function.role is None:
            return []
        stack = Stack.of(self)
        return [iam_role_arn(stack.partition, stack.account, self._rotation_role_name)
                if self._rotation_role_name else self.rotation_function.role.role_arn]

    def _limit_writers(self, deployers: list[str], operators: list[str]) -> None:
        """Only the rotation function and the deployer may write a value or move a stage (a principal whose IAM
        allows ``PutSecretValue`` could otherwise set a key it knows, which the sync hands to the sidecars); the
        operator roles may rotate now and take a label off. Without a known deployer, the deny would stop
        CloudFormation itself: writes stay to IAM, warned."""
        rotation = self._rotation_role_arns()
        if not deployers:
            Annotations.of(self).add_warning_v2(
                "@hyperpod-inference-iac/ApiKeySync:writesNotLimited",
                f"any principal whose IAM allows secretsmanager:PutSecretValue can set the API key "
                f"{self.sync.secrets_manager_name} to a value it knows: no deployer role is known (another "
                "synthesizer than DefaultStackSynthesizer); give deployer_role_arns")
            return
        writers = [*rotation, *deployers]
        for secret in self.secrets.values():
            secret.add_to_resource_policy(iam.PolicyStatement(
                sid="OnlyRotationAndDeployerWrite", effect=iam.Effect.DENY,
                actions=[a for a in SECRET_WRITE_ACTIONS if a not in OPERATOR_ACTIONS], resources=["*"],
                principals=[iam.AnyPrincipal()], conditions={"StringNotEquals": {"aws:PrincipalArn": writers}}))
            secret.add_to_resource_policy(iam.PolicyStatement(
                sid="OnlyRotationDeployerAndOperatorsRelabel", effect=iam.Effect.DENY, actions=list(OPERATOR_ACTIONS),
                resources=["*"], principals=[iam.AnyPrincipal()],
                conditions={"StringNotEquals": {"aws:PrincipalArn": [*writers, *operators]}}))
            if operators:
                secret.add_to_resource_policy(iam.PolicyStatement(
                    sid="OperatorsRotateAndRevoke", actions=list(OPERATOR_ACTIONS), resources=["*"],
                    principals=[iam.ArnPrincipal(arn) for arn in operators]))


def check_api_key_rotation(problems: Problems, at: KeyPaths = PROPS, *, rotation_days: int | None,
                           has_keys_file: bool = True,
                           refresh_interval_seconds: int = API_KEY_REFRESH_SECONDS) -> None:
    """``ApiKeySync.RotationDaysOutOfRange``: Secrets Manager schedules 1 to 1000 days. A rotated key needs the
    sync's keys file (``ApiKeySync.RotationWithoutKeysFile``), or the server would never learn the pending key, and
    a sync refreshed often enough that the wait for it fits in one invocation of the function
    (``ApiKeySync.RotationRefreshTooSlow``). :meth:`ApiKeySyncProps.check`'s rules, for callers of 0.2.0."""
    _check_rotation(problems, at, rotation_days, has_keys_file, refresh_interval_seconds)
