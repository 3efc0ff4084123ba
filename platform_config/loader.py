"""Read, check and plan a deployment configuration file before anything is built.

``load_config(path)`` returns a :class:`PlatformConfig` or raises one :class:`ConfigError` that lists
every problem of the file, each once, under its key path, with the bad value and what is allowed.

Division of work, so every rule exists once:

* this module reads the file's shape (types, required and unknown keys) and the few rules that belong to
  this app's file alone (``project``, ``environment``, which VPC kind);
* each value a construct takes is checked by that construct's own ``check_*`` function, called here with
  the file's key paths (:class:`~hyperpod_inference_iac.KeyPaths`): the same rule, the same code, whether
  the value comes from this file or from another team's Python;
* the ``models:`` and ``portable:`` entries are parsed by the charts and planned once, with everything
  else, by :func:`~hyperpod_inference_iac.charts.plan_workloads`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hyperpod_inference_iac import (
    CaptureEraserOptions,
    CapturePipelineOptions,
    CaptureStorageOptions,
    CaptureTablesOptions,
    FlowLogTraffic,
    GpuCostOptions,
    KeyPaths,
    LogRetentionOptions,
    RiskWarnings,
    SecretsOptions,
    UsageStoreOptions,
    WorkloadOwner,
    check_certificate_alarms,
    check_region,
    check_tags,
    warn_alarm_topic,
    warn_capture_pipeline,
    warn_capture_storage,
    warn_capture_tables,
    warn_certificate_alarms,
    warn_entry,
    warn_gateway,
    warn_hyperpod_cluster,
    warn_inference_cluster,
    warn_workload,
)
from hyperpod_inference_iac.capture.capture_tables import (
    ROW_RETENTION_DAYS,
    SNAPSHOT_RETENTION_DAYS,
)
from hyperpod_inference_iac.charts import (
    ModelDeployment,
    ModelWorkload,
    PlatformContext,
    PortableDeployment,
    PortableModelServer,
    PortableWorkload,
    WorkloadPlan,
    plan_workloads,
)
from hyperpod_inference_iac.charts.inference_chart import (
    ENTRY_SHORTCUTS,
    parse_model,
)
from hyperpod_inference_iac.cluster.hyperpod_dependencies import (
    check_health_agent_region,
)
from hyperpod_inference_iac.foundation.patterns import (
    ACCOUNT_ID,
    REGION,
)
from hyperpod_inference_iac.foundation.validation import (
    WRONG_TYPE,
    Problems,
    join_path,
)
from hyperpod_inference_iac.serving.endpoint_domain import (
    check_endpoint_certificate,
)
from platform_config.alarm_names import check_platform_alarm_names
from platform_config.document import read_document
from platform_config.gateways import read_gateways
from platform_config.model import (
    AcknowledgedWarning,
    AlarmsConfig,
    CapturePolicy,
    ClusterConfig,
    DomainConfig,
    Environment,
    ExistingVpc,
    HyperPodConfig,
    NewVpc,
    OperatorConfig,
    PlatformConfig,
)
from platform_config.reader import Section, read_props

PROJECT = r"[a-z][a-z0-9-]{1,18}[a-z0-9]"
WARNING_ID = r"@hyperpod-inference-iac/[A-Za-z_]+:[A-Za-z]+"

# Config keys of the construct properties they set (KeyPaths names).
# `capture.prefix` is the pipeline's capture_prefixes (its only one).
_CAPTURE_PREFIX_KEYS = {"capture_prefixes": "prefix", "capture_prefixes[0]": "prefix"}
# `network.flowLogs` is the VPC options' flow_log_traffic, beside the kind (it applies to whichever is given).
_BESIDE_THE_VPC_KIND = ("flow_log_traffic",)
_FLOW_LOGS_OFF = "off"
_UNSET: Any = object()
SIDECAR_IMAGE_BY_DIGEST = r"^[a-z0-9.-]+(:[0-9]+)?/[a-z0-9._/-]+@sha256:[0-9a-f]{64}$"

# The plan of a config being read, before its workloads are planned (never seen outside parse_config).
_UNPLANNED = WorkloadPlan(context=PlatformContext(cluster_name="", namespace="", account="", role_name_prefix=""))


def load_config(path: str | Path) -> PlatformConfig:
    """The checked config of a file (read within bounds first: platform_config.document)."""
    data, problems = read_document(path)
    return parse_config(data, source=str(path), problems=problems)


def parse_config(data: Any, *, source: str = "<config>", problems: Problems | None = None) -> PlatformConfig:
    """Every problem of the file in one :class:`ConfigError` (with ``problems``, those found before, such as
    duplicate keys), or the checked and planned config."""
    problems = Problems() if problems is None else problems
    root = Section(data, "", problems)
    project = root.string("project", required=True, pattern=PROJECT,
                          hint="must be 3-20 characters of lowercase letters, digits and '-', starting with a "
                               "letter (it prefixes bucket names, which S3 limits to 63 characters)") or "invalid"
    env_section = root.section("environment", required=True)
    region = env_section.string("region", required=True, pattern=REGION.pattern,
                                hint="must be an AWS region name such as us-west-2")
    if region is not None:
        check_region(problems, env_section.at("region"), region)
    environment = Environment(
        account=env_section.string("account", required=True, pattern=ACCOUNT_ID.pattern,
                                   hint="must be a 12-digit AWS account id, quoted in YAML") or "000000000000",
        # A placeholder after a problem: the region's consequences (a pandas layer, a certificate's region) are
        # not reported again under other keys.
        region=region if region is not None and not problems.has_at_or_below("environment.region")
        else "us-east-1",
    )
    if environment.region == region:  # (a known region: HyperPodCluster applies the health agent, an image of it)
        check_health_agent_region(problems, env_section.at("region"), region)
    env_section.finish()
    config = PlatformConfig(
        source=source,
        project=project,
        environment=environment,
        tags=_tags(root),
        capture=_capture(root.section("capture"), environment, project),
        logging=_logging(root.section("logging")),
        secrets=_secrets(root.section("secrets")),
        vpc=_vpc(root.section("network")),
        cluster=_cluster(root.section("cluster", required=True)),
        hyperpod=_hyperpod(root.section("hyperpod", required=True)),
        operator=_operator(root.section("operator")),
        domain=_domain(root.section("domain", required=True), environment),
        models=tuple(_models(root)),
        portable=tuple(_portable(root)),
        gateways=tuple(read_gateways(root)),
        usage_store=_usage_store(root),
        acknowledged_warnings=tuple(_acknowledged_warnings(root)),
        workloads=_UNPLANNED,  # replaced below, once the platform context (which the file determines) plans them
    )
    config = dataclasses.replace(config, alarms=_alarms(root.section("alarms"), config),
                                 workload_owner=_workload_owner(root.section("workloads")),
                                 costs=_costs(root.optional_section("costs"), config))
    root.finish()
    # The workloads are planned with the rest of the file: their problems are reported in the same run,
    # whatever else is wrong (values a plan needs fall back to placeholders above, never to a crash).
    context = config.platform_context
    if problems.has_at_or_below("operator.addonVersion"):  # (no version to hold the workloads to: one problem, its own)
        context = dataclasses.replace(context, operator_addon_version=None)
    if problems.has_at_or_below("hyperpod"):  # (groups with a problem place nothing: one problem, the group's)
        context = dataclasses.replace(context, node_groups=())
    if problems.has_at_or_below("domain.endpointDomains"):  # (the workloads' names are compared once it is right)
        context = dataclasses.replace(context, endpoint_domains=None)
    plan = plan_workloads(context, models=config.models, portable=config.portable, gateways=config.gateways,
                          problems=problems)
    if config.usage_store is not None and not plan.usage_store_users:
        problems.add("UsageStore.Unused", "usageStore",
                     "configures the budget store the platform creates for portable servers and gateway entries "
                     "whose usageLimits name no storeUrl, and none uses it (each gives its own storeUrl, or none has "
                     "token budgets): remove usageStore, or the storeUrl of those that should use the platform's "
                     "store")
    config = dataclasses.replace(config, workloads=plan)
    # Every alarm name the stacks will create, from the functions the constructs name them with: two of one name, or
    # one too long, is refused here (docs/alarms.md#alarm-names).
    check_platform_alarm_names(config, problems)
    problems.raise_if_any(source)
    return dataclasses.replace(config, warnings=tuple(_warnings(config)))


def _warnings(config: PlatformConfig) -> RiskWarnings:
    """The warnings the platform's stacks give at synth, from the constructs' own ``warn_*`` functions, given what
    the stacks give each construct (stacks/; a test builds the platform and compares) and this file's key paths."""
    warnings = RiskWarnings()
    storage, pipeline = config.capture.storage, config.capture.pipeline
    warn_capture_storage(warnings, storage.key_paths("capture"), account=config.environment.account,
                         reader_role_arns=storage.reader_role_arns, raw_reader_role_arns=storage.raw_reader_role_arns,
                         break_glass_role_arns=storage.break_glass_role_arns)
    warn_capture_pipeline(warnings, pipeline.key_paths("capture"), redact=pipeline.redact)
    tables = config.capture.tables
    warn_capture_tables(warnings, tables.key_paths("capture"), tables_layer_arn=tables.tables_layer_arn)
    warn_inference_cluster(warnings, ClusterConfig.key_paths("cluster"), endpoint_access=config.cluster.endpoint_access)
    warn_hyperpod_cluster(warnings, HyperPodConfig.key_paths("hyperpod"),
                          instance_groups=config.hyperpod.instance_groups)
    alarms = config.alarms
    if alarms.enabled:
        at = AlarmsConfig.key_paths("alarms")
        warn_alarm_topic(warnings, at.block("subscribers"), **alarms.subscribers.kwargs())
        warn_certificate_alarms(warnings, at.block("certificate"), **alarms.certificate.kwargs())
        # (days_to_expiry None: that alarm is off, and so is its warning)
    plan = config.workloads
    workloads: list[ModelWorkload | PortableWorkload] = [*plan.models, *plan.portable]
    for workload in workloads:
        # (the app builds the sidecar image: never named by a movable tag)
        warn_workload(warnings, workload, monitored_namespaces=config.monitored_namespaces)
    for gateway in config.workloads.gateways:
        warn_gateway(warnings, gateway)
    for entry in config.workloads.entries:
        warn_entry(warnings, entry, monitored_namespaces=config.monitored_namespaces)
    return warnings


