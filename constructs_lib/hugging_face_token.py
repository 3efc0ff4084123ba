"""Hugging Face token: kept in AWS Secrets Manager, synced into the Kubernetes Secret the operator
reads (``tokenSecretRef``) by the External Secrets Operator. The token value never appears in a
template, a manifest, an environment variable in ``dist/`` or a log line.

Flow: ``aws secretsmanager put-secret-value --secret-id <name> --secret-string hf_...`` (once, by a
person or a pipeline with that right) -> ESO's ``SecretStore`` in the inference namespace
authenticates as the ``hf-token-reader`` service account (IRSA, ``GetSecretValue`` on this one
secret only) -> ``ExternalSecret`` writes Secret ``<kubernetes_secret_name>`` with key ``token``.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import RemovalPolicy, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from hyperpod_inference_iac.workload_identity import service_account_principal

ESO_CHART_VERSION = "0.19.2"
READER_SERVICE_ACCOUNT = "hf-token-reader"


class HuggingFaceTokenSync(Construct):
    """:param secret_name: Secrets Manager name of the token (created empty; you put the value).
    :param namespace: where the model deployments (and so the synced Secret) live.
    :param kubernetes_secret_name: the Secret named by ``tokenSecretRef.name``; its key is ``token``.
    :param install_operator: install External Secrets Operator with Helm (turn off if you run it already).
    """

    SECRET_KEY = "token"

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        cluster: eks.Cluster,
        secret_name: str,
        namespace: str,
        kubernetes_secret_name: str = "hf-token",
        install_operator: bool = True,
        refresh_interval_seconds: int = 3600,
    ) -> None:
        super().__init__(scope, id_)
        stack = Stack.of(self)
        self.kubernetes_secret_name = kubernetes_secret_name
        self.secret = secretsmanager.Secret(
            self, "Secret", secret_name=secret_name, removal_policy=RemovalPolicy.RETAIN,
            description="Hugging Face access token for model downloads; set the value with "
                        "`aws secretsmanager put-secret-value` (never in code or config)",
        )
        self.reader_role = iam.Role(
            self, "ReaderRole",
            assumed_by=service_account_principal(self, "ReaderTrust", cluster=cluster, namespace=namespace,
                                                 service_account=READER_SERVICE_ACCOUNT),
            description=f"External Secrets: read the Hugging Face token into {namespace}",
        )
        self.secret.grant_read(self.reader_role)

        self.operator_chart = cluster.add_helm_chart(
            "ExternalSecretsOperator", chart="external-secrets", repository="https://charts.external-secrets.io",
            version=ESO_CHART_VERSION, namespace="external-secrets", create_namespace=True, wait=True,
            values={"installCRDs": True},
        ) if install_operator else None
        objects: list[dict[str, Any]] = [
            {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": READER_SERVICE_ACCOUNT, "namespace": namespace,
                          "annotations": {"eks.amazonaws.com/role-arn": self.reader_role.role_arn}}},
            {"apiVersion": "external-secrets.io/v1", "kind": "SecretStore",
             "metadata": {"name": "aws-secrets-manager", "namespace": namespace},
             "spec": {"provider": {"aws": {"service": "SecretsManager", "region": stack.region,
                                           "auth": {"jwt": {"serviceAccountRef": {"name": READER_SERVICE_ACCOUNT}}}}}}},
            {"apiVersion": "external-secrets.io/v1", "kind": "ExternalSecret",
             "metadata": {"name": kubernetes_secret_name, "namespace": namespace},
             "spec": {"refreshInterval": f"{refresh_interval_seconds}s",
                      "secretStoreRef": {"name": "aws-secrets-manager", "kind": "SecretStore"},
                      "target": {"name": kubernetes_secret_name, "creationPolicy": "Owner"},
                      "data": [{"secretKey": self.SECRET_KEY, "remoteRef": {"key": secret_name}}]}},
        ]
        self.manifest = cluster.add_manifest("TokenSync", *objects)
        if self.operator_chart is not None:
            self.manifest.node.add_dependency(self.operator_chart)
