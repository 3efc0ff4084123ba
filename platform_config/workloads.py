"""Model deployments from the config file, wired to the platform they run on.

A ``models:`` entry is the operator's CRD spec (see docs/charts.md) plus two platform shortcuts
that keep the file short and the wiring reviewable:

* ``endpointDomain: <name>`` sets ``tlsConfig`` (the platform certificate, the TLS bucket) and
  ``dnsConfig`` (the platform hosted zone); the name must be one of ``domain.endpointDomains``.
* a ``dataCapture`` block without ``s3Uri`` captures into the platform capture bucket, and its
  enabled SageMaker-endpoint and model-pod tiers without ``kmsKeyId`` use the capture key.

Every workload that names a service account (``spec.kubernetes.serviceAccountName``, or a
portable server) gets its own IAM role ``{project}-{serviceAccount}``, read-only on the S3 prefix
of its weights; the role ARN is derived, so manifests in ``dist/`` hold no CDK token.

Values that exist only after a deploy (a certificate or hosted zone this app creates) are
represented by :data:`DEPLOY_TIME` markers: validators skip them like CDK tokens, the CDK app
replaces them with real tokens, and ``dist/`` rendering takes them from stack outputs.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hyperpod_inference_iac.charts import PortableModelServer, WorkloadServiceAccount, parse_models
from hyperpod_inference_iac.charts.inference_chart import Workload
from hyperpod_inference_iac.validation import Problems, join_path

# Looks like a CDK token on purpose: every validator already skips unresolved tokens.
DEPLOY_TIME = {"CertificateArn": "${Token[DeployTime.CertificateArn]}",
               "HostedZoneId": "${Token[DeployTime.HostedZoneId]}"}


@dataclass(frozen=True, kw_only=True)
class PlatformValues:
    """What a model deployment needs from the platform; plain strings or deploy-time values."""

    account: str
    partition: str
    project: str
    capture_s3_uri: str
    capture_key: str
    tls_output_s3_uri: str
    certificate_arn: str
    hosted_zone_id: str
    endpoint_domains: tuple[str, ...]

    def role_arn(self, role_name: str) -> str:
        return f"arn:{self.partition}:iam::{self.account}:role/{role_name}"

    def role_name(self, service_account: str) -> str:
        return f"{self.project}-{service_account}"[:64]


@dataclass(frozen=True, kw_only=True)
class IdentityPlan:
    """One workload identity to create: role for ``namespace/service_account``."""

    service_account: str
    role_name: str
    weights_s3_uri: str | None


@dataclass(frozen=True, kw_only=True)
class WorkloadPlan:
    models: tuple[Workload, ...] = ()
    portable: tuple[PortableModelServer, ...] = ()
    service_accounts: tuple[WorkloadServiceAccount, ...] = ()
    identities: tuple[IdentityPlan, ...] = ()


def platform_values(config: Any, *, certificate_arn: str | None = None,
                    hosted_zone_id: str | None = None) -> PlatformValues:
    """Values from the config; ``certificate_arn``/``hosted_zone_id`` override (CDK tokens or stack
    outputs). A value known neither way stays a :data:`DEPLOY_TIME` marker."""
    env = config.environment
    return PlatformValues(
        account=env.account, partition=env.partition, project=config.project,
        capture_s3_uri=f"s3://{config.capture_bucket_name}/{config.capture.prefix.rstrip('/')}",
        capture_key=f"arn:{env.partition}:kms:{env.region}:{env.account}:{config.capture_key_alias}",
        tls_output_s3_uri=f"s3://{config.tls_bucket_name}/certificates",
        certificate_arn=certificate_arn or config.domain.existing_certificate_arn or DEPLOY_TIME["CertificateArn"],
        hosted_zone_id=hosted_zone_id or config.domain.existing_hosted_zone_id or DEPLOY_TIME["HostedZoneId"],
        endpoint_domains=config.domain.endpoint_domains,
    )


def plan_workloads(models: Any, portable: Any, *, values: PlatformValues, custom_service_accounts_enabled: bool,
                   problems: Problems) -> WorkloadPlan:
    """Parse, wire and validate every workload; problems are collected, never raised here."""
    if isinstance(models, list):  # otherwise parse_models reports the wrong type with its path
        models = [_wire_model(entry, join_path("models", i), values, problems) for i, entry in enumerate(models)]
    parsed_models = parse_models(models, problems=problems,
                                 custom_service_accounts_enabled=custom_service_accounts_enabled)
    for index, model in enumerate(parsed_models):
        model.validate(join_path("models", index), problems)

    identities: list[IdentityPlan] = []
    for model in parsed_models:
        account = model.service_account_name
        if account is not None:
            identities.append(IdentityPlan(service_account=account, role_name=values.role_name(account),
                                           weights_s3_uri=_weights_uri(model)))
    servers: list[PortableModelServer] = []
    for index, entry in enumerate(portable if isinstance(portable, list) else []):
        path = join_path("portable", index)
        server = PortableModelServer.from_dict(_wire_portable(entry, values), path, problems)
        if server is None:
            continue
        server.validate(path, problems)
        servers.append(server)
        identities.append(IdentityPlan(service_account=server.name, role_name=values.role_name(server.name),
                                       weights_s3_uri=server.model_cache.source_s3_uri))
    names = [i.service_account for i in identities]
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.add("ServiceAccount.Shared", "portable", "a portable server and a model share a service account",
                     name)
    return WorkloadPlan(
        models=tuple(parsed_models), portable=tuple(servers), identities=tuple(identities),
        service_accounts=tuple(WorkloadServiceAccount(name=m.service_account_name,
                                                      role_arn=values.role_arn(values.role_name(m.service_account_name)))
                               for m in parsed_models if m.service_account_name is not None),
    )


def _wire_model(entry: Any, path: str, values: PlatformValues, problems: Problems) -> Any:
    if not isinstance(entry, Mapping):
        return entry
    entry = copy.deepcopy(dict(entry))
    domain = entry.pop("endpointDomain", None)
    spec = entry.get("spec")
    if not isinstance(spec, dict):
        return entry
    if domain is not None:
        if domain not in values.endpoint_domains:
            problems.add("Model.EndpointDomainNotCertified", join_path(path, "endpointDomain"),
                         f"must be one of domain.endpointDomains ({', '.join(values.endpoint_domains)}), the "
                         f"names the platform certificate covers", domain)
        spec.setdefault("tlsConfig", {
            "customCertificateConfig": {"acmArn": values.certificate_arn, "domainName": domain},
            "tlsCertificateOutputS3Uri": values.tls_output_s3_uri,
        })
        spec.setdefault("dnsConfig", {"hostedZoneId": values.hosted_zone_id})
    _wire_capture(spec.get("dataCapture"), values, tiers=("sagemakerEndpoint", "modelPod"))
    return entry


def _wire_portable(entry: Any, values: PlatformValues) -> Any:
    if not isinstance(entry, Mapping):
        return entry
    entry = copy.deepcopy(dict(entry))
    if isinstance(entry.get("name"), str):
        entry.setdefault("roleArn", values.role_arn(values.role_name(entry["name"])))
    _wire_capture(entry.get("dataCapture"), values, tiers=("modelPod",))
    return entry


def _wire_capture(capture: Any, values: PlatformValues, *, tiers: tuple[str, ...]) -> None:
    if not isinstance(capture, dict):
        return
    capture.setdefault("s3Uri", values.capture_s3_uri)
    for tier in tiers:
        block = capture.get(tier)
        if isinstance(block, dict) and block.get("enabled") is True:
            block.setdefault("kmsKeyId", values.capture_key)


def _weights_uri(model: Workload) -> str | None:
    cache = getattr(model, "nvme_cache", None)
    if cache is not None:
        return cache.source_s3_uri
    source = getattr(model.spec, "model_source_config", None)
    storage = getattr(source, "s3_storage", None)
    if storage is not None:
        location = (source.model_location or "").strip("/")
        return f"s3://{storage.bucket_name}/{location}"
    return None