def _capture(section: Section, environment: Environment, project: str) -> CapturePolicy:
    """``capture:``: the options of the platform's CaptureStorage and CapturePipeline, each read by its declared keys
    and checked by its own rules. ``prefix`` is the storage's ``capture_prefix`` and the pipeline's only capture
    prefix; the pipeline's output and quarantine prefixes are the storage's."""
    problems = section.problems
    storage_rules, pipeline_rules = Problems(), Problems()
    storage = read_props(
        CaptureStorageOptions, section, problems=storage_rules,
        # An explicit "" is the prefix rule's to refuse (CapturePipeline.EmptyPrefix), not a silent default.
        allow_empty={"capture_prefix"},
        # (Against an account with a problem of its own, roles are not compared with it.)
        check_with={"account": None if problems.has_at_or_below("environment.account") else environment.account})
    pipeline = read_props(
        CapturePipelineOptions, section, problems=pipeline_rules, check_with={"region": environment.region},
        at=CapturePipelineOptions.key_paths(section.path, **_CAPTURE_PREFIX_KEYS),
        capture_prefixes=(storage.capture_prefix,), output_prefix=storage.curated_prefix,
        quarantine_prefix=storage.quarantine_prefix, glue_database_name=f"{project.replace('-', '_')}_capture")
    tables = read_props(
        CaptureTablesOptions, section, database_name=f"{project.replace('-', '_')}_capture_iceberg",
        iceberg_prefix=storage.iceberg_prefix, query_results_prefix=storage.query_results_prefix,
        workgroup_name=f"{project}-capture",
        # Rows older than the capture policy's retention are deleted daily (the raw objects expire by lifecycle).
        # (One mistake, one problem: a retention out of range is the storage's, reported at its key.)
        row_retention_days=storage.retention_days if ROW_RETENTION_DAYS[0] <= storage.retention_days
        <= ROW_RETENTION_DAYS[1] else None,
        # Snapshots (old versions of a table) expire as overwritten capture objects do.
        # (One mistake, one problem: a retention out of range is the storage's, reported at its key.)
        snapshot_retention_days=retention if SNAPSHOT_RETENTION_DAYS[0] <= (
            retention := storage.noncurrent_version_retention_days) <= SNAPSHOT_RETENTION_DAYS[1]
        else CaptureTablesOptions.snapshot_retention_days)
    # Who may assume the erasure role (none: no role; an erasure needs the break-glass role).
    eraser = read_props(CaptureEraserOptions, section, role_name=f"{project}-capture-eraser", check_with={
        "account": None if problems.has_at_or_below("environment.account") else environment.account})
    # A prebuilt sidecar image by digest (a tag could move under the running pods): no Docker at deploy time.
    sidecar_image = section.string(
        "sidecarImage", pattern=SIDECAR_IMAGE_BY_DIGEST,
        hint="must be <registry>/<repository>@sha256:<64 hex digits>: a digest is required (a tag can be moved)")
    section.finish()
    # One mistake, one problem: both constructs' rules read capture.prefix (one prefix rule). The pipeline's codes
    # for its form come first (CapturePipeline.EmptyPrefix, InvalidPrefix); an overlap with curated/ or quarantine/
    # is the storage's (at capture.prefix: the pipeline's names its own output prefix, which no file sets).
    overlaps = [p for p in pipeline_rules if p.code == "CapturePipeline.OverlappingPrefixes"]
    for batch in ([p for p in pipeline_rules if p not in overlaps], storage_rules, overlaps):
        reported = [part for problem in problems for part in problem.path.split(", ")]
        problems.extend(p for p in batch if not any(_at_or_below(part, path) for part in p.path.split(", ")
                                                    for path in reported))
    return CapturePolicy(storage=storage, pipeline=pipeline, tables=tables, eraser=eraser, sidecar_image=sidecar_image)


