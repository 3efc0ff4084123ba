"""Model deployments on the cluster: the same cdk8s charts reach the cluster two ways.

* The CDK app applies them through the kubectl provider, one small manifest per chart, each
  depending on the operator add-on, the namespace and the workload's role.
* ``dist/*.k8s.yaml`` hands them to GitOps tools; written by the same synth from the same plan
  (:func:`write_manifests`), so the two can never drift apart.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import cdk8s
from aws_cdk import DefaultStackSynthesizer, Stack
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_route53 as route53
from aws_cdk import aws_s3 as s3
from constructs import Construct, IConstruct

from hyperpod_inference_iac._package_data import package_dir
from hyperpod_inference_iac.charts import InferenceChart, PortableModelServerChart
from hyperpod_inference_iac.validation import ConfigError, Problems, is_token
from hyperpod_inference_iac.workload_identity import WorkloadIdentity, service_account_principal
from platform_config import PlatformConfig
from platform_config.workloads import WorkloadPlan, plan_workloads, platform_values

SIDECAR_DIR = package_dir("hyperpod_inference_iac.sidecar")
EXTERNAL_DNS_CHART_VERSION = "1.16.1"
EXTERNAL_DNS_SERVICE_ACCOUNT = "external-dns"


def plan_with(config: PlatformConfig, *, certificate_arn: str | None = None,
              hosted_zone_id: str | None = None) -> WorkloadPlan:
    """The config's workloads wired with the given platform values (CDK tokens, or stack outputs)."""
    problems = Problems()
    plan = plan_workloads(list(config.models_source), list(config.portable_source),
                          values=platform_values(config, certificate_arn=certificate_arn,
                                                 hosted_zone_id=hosted_zone_id),
                          custom_service_accounts_enabled=config.operator.enable_custom_service_accounts,
                          problems=problems)
    problems.raise_if_any(config.source)
    return plan


def workload_charts(app: cdk8s.App, config: PlatformConfig, plan: WorkloadPlan,
                    sidecar_image: str) -> tuple[cdk8s.Chart, list[cdk8s.Chart]]:
    """The namespace chart and one small chart per workload, in a fixed order."""
    namespace = config.operator.namespace
    namespace_chart = cdk8s.Chart(app, "namespace", disable_resource_name_hashes=True)
    cdk8s.ApiObject(namespace_chart, "namespace", api_version="v1", kind="Namespace",
                    metadata={"name": namespace, "labels": {"app.kubernetes.io/managed-by": config.project}})
    charts: list[cdk8s.Chart] = []
    for model in plan.models:
        accounts = [a for a in plan.service_accounts if a.name == model.service_account_name]
        charts.append(InferenceChart(
            app, f"model-{model.name}", namespace=namespace, models=[model], service_accounts=accounts,
            custom_service_accounts_enabled=config.operator.enable_custom_service_accounts))
    for server in plan.portable:
        charts.append(PortableModelServerChart(app, f"portable-{server.name}", namespace=namespace,
                                               cluster_name=config.cluster.name, server=server,
                                               sidecar_image=sidecar_image))
    return namespace_chart, charts


def write_manifests(config: PlatformConfig, *, outdir: Path, sidecar_image: str,
                    outputs_file: Path | None = None) -> list[str]:
    """Write ``dist/``; return the names of charts left out because they await deploy-time values."""
    certificate_arn, hosted_zone_id = _from_outputs(config, outputs_file)
    plan = plan_with(config, certificate_arn=certificate_arn, hosted_zone_id=hosted_zone_id)
    app = cdk8s.App(outdir=str(outdir), yaml_output_type=cdk8s.YamlOutputType.FILE_PER_CHART)
    _, charts = workload_charts(app, config, plan, sidecar_image)
    waiting = [chart.node.id for chart in charts if "${Token[" in json.dumps(chart.to_json())]
    for name in waiting:
        app.node.try_remove_child(name)
    outdir.mkdir(parents=True, exist_ok=True)
    for stale in outdir.glob("*.k8s.yaml"):
        stale.unlink()
    app.synth()
    return waiting


def _from_outputs(config: PlatformConfig, outputs_file: Path | None) -> tuple[str | None, str | None]:
    if outputs_file is None:
        return None, None
    try:
        outputs = json.loads(outputs_file.read_text())
    except (OSError, ValueError) as error:
        problems = Problems()
        problems.add("Manifests.BadOutputsFile", str(outputs_file),
                     f"must be the JSON written by `cdk deploy --outputs-file` ({error})")
        raise ConfigError(problems) from None
    stack = outputs.get(f"{config.project}-cluster", {})
    return stack.get("CertificateArn"), stack.get("HostedZoneId")


