"""CaptureSidecarMetrics: the capture sidecars' Prometheus counters in CloudWatch, and alarms on them.

Path: a CloudWatch agent with Prometheus scraping (the Container Insights Prometheus agent) runs as one small
Deployment in the workloads' namespace. It discovers every ``capture-sidecar`` container's ``metrics`` port
(Kubernetes pod discovery limited to that namespace), scrapes ``/metrics`` once a minute, keeps only the
``capture_sidecar_*`` series and sends them as embedded-metric-format log events to one log group; CloudWatch
turns them into metrics in namespace ``ContainerInsights/Prometheus`` with dimensions ``ClusterName`` and
``Namespace`` (plus ``reason``, ``result``, ``model``, ``status_class``, ``le`` or ``type`` where an alarm or the
dashboard needs them). Counters arrive as the increase since the previous scrape, so ``Sum`` over a period counts
events in it.

Histograms do not arrive: the agent keeps counters, gauges and summaries and drops histogram series (its
``MetricsFilter``; "Prometheus metric type conversion by the CloudWatch agent" in the CloudWatch docs). The p99
time-to-first-chunk alarm therefore reads ``capture_sidecar_first_chunks_total{model, le}``, the sidecar's 2xx
time-to-first-chunk buckets exposed again as a plain cumulative counter: "p99 above X s" is "more than 1 % of
responses took longer than X s", i.e. ``100 * (le=+Inf - le=X) / le=+Inf > 1``, exact when X is a bucket bound,
and correct across any number of pods (a summary's quantiles, which the agent would keep, cannot be combined
across pods, and computing them would cost the sidecar a sort on its event loop).

Why this path and not Amazon Managed Prometheus: the alarms then live where every other alarm of the platform
lives (the same topic, the same notification format, the same dashboard), nothing needs an AMP workspace, a
managed scraper and an alert manager definition of its own, and only the few series the alarms and the
dashboard use are stored. docs/alarms.md has the comparison.

The Kubernetes objects come from :func:`sidecar_metrics_manifests`, which both the construct (applied by the
kubectl provider) and the GitOps hand-off (``dist/``) render.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import yaml
from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from constructs import Construct, IConstruct

from hyperpod_inference_iac.charts.gateway_entry_chart import GATEWAY_ENTRY_WORKLOAD
from hyperpod_inference_iac.charts.network_policies import HTTPS, LINK_LOCAL, WORKLOAD_LABEL
from hyperpod_inference_iac.charts.portable import PORTABLE_WORKLOAD, SIDECAR_METRICS_PORT
from hyperpod_inference_iac.foundation.cdk_types import ClusterLike
from hyperpod_inference_iac.foundation.patterns import (
    DNS1123_LABEL,
    EKS_CLUSTER_NAME,
    IAM_ROLE_NAME,
    IAM_ROLE_NAME_MAX,
    PINNED_IMAGE,
    iam_role_arn,
)
from hyperpod_inference_iac.foundation.props import Props, listed, prop, real_signature
from hyperpod_inference_iac.foundation.validation import PROPS, KeyPaths, Problems, is_unresolved
from hyperpod_inference_iac.observability.alarm_names import PlannedAlarm, alarm_name, check_alarm_names
from hyperpod_inference_iac.observability.alarm_topic import AlarmTopic
from hyperpod_inference_iac.observability.alarms import (
    AlarmSettings,
    AlarmWiring,
    AlarmWiringProps,
    alarm_names,
    alarm_prop,
    check_alarm_blocks,
    topic_actions,
)
from hyperpod_inference_iac.observability.budget_alarms import (
    BUDGET_ALERTS,
    BUDGET_THRESHOLD,
    add_budget_alarms,
    budget_alarm_suffixes,
)
from hyperpod_inference_iac.security.workload_identity import service_account_principal

# The agent image and Container Insights version of aws-samples/amazon-cloudwatch-container-insights
# (k8s-deployment-manifest-templates/deployment-mode/service/cwagent-prometheus, release k8s/1.3.43).
CLOUDWATCH_AGENT_IMAGE = "public.ecr.aws/cloudwatch-agent/cloudwatch-agent:1.300066.1b1374"
CONTAINER_INSIGHTS_VERSION = "k8s/1.3.43"
METRICS_NAMESPACE = "ContainerInsights/Prometheus"
AGENT_NAME = "capture-metrics-agent"
SCRAPE_JOB = "capture-sidecar"

# What the capture sidecar exposes (sidecar/capture_sidecar/metrics.py) and where (charts/portable.py): kept in
# step by tests.
SIDECAR_CONTAINER = "capture-sidecar"
SIDECAR_METRICS_PORT_NAME = "metrics"
RECORDS_CAPTURED = "capture_sidecar_records_captured_total"
RECORDS_UPLOADED = "capture_sidecar_records_uploaded_total"
RECORDS_DROPPED = "capture_sidecar_records_dropped_total"
UPLOADS = "capture_sidecar_uploads_total"
REQUESTS_REJECTED = "capture_sidecar_requests_rejected_memory_total"
REQUESTS = "capture_sidecar_requests_total"  # {model, status_class}
FIRST_CHUNKS = "capture_sidecar_first_chunks_total"  # {model, le}: 2xx time to first chunk, cumulative buckets
TOKENS = "capture_sidecar_tokens_total"  # {model, type}
PARTIAL_EXCHANGES = "capture_sidecar_partial_exchanges_total"  # {model, reason}
# Per server (the pod's app.kubernetes.io/name as Workload): the keys each sidecar accepts, as many samples as scrapes
# (the API key rotation compares them, RotationAcceptance), and the 401s (the API key alarms).
API_KEYS = "capture_sidecar_api_keys"
API_KEY_ACCEPTED = "capture_sidecar_api_key_accepted"  # {fingerprint, caller_id}
REQUESTS_UNAUTHORIZED = "capture_sidecar_requests_unauthorized_total"
# Histograms the agent would drop anyway (its log would list them): not scraped.
HISTOGRAM_SERIES = r"capture_sidecar_(request_duration|time_to_first_chunk)_seconds_(bucket|sum|count)"
DROP_REASONS = ("queue_full", "upload_failed", "spool_full", "shutdown_timeout", "memory_full")
UPLOAD_RESULTS = ("ok", "failed")
STATUS_CLASSES = ("2xx", "3xx", "4xx", "5xx")
# The sidecar's time-to-first-chunk bucket bounds (seconds), as its `le` labels read (metrics.format_bound).
FIRST_CHUNK_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0)
# The sidecar's MODEL_NAME rule: the `model` dimension of the per-model alarms.
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$")
# p99: the share of responses slower than the bound, in percent, above which the alarm fires.
P99_SLOWER_SHARE_PERCENT = 1.0

ONE_MINUTE = Duration.minutes(1)
FIVE_MINUTES = Duration.minutes(5)
DROPPED_RECORDS = AlarmSettings(threshold=0, period=Duration.minutes(5))
FAILED_UPLOADS = AlarmSettings(threshold=0, period=Duration.minutes(5), evaluation_periods=3)
REJECTED_REQUESTS = AlarmSettings(threshold=0, period=Duration.minutes(5))
# Fewer than one datapoint of the captured-records series in 15 minutes: no sidecar reports at all. While any
# sidecar runs, the agent sends that counter's increase every scrape, zeros included (every series of the
# sidecar exists from its start), so silence means the agent is down or hung, or no capture sidecar runs.
NO_METRICS = AlarmSettings(threshold=1, period=Duration.minutes(15))
# Per model: 5xx responses above 5 % of all responses, and p99 time to first chunk above 5 s, each in 2 of 3
# five-minute periods (one bad period of a quiet model is not a page).
SERVER_ERROR_RATE = AlarmSettings(threshold=5, period=Duration.minutes(5), evaluation_periods=3, datapoints_to_alarm=2)
FIRST_CHUNK_P99 = AlarmSettings(threshold=5, period=Duration.minutes(5), evaluation_periods=3, datapoints_to_alarm=2)


def format_bound(bound: float) -> str:
    """A bucket bound as the sidecar writes its `le` label ("0.025", "5", "+Inf" is not a bound)."""
    return f"{bound:g}"


# The alarms on all sidecars of the namespace, and those per model (in this order in ``alarms``).
SIDECAR_ALARMS = ("dropped_records", "failed_uploads", "rejected_requests", "no_metrics")
PER_MODEL_ALARMS = ("server_error_rate", "first_chunk_p99")


def sidecar_alarm_suffixes(*, models: Sequence[str], budget_alert_percents: Sequence[int],
                           options: CaptureSidecarMetricsOptions) -> dict[str, str]:
    """The alarms :class:`CaptureSidecarMetrics` creates, key (as in its ``alarms``) -> name suffix (the name is
    ``<alarm_name_prefix>-<suffix>``): ``sidecar-<what>``, per model ``sidecar-<model>-<what>`` (a ``/`` of the model
    becomes ``-``), per budget level ``sidecar-budget-<percent>-percent``; an alarm whose settings are None is not
    created. The construct names its alarms with it; a loader plans them with it (docs/alarms.md#alarm-names)."""
    suffixes = {key: "sidecar-" + key.replace("_", "-") for key in SIDECAR_ALARMS if getattr(options, key) is not None}
    for model in models:
        plain = model.replace("/", "-")
        for key in PER_MODEL_ALARMS:
            if getattr(options, key) is not None:
                suffixes[f"{key}:{model}"] = f"sidecar-{plain}-{key.replace('_', '-')}"
    if options.budget_threshold is not None:
        suffixes.update(budget_alarm_suffixes(budget_alert_percents))
    return suffixes


def sidecar_metrics_log_group_name(cluster_name: str, namespace: str | None = None) -> str:
    """The agent's log group: beside Container Insights' own groups, apart from its ``prometheus`` group. With
    ``namespace``, the group of an agent in that namespace (``.../capture-sidecar/<namespace>``), for a cluster with
    more than one agent: each creates its own log group, so no two may share a name."""
    base = f"/aws/containerinsights/{cluster_name}/capture-sidecar"
    return f"{base}/{namespace}" if namespace else base


def sidecar_metrics_manifests(*, namespace: str, cluster_name: str, region: str, role_arn: str, log_group_name: str,
                              image: str = CLOUDWATCH_AGENT_IMAGE, scrape_interval_seconds: int = 60,
                              ) -> list[dict[str, Any]]:
    """The agent's ServiceAccount (IRSA), a Role and RoleBinding that may list and watch pods of ``namespace``
    only, its two ConfigMaps (agent configuration, Prometheus scrape configuration), a NetworkPolicy that admits
    nothing to it, and its Deployment."""
    labels = {"app.kubernetes.io/name": AGENT_NAME, "app.kubernetes.io/part-of": "hyperpod-inference-iac"}

    def meta(name: str) -> dict[str, Any]:
        return {"name": name, "namespace": namespace, "labels": dict(labels)}

    declarations = [
        {"source_labels": ["job"], "label_matcher": f"^{SCRAPE_JOB}$",
         "dimensions": [["ClusterName", "Namespace"]],
         "metric_selectors": [f"^{name}$" for name in
                              (RECORDS_CAPTURED, RECORDS_UPLOADED, RECORDS_DROPPED, REQUESTS_REJECTED)]},
        {"source_labels": ["job"], "label_matcher": f"^{SCRAPE_JOB}$",
         "dimensions": [["ClusterName", "Namespace", "reason"]],
         "metric_selectors": [f"^{RECORDS_DROPPED}$"]},
        {"source_labels": ["job"], "label_matcher": f"^{SCRAPE_JOB}$",
         "dimensions": [["ClusterName", "Namespace", "result"]],
         "metric_selectors": [f"^{UPLOADS}$"]},
        # Per model: all requests and by status class (the 5xx rate), the 2xx first-chunk buckets
        # (the p99 alarm), tokens and partial exchanges (the dashboard).
        {"source_labels": ["job"], "label_matcher": f"^{SCRAPE_JOB}$",
         "dimensions": [["ClusterName", "Namespace", "model"],
                        ["ClusterName", "Namespace", "model", "status_class"]],
         "metric_selectors": [f"^{REQUESTS}$"]},
        {"source_labels": ["job"], "label_matcher": f"^{SCRAPE_JOB}$",
         "dimensions": [["ClusterName", "Namespace", "model", "le"]],
         "metric_selectors": [f"^{FIRST_CHUNKS}$"]},
        {"source_labels": ["job"], "label_matcher": f"^{SCRAPE_JOB}$",
         "dimensions": [["ClusterName", "Namespace", "model", "type"]],
         "metric_selectors": [f"^{TOKENS}$"]},
        {"source_labels": ["job"], "label_matcher": f"^{SCRAPE_JOB}$",
         "dimensions": [["ClusterName", "Namespace", "model", "reason"]],
         "metric_selectors": [f"^{PARTIAL_EXCHANGES}$"]},
        {"source_labels": ["job"], "label_matcher": f"^{SCRAPE_JOB}$",
         "dimensions": [["ClusterName", "Namespace", "Workload"]],
         "metric_selectors": [f"^{API_KEYS}$", f"^{REQUESTS_UNAUTHORIZED}$"]},
        {"source_labels": ["job"], "label_matcher": f"^{SCRAPE_JOB}$",
         "dimensions": [["ClusterName", "Namespace", "Workload", "fingerprint"]],
         "metric_selectors": [f"^{API_KEY_ACCEPTED}$"]},
        # Budget alerts: one metric per level, no caller (the crossed gauge stays log events: who, for the query).
        {"source_labels": ["job"], "label_matcher": f"^{SCRAPE_JOB}$",
         "dimensions": [["ClusterName", "Namespace", "percent"]],
         "metric_selectors": [f"^{BUDGET_ALERTS}$"]},
    ]
    scrape_configs = [{
        "job_name": SCRAPE_JOB,
        "sample_limit": 1000,
        "metrics_path": "/metrics",
        "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [namespace]}}],
        "relabel_configs": [
            # Every capture sidecar's metrics port, nothing else in the namespace.
            {"source_labels": ["__meta_kubernetes_pod_container_name", "__meta_kubernetes_pod_container_port_name"],
             "action": "keep", "regex": f"{SIDECAR_CONTAINER};{SIDECAR_METRICS_PORT_NAME}"},
            {"source_labels": ["__meta_kubernetes_namespace"], "action": "replace", "target_label": "Namespace"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "action": "replace", "target_label": "pod_name"},
            {"source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_name"], "action": "replace",
             "target_label": "Workload"},
        ],
        "metric_relabel_configs": [
            {"source_labels": ["__name__"], "regex": "capture_sidecar_.*", "action": "keep"},
            {"source_labels": ["__name__"], "regex": HISTOGRAM_SERIES, "action": "drop"}],
    }]
    return cloudwatch_agent_objects(
        name=AGENT_NAME, namespace=namespace, labels=labels, role_arn=role_arn, image=image,
        agent_config=agent_configuration(region=region, cluster_name=cluster_name, log_group_name=log_group_name,
                                         declarations=declarations),
        scrape_config=scrape_configuration(scrape_configs, scrape_interval_seconds),
        rbac=[
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta(AGENT_NAME),
             "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta(AGENT_NAME),
             "subjects": [{"kind": "ServiceAccount", "name": AGENT_NAME, "namespace": namespace}],
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": AGENT_NAME}},
        ],
        # Out: the sidecars' metrics ports in this namespace: the portable servers' and the gateway entries'.
        egress=[{"to": [{"podSelector": {"matchLabels": {WORKLOAD_LABEL: PORTABLE_WORKLOAD}}},
                        {"podSelector": {"matchLabels": {WORKLOAD_LABEL: GATEWAY_ENTRY_WORKLOAD}}}],
                 "ports": [{"protocol": "TCP", "port": SIDECAR_METRICS_PORT}]}])