def _usage_store(root: Section) -> UsageStoreOptions | None:
    """``usageStore:`` (optional): the options of the budget store (UsageStore) the cluster stack creates when a
    portable server's token budgets name no ``storeUrl``."""
    if not root.has("usageStore"):
        return None
    section = root.section("usageStore")
    options = read_props(UsageStoreOptions, section)
    section.finish()
    return options


def _workload_owner(section: Section) -> WorkloadOwner:
    """``workloads.owner``: ``cdk`` (the default: the cluster stack applies the workloads) or ``gitops`` (dist/ is
    the hand-off, the cluster stack applies none of them)."""
    owners = "|".join(owner.value for owner in WorkloadOwner)
    owner = section.string("owner", default=WorkloadOwner.CDK.value, pattern=f"^({owners})$",
                           hint=f"must be one of {', '.join(owner.value for owner in WorkloadOwner)}")
    section.finish()
    return WorkloadOwner(owner or WorkloadOwner.CDK.value)


def _at_or_below(path: str, ancestor: str) -> bool:
    return path == ancestor or path.startswith((f"{ancestor}.", f"{ancestor}["))


def _costs(section: Section | None, config: PlatformConfig) -> GpuCostOptions | None:
    """``costs``: the prices and the models of each group (GpuCost), checked against the platform's GPU node groups
    and HyperPod instance groups (unless those have problems of their own: one mistake, one problem)."""
    if section is None:
        return None
    problems = section.problems
    groups_ok = not problems.has_at_or_below("cluster.gpuNodeGroups") and not problems.has_at_or_below("hyperpod")
    costs = read_props(GpuCostOptions, section, check_with={
        "node_groups": {g.name: tuple(g.instance_types) for g in config.cluster.gpu_node_groups} if groups_ok else None,
        "instance_groups": {g.name: g.instance_type for g in config.hyperpod.instance_groups} if groups_ok else None})
    section.finish()
    if config.capture.tables.tables_layer_arn is None and not problems.has_at_or_below("capture.tablesLayerArn"):
        problems.add("GpuCost.NoTablesLayer", section.path,
                     "the node-hour sampler writes the Iceberg table gpu_node_hours with pyiceberg: give "
                     "capture.tablesLayerArn (make capture-layer), or leave costs out")
    return costs