class InferenceWorkloads(Construct):
    """Apply the workload charts to ``cluster``, with one IAM role per workload."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        config: PlatformConfig,
        cluster: eks.Cluster,
        certificate_arn: str,
        hosted_zone: route53.IHostedZone,
        depends_on: Sequence[IConstruct],
    ) -> None:
        super().__init__(scope, id_)
        self.plan = plan_with(config, certificate_arn=certificate_arn, hosted_zone_id=hosted_zone.hosted_zone_id)
        namespace = config.operator.namespace
        self.identities = {
            plan.service_account: WorkloadIdentity(
                self, f"Identity-{plan.service_account}", cluster=cluster, namespace=namespace,
                service_account=plan.service_account, role_name=plan.role_name,
                **_weights(self, plan.service_account, plan.weights_s3_uri))
            for plan in self.plan.identities
        }
        self.sidecar_image = ecr_assets.DockerImageAsset(
            self, "CaptureSidecarImage", directory=str(SIDECAR_DIR),
            exclude=["**/__pycache__", "**/*.pyc", ".pytest_cache", "__init__.py"],
        ) if self.plan.portable else None
        self.external_dns = self._external_dns(cluster, hosted_zone, config) if self.plan.portable else None

        charts8s = cdk8s.App()
        namespace_chart, charts = workload_charts(charts8s, config, self.plan, self.sidecar_image_uri)
        self.namespace_manifest = cluster.add_cdk8s_chart("Namespace", namespace_chart)
        for dependency in depends_on:
            self.namespace_manifest.node.add_dependency(dependency)
        self.manifests = {}
        for chart in charts:
            manifest = cluster.add_cdk8s_chart(chart.node.id, chart)
            manifest.node.add_dependency(self.namespace_manifest)
            for account in _service_accounts_of(chart):
                manifest.node.add_dependency(self.identities[account])
            if self.external_dns is not None and chart.node.id.startswith("portable-"):
                manifest.node.add_dependency(self.external_dns)
            self.manifests[chart.node.id] = manifest

    @property
    def sidecar_image_uri(self) -> str:
        """Deterministic (no token): the bootstrap's container asset repository and the asset hash."""
        if self.sidecar_image is None:
            return ""
        stack = Stack.of(self)
        qualifier = DefaultStackSynthesizer.DEFAULT_QUALIFIER
        return (f"{stack.account}.dkr.ecr.{stack.region}.amazonaws.com/cdk-{qualifier}-container-assets-"
                f"{stack.account}-{stack.region}:{self.sidecar_image.asset_hash}")

    def _external_dns(self, cluster: eks.Cluster, zone: route53.IHostedZone, config: PlatformConfig) -> Construct:
        """ExternalDNS for the portable Services' hostnames, allowed to change only this zone."""
        role = iam.Role(
            self, "ExternalDnsRole",
            assumed_by=service_account_principal(self, "ExternalDnsTrust", cluster=cluster, namespace="kube-system",
                                                 service_account=EXTERNAL_DNS_SERVICE_ACCOUNT),
            description="ExternalDNS: records of portable model servers in one hosted zone",
        )
        role.add_to_principal_policy(iam.PolicyStatement(
            sid="ChangeRecordsInOneZone", actions=["route53:ChangeResourceRecordSets", "route53:ListResourceRecordSets",
                                                   "route53:ListTagsForResource"],
            resources=[zone.hosted_zone_arn]))
        role.add_to_principal_policy(iam.PolicyStatement(
            # Route 53 list calls support no resource-level permissions; zoneIdFilters limits use to the one zone.
            sid="FindTheZone", actions=["route53:ListHostedZones"], resources=["*"]))
        self.external_dns_role = role
        return cluster.add_helm_chart(
            "ExternalDns", chart="external-dns", repository="https://kubernetes-sigs.github.io/external-dns/",
            version=EXTERNAL_DNS_CHART_VERSION, namespace="kube-system", release="external-dns",
            values={
                "provider": {"name": "aws"},
                "policy": "upsert-only",
                "sources": ["service"],
                "domainFilters": [config.domain.zone_name],
                "extraArgs": [f"--zone-id-filter={zone.hosted_zone_id}"],
                "txtOwnerId": config.cluster.name,
                "serviceAccount": {"name": EXTERNAL_DNS_SERVICE_ACCOUNT,
                                   "annotations": {"eks.amazonaws.com/role-arn": role.role_arn}},
            },
        )


def _service_accounts_of(chart: cdk8s.Chart) -> list[str]:
    """The service accounts a workload chart runs under (each has its identity in this construct)."""
    if isinstance(chart, PortableModelServerChart):
        return [chart.server.name]
    assert isinstance(chart, InferenceChart)
    return list(chart.service_accounts)


def _weights(scope: Construct, name: str, uri: str | None) -> dict[str, object]:
    if uri is None or is_token(uri):
        return {}
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    return {"weights_bucket": s3.Bucket.from_bucket_name(scope, f"Weights-{name}", bucket),
            "weights_prefix": prefix}
