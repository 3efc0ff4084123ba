"""Validation is whole at the config check: every problem code a construct of the library can raise is raised by
``python -m platform_config`` too, under the config key, for a file that makes that mistake, or is listed below with
the reason no config file can make it (a value the app derives itself, a construct the app does not use, a property
only Python code passes). A code added to a construct without either fails here.

The cases of tests/unit/test_config.py count (each runs the config check and asserts the code at its key path);
the ones here add the codes those do not exercise."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

import pytest

from hyperpod_inference_iac.foundation.validation import ConfigError
from platform_config import parse_config
from tests.support.synth import REPO
from tests.unit import test_config
from tests.unit.test_config import _set, _with

# The codes no config file can raise, each with the reason. A code here that a case reaches fails the test below.
NOT_FROM_CONFIG: dict[str, str] = {
    # Parts that agree (agreement.py): the app derives each shared fact from one key, so they agree by construction.
    "CapturePipeline.OperatorPrefixNotProcessed": "the app gives `capture.prefix` to the operator and the pipeline",
    "CapturePipeline.PlanPrefixNotProcessed": "the app gives `capture.prefix` to the plan and the pipeline",
    "InferenceWorkloads.CapturePrefixNotOperators": "the app gives `capture.prefix` to the plan and the operator",
    "InferenceWorkloads.GatewayNotRunByOperator": "the app turns the operator's gateway on exactly when the plan has "
                                                  "gateways",
    "InferenceWorkloads.InstanceTypeNotInCluster": "the app's plan lists `hyperpod.instanceGroups` as its node groups, "
                                                   "so the plan refuses it first (Model.InstanceTypeNotInCluster)",
    "GpuNodeGroup.DuplicateName": "refused first by the config check (Cluster.DuplicateNodeGroup)",
    # Names the app derives (from `project`, `environment`, `cluster.name`): their patterns hold by construction.
    "AlarmTopic.BadTopicName": "the app names the topic `<project>-alarms`",
    "CaptureStorage.BadBucketName": "the app names the buckets from project, account and region",
    "CaptureTables.InvalidGlueName": "the app names the Iceberg database `<project>_capture_iceberg`",
    "CaptureTables.BadPrefix": "the app gives the storage's iceberg and query-results prefixes, constants of the "
                               "library",
    "CaptureStorage.TlsBucketPrefix": "the app names the TLS bucket `hyperpod-tls-<project>-…`",
    "HyperPodCluster.BadBucketName": "the app names the lifecycle bucket from project, account and region",
    "InferenceOperator.ExecutionRoleName": "the app names the role `SageMakerHyperPodInference-<project>`",
    "InferenceOperator.GatewayNeedsCertificate": "the app always passes the platform certificate (the domain section's "
                                                 "existing one or the one it creates) when a gateway exists",
    "PlatformDashboard.BadName": "the app names the dashboard after `project`",
    "CaptureSidecarMetrics.BadRoleName": "the app names the agent's role after `project`",
    "CaptureSidecarMetrics.BadClusterName": "`cluster.name` is checked by InferenceCluster (one problem)",
    "CaptureSidecarMetrics.BadNamespace": "`operator.inferenceNamespace` is checked by the plan "
                                          "(Chart.NamespaceInvalid)",
    "CaptureSidecarMetrics.BadModelName": "portable server names are checked by the plan (Portable.NameInvalid)",
    "CertificateAlarms.BadCertificateArn": "the certificate is the app's own, or `domain.existingCertificateArn`, "
                                           "whose format the config check refuses first (Config.BadFormat)",
    "CertificateAlarms.OtherRegion": "refused first as EndpointDomain.CertificateOtherRegion",
    "EndpointDomain.BadCertificateArn": "`domain.existingCertificateArn` is refused first by its format "
                                        "(Config.BadFormat)",
    "EndpointDomain.NoDomains": "`domain.endpointDomains: []` is refused first by the config check "
                                "(Config.TooFewItems)",
    "CaptureAlarms.BadNamePrefix": "the app prefixes alarm names with `project`",
    "GpuCost.NoCluster": "the app gives the sampler `cluster.name`, `hyperpod.clusterName` and the cluster's ARN",
    "CaptureEraser.NoPrincipals": "the app creates the erasure role only when `capture.eraserPrincipals` has one",
    "CaptureSidecarMetrics.BadBudgetPercent": "the config's `usageLimits.alertPercents` are refused first, at "
                                              "their key (`UsageLimits.AlertPercentsInvalid`)",
    # The budget store (issue 29): the app creates it exactly when the plan has servers that use it, names it
    # `<project>-usage` (the plan's UsageStoreRef from the same name), and admits the cluster security group.
    "InferenceWorkloads.UsageStoreMissing": "the app creates the store whenever the plan has servers that use it",
    "InferenceWorkloads.UsageStoreMismatch": "the app plans and creates the store from one name, `<project>-usage`",
    "UsageStore.CacheNameInvalid": "the app names the cache `<project>-usage`",
    "UsageStore.NoClients": "the app admits the EKS cluster security group",
    "CaptureStorage.BadPrefix": "`capture.prefix` is judged by one rule (s3_access.key_prefix_fault) for both "
                                "constructs, reported once with the pipeline's code (CapturePipeline.InvalidPrefix)",
    "CapturePipeline.OverlappingPrefixes": "an overlap of `capture.prefix` with the outputs is reported once, as "
                                           "CaptureStorage.PrefixesOverlap",
    "CertificateAlarms.BadNamePrefix": "the app prefixes alarm names with `project`",
    "CaptureSidecarMetrics.BadNamePrefix": "the app prefixes alarm names with `project`",
    "CertificateAlarms.BadRunbookUrl": "`alarms.runbookUrl` is shared: reported once, as CaptureAlarms.BadRunbookUrl",
    "CaptureSidecarMetrics.BadRunbookUrl": "`alarms.runbookUrl` is shared: reported once, as "
                                           "CaptureAlarms.BadRunbookUrl",
    "ModelServingMetrics.BadModel": "the app derives the watched models from `models` (names and namespaces checked "
                                    "by the plan)",
    "ModelServingMetrics.BadNamePrefix": "the app prefixes alarm names with `project`",
    "ModelServingMetrics.BadPodCidr": "the app passes the VPC's CIDR (network.newVpc.cidr or "
                                      "network.existingVpc.vpcCidr, checked there; a VPC is /16 to /28)",
    "ModelServingMetrics.BadRunbookUrl": "`alarms.runbookUrl` is shared: reported once, as CaptureAlarms.BadRunbookUrl",
    # Values the app sets itself (constants, or derived from the plan): not in the file.
    "ApiKeySync.RotationRefreshTooSlow": "the app's sync refresh and propagation wait are constants",
    "ApiKeySync.RotationWithoutKeysFile": "the app always syncs the keys file with rotation",
    "CaptureAlarms.UnknownTier": "the app passes the tiers the plan captures",
    "PlatformDashboard.UnknownTier": "the app passes the tiers the plan captures",
    "CertificateAlarms.BadLabel": "the app labels its one certificate",
    "CertificateAlarms.NoCertificates": "the app always passes the platform certificate",
    "CaptureSidecarMetrics.ScrapeInterval": "the app keeps the agent's default scrape interval",
    "CaptureSidecarMetrics.BadLogGroupName": "the app names each agent's log group after `cluster.name` and its "
                                             "namespace (sidecar_metrics_log_group_name)",
    "CaptureSidecarMetrics.SharedLogGroup": "the app gives each namespace's agent a log group of its own",
    "CaptureSidecarMetrics.SecondAgent": "the app makes one agent per namespace (PlatformConfig.metrics_agents)",
    "CaptureSidecarMetrics.UnpinnedImage": "the app uses the construct's pinned agent image",
    "CaptureSidecarMetrics.AlarmNameCollision": "the app's served model names are portable server names (DNS labels, "
                                                "each once: no two one '/' apart); across agents and families the "
                                                "config check refuses it first (Config.AlarmNameCollision)",
    "CaptureSidecarMetrics.AlarmNameTooLong": "the app's names are at most `project` (20), a namespace (63) and a "
                                              "server name (63) long: under 255 characters",
    "ModelServingMetrics.AlarmNameCollision": "one operator model name in two namespaces is refused first by the plan "
                                              "(Model.DuplicateName)",
    "ModelServingMetrics.AlarmNameTooLong": "the app's model names are DNS labels (63) and the prefix is `project` "
                                            "(20): under 255 characters",
    "CapturePipeline.InvalidDate": "the app keeps the construct's first partition date",
    "CapturePipeline.InvalidGlueName": "the app keeps the construct's Glue database name",
    "CapturePipeline.MemoryOutOfRange": "the app keeps the construct's memory size",
    "CapturePipeline.NoCapturePrefixes": "the app passes `[capture.prefix]`",
    "CapturePipeline.BucketInOtherStack": "the app builds the pipeline with the storage in one stack",
    "CapturePipeline.KeyRequired": "the app passes the capture storage's key",
    "ExternalDns.BadHostname": "the app passes the plan's hostnames (checked as Portable.HostnameInvalid)",
    "ExternalDns.BadNamespace": "the app passes the plan's namespaces (checked by the plan)",
    "ExternalDns.DuplicateNamespace": "the app passes the plan's namespaces, each once",
    "ExternalDns.HostnameOutsideZones": "the plan refuses a hostname outside the zone (Portable.HostnameOutsideZone)",
    "ExternalDns.NoHostedZones": "the app always passes the platform zone",
    "ExternalDns.NoNamespaces": "the app builds ExternalDNS only for portable servers with a hostname",
    "HyperPodCluster.NoOnCreateScript": "the app uses the library's lifecycle script",
    "HyperPodCluster.NoSubnets": "the app passes the VPC's private subnets",
    "HyperPodCluster.TooManySubnets": "the app passes the VPC's private subnets (at most 6 zones: Network.ZoneCount)",
    "HyperPodCluster.NoVpc": "the app passes the cluster's VPC",
    "HyperPodCluster.DependenciesRequired": "a Python-only property (`install_dependencies`); the app installs them",
    "HyperPodCluster.NoKubectlProvider": "the app's InferenceCluster always has a kubectl provider",
    "InferenceOperator.NoOidcProvider": "the app's cluster is an InferenceCluster (created: its OIDC provider exists)",
    "ExternalDns.NoOidcProvider": "the app's cluster is an InferenceCluster (created: its OIDC provider exists)",
    "ExternalDns.NoKubectlProvider": "the app's InferenceCluster always has a kubectl provider",
    "HyperPodCluster.SecurityGroups": "the app passes the cluster's security group",
    "InferenceCluster.BadDeployerRoleArn": "a Python-only property (`deployer_role_arns`); the app uses the "
                                           "synthesizer's deploy role",
    "InferenceWorkloads.ContainerIdentityNeedsIrsa": "the app binds identities with IRSA",
    "InferenceWorkloads.MissingPlatformResource": "the app passes every platform resource the plan refers to",
    "Manifests.UnresolvedToken": "a guard on what the library writes to dist/: the plan never holds a token",
    "WorkloadIdentity.BadBinding": "the app binds identities with IRSA",
    "WorkloadIdentity.BadNamespace": "namespaces are checked by the plan (Chart.NamespaceInvalid, "
                                     "Portable.NamespaceInvalid, Model.NamespaceInvalid)",
    "WorkloadIdentity.BadRoleName": "the plan names the roles (patterns.iam_role_name)",
    "WorkloadIdentity.BadServiceAccount": "service account names are checked by the plan",
    "WorkloadIdentity.WholeBucket": "the plan's prefixes are never empty (NvmeCache.SourceS3UriInvalid, capture "
                                    "prefixes)",
    # Constructs the app does not use (a Python consumer's own).
    **{f"GitHubDeployRole.{name}": "GitHubDeployRole is not part of the app (a consumer's CI construct)"
       for name in ("BadAccount", "BadEnvironment", "BadOwner", "BadProviderArn", "BadQualifier", "BadRegion",
                    "BadRepository", "BadRoleName", "NoRegion")},
    "PreflightPolicy.BadQualifier": "PreflightPolicy is not part of the app (a consumer's policy for the preflight)",
}


def _group(**changes: Any) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        data["cluster"]["gpuNodeGroups"][0].update(changes)
    return change


def _instance_group(**changes: Any) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        data["hyperpod"]["instanceGroups"][0].update(changes)
    return change


def _second_instance_group(data: dict[str, Any]) -> None:
    data["hyperpod"]["instanceGroups"].append(copy.deepcopy(data["hyperpod"]["instanceGroups"][0]))


def _sidecar_first_chunk(data: dict[str, Any]) -> None:
    data.setdefault("alarms", {}).setdefault("sidecar", {})["firstChunkP99"] = {"threshold": 7}


def _platform_store(**options: Any) -> Callable[[dict[str, Any]], None]:
    """The default server with a token budget and no storeUrl (it uses the platform's store), and ``usageStore``."""
    def change(data: dict[str, Any]) -> None:
        data["portable"][0]["usageLimits"] = {"callers": [{"callerId": "team-b", "tokensPerDay": 1000}]}
        data["usageStore"] = options
    return change


# (code, key path, change): the codes tests/unit/test_config.py's cases do not exercise.
CASES = [
    ("UsageStore.MaxDataOutOfRange", "usageStore.maxDataGb", _platform_store(maxDataGb=0)),
    ("UsageStore.MaxEcpuOutOfRange", "usageStore.maxEcpuPerSecond", _platform_store(maxEcpuPerSecond=999)),
    ("HyperPodCluster.NoHealthAgentImage", "environment.region", _set("environment.region", "ca-central-1")),
    ("GpuNodeGroup.BadName", "cluster.gpuNodeGroups[0].name", _group(name="GPU_1")),
    ("GpuNodeGroup.NoInstanceTypes", "cluster.gpuNodeGroups[0].instanceTypes", _group(instanceTypes=[])),
    ("GpuNodeGroup.BadInstanceType", "cluster.gpuNodeGroups[0].instanceTypes[0]",
     _group(instanceTypes=["ml.g5.12xlarge"])),
    ("GpuNodeGroup.NeuronInstance", "cluster.gpuNodeGroups[0].instanceTypes[0]", _group(instanceTypes=["inf2.xlarge"])),
    ("GpuNodeGroup.UnsupportedFamily", "cluster.gpuNodeGroups[0].instanceTypes[0]",
     _group(instanceTypes=["m6i.large"])),
    ("GpuNodeGroup.LocalStorageStrategy", "cluster.gpuNodeGroups[0].localStorageStrategy",
     _group(localStorageStrategy="RAID5")),
    ("HyperPodCluster.DuplicateInstanceGroup", "hyperpod.instanceGroups[1].name", _second_instance_group),
    ("HyperPodCluster.InstanceCount", "hyperpod.instanceGroups[0].instanceCount", _instance_group(instanceCount=-1)),
    ("HyperPodCluster.ThreadsPerCore", "hyperpod.instanceGroups[0].threadsPerCore", _instance_group(threadsPerCore=3)),
    ("HyperPodCluster.VolumeSize", "hyperpod.instanceGroups[0].ebsVolumeGiB", _instance_group(ebsVolumeGiB=0)),
    ("CaptureSidecarMetrics.FirstChunkBound", "alarms.sidecar.firstChunkP99.threshold", _sidecar_first_chunk),
    # The cost per team (costs: GpuCost).
    ("GpuCost.PriceOutOfRange", "costs.instancePrices[0].usdPerNodeHour",
     _set("costs.instancePrices.0", {"instanceType": "g6e.12xlarge", "usdPerNodeHour": -1})),
    ("GpuCost.PriceOutOfRange", "costs.groups[0].usdPerNodeHour",
     _set("costs.groups.0", {"name": "gpu-g6e", "models": ["m"], "usdPerNodeHour": 5000})),
    ("GpuCost.DuplicatePrice", "costs.instancePrices[2].instanceType",
     lambda data: data["costs"]["instancePrices"].append({"instanceType": "g6e.12xlarge", "usdPerNodeHour": 1})),
    ("GpuCost.UnknownInstancePrice", "costs.instancePrices",
     _set("costs.instancePrices", [{"instanceType": "g6e.12xlarge", "usdPerNodeHour": 10.49}])),
    ("GpuCost.UnusedInstancePrice", "costs.instancePrices[2].instanceType",
     lambda data: data["costs"]["instancePrices"].append({"instanceType": "g5.12xlarge", "usdPerNodeHour": 7.09})),
    ("GpuCost.UnknownGroup", "costs.groups[0].name", _set("costs.groups.0", {"name": "gpu-g7", "models": ["m"]})),
    ("GpuCost.DuplicateGroup", "costs.groups[1].name", _set("costs.groups.1", {"name": "gpu-g6e", "models": ["m"]})),
    ("GpuCost.NoModels", "costs.groups[0].models", _set("costs.groups.0", {"name": "gpu-g6e", "models": []})),
    ("GpuCost.DuplicateModel", "costs.groups[0].models[1]",
     _set("costs.groups.0", {"name": "gpu-g6e", "models": ["m", "m"]})),
    ("GpuCost.NoTablesLayer", "costs", lambda data: data["capture"].pop("tablesLayerArn")),
]

_TAINT = {"key": "example.com/dedicated", "value": "inference", "effect": "NoSchedule"}
_GROUP0 = "hyperpod.instanceGroups[0]"

# Shared-cluster scheduling (issue 19, 4): each rule of an instance group's labels, taints and capacity type.
CASES += [
    ("HyperPodCluster.InvalidLabelKey", f"{_GROUP0}.kubernetesLabels.Team_/pool",
     _instance_group(kubernetesLabels={"Team_/pool": "inference"})),
    ("HyperPodCluster.InvalidLabelValue", f"{_GROUP0}.kubernetesLabels.pool",
     _instance_group(kubernetesLabels={"pool": ""})),
    ("HyperPodCluster.ReservedKey", f"{_GROUP0}.kubernetesLabels.node.kubernetes.io/pool",
     _instance_group(kubernetesLabels={"node.kubernetes.io/pool": "inference"})),
    ("HyperPodCluster.TooManyLabels", f"{_GROUP0}.kubernetesLabels",
     _instance_group(kubernetesLabels={f"label-{i}": "a" for i in range(51)})),
    ("HyperPodCluster.TooManyTaints", f"{_GROUP0}.kubernetesTaints",
     _instance_group(kubernetesTaints=[{**_TAINT, "key": f"example.com/t{i}"} for i in range(51)])),
    ("HyperPodCluster.InvalidTaintKey", f"{_GROUP0}.kubernetesTaints[0].key",
     _instance_group(kubernetesTaints=[{**_TAINT, "key": "example.com/-dedicated"}])),
    ("HyperPodCluster.InvalidTaintValue", f"{_GROUP0}.kubernetesTaints[0].value",
     _instance_group(kubernetesTaints=[{**_TAINT, "value": "inference pool"}])),
    ("HyperPodCluster.TaintEffect", f"{_GROUP0}.kubernetesTaints[0].effect",
     _instance_group(kubernetesTaints=[{**_TAINT, "effect": "noschedule"}])),
    ("HyperPodCluster.DuplicateTaint", f"{_GROUP0}.kubernetesTaints[1].key",
     _instance_group(kubernetesTaints=[_TAINT, {**_TAINT, "value": "training"}])),
    ("HyperPodCluster.CapacityType", f"{_GROUP0}.capacityType", _instance_group(capacityType="spot")),
]


def _duplicate_domain(data: dict[str, Any]) -> None:
    data["domain"]["endpointDomains"].append(data["domain"]["endpointDomains"][0])


def _extra_domain(data: dict[str, Any]) -> None:
    data["domain"]["endpointDomains"].append("not_a_domain")


def _alarm(block: str, name: str, **settings: Any) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        data.setdefault("alarms", {}).setdefault(block, {})[name] = settings
    return change


def _min_requests(data: dict[str, Any]) -> None:
    data.setdefault("alarms", {}).setdefault("models", {})["minRequests"] = 0


FINOPS = "arn:aws:iam::111122223333:role/finops"

CASES += [
    ("CaptureStorage.PrefixesOverlap", "capture.prefix", _set("capture.prefix", "curated/x/")),
    ("CaptureTables.BadReaderRoleArn", "capture.tableReaders[0].roleArn",
     _set("capture.tableReaders", [{"roleArn": "finops"}])),
    ("CaptureTables.DuplicateReader", "capture.tableReaders[1]",
     _set("capture.tableReaders", [{"roleArn": FINOPS}, {"roleArn": FINOPS, "columns": "all"}])),
    ("CaptureTables.OutOfRange", "capture.queryScanLimitGiB", _set("capture.queryScanLimitGiB", 0)),
    ("CaptureTables.InvalidLayerArn", "capture.tablesLayerArn", _set("capture.tablesLayerArn", "pyiceberg-layer")),
    ("CaptureStorage.BadAuditLockMode", "capture.auditLockMode", _set("capture.auditLockMode", "LEGAL_HOLD")),
    ("CaptureTables.BadUsageColumn", "capture.usageColumnsGranted[0]", _set("capture.usageColumnsGranted", ["x"])),
    ("CaptureTables.TextColumnForUsage", "capture.usageColumnsGranted[0]",
     _set("capture.usageColumnsGranted", ["capture_records.input_text"])),
    ("CaptureTables.UnknownColumnAccess", "capture.tableReaders[0].columns",
     _set("capture.tableReaders", [{"roleArn": FINOPS, "columns": "text"}])),
    ("InferenceWorkloads.KeyNotGrantable", "portable[0].dataCapture.modelPod.kmsKeyId",
     _set("portable.0.dataCapture.modelPod.kmsKeyId", "alias/captures")),
    ("EndpointDomain.Duplicate", "domain.endpointDomains", _duplicate_domain),
    ("EndpointDomain.BadDomainName", "domain.endpointDomains[6]", _extra_domain),
    # The shared alarm-setting rules, for the two constructs test_config.py does not try them on.
    ("CertificateAlarms.AlarmPeriod", "alarms.certificate.daysToExpiry.periodMinutes",
     _alarm("certificate", "daysToExpiry", periodMinutes=0)),
    ("CertificateAlarms.EvaluationPeriods", "alarms.certificate.daysToExpiry.evaluationPeriods",
     _alarm("certificate", "daysToExpiry", evaluationPeriods=0)),
    ("CertificateAlarms.DatapointsToAlarm", "alarms.certificate.daysToExpiry.datapointsToAlarm",
     _alarm("certificate", "daysToExpiry", datapointsToAlarm=0)),
    ("CertificateAlarms.EvaluationRange", "alarms.certificate.daysToExpiry.evaluationPeriods",
     _alarm("certificate", "daysToExpiry", periodMinutes=1440, evaluationPeriods=8)),
    ("CaptureSidecarMetrics.AlarmPeriod", "alarms.sidecar.droppedRecords.periodMinutes",
     _alarm("sidecar", "droppedRecords", periodMinutes=0)),
    ("CaptureSidecarMetrics.EvaluationPeriods", "alarms.sidecar.droppedRecords.evaluationPeriods",
     _alarm("sidecar", "droppedRecords", evaluationPeriods=0)),
    ("CaptureSidecarMetrics.DatapointsToAlarm", "alarms.sidecar.droppedRecords.datapointsToAlarm",
     _alarm("sidecar", "droppedRecords", datapointsToAlarm=0)),
    # The operator models' alarms (alarms.models).
    ("ModelServingMetrics.ThresholdOutOfRange", "alarms.models.errorRate.threshold",
     _alarm("models", "errorRate", threshold=101)),
    ("ModelServingMetrics.AlarmPeriod", "alarms.models.latency.periodMinutes", _alarm("models", "latency",
                                                                                       periodMinutes=0)),
    ("ModelServingMetrics.EvaluationPeriods", "alarms.models.modelFailed.evaluationPeriods",
     _alarm("models", "modelFailed", evaluationPeriods=0)),
    ("ModelServingMetrics.DatapointsToAlarm", "alarms.models.timeToFirstToken.datapointsToAlarm",
     _alarm("models", "timeToFirstToken", datapointsToAlarm=4)),
    ("ModelServingMetrics.EvaluationRange", "alarms.models.deploymentTimeExceeded.evaluationPeriods",
     _alarm("models", "deploymentTimeExceeded", evaluationPeriods=300)),
    ("ModelServingMetrics.MinRequests", "alarms.models.minRequests", _min_requests),
    ("ModelServingMetrics.LatencyBound", "alarms.models.latency.threshold",
     _alarm("models", "latency", threshold=45)),
    ("ModelServingMetrics.FirstTokenBound", "alarms.models.timeToFirstToken.threshold",
     _alarm("models", "timeToFirstToken", threshold=5)),
]


def construct_codes() -> set[str]:
    """Every problem code the library's constructs raise (``problems.add("X.Y", ...)`` and
    ``problems.add(f"{code}.Y", ...)`` with the module's ``code = "X"``)."""
    found: set[str] = set()
    texts = {path: path.read_text() for path in sorted((REPO / "constructs_lib").rglob("*.py"))}
    for text in texts.values():
        found |= set(re.findall(r'(?:\.add\(|Problem\()\s*"([A-Z][A-Za-z0-9]+\.[A-Z][A-Za-z0-9]+)"', text))
        prefixes = set(re.findall(r'\bcode = "([A-Z][A-Za-z0-9]+)"', text))
        for suffix in re.findall(r'\.add\(\s*f"\{code\}\.([A-Z][A-Za-z0-9]+)"', text):
            found |= {f"{prefix}.{suffix}" for prefix in prefixes}
    # Codes kept in tables before they are added (GitHubDeployRole's): any literal of a family seen above.
    families = {code.split(".")[0] for code in found}
    for text in texts.values():
        found |= {code for code in re.findall(r'"([A-Z][A-Za-z0-9]+\.[A-Z][A-Za-z0-9]+)"', text)
                  if code.split(".")[0] in families}
    # alarms.py's shared checks raise under the calling construct's code.
    callers = {"CaptureAlarms", "CertificateAlarms", "CaptureSidecarMetrics", "ModelServingMetrics"}
    alarms_source = (REPO / "constructs_lib" / "observability" / "alarms.py").read_text()
    for suffix in re.findall(r'\.add\(\s*f"\{code\}\.([A-Z][A-Za-z0-9]+)"', alarms_source):
        found |= {f"{caller}.{suffix}" for caller in callers}
    # alarm_names.py's name check raises under the code of the constructs that call it.
    names_source = (REPO / "constructs_lib" / "observability" / "alarm_names.py").read_text()
    for suffix in re.findall(r'\.add\(\s*f"\{code\}\.([A-Z][A-Za-z0-9]+)"', names_source):
        found |= {f"{caller}.{suffix}" for caller in ("CaptureSidecarMetrics", "ModelServingMetrics")}
    return {code for code in found if not code.startswith("Config.")}


def _reached() -> set[str]:
    cases = [*test_config.CASES, *CASES]
    return {code for code, *_ in cases} | {case[0] for case in test_config.WORKLOAD_MISTAKES}


def test_every_construct_code_is_reachable_from_the_config_or_explained() -> None:
    unexplained = sorted(construct_codes() - _reached() - set(NOT_FROM_CONFIG))
    assert unexplained == [], "add a config case (tests/unit/test_codes_reachable.py) or a reason in NOT_FROM_CONFIG"


def test_no_reason_is_stale() -> None:
    assert sorted(set(NOT_FROM_CONFIG) - construct_codes()) == [], "a code that no construct raises any more"
    assert sorted(set(NOT_FROM_CONFIG) & _reached()) == [], "a config case reaches a code said to be unreachable"


@pytest.mark.parametrize(("code", "path", "change"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_the_config_check_raises_it_at_its_key(code: str, path: str, change: Callable[[dict[str, Any]], None]) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(_with(change))
    assert [(p.code, p.path) for p in caught.value.problems] == [(code, path)], str(caught.value)


def test_the_two_readers_word_the_same_problem_alike() -> None:
    """The config loader and the models' parser (charts) report a wrong type and an unknown key in the same words."""
    data = _with(lambda d: (d["capture"].update(retentionDays="thirty"), d["models"][0]["spec"].update(replicas="two"),
                            d["capture"].update(retentionDay=3), d["models"][0]["spec"].update(replica=2)))
    with pytest.raises(ConfigError) as caught:
        parse_config(data)
    messages = {(p.code, p.path): p.message for p in caught.value.problems}
    assert messages[("Config.WrongType", "capture.retentionDays")] == "must be an integer, not a string"
    assert messages[("Config.WrongType", "models[0].spec.replicas")] == "must be an integer, not a string"
    assert messages[("Config.UnknownKey", "capture.retentionDay")].startswith("is not a known key here; known: ")
    assert messages[("Config.UnknownKey", "models[0].spec.replica")].startswith("is not a known key here; known: ")