def _logging(section: Section) -> LogRetentionOptions:
    logging = read_props(LogRetentionOptions, section)
    section.finish()
    return logging


def _secrets(section: Section) -> SecretsOptions:
    secrets = read_props(SecretsOptions, section)
    section.finish()
    return secrets


def _vpc(section: Section) -> NewVpc | ExistingVpc:
    """``network``: one VPC kind, read as that construct's options under ``network.<kind>``, and ``flowLogs`` for
    whichever it is (the construct's default when unset)."""
    problems = section.problems
    existing = section.optional_section("existingVpc")
    create = section.optional_section("newVpc")
    flow_logs = section.raw("flowLogs") if section.has("flowLogs") else _UNSET
    section.finish()
    if existing is not None and create is not None:
        problems.add("Network.BothVpcKinds", section.path, "give either newVpc or existingVpc, not both")
    kind: type[NewVpc | ExistingVpc]
    name, kind, block = ("existingVpc", ExistingVpc, existing) if existing is not None else \
        ("newVpc", NewVpc, create or Section({}, section.at("newVpc"), problems))
    at = KeyPaths(section.path, {field: key if field in _BESIDE_THE_VPC_KIND else f"{name}.{key}"
                                 for field, key in kind.key_names().items()})
    traffic = kind.flow_log_traffic if flow_logs is _UNSET else _traffic(_flow_logs_off_or(flow_logs))
    vpc = read_props(kind, block, at=at, flow_log_traffic=traffic)
    block.finish()
    if isinstance(vpc, ExistingVpc) and problems.has_at_or_below(block.at("vpcCidr")):
        # (the plan bounds portable servers' networks by it: a stand-in, so the CIDR's problem is reported once)
        vpc = vpc.replace(vpc_cidr=NewVpc.cidr)
    return vpc


