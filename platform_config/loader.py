"""Read and validate a deployment configuration file before anything is built.

``load_config(path)`` returns a :class:`PlatformConfig` or raises one :class:`ConfigError` that
lists every problem with its key path, the bad value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from pathlib import Path
from typing import Any

import yaml

# The operator's own patterns: a value the config accepts must also pass the CRD.
from hyperpod_inference_iac.charts.endpoint_blocks import ACM_ARN_PATTERN, HOSTED_ZONE_ID_PATTERN
from hyperpod_inference_iac.charts.endpoint_blocks import IAM_ROLE_ARN_PATTERN as ROLE_ARN_PATTERN
from hyperpod_inference_iac.validation import DNS1123_LABEL, ConfigError, Problems
from platform_config.model import (
    CapturePolicy,
    ClusterConfig,
    DomainConfig,
    Environment,
    ExistingVpc,
    GpuNodeGroupConfig,
    HyperPodConfig,
    HyperPodInstanceGroupConfig,
    NewVpc,
    OperatorConfig,
    PlatformConfig,
)
from platform_config.reader import Section
from platform_config.workloads import plan_workloads, platform_values

REDACTION_RULES = ("email", "phone", "access_token")
# Kubernetes minors with an EKS release, a kubectl layer package and a cdk8s-plus package we can pin.
SUPPORTED_KUBERNETES_VERSIONS = ("1.33", "1.34", "1.35")
ACCOUNT_PATTERN = r"\d{12}"
REGION_PATTERN = r"[a-z]{2}(-gov)?-[a-z]+-\d"
DOMAIN_PATTERN = r"(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+"
HYPERPOD_NAME_PATTERN = r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}"


def load_config(path: str | Path) -> PlatformConfig:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError([], source=f"{path} (cannot be read: {error.strerror}; pass an existing file with "
                                     f"`-c config=path/to/file.yaml`)") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        problems = Problems()
        problems.add("Config.InvalidYaml", where, f"is not valid YAML: {getattr(error, 'problem', error)}")
        raise ConfigError(problems, source=str(path)) from None
    return parse_config(data, source=str(path))


def parse_config(data: Any, *, source: str = "<config>") -> PlatformConfig:
    problems = Problems()
    root = Section(data, "", problems)

    project = root.string("project", required=True, pattern=r"[a-z][a-z0-9-]{1,18}[a-z0-9]",
                          hint="must be 3-20 characters of lowercase letters, digits and '-', starting with a "
                               "letter (it prefixes bucket names, which S3 limits to 63 characters)") or "invalid"
    env_section = root.section("environment", required=True)
    environment = Environment(
        account=env_section.string("account", required=True, pattern=ACCOUNT_PATTERN,
                                   hint="must be a 12-digit AWS account id, quoted in YAML") or "000000000000",
        region=env_section.string("region", required=True, pattern=REGION_PATTERN,
                                  hint="must be an AWS region name such as us-west-2") or "us-east-1",
    )
    env_section.finish()
    tags = root.string_map("tags")

    config = PlatformConfig(
        source=source,
        project=project,
        environment=environment,
        tags=tags,
        capture=_capture(root.section("capture"), problems),
        vpc=_vpc(root.section("network"), problems),
        cluster=_cluster(root.section("cluster", required=True), problems),
        hyperpod=_hyperpod(root.section("hyperpod", required=True)),
        operator=_operator(root.section("operator")),
        domain=_domain(root.section("domain", required=True)),
        models_source=tuple(item for _, item in root.items("models")),
        portable_source=tuple(item for _, item in root.items("portable")),
    )
    root.finish()
    if not problems:  # workloads are wired from platform values, which need a valid platform first
        config = dataclasses.replace(config, workloads=plan_workloads(
            list(config.models_source), list(config.portable_source), values=platform_values(config),
            custom_service_accounts_enabled=config.operator.enable_custom_service_accounts, problems=problems))
    problems.raise_if_any(source)
    return config


def _capture(section: Section, problems: Problems) -> CapturePolicy:
    def known_rule(path: str, rule: str) -> None:
        if rule not in REDACTION_RULES:
            problems.add("Capture.UnknownRedactionRule", path, f"must be one of {', '.join(REDACTION_RULES)}", rule)

    def role_arn(path: str, arn: str) -> None:
        _check_pattern(problems, path, arn, ROLE_ARN_PATTERN, "Config.BadFormat", "must be an IAM role ARN")

    policy = CapturePolicy(
        prefix=section.string("prefix", default="data-capture/", pattern=r"([a-z0-9][a-z0-9._-]*/)+",
                              hint="must be lowercase path segments each ending in '/', e.g. data-capture/")
        or "data-capture/",
        retention_days=section.integer("retentionDays", default=30, minimum=1, maximum=3650) or 30,
        noncurrent_version_retention_days=section.integer("noncurrentVersionRetentionDays", default=7,
                                                          minimum=1, maximum=365) or 7,
        access_log_retention_days=section.integer("accessLogRetentionDays", default=365, minimum=1,
                                                  maximum=3650) or 365,
        redact=tuple(section.string_list("redact", check=known_rule) if section.has("redact")
                     else REDACTION_RULES),
        reader_role_arns=tuple(section.string_list("readerRoleArns", check=role_arn)),
        pandas_layer_arn=section.string(
            "pandasLayerArn", pattern=r"arn:aws[a-z-]*:lambda:[a-z0-9-]+:\d{12}:layer:[A-Za-z0-9_-]+:\d+",
            hint="must be a Lambda layer version ARN (AWS SDK for pandas, Python 3.13, arm64)"),
    )
    section.finish()
    return policy


def _vpc(section: Section, problems: Problems) -> NewVpc | ExistingVpc:
    existing = section.optional_section("existingVpc")
    create = section.optional_section("newVpc")
    section.finish()
    if existing is not None and create is not None:
        problems.add("Network.BothVpcKinds", section.path, "give either newVpc or existingVpc, not both")
    if existing is not None:
        def subnet(path: str, value: str) -> None:
            _check_pattern(problems, path, value, r"subnet-[0-9a-f]{8,17}", "Config.BadFormat",
                           "must be a subnet id such as subnet-0123456789abcdef0")

        vpc = ExistingVpc(
            vpc_id=existing.string("vpcId", required=True, pattern=r"vpc-[0-9a-f]{8,17}",
                                   hint="must be a VPC id such as vpc-0123456789abcdef0") or "vpc-00000000",
            vpc_cidr=_cidr(existing, "vpcCidr", problems, required=True),
            availability_zones=tuple(existing.string_list("availabilityZones", required=True, min_items=2)),
            private_subnet_ids=tuple(existing.string_list("privateSubnetIds", required=True, min_items=2,
                                                          check=subnet)),
        )
        existing.finish()
        if len(vpc.availability_zones) != len(vpc.private_subnet_ids):
            problems.add("Network.SubnetsPerZone", existing.at("privateSubnetIds"),
                         f"needs one private subnet per availability zone ({len(vpc.availability_zones)} zones)",
                         list(vpc.private_subnet_ids))
        return vpc
    create = create or Section({}, section.at("newVpc"), problems)
    vpc = NewVpc(
        cidr=_cidr(create, "cidr", problems, default="10.42.0.0/16"),
        max_azs=create.integer("maxAzs", default=2, minimum=2, maximum=6) or 2,
        nat_gateways=create.integer("natGateways", default=1, minimum=1, maximum=6) or 1,
    )
    create.finish()
    return vpc


def _cidr(section: Section, key: str, problems: Problems, *, required: bool = False,
          default: str | None = None) -> str:
    value = section.string(key, required=required, default=default) or default or "10.42.0.0/16"
    try:
        network = ipaddress.ip_network(value)
        if network.version != 4 or not 16 <= network.prefixlen <= 24:
            raise ValueError
    except ValueError:
        problems.add("Network.BadCidr", section.at(key), "must be an IPv4 CIDR block from /16 to /24", value)
    return value


def _cluster(section: Section, problems: Problems) -> ClusterConfig:
    groups = []
    for path, item in section.items("gpuNodeGroups", required=True, min_items=1):
        group = Section(item, path, problems)
        min_size = group.integer("minSize", default=0, minimum=0, maximum=100)
        desired = group.integer("desiredSize", default=1, minimum=0, maximum=100)
        max_size = group.integer("maxSize", default=2, minimum=1, maximum=100)
        if None not in (min_size, desired, max_size) and not min_size <= desired <= max_size:  # type: ignore[operator]
            problems.add("Cluster.NodeGroupSizes", path, "needs minSize <= desiredSize <= maxSize",
                         {"minSize": min_size, "desiredSize": desired, "maxSize": max_size})
        groups.append(GpuNodeGroupConfig(
            name=group.string("name", required=True, pattern=DNS1123_LABEL.pattern,
                              hint="must be a lowercase DNS label") or "invalid",
            instance_types=tuple(group.string_list("instanceTypes", required=True, min_items=1)),
            min_size=min_size or 0, desired_size=desired or 0, max_size=max_size or 1,
            root_volume_gib=group.integer("rootVolumeGiB", default=200, minimum=50, maximum=16384) or 200,
            labels=group.string_map("labels"),
        ))
        group.finish()
    names = [g.name for g in groups]
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.add("Cluster.DuplicateNodeGroup", section.at("gpuNodeGroups"), "node group names must be unique",
                     name)

    def admin(path: str, arn: str) -> None:
        _check_pattern(problems, path, arn, ROLE_ARN_PATTERN, "Config.BadFormat", "must be an IAM role ARN")

    config = ClusterConfig(
        name=section.string("name", required=True, pattern=r"[a-zA-Z][a-zA-Z0-9-]{0,99}",
                            hint="must start with a letter; letters, digits and '-' only") or "invalid",
        kubernetes_version=section.string("kubernetesVersion", default="1.34",
                                          allowed=SUPPORTED_KUBERNETES_VERSIONS) or "1.34",
        endpoint_access=section.string("endpointAccess", default="private",
                                       allowed=("private", "public_and_private")) or "private",
        admin_role_arns=tuple(section.string_list("adminRoleArns", check=admin)),
        system_instance_type=section.string("systemInstanceType", default="m6i.large",
                                            pattern=r"[a-z0-9-]+\.[a-z0-9]+",
                                            hint="must be an EC2 instance type such as m6i.large") or "m6i.large",
        gpu_node_groups=tuple(groups),
    )
    section.finish()
    return config


def _hyperpod(section: Section) -> HyperPodConfig:
    problems = section.problems
    groups = []
    for path, item in section.items("instanceGroups", required=True, min_items=1):
        group = Section(item, path, problems)
        groups.append(HyperPodInstanceGroupConfig(
            name=group.string("name", required=True, pattern=HYPERPOD_NAME_PATTERN,
                              hint="must be 1-63 letters, digits and '-'") or "invalid",
            instance_type=group.string("instanceType", required=True, pattern=r"ml\.[a-z0-9-]+\.[a-z0-9]+",
                                       hint="must be a SageMaker instance type such as ml.g5.12xlarge")
            or "ml.invalid",
            instance_count=group.integer("instanceCount", default=1, minimum=0, maximum=1000) or 0,
            threads_per_core=group.integer("threadsPerCore", default=1, minimum=1, maximum=2) or 1,
            ebs_volume_gib=group.integer("ebsVolumeGiB", default=500, minimum=1, maximum=16384) or 500,
            deep_health_checks=tuple(group.string_list(
                "deepHealthChecks",
                check=lambda p, v: v in ("InstanceStress", "InstanceConnectivity") or problems.add(
                    "HyperPod.UnknownDeepHealthCheck", p, "must be InstanceStress or InstanceConnectivity", v),
            )),
        ))
        group.finish()
    config = HyperPodConfig(
        cluster_name=section.string("clusterName", required=True, pattern=HYPERPOD_NAME_PATTERN,
                                    hint="must be 1-63 letters, digits and '-'") or "invalid",
        node_recovery=section.string("nodeRecovery", default="Automatic", allowed=("Automatic", "None"))
        or "Automatic",
        instance_groups=tuple(groups),
    )
    section.finish()
    return config


def _operator(section: Section) -> OperatorConfig:
    config = OperatorConfig(
        addon_version=section.string("addonVersion", default="v1.0.0-eksbuild.1",
                                     pattern=r"v\d+\.\d+\.\d+-eksbuild\.\d+",
                                     hint="must be an EKS add-on version such as v1.0.0-eksbuild.1")
        or "v1.0.0-eksbuild.1",
        enable_custom_service_accounts=section.boolean("enableCustomServiceAccounts", default=False),
        namespace=section.string("inferenceNamespace", default="inference", pattern=DNS1123_LABEL.pattern,
                                 hint="must be a lowercase DNS label") or "inference",
    )
    section.finish()
    return config


def _domain(section: Section) -> DomainConfig:
    problems = section.problems
    zone_name = section.string("zoneName", required=True, pattern=DOMAIN_PATTERN,
                               hint="must be a lowercase DNS name such as inference.example.com") or "example.com"

    def in_zone(path: str, name: str) -> None:
        if not _check_pattern(problems, path, name, DOMAIN_PATTERN, "Domain.BadDomainName",
                              "must be a concrete lowercase DNS name (no wildcard: the operator needs the exact "
                              "name)"):
            return
        if not name.endswith("." + zone_name):
            problems.add("Domain.OutsideZone", path, f"must be a subdomain of the zone {zone_name}", name)

    config = DomainConfig(
        zone_name=zone_name,
        existing_hosted_zone_id=section.string("existingHostedZoneId", pattern=HOSTED_ZONE_ID_PATTERN,
                                               hint="must be a Route 53 hosted zone id such as Z0123456789ABC"),
        endpoint_domains=tuple(section.string_list("endpointDomains", required=True, min_items=1,
                                                   check=in_zone)),
        existing_certificate_arn=section.string("existingCertificateArn", pattern=ACM_ARN_PATTERN,
                                                hint="must be an ACM certificate ARN"),
    )
    section.finish()
    return config


def _check_pattern(problems: Problems, path: str, value: str, pattern: str, code: str, message: str) -> bool:
    if re.fullmatch(pattern, value):
        return True
    problems.add(code, path, message, value)
    return False
