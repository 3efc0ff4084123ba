"""API keys of portable model servers: generated in AWS Secrets Manager, synced into the namespace by the
External Secrets Operator exactly like the Hugging Face token (:mod:`hyperpod_inference_iac.hugging_face_token`),
and read by the model server and its capture sidecar from that Secret, by reference.

Unlike the Hugging Face token, the value is generated: Secrets Manager draws 48 random letters and digits
when the secret is created (``GenerateSecretString``), so the key exists in Secrets Manager and in the
namespace's Secret only, never in a template, a manifest, ``dist/`` or a log line.

Who can read it: the secret's resource policy denies ``secretsmanager:GetSecretValue`` to every principal
except the sync's reader role (External Secrets, IRSA for one service account) and the client roles named
in the server's ``apiKey.clientRoleArns``, which it allows. Clients fetch it with
``aws secretsmanager get-secret-value --secret-id <name> --query SecretString --output text`` and send
``Authorization: Bearer <key>``. With a customer managed key (``encryption_key``, the app's
:class:`~hyperpod_inference_iac.SecretsKey`), the key policy is a second gate: the reader and the client roles
may decrypt this secret, through Secrets Manager only, and no one else.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import RemovalPolicy, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from hyperpod_inference_iac.charts.plan import PortableWorkload
from hyperpod_inference_iac.hugging_face_token import SecretSync, apply_sync, sync_reader_role
from hyperpod_inference_iac.nag import acknowledge
from hyperpod_inference_iac.patterns import iam_role_name
from hyperpod_inference_iac.secrets_key import encrypt_secret

API_KEY_LENGTH = 48  # letters and digits: ~285 bits, safe in a header and on a command line


def api_key_sync(workload: PortableWorkload, *, namespace: str, secrets_manager_prefix: str,
                 role_name_prefix: str) -> SecretSync:
    """The sync of one server's key, named after the server: Secrets Manager ``<prefix>/<server>/api-key``, the
    Kubernetes Secret the plan names, a reader service account, role and SecretStore of its own."""
    assert workload.api_key is not None, f"{workload.name} has no API key"
    name = workload.name
    return SecretSync(
        namespace=namespace, secrets_manager_name=f"{secrets_manager_prefix}/{name}/api-key",
        kubernetes_secret_name=workload.api_key.name, key=workload.api_key.key,
        reader_service_account=f"{name}-api-key-reader",
        reader_role_name=iam_role_name(f"{role_name_prefix}-{name}-api-key"),
        secret_store_name=f"{name}-api-key")


class ApiKeySync(Construct):
    """One generated API key in Secrets Manager, readable by its reader and client roles only, synced into the
    namespace.

    :param cluster: the cluster to sync into (External Secrets Operator must run there: ``HuggingFaceTokenSync``
        installs it, pass its ``operator_chart``).
    :param sync: what to sync where (:func:`api_key_sync`).
    :param client_role_arns: the roles of the clients that call the server; they may read the key.
    :param operator_chart: what the sync objects wait for (the operator's chart, for its CRDs). @default none
    :param encryption_key: a customer managed key for the secret, usually a
        :class:`~hyperpod_inference_iac.SecretsKey`'s: the reader and the client roles may then decrypt only
        through Secrets Manager and only this secret (the key's policy names the clients, which must exist).
        @default Secrets Manager's ``aws/secretsmanager``

    Attributes: ``secret``, ``reader_role``, ``manifest``, ``encryption_key``. The secret's missing rotation schedule is
    acknowledged for cdk-nag here (rotation restarts the server: a runbook, docs/secrets.md).
    """

    def __init__(self, scope: Construct, id: str, *, cluster: eks.ICluster, sync: SecretSync,
                 client_role_arns: Sequence[str] = (), operator_chart: Construct | None = None,
                 encryption_key: kms.IKey | None = None) -> None:
        super().__init__(scope, id)
        self.sync = sync
        self.encryption_key = encryption_key
        self.secret = secretsmanager.Secret(
            self, "Secret", secret_name=sync.secrets_manager_name, removal_policy=RemovalPolicy.RETAIN,
            description=f"API key of the model server {sync.kubernetes_secret_name.removesuffix('-api-key')} "
                        f"in {sync.namespace}: clients send it as a bearer token",
            generate_secret_string=secretsmanager.SecretStringGenerator(
                password_length=API_KEY_LENGTH, exclude_punctuation=True, include_space=False),
            encryption_key=encryption_key,
        )
        if encryption_key is not None:
            encrypt_secret(self, encryption_key, sync.secrets_manager_name, named_readers=list(client_role_arns))
        self.reader_role = sync_reader_role(self, cluster=cluster, sync=sync, secret=self.secret,
                                            purpose="read a model server's API key", encryption_key=encryption_key)
        self._limit_readers(list(client_role_arns))
        self.manifest = apply_sync(cluster, f"ApiKeySync-{sync.kubernetes_secret_name}", sync=sync,
                                   reader_role=self.reader_role, operator_chart=operator_chart)
        acknowledge(self.secret, "portable-api-key-rotation")

    def _limit_readers(self, client_role_arns: list[str]) -> None:
        """The clients may read the key (same account: no IAM policy of their own needed); every other principal
        is denied, whatever its IAM policies allow, except the reader role that syncs it."""
        if client_role_arns:
            self.secret.add_to_resource_policy(iam.PolicyStatement(
                sid="ClientsReadTheKey", actions=["secretsmanager:GetSecretValue"], resources=["*"],
                principals=[iam.ArnPrincipal(arn) for arn in client_role_arns]))
        stack = Stack.of(self)
        reader_arn = f"arn:{stack.partition}:iam::{stack.account}:role/{self.sync.reader_role_name}" \
            if self.sync.reader_role_name else self.reader_role.role_arn
        self.secret.add_to_resource_policy(iam.PolicyStatement(
            sid="OnlyReaderAndClients", effect=iam.Effect.DENY, actions=["secretsmanager:GetSecretValue"],
            resources=["*"], principals=[iam.AnyPrincipal()],
            conditions={"StringNotEquals": {"aws:PrincipalArn": [reader_arn, *client_role_arns]}}))