def _flow_logs_off_or(value: Any) -> Any:
    """``network.flowLogs``: ``off`` (YAML reads an unquoted off as false) means no flow log (None); anything
    else is a traffic type for the construct's check."""
    if value is False or (isinstance(value, str) and value.lower() == _FLOW_LOGS_OFF):
        return None
    return value


def _traffic(value: Any) -> Any:
    """The traffic type when it is one; anything else as the file wrote it (``true`` as ``'true'``), for the
    construct's rule to report (its type check would otherwise name a Python type the file does not have)."""
    if value is not None and not isinstance(value, str):
        value = str(value).lower() if isinstance(value, bool) else str(value)
    return FlowLogTraffic(value) if isinstance(value, str) and value in FlowLogTraffic._value2member_map_ else value

def _cluster(section: Section) -> ClusterConfig:
    config = read_props(ClusterConfig, section)
    section.finish()
    return config


def _hyperpod(section: Section) -> HyperPodConfig:
    config = read_props(HyperPodConfig, section)
    section.finish()
    return config


def _operator(section: Section) -> OperatorConfig:
    config = read_props(OperatorConfig, section)
    section.finish()
    return config


def _tags(root: Section) -> dict[str, str]:
    """``tags``: key -> string value, each entry under its own key path; the tag rules are the construct's."""
    problems = root.problems
    value = root.raw("tags")
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        problems.add(WRONG_TYPE, root.at("tags"), "must be a mapping of tag keys to string values", value)
        return {}
    tags = {}
    for key, item in value.items():
        path = join_path(root.at("tags"), str(key))
        if not isinstance(key, str):
            problems.add(WRONG_TYPE, path, "a tag key must be a string (quote it in YAML)", key)
        elif not isinstance(item, str):
            problems.add(WRONG_TYPE, path, "a tag value must be a string (quote it in YAML; an empty one is \"\")",
                         item)
        else:
            tags[key] = item
    check_tags(problems, KeyPaths(root.path), tags=tags)
    return tags