def agent_configuration(*, region: str, cluster_name: str, log_group_name: str,
                        declarations: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The CloudWatch agent's configuration: Prometheus scraping into one log group as embedded metric format, with
    these metric declarations (what becomes a metric, with which dimensions)."""
    return {
        # Explicit region, cluster and log group: nothing depends on the node's instance metadata.
        "agent": {"region": region},
        "logs": {
            "metrics_collected": {"prometheus": {
                "cluster_name": cluster_name,
                "log_group_name": log_group_name,
                "prometheus_config_path": "/etc/prometheusconfig/prometheus.yaml",
                "emf_processor": {"metric_declaration": list(declarations)},
            }},
            "force_flush_interval": 5,
        },
    }


def scrape_configuration(scrape_configs: Sequence[dict[str, Any]], interval_seconds: int) -> dict[str, Any]:
    """The agent's Prometheus scrape configuration: these jobs, every ``interval_seconds``."""
    return {"global": {"scrape_interval": f"{interval_seconds}s", "scrape_timeout": "10s"},
            "scrape_configs": list(scrape_configs)}


def cloudwatch_agent_objects(*, name: str, namespace: str, labels: dict[str, str], role_arn: str, image: str,
                             agent_config: dict[str, Any], scrape_config: dict[str, Any],
                             rbac: Sequence[dict[str, Any]], egress: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One CloudWatch agent with Prometheus scraping: its ServiceAccount (IRSA), the ``rbac`` objects, its two
    ConfigMaps (agent configuration, scrape configuration), a NetworkPolicy that admits nothing to it and lets it out
    to ``egress`` and HTTPS, and its Deployment (``labels`` name it: ``app.kubernetes.io/name`` is ``name``)."""

    def meta(object_name: str) -> dict[str, Any]:
        return {"name": object_name, "namespace": namespace, "labels": dict(labels)}

    return [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {**meta(name), "annotations": {"eks.amazonaws.com/role-arn": role_arn}}},
        *rbac,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(f"{name}-config"),
         "data": {"cwagentconfig.json": json.dumps(agent_config, indent=2)}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(f"{name}-scrape"),
         "data": {"prometheus.yaml": yaml.safe_dump(scrape_config, sort_keys=False)}},
        # The agent serves nothing: no ingress at all. Out: its targets, and HTTPS to the Kubernetes API (in the VPC
        # with a private endpoint), STS and CloudWatch Logs, whose addresses are not stable; never the metadata
        # service. (DNS: the namespace's own policy; everything else: its default deny.)
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta(name),
         "spec": {"podSelector": {"matchLabels": {"app.kubernetes.io/name": name}},
                  "policyTypes": ["Ingress", "Egress"], "ingress": [],
                  "egress": [
                      *egress,
                      {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": [LINK_LOCAL]}}],
                       "ports": [{"protocol": "TCP", "port": HTTPS}]},
                  ]}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(name),
         "spec": {
             "replicas": 1,  # two agents would send every increase twice
             "strategy": {"type": "Recreate"},
             "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
             "template": {
                 # The workload label tells the namespace's policies it is the platform's own pod, not the operator's.
                 "metadata": {"labels": {**labels, WORKLOAD_LABEL: name}},
                 "spec": {
                     "serviceAccountName": name,
                     "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                     "terminationGracePeriodSeconds": 60,
                     "containers": [{
                         "name": "cloudwatch-agent",
                         "image": image,
                         "imagePullPolicy": "IfNotPresent",
                         "resources": {"requests": {"cpu": "200m", "memory": "200Mi"},
                                       "limits": {"cpu": "1", "memory": "1000Mi"}},
                         "env": [{"name": "CI_VERSION", "value": CONTAINER_INSIGHTS_VERSION},
                                 {"name": "RUN_IN_AWS", "value": "True"}],
                         # Root in the image (it writes its translated configuration and logs under /opt/aws),
                         # but without any capability or a way to gain one. Non-root with a read-only root
                         # filesystem is not supported by the image yet (aws/amazon-cloudwatch-agent#276).
                         "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                         "volumeMounts": [
                             {"name": "agent-config", "mountPath": "/etc/cwagentconfig"},
                             {"name": "scrape-config", "mountPath": "/etc/prometheusconfig"},
                         ],
                     }],
                     "volumes": [
                         {"name": "agent-config", "configMap": {"name": f"{name}-config"}},
                         {"name": "scrape-config", "configMap": {"name": f"{name}-scrape"}},
                     ],
                 },
             },
         }},
    ]


def cloudwatch_agent_identity(scope: Construct, *, cluster: ClusterLike, namespace: str, service_account: str,
                              log_group_name: str, retention: logs.RetentionDays, role_name: str | None,
                              description: str) -> tuple[logs.LogGroup, iam.Role, str]:
    """A CloudWatch agent's log group and IRSA role (construct ids ``Logs``, ``Role``, ``Trust`` under ``scope``), and
    the role's ARN as its manifests name it: derived from a fixed ``role_name`` (no CDK token in dist/), else the
    role's token. Exactly what the agent does with EMF: create its log streams, find them, put events; nothing else
    (no other log group, no PutMetricData: the log group's EMF lines become the metrics). Shared by the capture
    sidecars' agent and the model servers' (:class:`~hyperpod_inference_iac.ModelServingMetrics`)."""
    stack = Stack.of(scope)
    log_group = logs.LogGroup(scope, "Logs", log_group_name=log_group_name, retention=retention,
                              removal_policy=RemovalPolicy.DESTROY)
    role = iam.Role(
        scope, "Role", role_name=role_name,
        assumed_by=service_account_principal(scope, "Trust", cluster=cluster, namespace=namespace,
                                             service_account=service_account),
        description=description)
    log_group.grant_write(role)
    log_group.grant(role, "logs:DescribeLogStreams")
    role_arn = iam_role_arn(stack.partition, stack.account, role_name) if role_name else role.role_arn
    return log_group, role, role_arn


def sidecar_metric(name: str, *, cluster_name: str, namespace: str, statistic: str = "Sum",
                   period: Duration = FIVE_MINUTES, label: str | None = None, **labels: str) -> cloudwatch.Metric:
    """A sidecar series as the agent publishes it (``labels``: ``reason=...`` or ``result=...``; ``label`` for
    graphs)."""
    dimensions = {"ClusterName": cluster_name, "Namespace": namespace, **labels}
    return cloudwatch.Metric(namespace=METRICS_NAMESPACE, metric_name=name, dimensions_map=dimensions,
                             statistic=statistic, period=period, label=label)


# A CloudWatch Logs log group name (CreateLogGroup's rule).
LOG_GROUP_NAME = re.compile(r"^[.\-_/#A-Za-z0-9]{1,512}$")


def _refuse_a_second_agent(agent: CaptureSidecarMetrics, log_group_name: str) -> None:
    """Another agent of this app (any stack of it: ours, or a consumer's beside ours) deployed to the same account and
    region, on the same namespace of the same cluster (every increase would be sent twice), or with the same log group
    (both would create it; CloudFormation refuses the second at deploy): one error now, naming the property and both
    construct paths. Stacks whose account or region differ (two environments of one app) share nothing."""
    problems = Problems()
    stack = Stack.of(agent)
    where = (stack.account, stack.region)
    for other in agent.node.root.node.find_all():
        if other is agent or not isinstance(other, CaptureSidecarMetrics):
            continue
        other_stack = Stack.of(other)
        if (other_stack.account, other_stack.region) != where:
            continue
        # (getattr: an agent whose construction failed stays in the tree without them)
        if getattr(other, "namespace", None) == agent.namespace \
                and getattr(other, "cluster_name", None) == agent.cluster_name:
            problems.add("CaptureSidecarMetrics.SecondAgent", PROPS.at("namespace"),
                         f"is already watched by {other.node.path}: two agents would send every increase twice",
                         agent.namespace)
        if not is_unresolved(log_group_name) and getattr(other, "log_group_name", None) == log_group_name:
            problems.add("CaptureSidecarMetrics.SharedLogGroup", PROPS.at("log_group_name"),
                         f"is already the log group of {other.node.path} (each agent creates its own; CloudFormation "
                         f"would refuse the second at deploy): give {agent.node.path} "
                         "sidecar_metrics_log_group_name(cluster_name, namespace)", log_group_name)
    problems.raise_if_any(f"CaptureSidecarMetrics {agent.node.path}")


def check_agent_props(props: Any, problems: Problems, at: KeyPaths, code: str) -> None:
    """The rules of a metrics agent construct's ``cluster_name``, ``namespace``, ``role_name``, images (``image`` and
    ``state_image`` when it has one) and ``scrape_interval``, under ``code`` (None: not checked)."""
    cluster_name, namespace, role_name = props.cluster_name, props.namespace, props.role_name
    if cluster_name is not None and not is_unresolved(cluster_name) and not EKS_CLUSTER_NAME.match(cluster_name):
        problems.add(f"{code}.BadClusterName", at.at("cluster_name"), "must be an EKS cluster name", cluster_name)
    if namespace is not None and not is_unresolved(namespace) and (
            len(namespace) > 63 or not DNS1123_LABEL.match(namespace)):
        problems.add(f"{code}.BadNamespace", at.at("namespace"), "must be a DNS-1123 label", namespace)
    if role_name is not None and not is_unresolved(role_name) and not IAM_ROLE_NAME.match(role_name):
        problems.add(f"{code}.BadRoleName", at.at("role_name"),
                     f"must be 1-{IAM_ROLE_NAME_MAX} ASCII letters, digits and '+=,.@_-' (IAM role names)", role_name)
    for name in ("image", "state_image"):
        image = getattr(props, name, None)
        if image is not None and not PINNED_IMAGE.match(image):
            problems.add(f"{code}.UnpinnedImage", at.at(name), "must name a tag or a digest", image)
    seconds = props.scrape_interval.to_seconds()
    if not is_unresolved(seconds) and not (10 <= seconds <= 300 and seconds % 1 == 0):
        problems.add(f"{code}.ScrapeInterval", at.at("scrape_interval"), "must be 10 to 300 seconds", f"{seconds:g} s")


@dataclass(frozen=True, kw_only=True)
class CaptureSidecarMetricsOptions(Props):
    """The capture sidecars' alarms, one :class:`AlarmSettings` per alarm (None leaves it out): what a config file
    sets (``alarms.sidecar`` in the app's)."""

    CONSTRUCT: ClassVar[str] = "CaptureSidecarMetrics"

    dropped_records: AlarmSettings | None = alarm_prop(
        DROPPED_RECORDS, threshold=(0, 1e9), unit="records lost per period, all sidecars of the namespace",
        doc="Records the sidecars lost (any reason) above the threshold.")
    failed_uploads: AlarmSettings | None = alarm_prop(
        FAILED_UPLOADS, threshold=(0, 1e9), unit="failed PutObject calls per period",
        doc="Failed `PutObject` calls above the threshold in every period (the spool keeps retrying them).")
    rejected_requests: AlarmSettings | None = alarm_prop(
        REJECTED_REQUESTS, threshold=(0, 1e9), unit="requests answered 503 per period",
        doc="Requests the sidecars answered `503` because their chunked body could not be buffered within "
            "`MAX_INFLIGHT_BODY_BYTES` (clients see it).")
    no_metrics: AlarmSettings | None = alarm_prop(
        NO_METRICS, threshold=(1, 1000), unit="datapoints of the captured-records series per period, fires below",
        doc="The sidecars' series stop arriving (missing data breaches): the agent is down or hung, or no capture "
            "sidecar runs in the namespace; without it a dead agent would leave the other alarms quiet. Switch it off "
            "where servers scale to zero.")
    server_error_rate: AlarmSettings | None = alarm_prop(
        SERVER_ERROR_RATE, threshold=(0, 100), unit="percent of a model's responses that are 5xx",
        doc="Per model: its 5xx responses (the sidecar's own 502s included) in percent of all its responses, above "
            "the threshold: `100 * errors / requests`.")
    first_chunk_p99: AlarmSettings | None = alarm_prop(
        FIRST_CHUNK_P99, threshold=(0, 1e9), unit="seconds",
        doc="Per model: the p99 time to first chunk of its 2xx responses above the threshold, `100 * (responses - "
            "within) / responses > 1` (more than 1 % of the responses slower than it). The threshold must be one of "
            "the sidecar's bucket bounds, `FIRST_CHUNK_BUCKETS`: "
            + ", ".join(format_bound(bound) for bound in FIRST_CHUNK_BUCKETS) + ".")
    budget_threshold: AlarmSettings | None = alarm_prop(
        BUDGET_THRESHOLD, threshold=(0, 1e9), unit="budget crossings per period, all callers of the namespace",
        doc="Per level of `budget_alert_percents`: callers whose day or month token budget (a portable server's "
            "or a gateway entry's `usageLimits`) passed that percent, each crossing counted once across replicas; "
            "one metric and one alarm per level, whatever the number of callers (who: the saved Logs Insights query).")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        code = "CaptureSidecarMetrics"
        check_alarm_blocks(self, problems, at, code)
        first_chunk_p99 = self.first_chunk_p99
        if first_chunk_p99 is not None and first_chunk_p99.threshold not in FIRST_CHUNK_BUCKETS:
            problems.add(f"{code}.FirstChunkBound", at.at("first_chunk_p99", "threshold"),
                         "must be one of the sidecar's time-to-first-chunk bucket bounds (seconds): "
                         + ", ".join(format_bound(bound) for bound in FIRST_CHUNK_BUCKETS), first_chunk_p99.threshold)


@dataclass(frozen=True, kw_only=True)
class CaptureSidecarMetricsProps(CaptureSidecarMetricsOptions, AlarmWiringProps):
    """:class:`CaptureSidecarMetrics`' properties: the alarms' settings, the shared ones of every alarm construct, and
    what only Python code passes."""

    cluster: ClusterLike = prop(config=False, doc="The cluster the sidecars run in (an `eks.Cluster` or "
                                                  "`eks.ICluster`; its kubectl provider applies the agent).")
    namespace: str = prop(config=False, doc="The namespace of the sidecars (the agent runs there and may only see its "
                                            "pods).")
    cluster_name: str | None = prop(None, config=False, default_doc="`cluster.cluster_name`",
                                    doc="The `ClusterName` dimension and the agent's cluster name; give the literal "
                                        "name so the dashboard and dist/ need no token.")
    role_name: str | None = prop(None, config=False, default_doc="generated",
                                 doc="Fixed name of the agent's role, so GitOps manifests can name it.")
    log_group_name: str | None = prop(
        None, config=False, default_doc="`/aws/containerinsights/<cluster_name>/capture-sidecar`",
        doc="The agent's log group, which the construct creates: a second agent in the same cluster (another "
            "namespace) needs a name of its own, `sidecar_metrics_log_group_name(cluster_name, namespace)`.")
    log_retention: logs.RetentionDays = prop(logs.RetentionDays.ONE_MONTH, config=False,
                                             doc="How long the agent's metric log events are kept (the metrics stay 15 "
                                                 "months).")
    image: str = prop(CLOUDWATCH_AGENT_IMAGE, config=False,
                      doc="The CloudWatch agent image, pinned by tag or digest (`CLOUDWATCH_AGENT_IMAGE`).")
    scrape_interval: Duration = prop(ONE_MINUTE, config=False,
                                     doc="How often each sidecar is scraped (10 s to 5 min, whole seconds).")
    models: Sequence[str] = prop((), config=False,
                                 doc="The served model names (each sidecar's `MODEL_NAME`, the `model` dimension) that "
                                     "get the two per-model alarms.")
    depends_on: Sequence[IConstruct] = prop((), config=False, doc="What must exist first (the namespace's manifest).")
    budget_alert_percents: Sequence[int] = prop(
        (), config=False,
        doc="The levels (percent of a budget) the sidecars report (their `BUDGET_ALERT_PERCENTS`, each portable "
            "server's and gateway entry's `usageLimits.alertPercents`), each getting a `budget_threshold` alarm; "
            "empty: no budget alarm and no saved query.")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        """Every rule (``cluster_name`` and ``namespace`` None: not checked, for a loader whose other sections
        check them)."""
        code = "CaptureSidecarMetrics"
        check_agent_props(self, problems, at, code)
        AlarmWiringProps.check(self, problems, at)
        log_group_name = self.log_group_name
        if log_group_name is not None and not is_unresolved(log_group_name) \
                and not LOG_GROUP_NAME.match(log_group_name):
            problems.add(f"{code}.BadLogGroupName", at.at("log_group_name"),
                         "must be a CloudWatch Logs log group name (1-512 letters, digits and '._-/#')", log_group_name)
        seen: set[str] = set()
        for index, model in enumerate(self.models):
            if not isinstance(model, str) or not MODEL_NAME.match(model) or model in seen:
                problems.add(f"{code}.BadModelName", at.at("models", index),
                             "must be a served model name as the sidecar's MODEL_NAME (1-128 letters, digits and "
                             "'._:/@+-'), each once", model)
            seen.add(model)
        percents = list(self.budget_alert_percents)
        for index, percent in enumerate(percents):
            if isinstance(percent, bool) or not isinstance(percent, int) or not 1 <= percent <= 100 \
                    or percents.index(percent) != index:
                problems.add(f"{code}.BadBudgetPercent", at.at("budget_alert_percents", index),
                             "must be a whole percent from 1 to 100, each once", percent)
        CaptureSidecarMetricsOptions.check(self, problems, at)
        prefix = self.alarm_name_prefix
        if isinstance(prefix, str) and not is_unresolved(prefix) and not problems.has_at_or_below(at.at("models")) \
                and not problems.has_at_or_below(at.at("budget_alert_percents")):
            # Two models one '/' apart ("a/b", "a-b") would give one name; a long prefix and model, one too long.
            paths = {f"{key}:{model}": at.at("models", index)
                     for index, model in enumerate(self.models) for key in PER_MODEL_ALARMS}
            suffixes = sidecar_alarm_suffixes(models=list(self.models),
                                              budget_alert_percents=list(self.budget_alert_percents), options=self)
            check_alarm_names(problems, [PlannedAlarm(alarm_name(prefix, suffix),
                                                      paths.get(key, at.at("alarm_name_prefix")))
                                         for key, suffix in suffixes.items()], code)


def check_capture_sidecar_metrics(problems: Problems, at: KeyPaths = PROPS, **options: Any) -> None:
    """:meth:`CaptureSidecarMetricsProps.check` of these properties (kept for callers of 0.2.0; ``cluster`` not
    needed, ``cluster_name`` and ``namespace`` None are not checked)."""
    CaptureSidecarMetricsProps(**{"cluster": None, **options}).check(problems, at)


@real_signature
class CaptureSidecarMetrics(Construct):
    """A CloudWatch agent that scrapes the capture sidecars of one namespace, its role and log group, and
    alarms on lost records, failed uploads, requests refused for memory, the sidecars' series going silent and,
    per served model, the 5xx rate and the p99 time to first chunk.

    Properties: :class:`CaptureSidecarMetricsProps` (each with its type, default and meaning); ``props`` keeps them
    (``cluster_name`` the one in use: the cluster's when not given).

    Attributes: ``role`` (IRSA, may only write to ``log_group``), ``log_group``, ``manifest``, ``alarms``
    (``dropped_records``, ``failed_uploads``, ``rejected_requests``, ``no_metrics``, and per model
    ``server_error_rate:<model>``, ``first_chunk_p99:<model>``), ``alarm_names``, ``cluster_name``,
    ``namespace``, ``models``; :meth:`metric`.
    """

    PROPS: ClassVar[type[Props]] = CaptureSidecarMetricsProps

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: ClusterLike,
        namespace: str,
        cluster_name: str | None = CaptureSidecarMetricsProps.cluster_name,
        role_name: str | None = CaptureSidecarMetricsProps.role_name,
        log_group_name: str | None = CaptureSidecarMetricsProps.log_group_name,
        log_retention: logs.RetentionDays = CaptureSidecarMetricsProps.log_retention,
        image: str = CaptureSidecarMetricsProps.image,
        scrape_interval: Duration = CaptureSidecarMetricsProps.scrape_interval,
        topic: AlarmTopic | sns.ITopic | None = CaptureSidecarMetricsProps.topic,
        alarm_name_prefix: str,
        runbook_url: str | None = CaptureSidecarMetricsProps.runbook_url,
        notify_on_ok: bool = CaptureSidecarMetricsProps.notify_on_ok,
        dropped_records: AlarmSettings | None = CaptureSidecarMetricsProps.dropped_records,
        failed_uploads: AlarmSettings | None = CaptureSidecarMetricsProps.failed_uploads,
        rejected_requests: AlarmSettings | None = CaptureSidecarMetricsProps.rejected_requests,
        no_metrics: AlarmSettings | None = CaptureSidecarMetricsProps.no_metrics,
        models: Sequence[str] = CaptureSidecarMetricsProps.models,
        server_error_rate: AlarmSettings | None = CaptureSidecarMetricsProps.server_error_rate,
        first_chunk_p99: AlarmSettings | None = CaptureSidecarMetricsProps.first_chunk_p99,
        budget_threshold: AlarmSettings | None = CaptureSidecarMetricsProps.budget_threshold,
        depends_on: Sequence[IConstruct] = CaptureSidecarMetricsProps.depends_on,
        budget_alert_percents: Sequence[int] = CaptureSidecarMetricsProps.budget_alert_percents,
    ) -> None:
        """Create the construct. Its properties (:class:`CaptureSidecarMetricsProps`, kept as ``self.props``):

        :param runbook_url: The runbook page (`https://`, no fragment): each alarm's description links
            `<url>#<section>`. Default: ``None`` (descriptions name the library's docs/alarms.md).
        :param notify_on_ok: Also notify when an alarm recovers. Default: ``True``.
        :param topic: Where the alarms notify; an [AlarmTopic](alarm-topic.md) also forwards to its other
            topics. Default: ``None`` (the alarms change state without actions).
        :param alarm_name_prefix: Every alarm's name starts with `<prefix>-` (1-128 letters, digits, '.', '_',
            '-'). Default: required.
        :param dropped_records: Records the sidecars lost (any reason) above the threshold. Threshold: records
            lost per period, all sidecars of the namespace (0 to 1,000,000,000). Default: threshold 0, 1 of 1 x
            5 min.
        :param failed_uploads: Failed `PutObject` calls above the threshold in every period (the spool keeps
            retrying them). Threshold: failed PutObject calls per period (0 to 1,000,000,000). Default:
            threshold 0, 3 of 3 x 5 min.
        :param rejected_requests: Requests the sidecars answered `503` because their chunked body could not be
            buffered within `MAX_INFLIGHT_BODY_BYTES` (clients see it). Threshold: requests answered 503 per
            period (0 to 1,000,000,000). Default: threshold 0, 1 of 1 x 5 min.
        :param no_metrics: The sidecars' series stop arriving (missing data breaches): the agent is down or
            hung, or no capture sidecar runs in the namespace; without it a dead agent would leave the other
            alarms quiet. Switch it off where servers scale to zero. Threshold: datapoints of the
            captured-records series per period, fires below (1 to 1000). Default: threshold 1, 1 of 1 x 15 min.
        :param server_error_rate: Per model: its 5xx responses (the sidecar's own 502s included) in percent of
            all its responses, above the threshold: `100 * errors / requests`. Threshold: percent of a model's
            responses that are 5xx (0 to 100). Default: threshold 5, 2 of 3 x 5 min.
        :param first_chunk_p99: Per model: the p99 time to first chunk of its 2xx responses above the threshold,
            `100 * (responses - within) / responses > 1` (more than 1 % of the responses slower than it). The
            threshold must be one of the sidecar's bucket bounds, `FIRST_CHUNK_BUCKETS`: 0.025, 0.05, 0.1, 0.25,
            0.5, 1, 2, 5, 10, 20, 30, 60. Threshold: seconds (0 to 1,000,000,000). Default: threshold 5, 2 of 3
            x 5 min.
        :param budget_threshold: Per level of `budget_alert_percents`: callers whose day or month token budget
            (a portable server's or a gateway entry's `usageLimits`) passed that percent, each crossing counted
            once across replicas; one metric and one alarm per level, whatever the number of callers (who: the
            saved Logs Insights query). Threshold: budget crossings per period, all callers of the namespace (0
            to 1,000,000,000). Default: threshold 0, 1 of 1 x 5 min.
        :param cluster: The cluster the sidecars run in (an `eks.Cluster` or `eks.ICluster`; its kubectl
            provider applies the agent). Default: required.
        :param namespace: The namespace of the sidecars (the agent runs there and may only see its pods).
            Default: required.
        :param cluster_name: The `ClusterName` dimension and the agent's cluster name; give the literal name so
            the dashboard and dist/ need no token. Default: ``None`` (``cluster.cluster_name``).
        :param role_name: Fixed name of the agent's role, so GitOps manifests can name it. Default: ``None``
            (generated).
        :param log_group_name: The agent's log group, which the construct creates: a second agent in the same
            cluster (another namespace) needs a name of its own, `sidecar_metrics_log_group_name(cluster_name,
            namespace)`. Default: ``None`` (``/aws/containerinsights/<cluster_name>/capture-sidecar``).
        :param log_retention: How long the agent's metric log events are kept (the metrics stay 15 months).
            Default: ``RetentionDays.ONE_MONTH``.
        :param image: The CloudWatch agent image, pinned by tag or digest (`CLOUDWATCH_AGENT_IMAGE`). Default:
            ``'public.ecr.aws/cloudwatch-agent/cloudwatch-agent:1.300066.1b1374'``.
        :param scrape_interval: How often each sidecar is scraped (10 s to 5 min, whole seconds). Default: ``1
            minute``.
        :param models: The served model names (each sidecar's `MODEL_NAME`, the `model` dimension) that get the
            two per-model alarms. Default: ``()``.
        :param depends_on: What must exist first (the namespace's manifest). Default: ``()``.
        :param budget_alert_percents: The levels (percent of a budget) the sidecars report (their
            `BUDGET_ALERT_PERCENTS`, each portable server's and gateway entry's `usageLimits.alertPercents`),
            each getting a `budget_threshold` alarm; empty: no budget alarm and no saved query. Default: ``()``.
        """
        super().__init__(scope, id)
        stack = Stack.of(self)
        self.props = props = CaptureSidecarMetricsProps(
            cluster=cluster, namespace=namespace, cluster_name=cluster_name or cluster.cluster_name,
            role_name=role_name, log_group_name=log_group_name, log_retention=log_retention, image=image,
            scrape_interval=scrape_interval,
            topic=topic, alarm_name_prefix=alarm_name_prefix, runbook_url=runbook_url, notify_on_ok=notify_on_ok,
            dropped_records=dropped_records, failed_uploads=failed_uploads, rejected_requests=rejected_requests,
            no_metrics=no_metrics, models=listed(models), server_error_rate=server_error_rate,
            first_chunk_p99=first_chunk_p99, budget_threshold=budget_threshold, depends_on=listed(depends_on),
            budget_alert_percents=listed(budget_alert_percents))
        props.raise_if_invalid(f"CaptureSidecarMetrics {self.node.path}")
        cluster_name = props.cluster_name
        assert cluster_name is not None
        namespace = props.namespace
        self.cluster_name = cluster_name
        self.namespace = namespace
        self.models = tuple(props.models)
        self.log_group_name = log_group_name = props.log_group_name or sidecar_metrics_log_group_name(cluster_name)
        _refuse_a_second_agent(self, log_group_name)
        self.log_group, self.role, role_arn = cloudwatch_agent_identity(
            self, cluster=props.cluster, namespace=namespace, service_account=AGENT_NAME,
            log_group_name=log_group_name, retention=props.log_retention,
            role_name=props.role_name,
            description=f"CloudWatch agent: capture sidecar metrics of {namespace} into one log group")
        objects = sidecar_metrics_manifests(
            namespace=namespace, cluster_name=cluster_name, region=stack.region, role_arn=role_arn,
            log_group_name=log_group_name, image=props.image,
            scrape_interval_seconds=int(props.scrape_interval.to_seconds()))
        # (the first agent of a cluster keeps the id it always had; another one's names its namespace)
        first = props.cluster.node.try_find_child("manifest-CaptureSidecarMetrics") is None
        self.manifest = props.cluster.add_manifest(
            "CaptureSidecarMetrics" if first else f"CaptureSidecarMetrics-{namespace}", *objects)
        self.manifest.node.add_dependency(self.role)
        for dependency in props.depends_on:
            self.manifest.node.add_dependency(dependency)

        wiring = AlarmWiring(props.alarm_name_prefix, topic_actions(props.topic), props.notify_on_ok, props.runbook_url)
        above = cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD
        below = cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD
        quiet, breaching = cloudwatch.TreatMissingData.NOT_BREACHING, cloudwatch.TreatMissingData.BREACHING
        # key, construct id, settings, metric, comparison, missing data, what it means (the name and the runbook
        # anchor are "sidecar-" and the key in kebab case).
        specs = [
            ("dropped_records", "DroppedRecords", props.dropped_records, self.metric(RECORDS_DROPPED), above, quiet,
             f"Capture sidecars in {namespace} lost captured records (queue, memory or spool full, uploads failing "
             "without a spool, or shutdown): the requests were served, their capture is gone."),
            ("failed_uploads", "FailedUploads", props.failed_uploads, self.metric(UPLOADS, result="failed"), above,
             quiet,
             f"Capture sidecars in {namespace} cannot write to S3 (IAM, KMS, bucket policy or network); captures "
             "wait in the spool until it is full, then are dropped."),
            ("rejected_requests", "RejectedRequests", props.rejected_requests, self.metric(REQUESTS_REJECTED), above,
             quiet,
             f"Capture sidecars in {namespace} answered requests 503 because their body could not be buffered "
             "within MAX_INFLIGHT_BODY_BYTES: clients see errors."),
            ("no_metrics", "NoMetrics", props.no_metrics, self.metric(RECORDS_CAPTURED, statistic="SampleCount"), below,
             breaching, f"No capture sidecar in {namespace} has reported for a while: the metrics agent is down or "
             "hung (the other sidecar alarms cannot fire), or no capture sidecar runs there."),
        ]
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        suffixes = sidecar_alarm_suffixes(models=self.models, budget_alert_percents=props.budget_alert_percents,
                                          options=props)
        for key, construct_id, settings, metric, comparison, missing, text in specs:
            if settings is None:
                continue
            name = suffixes[key]
            self.alarms[key] = wiring.alarm(self, construct_id, suffix=name, anchor=name, text=text, metric=metric,
                                            settings=settings, comparison=comparison, missing=missing)
        # Per model: key, construct id, settings, expression, its inputs, threshold of the expression, meaning.
        for model in self.models:
            model_specs = []
            if props.server_error_rate is not None:
                model_specs.append((
                    "server_error_rate", "ServerErrorRate", props.server_error_rate, "100 * errors / requests",
                    {"errors": self.metric(REQUESTS, model=model, status_class="5xx"),
                     "requests": self.metric(REQUESTS, model=model)}, props.server_error_rate.threshold,
                    f"Model {model} in {namespace}: more than {props.server_error_rate.threshold:g} % of its responses "
                    "were 5xx (the model server's, or the capture sidecar's 502 when the model server is "
                    "unreachable or broke a response before its headers)."))
            if props.first_chunk_p99 is not None:
                bound = format_bound(props.first_chunk_p99.threshold)
                model_specs.append((
                    "first_chunk_p99", "FirstChunkP99", props.first_chunk_p99, "100 * (responses - within) / responses",
                    {"responses": self.metric(FIRST_CHUNKS, model=model, le="+Inf"),
                     "within": self.metric(FIRST_CHUNKS, model=model, le=bound)}, P99_SLOWER_SHARE_PERCENT,
                    f"Model {model} in {namespace}: p99 time to first chunk above {bound} s (more than "
                    f"{P99_SLOWER_SHARE_PERCENT:g} % of its 2xx responses waited longer for their first byte)."))
            # In names and ids a model's '/' (meta-llama/Llama-3.1-8B-Instruct) becomes '-'.
            plain = model.replace("/", "-")
            for key, construct_id, settings, expression, inputs, threshold, text in model_specs:
                kebab = key.replace("_", "-")
                math = cloudwatch.MathExpression(expression=expression, using_metrics=inputs, period=settings.period,
                                                 label=f"{kebab} {model}")
                self.alarms[f"{key}:{model}"] = wiring.alarm(
                    self, f"{construct_id}-{plain}", suffix=suffixes[f"{key}:{model}"], anchor=f"sidecar-{kebab}",
                    text=text, metric=math, settings=settings, comparison=above, missing=quiet, threshold=threshold)
        # Budget alerts: one alarm per level, the saved query that names the callers.
        self.budget_alert_percents = tuple(sorted(props.budget_alert_percents))
        self.budget_query: logs.CfnQueryDefinition | None = None
        if self.budget_alert_percents and props.budget_threshold is not None:
            budget_alarms, self.budget_query = add_budget_alarms(
                self, wiring=wiring, settings=props.budget_threshold, percents=self.budget_alert_percents,
                metric=self.metric(BUDGET_ALERTS), namespace=namespace, log_group=self.log_group, suffixes=suffixes,
                log_group_name=self.log_group_name,
                query_name=f"{props.alarm_name_prefix}/budget-crossings")
            self.alarms.update(budget_alarms)
        self.alarm_names = alarm_names(self.alarms)

    def metric(self, name: str, *, statistic: str = "Sum", period: Duration = FIVE_MINUTES,
               label: str | None = None, **labels: str) -> cloudwatch.Metric:
        """A sidecar series of this namespace (``RECORDS_DROPPED``, ``UPLOADS`` with ``result=``, ...)."""
        return sidecar_metric(name, cluster_name=self.cluster_name, namespace=self.namespace, statistic=statistic,
                              period=period, label=label, **labels)