def _domain(section: Section, environment: Environment) -> DomainConfig:
    problems = section.problems
    config = read_props(DomainConfig, section)
    section.finish()
    # The certificate's account and region are the environment's. (Against a region or account with a problem of
    # its own, or an ARN that is none, the certificate is not checked: one mistake, one problem.)
    if not problems.has_at_or_below("environment") and not problems.has_at_or_below(
            section.at("existingCertificateArn")):
        check_endpoint_certificate(problems, DomainConfig.key_paths(section.path, certificate="existingCertificateArn"),
                                   config.existing_certificate_arn, account=environment.account,
                                   region=environment.region)
    if problems.has_at_or_below(section.at("zoneName")):
        config = config.replace(zone_name="")  # no zone: the plan compares no name with it (one problem, the zone's)
    return config


def _alarms(section: Section, config: PlatformConfig) -> AlarmsConfig:
    """The ``alarms:`` section, read as the alarm constructs' options (their keys, defaults and rules)."""
    problems = section.problems
    alarms = read_props(AlarmsConfig, section)
    section.finish()
    if (config.domain.existing_certificate_arn and not problems.has_at_or_below("environment")
            and not problems.has_at_or_below("domain.existingCertificateArn")):  # (its region: EndpointDomain's)
        # The certificate the alarm watches is the config's: a problem with it is named after its key.
        check_certificate_alarms(problems, KeyPaths("domain", {"certificates.endpoints": "existingCertificateArn"}),
                                 region=config.environment.region,
                                 certificate_arns={"endpoints": config.domain.existing_certificate_arn},
                                 alarm_name_prefix=config.project, days_to_expiry=None)
    # (The names the app gives the topic, the alarms and the agent's role derive from `project`; the sidecars'
    # cluster name and namespace are their own sections' values, checked there.)
    return alarms


def _models(root: Section) -> list[ModelDeployment]:
    problems = root.problems
    deployments = []
    for path, entry in root.items("models"):
        workload = parse_model(entry, path, problems)
        if workload is None:
            continue
        shortcuts = {}
        for key in ENTRY_SHORTCUTS:  # endpointDomain, namespace, gateway: plain strings
            value = entry.get(key)
            if value is not None and not isinstance(value, str):
                problems.add(WRONG_TYPE, join_path(path, key), "must be a string", value)
                value = None
            shortcuts[key] = value
        deployments.append(ModelDeployment(workload, endpoint_domain=shortcuts["endpointDomain"], path=path,
                                           namespace=shortcuts["namespace"], gateway=shortcuts["gateway"]))
    return deployments


def _portable(root: Section) -> list[PortableDeployment]:
    problems = root.problems
    deployments = []
    for path, entry in root.items("portable"):
        server = PortableModelServer.from_dict(entry, path, problems)
        if server is not None:
            deployments.append(PortableDeployment(server, path=path))
    return deployments


def _acknowledged_warnings(root: Section) -> list[AcknowledgedWarning]:
    """Construct warnings the platform accepts: each names the warning and says why (the reason is the review)."""
    problems = root.problems
    acknowledged = []
    for path, item in root.items("acknowledgedWarnings"):
        entry = Section(item, path, problems)
        warning_id = entry.string("id", required=True, pattern=WARNING_ID,
                                  hint="must be a construct warning id such as "
                                       "@hyperpod-inference-iac/InferenceWorkloads:imageNotPinnedByDigest")
        reason = entry.string("reason", required=True, pattern=r"\S.{9,}",
                              hint="must say why the platform accepts it (at least 10 characters)")
        entry.finish()
        if warning_id and reason:
            acknowledged.append(AcknowledgedWarning(id=warning_id, reason=reason, path=path))
    return acknowledged


def _integer(section: Section, key: str, default: int) -> int:
    """An integer whose range the construct that takes it checks (one rule, one code)."""
    value = section.integer(key, default=default)
    return default if value is None else value
