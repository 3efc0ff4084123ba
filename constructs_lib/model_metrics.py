"""ModelServingMetrics: alarms on what the users of the operator's models feel (failed requests, latency, time to
first token) and on each model's custom resource (failed, or not ready within the deployment time limit).

Path (decided for issue 19): CloudWatch, through the platform's existing metrics agent path, not the HyperPod
observability add-on (Amazon Managed Prometheus and Grafana). A CloudWatch agent with Prometheus scraping (the same
image and configuration style as :mod:`~hyperpod_inference_iac.sidecar_metrics`) runs as one small Deployment
``model-metrics-agent`` in the platform's namespace. It scrapes

* the model server of every watched ``InferenceEndpointConfig`` (vLLM or SGLang, on its own port, ``/metrics``;
  Kubernetes pod discovery in the models' namespaces, kept by the Deployment name the operator gives the pods'
  ReplicaSet, which is the custom resource's name), keeping only the series below; and
* one kube-state-metrics ``model-state-metrics`` that exports nothing but the ``status`` of every
  ``InferenceEndpointConfig`` and ``JumpStartModel`` (a ``CustomResourceStateMetrics`` configuration), through
  its Service,

and sends them as embedded-metric-format events to one log group; CloudWatch turns them into metrics in namespace
``ContainerInsights/Prometheus`` with dimensions ``ClusterName``, ``Namespace`` and ``model`` (the custom
resource's name; plus ``finished_reason`` or ``state`` where an alarm needs it). The alarms notify the platform's
alarm topic, with the same notification format, and :class:`~hyperpod_inference_iac.PlatformDashboard` shows
them beside the capture sidecars' rows. Only the few series the alarms and the dashboard use are stored.

Cost per model and month at list prices (us-east-1, first tiers; docs/alarms.md has the arithmetic): 10 custom
metrics of a vLLM model (7 serving, 3 state; $0.30 each: $3.00), 5 alarms reading 8 metrics ($0.80; metric math
alarms are billed per metric they read) and about 0.13 GB of EMF log events at a 60 s scrape ($0.07): about $3.90.
The AMP path ingests every series the add-on scrapes (about 1,500 per vLLM pod at a 15 s interval: 263 M samples a
month, $23.65 at $0.90 per 10 M) before its collector and Grafana, so CloudWatch is cheaper from the first model on;
AMP would only win for a platform already paying for it that adds a handful of rules on series it ingests anyway.

Histograms do not arrive. The agent keeps counters, gauges and summaries and drops histogram *families*: it looks
a series' type up by the family's metadata under the name the series had before any relabelling, so a family's
``_bucket``, ``_sum`` and ``_count`` all go, and renaming them in ``metric_relabel_configs`` does not help (the
agent's ``metricsTypeHandler``; "Prometheus metric type conversion by the CloudWatch agent"). vLLM's and SGLang's
latencies are histograms only, and unlike the capture sidecar (which re-exposes its buckets as a counter,
``capture_sidecar_first_chunks_total{le}``) the model servers cannot be changed. So: the error-rate alarm reads
counters and works with the pinned agent; the latency and TTFT alarms read the mean ``_sum / _count`` of the two
histograms, whose series the scrape keeps, and get data only from an agent whose Prometheus path forwards a
classic histogram's ``_sum`` and ``_count`` (the agent's OpenTelemetry-based Prometheus receiver, aws/amazon-
cloudwatch-agent#1709, is meant to). Until that is confirmed on a cluster, the two alarms stay OK without data
(missing data is not breaching) and docs/alarms.md says so; p90 would need the buckets as counters, i.e. a relay
that re-exposes them (not built here).

The Kubernetes objects come from :func:`model_metrics_manifests`, which both the construct (applied by the kubectl
provider) and the GitOps hand-off (``dist/``) render. :func:`operator_metrics_spec` is what an
``InferenceEndpointConfig`` must set (or may leave at its defaults) for this path.
"""

from __future__ import annotations

import enum
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

from hyperpod_inference_iac.alarm_topic import AlarmTopic
from hyperpod_inference_iac.alarms import (
    AlarmSettings,
    AlarmWiring,
    AlarmWiringProps,
    alarm_names,
    alarm_prop,
    check_alarm_blocks,
    topic_actions,
)
from hyperpod_inference_iac.cdk_types import ClusterLike
from hyperpod_inference_iac.charts.network_policies import HTTPS, LINK_LOCAL, WORKLOAD_LABEL
from hyperpod_inference_iac.patterns import (
    DNS1123_LABEL,
    iam_role_arn,
)
from hyperpod_inference_iac.props import Props, listed, prop
from hyperpod_inference_iac.sidecar_metrics import (
    CLOUDWATCH_AGENT_IMAGE,
    METRICS_NAMESPACE,
    agent_configuration,
    check_agent_props,
    cloudwatch_agent_objects,
    scrape_configuration,
)
from hyperpod_inference_iac.validation import PROPS, KeyPaths, Problems
from hyperpod_inference_iac.workload_identity import service_account_principal

AGENT_NAME = "model-metrics-agent"
KSM_NAME = "model-state-metrics"
SERVING_JOB = "model-server"
STATE_JOB = "model-state"
KSM_PORT = 8080
KSM_TELEMETRY_PORT = 8081
# kube-state-metrics v2.15.0 (registry.k8s.io), pinned by tag like the CloudWatch agent image (PINNED_IMAGE): a
# digest cannot be verified offline here. CustomResourceStateMetrics with StateSet and `--custom-resource-state-only`
# exist since v2.9.
KSM_IMAGE = "registry.k8s.io/kube-state-metrics/kube-state-metrics:v2.15.0"
CRD_GROUP = "inference.sagemaker.aws.amazon.com"
CRD_VERSION = "v1"
WATCHED_KINDS = {"InferenceEndpointConfig": "inferenceendpointconfigs", "JumpStartModel": "jumpstartmodels"}
# kube-state-metrics names each series <prefix>_<metric>: hyperpod_inference_model_state{model, state, ...}.
STATE_PREFIX = "hyperpod_inference"
MODEL_STATE = f"{STATE_PREFIX}_model_state"
# The CRDs' status.state enum (both kinds): StateSet series, one per state, 1 for the current one.
MODEL_STATES = ("DeploymentPending", "DeploymentInProgress", "DeploymentFailed", "DeploymentComplete",
                "DeletionPending", "DeletionInProgress", "DeletionFailed", "DeletionComplete")
# Of those, what the alarms and the dashboard use (the others are dropped before they reach CloudWatch).
KEPT_STATES = ("DeploymentInProgress", "DeploymentFailed", "DeploymentComplete")


class Engine(enum.StrEnum):
    """The model servers whose metrics are known (the operator's own requirement: vLLM >= 0.9.2, SGLang >= 0.3.5.post1
    with ``--enable-metrics``)."""

    VLLM = "vllm"
    SGLANG = "sglang"


@dataclass(frozen=True)
class EngineSeries:
    """An engine's series: all finished requests, the failed ones (with the label that says so), and the two
    histograms' ``_sum``/``_count`` (mean end-to-end latency and mean time to first token)."""

    requests: str
    failed: str
    failed_labels: dict[str, str]
    latency: str
    first_token: str
    default_port: int

    @property
    def counters(self) -> tuple[str, ...]:
        names = [self.requests] if self.failed == self.requests else [self.requests, self.failed]
        for histogram in (self.latency, self.first_token):
            names += [f"{histogram}_sum", f"{histogram}_count"]
        return tuple(names)


# vLLM (>= 0.9.2, its V1 engine): request_success_total counts every finished request by finished_reason ("stop",
# "length", "abort"; "error" in newer releases); "abort" is a request the engine gave up (client gone, engine error).
# SGLang (--enable-metrics): num_requests_total and num_aborted_requests_total. Both label model_name (the served
# name, not the resource's: not used as a dimension).
ENGINES = {
    Engine.VLLM: EngineSeries(
        requests="vllm:request_success_total", failed="vllm:request_success_total",
        failed_labels={"finished_reason": "abort"}, latency="vllm:e2e_request_latency_seconds",
        first_token="vllm:time_to_first_token_seconds", default_port=8000),
    Engine.SGLANG: EngineSeries(
        requests="sglang:num_requests_total", failed="sglang:num_aborted_requests_total", failed_labels={},
        latency="sglang:e2e_request_latency_seconds", first_token="sglang:time_to_first_token_seconds",
        default_port=30000),
}
FAILED_REASONS = ("abort", "error")  # vLLM finished_reason values kept as a dimension

ONE_MINUTE = Duration.minutes(1)
FIVE_MINUTES = Duration.minutes(5)
# Per model: failed requests above 5 % of its requests, mean end-to-end latency above 60 s, mean time to first token
# above 5 s, each in 2 of 3 five-minute periods, and only in periods with at least `min_requests` requests (a quiet
# model's one slow or aborted request is not a page).
ERROR_RATE = AlarmSettings(threshold=5, period=FIVE_MINUTES, evaluation_periods=3, datapoints_to_alarm=2)
LATENCY = AlarmSettings(threshold=60, period=FIVE_MINUTES, evaluation_periods=3, datapoints_to_alarm=2)
TIME_TO_FIRST_TOKEN = AlarmSettings(threshold=5, period=FIVE_MINUTES, evaluation_periods=3, datapoints_to_alarm=2)
MIN_REQUESTS = 10
# Per resource: DeploymentFailed at any sample; not DeploymentComplete in any sample of 6 x 5 min, the deployment
# time limit of 30 minutes (a model that is deploying, or fell back from complete, for that long).
MODEL_FAILED = AlarmSettings(threshold=0, period=FIVE_MINUTES)
DEPLOYMENT_TIME_EXCEEDED = AlarmSettings(threshold=1, period=FIVE_MINUTES, evaluation_periods=6)
# The model name rule (a custom resource's name).
MODEL_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True, kw_only=True)
class WatchedModel:
    """One operator custom resource whose state is watched, and whose model server's metrics are when ``engine`` is
    known (a ``JumpStartModel``'s server is JumpStart's choice: its state only)."""

    name: str
    namespace: str
    kind: str = "InferenceEndpointConfig"
    engine: Engine | None = None
    port: int | None = None

    @property
    def metrics_port(self) -> int | None:
        """Where the model server serves ``/metrics``: its invocation port (vLLM and SGLang serve both on one)."""
        if self.engine is None:
            return None
        return self.port or ENGINES[self.engine].default_port


def engine_of_image(image: str) -> Engine | None:
    """The engine a worker image runs, from its repository name (``vllm/vllm-openai:...``, ``lmsysorg/sglang:...``),
    or None."""
    repository = image.split("@")[0].rsplit(":", 1)[0] if "/" in image else image.split("@")[0].split(":")[0]
    name = repository.lower()
    if "sglang" in name:
        return Engine.SGLANG
    if "vllm" in name:
        return Engine.VLLM
    return None


def operator_metrics_spec(model: WatchedModel) -> dict[str, Any] | None:
    """What the model's ``spec.metrics`` must be for this path, for the charts to set: ``enabled: true`` (the CRD's
    default) with ``modelMetrics`` naming the engine's own port and ``/metrics``, so the operator's collector (when it
    runs) reads the same endpoint the agent scrapes; the CRD's default port 8080 is neither vLLM's nor SGLang's.
    None: nothing to set (no engine known)."""
    port = model.metrics_port
    if port is None:
        return None
    return {"enabled": True, "modelMetrics": {"port": port, "path": "/metrics"}}


def model_metrics_log_group_name(cluster_name: str) -> str:
    """The agent's log group, beside the capture sidecars' one."""
    return f"/aws/containerinsights/{cluster_name}/model-serving"


def state_metrics_config(namespaces: Sequence[str] = ()) -> dict[str, Any]:
    """kube-state-metrics' ``CustomResourceStateMetrics`` configuration: per ``InferenceEndpointConfig`` and
    ``JumpStartModel``, ``<prefix>_model_state`` (a StateSet over ``status.state``) labelled ``model``
    (``metadata.name``), ``namespace`` and ``kind``. ``namespaces`` is not part of it (the ``--namespaces`` flag)."""
    del namespaces
    resources = []
    for kind in WATCHED_KINDS:
        resources.append({
            "groupVersionKind": {"group": CRD_GROUP, "version": CRD_VERSION, "kind": kind},
            "metricNamePrefix": STATE_PREFIX,
            "labelsFromPath": {"model": ["metadata", "name"], "namespace": ["metadata", "namespace"]},
            "commonLabels": {"kind": kind},
            "metrics": [{
                "name": "model_state",
                "help": "The custom resource's status.state (1 for the current state).",
                "each": {"type": "StateSet",
                         "stateSet": {"labelName": "state", "path": ["status", "state"], "list": list(MODEL_STATES)}},
            }],
        })
    return {"kind": "CustomResourceStateMetrics", "spec": {"resources": resources}}


def _keep_regex(models: Sequence[WatchedModel]) -> str:
    """``<namespace>;<deployment>-<replicaset hash>;<port>`` of every watched model with an engine."""
    parts = [f"{m.namespace};{m.name}-[a-z0-9]+;{m.metrics_port}"
             for m in models if m.metrics_port is not None]
    return "(" + "|".join(parts) + ")" if parts else "(?!)"


def model_metrics_manifests(*, namespace: str, cluster_name: str, region: str, role_arn: str, log_group_name: str,
                            models: Sequence[WatchedModel], image: str = CLOUDWATCH_AGENT_IMAGE,
                            state_image: str = KSM_IMAGE, scrape_interval_seconds: int = 60,
                            ) -> list[dict[str, Any]]:
    """The agent (ServiceAccount with IRSA, a Role and RoleBinding per models' namespace that may list and watch its
    pods, its two ConfigMaps, Deployment, NetworkPolicy), kube-state-metrics (ServiceAccount, a ClusterRole that may
    only list and watch the two custom resources and their definitions, its ClusterRoleBinding, ConfigMap,
    Deployment, Service, NetworkPolicy admitting the agent only), and in each models' namespace a NetworkPolicy
    admitting the agent to the model servers' metrics ports."""
    labels = {"app.kubernetes.io/part-of": "hyperpod-inference-iac"}
    model_namespaces = sorted({m.namespace for m in models})
    served = [m for m in models if m.metrics_port is not None]

    def meta(name: str, at: str = namespace, component: str = AGENT_NAME) -> dict[str, Any]:
        return {"name": name, "namespace": at, "labels": {"app.kubernetes.io/name": component, **labels}}

    def declaration(job: str, dimensions: list[list[str]], selectors: Sequence[str],
                    matcher: str | None = None, extra: Sequence[str] = ()) -> dict[str, Any]:
        return {"source_labels": ["job", *extra], "label_matcher": matcher or f"^{job}$", "dimensions": dimensions,
                "metric_selectors": [f"^{re.escape(s)}$" for s in selectors]}

    base = ["ClusterName", "Namespace", "model"]
    declarations = []
    for engine in Engine:
        series = ENGINES[engine]
        if not any(m.engine is engine for m in served):
            continue
        declarations.append(declaration(SERVING_JOB, [base], series.counters))
        if series.failed_labels:
            (label, _), = series.failed_labels.items()
            declarations.append(declaration(
                SERVING_JOB, [[*base, label]], [series.failed],
                matcher=f"^{SERVING_JOB};({'|'.join(FAILED_REASONS)})$", extra=[label]))
    if models:
        declarations.append(declaration(STATE_JOB, [[*base, "state"]], [MODEL_STATE],
                                        matcher=f"^{STATE_JOB};({'|'.join(KEPT_STATES)})$", extra=["state"]))
    kept_serving = sorted({name for m in served for name in ENGINES[m.engine].counters})  # type: ignore[index]
    scrape_configs: list[dict[str, Any]] = []
    if served:
        scrape_configs.append({
            "job_name": SERVING_JOB,
            "sample_limit": 5000,
            "metrics_path": "/metrics",
            "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": sorted({m.namespace for m in served})}}],
            "relabel_configs": [
                # Each watched model's pods (their ReplicaSet is <resource name>-<hash>) on its metrics port only.
                {"source_labels": ["__meta_kubernetes_namespace", "__meta_kubernetes_pod_controller_name",
                                   "__meta_kubernetes_pod_container_port_number"],
                 "separator": ";", "action": "keep", "regex": _keep_regex(served)},
                {"source_labels": ["__meta_kubernetes_namespace"], "action": "replace", "target_label": "Namespace"},
                {"source_labels": ["__meta_kubernetes_pod_controller_name"], "action": "replace",
                 "regex": "(.+)-[a-z0-9]+", "replacement": "$1", "target_label": "model"},
                {"source_labels": ["__meta_kubernetes_pod_name"], "action": "replace", "target_label": "pod_name"},
            ],
            "metric_relabel_configs": [
                {"source_labels": ["__name__"], "action": "keep",
                 "regex": "(" + "|".join(re.escape(name) for name in kept_serving) + ")"}],
        })
    if models:
        scrape_configs.append({
            "job_name": STATE_JOB,
            "sample_limit": 5000,
            "metrics_path": "/metrics",
            "static_configs": [{"targets": [f"{KSM_NAME}.{namespace}.svc:{KSM_PORT}"]}],
            "metric_relabel_configs": [
                {"source_labels": ["__name__"], "action": "keep", "regex": re.escape(MODEL_STATE)},
                # The resource's namespace (not kube-state-metrics'), as the serving series carry it.
                {"source_labels": ["namespace"], "action": "replace", "target_label": "Namespace"},
            ],
        })

    rbac: list[dict[str, Any]] = []
    for at in sorted({m.namespace for m in served}):
        rbac += [
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta(AGENT_NAME, at),
             "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta(AGENT_NAME, at),
             "subjects": [{"kind": "ServiceAccount", "name": AGENT_NAME, "namespace": namespace}],
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": AGENT_NAME}},
        ]
    agent_pods = {"app.kubernetes.io/name": AGENT_NAME}
    operator_pods = {"matchExpressions": [{"key": WORKLOAD_LABEL, "operator": "DoesNotExist"}]}
    ports = sorted({m.metrics_port for m in served if m.metrics_port is not None})
    # Out: the model servers' metrics ports in their namespaces, and kube-state-metrics.
    egress: list[dict[str, Any]] = [
        {"to": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": KSM_NAME}}}],
         "ports": [{"protocol": "TCP", "port": KSM_PORT}]}]
    if served:
        egress.insert(0, {"to": [{"namespaceSelector": {"matchExpressions": [{
            "key": "kubernetes.io/metadata.name", "operator": "In", "values": sorted({m.namespace for m in served})}]},
            "podSelector": operator_pods}], "ports": [{"protocol": "TCP", "port": port} for port in ports]})
    objects = cloudwatch_agent_objects(
        name=AGENT_NAME, namespace=namespace, labels=meta(AGENT_NAME)["labels"], role_arn=role_arn, image=image,
        agent_config=agent_configuration(region=region, cluster_name=cluster_name, log_group_name=log_group_name,
                                         declarations=declarations),
        scrape_config=scrape_configuration(scrape_configs, scrape_interval_seconds), rbac=rbac, egress=egress)
    https_out = {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": [LINK_LOCAL]}}],
                 "ports": [{"protocol": "TCP", "port": HTTPS}]}
    if models:
        objects += _state_metrics_objects(namespace, model_namespaces, state_image, labels, agent_pods, https_out)
    # In each models' namespace: the agent may reach the model servers' metrics ports (beside the namespace's own
    # operator-workloads policy, which admits the VPC; policies add up).
    for at in sorted({m.namespace for m in served}):
        at_ports = sorted({m.metrics_port for m in served if m.namespace == at and m.metrics_port is not None})
        objects.append({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta(f"{AGENT_NAME}-scrape", at),
            "spec": {"podSelector": operator_pods, "policyTypes": ["Ingress"],
                     "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {
                         "kubernetes.io/metadata.name": namespace}}, "podSelector": {"matchLabels": agent_pods}}],
                         "ports": [{"protocol": "TCP", "port": port} for port in at_ports]}]}})
    return objects


def _state_metrics_objects(namespace: str, model_namespaces: Sequence[str], image: str, labels: dict[str, str],
                           agent_pods: dict[str, str], https_out: dict[str, Any]) -> list[dict[str, Any]]:
    ksm_pods = {"app.kubernetes.io/name": KSM_NAME}

    def meta(name: str, namespaced: bool = True) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": name, "labels": {**ksm_pods, **labels}}
        if namespaced:
            metadata["namespace"] = namespace
        return metadata

    plural = sorted(WATCHED_KINDS.values())
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(KSM_NAME)},
        # Read-only, on the two custom resources and their definitions (kube-state-metrics discovers a custom
        # resource through its CRD): nothing else of the cluster.
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta(KSM_NAME, False),
         "rules": [{"apiGroups": [CRD_GROUP], "resources": plural, "verbs": ["list", "watch"]},
                   {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
                    "verbs": ["list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": meta(KSM_NAME, False),
         "subjects": [{"kind": "ServiceAccount", "name": KSM_NAME, "namespace": namespace}],
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": KSM_NAME}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(f"{KSM_NAME}-config"),
         "data": {"config.yaml": yaml.safe_dump(state_metrics_config(), sort_keys=False)}},
        {"apiVersion": "v1", "kind": "Service", "metadata": meta(KSM_NAME),
         "spec": {"selector": ksm_pods, "ports": [{"name": "metrics", "port": KSM_PORT, "targetPort": "metrics"}]}},
        # In: the agent, on the metrics port only. Out: HTTPS to the Kubernetes API (DNS: the namespace's policy).
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta(KSM_NAME),
         "spec": {"podSelector": {"matchLabels": ksm_pods}, "policyTypes": ["Ingress", "Egress"],
                  "ingress": [{"from": [{"podSelector": {"matchLabels": agent_pods}}],
                               "ports": [{"protocol": "TCP", "port": KSM_PORT}]}],
                  "egress": [https_out]}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(KSM_NAME),
         "spec": {
             "replicas": 1,
             "selector": {"matchLabels": ksm_pods},
             "template": {
                 "metadata": {"labels": {**ksm_pods, **labels, WORKLOAD_LABEL: KSM_NAME}},
                 "spec": {
                     "serviceAccountName": KSM_NAME,
                     "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534,
                                         "fsGroup": 65534, "seccompProfile": {"type": "RuntimeDefault"}},
                     "containers": [{
                         "name": "kube-state-metrics",
                         "image": image,
                         "imagePullPolicy": "IfNotPresent",
                         "args": [f"--port={KSM_PORT}", f"--telemetry-port={KSM_TELEMETRY_PORT}",
                                  "--custom-resource-state-only=true",
                                  "--custom-resource-state-config-file=/etc/model-state-metrics/config.yaml",
                                  "--resources=" + ",".join(plural),
                                  "--namespaces=" + ",".join(model_namespaces)],
                         "ports": [{"name": "metrics", "containerPort": KSM_PORT, "protocol": "TCP"}],
                         "resources": {"requests": {"cpu": "10m", "memory": "32Mi"},
                                       "limits": {"cpu": "100m", "memory": "128Mi"}},
                         "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                             "readOnlyRootFilesystem": True},
                         "livenessProbe": {"httpGet": {"path": "/livez", "port": "metrics"},
                                           "initialDelaySeconds": 5, "timeoutSeconds": 5},
                         "volumeMounts": [{"name": "config", "mountPath": "/etc/model-state-metrics",
                                           "readOnly": True}],
                     }],
                     "volumes": [{"name": "config", "configMap": {"name": f"{KSM_NAME}-config"}}],
                 },
             },
         }},
    ]


def model_metric(name: str, *, cluster_name: str, namespace: str, model: str, statistic: str = "Sum",
                 period: Duration = FIVE_MINUTES, label: str | None = None, **labels: str) -> cloudwatch.Metric:
    """A model's series as the agent publishes it (``labels``: ``finished_reason=`` or ``state=``)."""
    dimensions = {"ClusterName": cluster_name, "Namespace": namespace, "model": model, **labels}
    return cloudwatch.Metric(namespace=METRICS_NAMESPACE, metric_name=name, dimensions_map=dimensions,
                             statistic=statistic, period=period, label=label)


@dataclass(frozen=True, kw_only=True)
class ModelServingMetricsOptions(Props):
    """The operator models' alarms, one :class:`AlarmSettings` per alarm (None leaves it out), and the minimum-requests
    guard: what a config file sets (``alarms.models`` in the app's)."""

    CONSTRUCT: ClassVar[str] = "ModelServingMetrics"

    min_requests: int = prop(MIN_REQUESTS, doc="The error-rate, latency and TTFT alarms judge only periods in which "
                                               "the model finished at least this many requests (1 to 1,000,000).")
    error_rate: AlarmSettings | None = alarm_prop(
        ERROR_RATE, threshold=(0, 100), unit="percent of a model's finished requests that failed",
        doc="Per model with a known engine: its failed requests (vLLM `finished_reason=\"abort\"`, SGLang aborted) "
            "in percent of all its finished requests, `IF(requests >= minRequests, 100 * FILL(failed, 0) / "
            "requests, 0)`.")
    latency: AlarmSettings | None = alarm_prop(
        LATENCY, threshold=(0, 3600), unit="seconds, mean end-to-end latency",
        doc="Per model with a known engine: mean end-to-end request latency (`e2e_request_latency_seconds` "
            "`_sum / _count`) above the threshold, in periods with at least `minRequests` requests.")
    time_to_first_token: AlarmSettings | None = alarm_prop(
        TIME_TO_FIRST_TOKEN, threshold=(0, 3600), unit="seconds, mean time to first token",
        doc="Per model with a known engine: mean time to first token (`time_to_first_token_seconds` `_sum / "
            "_count`) above the threshold, in periods with at least `minRequests` requests.")
    model_failed: AlarmSettings | None = alarm_prop(
        MODEL_FAILED, threshold=(0, 1), unit="`status.state` DeploymentFailed, 1 when it is",
        doc="Per custom resource: its `status.state` is `DeploymentFailed` (Maximum of the state series).")
    deployment_time_exceeded: AlarmSettings | None = alarm_prop(
        DEPLOYMENT_TIME_EXCEEDED, threshold=(1, 1), unit="`status.state` DeploymentComplete, fires below 1",
        doc="Per custom resource: not `DeploymentComplete` in any sample for `periodMinutes x evaluationPeriods` "
            "(the deployment time limit, 30 minutes by default; missing data is not breaching, so a deleted "
            "resource does not fire).")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        code = "ModelServingMetrics"
        check_alarm_blocks(self, problems, at, code)
        value = self.min_requests
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1_000_000:
            problems.add(f"{code}.MinRequests", at.at("min_requests"), "must be an integer from 1 to 1,000,000", value)


@dataclass(frozen=True, kw_only=True)
class ModelServingMetricsProps(ModelServingMetricsOptions, AlarmWiringProps):
    """:class:`ModelServingMetrics`' properties: the alarms' settings, the shared ones of every alarm construct, and
    what only Python code passes."""

    cluster: ClusterLike = prop(config=False, doc="The cluster the models run in (an `eks.Cluster` or `eks.ICluster`; "
                                                  "its kubectl provider applies the agent).")
    namespace: str = prop(config=False, doc="Where the agent and kube-state-metrics run (the platform's namespace).")
    models: Sequence[WatchedModel] = prop(
        (), config=False, doc="The watched custom resources (`WatchedModel`: name, namespace, kind, engine, port); "
                              "each gets the two state alarms, and the three serving alarms when its engine is known.")
    cluster_name: str | None = prop(None, config=False, default_doc="`cluster.cluster_name`",
                                    doc="The `ClusterName` dimension and the agent's cluster name; give the literal "
                                        "name so the dashboard and dist/ need no token.")
    role_name: str | None = prop(None, config=False, default_doc="generated",
                                 doc="Fixed name of the agent's role, so GitOps manifests can name it.")
    log_retention: logs.RetentionDays = prop(logs.RetentionDays.ONE_MONTH, config=False,
                                             doc="How long the agent's metric log events are kept.")
    image: str = prop(CLOUDWATCH_AGENT_IMAGE, config=False, doc="The CloudWatch agent image, pinned by tag or digest.")
    state_image: str = prop(KSM_IMAGE, config=False, doc="The kube-state-metrics image, pinned by tag or digest "
                                                         "(`KSM_IMAGE`).")
    scrape_interval: Duration = prop(ONE_MINUTE, config=False, doc="How often each target is scraped (10 s to 5 min, "
                                                                   "whole seconds).")
    depends_on: Sequence[IConstruct] = prop((), config=False, doc="What must exist first (the namespaces' manifest).")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        code = "ModelServingMetrics"
        check_agent_props(self, problems, at, code)
        AlarmWiringProps.check(self, problems, at)
        seen: set[tuple[str, str]] = set()
        for index, model in enumerate(self.models):
            ok = (isinstance(model, WatchedModel) and len(model.name) <= 63 and MODEL_NAME.match(model.name)
                  and DNS1123_LABEL.match(model.namespace) and model.kind in WATCHED_KINDS
                  and (model.port is None or 1 <= model.port <= 65535)
                  and (model.engine is None or model.engine in ENGINES)
                  and (model.namespace, model.name) not in seen)
            if not ok:
                problems.add(f"{code}.BadModel", at.at("models", index),
                             "must be a WatchedModel: a DNS-1123 name and namespace, kind InferenceEndpointConfig or "
                             "JumpStartModel, an engine of vllm/sglang or none, a port 1-65535; each resource once",
                             model)
            if isinstance(model, WatchedModel):
                seen.add((model.namespace, model.name))
        ModelServingMetricsOptions.check(self, problems, at)


class ModelServingMetrics(Construct):
    """A CloudWatch agent that scrapes the operator models' servers and a kube-state-metrics that exports their custom
    resources' state, its role and log group, and per model the error-rate, latency and time-to-first-token alarms
    (engine known) and the model-failed and deployment-time-exceeded alarms.

    Properties: :class:`ModelServingMetricsProps` (each with its type, default and meaning); ``props`` keeps them.

    Attributes: ``role``, ``log_group``, ``manifest``, ``alarms`` (``<key>:<model>``: ``error_rate``, ``latency``,
    ``time_to_first_token``, ``model_failed``, ``deployment_time_exceeded``), ``alarm_names``, ``cluster_name``,
    ``namespace``, ``models``; :meth:`metric`, :meth:`math`.
    """

    PROPS: ClassVar[type[Props]] = ModelServingMetricsProps

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: ClusterLike,
        namespace: str,
        models: Sequence[WatchedModel] = ModelServingMetricsProps.models,
        cluster_name: str | None = ModelServingMetricsProps.cluster_name,
        role_name: str | None = ModelServingMetricsProps.role_name,
        log_retention: logs.RetentionDays = ModelServingMetricsProps.log_retention,
        image: str = ModelServingMetricsProps.image,
        state_image: str = ModelServingMetricsProps.state_image,
        scrape_interval: Duration = ModelServingMetricsProps.scrape_interval,
        topic: AlarmTopic | sns.ITopic | None = ModelServingMetricsProps.topic,
        alarm_name_prefix: str,
        runbook_url: str | None = ModelServingMetricsProps.runbook_url,
        notify_on_ok: bool = ModelServingMetricsProps.notify_on_ok,
        min_requests: int = ModelServingMetricsProps.min_requests,
        error_rate: AlarmSettings | None = ModelServingMetricsProps.error_rate,
        latency: AlarmSettings | None = ModelServingMetricsProps.latency,
        time_to_first_token: AlarmSettings | None = ModelServingMetricsProps.time_to_first_token,
        model_failed: AlarmSettings | None = ModelServingMetricsProps.model_failed,
        deployment_time_exceeded: AlarmSettings | None = ModelServingMetricsProps.deployment_time_exceeded,
        depends_on: Sequence[IConstruct] = ModelServingMetricsProps.depends_on,
    ) -> None:
        super().__init__(scope, id)
        stack = Stack.of(self)
        self.props = props = ModelServingMetricsProps(
            cluster=cluster, namespace=namespace, models=listed(models), cluster_name=cluster_name or
            cluster.cluster_name, role_name=role_name, log_retention=log_retention, image=image,
            state_image=state_image, scrape_interval=scrape_interval, topic=topic, alarm_name_prefix=alarm_name_prefix,
            runbook_url=runbook_url, notify_on_ok=notify_on_ok, min_requests=min_requests, error_rate=error_rate,
            latency=latency, time_to_first_token=time_to_first_token, model_failed=model_failed,
            deployment_time_exceeded=deployment_time_exceeded, depends_on=tuple(depends_on))
        props.raise_if_invalid(f"ModelServingMetrics {self.node.path}")
        assert props.cluster_name is not None
        self.cluster_name = cluster_name = props.cluster_name
        self.namespace = props.namespace
        self.models: tuple[WatchedModel, ...] = tuple(props.models)
        self.log_group = logs.LogGroup(
            self, "Logs", log_group_name=model_metrics_log_group_name(cluster_name), retention=props.log_retention,
            removal_policy=RemovalPolicy.DESTROY)
        self.role = iam.Role(
            self, "Role", role_name=props.role_name,
            assumed_by=service_account_principal(self, "Trust", cluster=props.cluster, namespace=self.namespace,
                                                 service_account=AGENT_NAME),
            description=f"CloudWatch agent: operator model metrics into one log group ({self.namespace})")
        self.log_group.grant_write(self.role)
        self.log_group.grant(self.role, "logs:DescribeLogStreams")
        role_arn = iam_role_arn(stack.partition, stack.account, props.role_name) if props.role_name \
            else self.role.role_arn
        objects = model_metrics_manifests(
            namespace=self.namespace, cluster_name=cluster_name, region=stack.region, role_arn=role_arn,
            log_group_name=model_metrics_log_group_name(cluster_name), models=self.models, image=props.image,
            state_image=props.state_image, scrape_interval_seconds=int(props.scrape_interval.to_seconds()))
        self.manifest = props.cluster.add_manifest("ModelServingMetrics", *objects)
        self.manifest.node.add_dependency(self.role)
        for dependency in props.depends_on:
            self.manifest.node.add_dependency(dependency)

        wiring = AlarmWiring(props.alarm_name_prefix, topic_actions(props.topic), props.notify_on_ok, props.runbook_url)
        above = cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD
        below = cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD
        quiet = cloudwatch.TreatMissingData.NOT_BREACHING
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        guard = props.min_requests
        for model in self.models:
            where = f"Model {model.name} ({model.kind}) in {model.namespace}"
            specs: list[tuple[str, str, AlarmSettings | None, cloudwatch.IMetric, Any, str]] = []
            if model.engine is not None:
                for key, settings in (("error_rate", props.error_rate), ("latency", props.latency),
                                      ("time_to_first_token", props.time_to_first_token)):
                    if settings is None:
                        continue
                    text = {
                        "error_rate": f"{where}: more than {settings.threshold:g} % of its finished requests failed "
                                      f"(aborted by the {model.engine} engine), in periods with at least {guard} "
                                      "requests.",
                        "latency": f"{where}: mean end-to-end request latency above {settings.threshold:g} s, in "
                                   f"periods with at least {guard} requests.",
                        "time_to_first_token": f"{where}: mean time to first token above {settings.threshold:g} s, in "
                                               f"periods with at least {guard} requests.",
                    }[key]
                    specs.append((key, "".join(p.title() for p in key.split("_")), settings,
                                  self.math(key, model, settings.period), above, text))
            if props.model_failed is not None:
                specs.append(("model_failed", "ModelFailed", props.model_failed,
                              self.metric(MODEL_STATE, model, statistic="Maximum", state="DeploymentFailed"), above,
                              f"{where}: status.state is DeploymentFailed (the operator gave up deploying it)."))
            if props.deployment_time_exceeded is not None:
                settings = props.deployment_time_exceeded
                minutes = int(settings.period.to_minutes()) * settings.evaluation_periods
                specs.append(("deployment_time_exceeded", "DeploymentTimeExceeded", settings,
                              self.metric(MODEL_STATE, model, statistic="Maximum", state="DeploymentComplete"), below,
                              f"{where}: not DeploymentComplete for {minutes} minutes (the deployment time limit)."))
            for key, construct_id, settings, metric, comparison, text in specs:
                assert settings is not None
                kebab = key.replace("_", "-")
                self.alarms[f"{key}:{model.name}"] = wiring.alarm(
                    self, f"{construct_id}-{model.namespace}-{model.name}", suffix=f"model-{model.name}-{kebab}",
                    anchor=f"model-{kebab}", text=text, metric=metric, settings=settings, comparison=comparison,
                    missing=quiet)
        self.alarm_names = alarm_names(self.alarms)

    def metric(self, name: str, model: WatchedModel, *, statistic: str = "Sum", period: Duration = FIVE_MINUTES,
               label: str | None = None, **labels: str) -> cloudwatch.Metric:
        """One series of ``model`` (``MODEL_STATE`` with ``state=``, an engine's counter)."""
        return model_metric(name, cluster_name=self.cluster_name, namespace=model.namespace, model=model.name,
                            statistic=statistic, period=period, label=label, **labels)

    def math(self, key: str, model: WatchedModel, period: Duration = FIVE_MINUTES,
             label: str | None = None) -> cloudwatch.MathExpression:
        """``error_rate`` (percent), ``latency`` or ``time_to_first_token`` (mean seconds) of a model with an engine,
        0 in periods with fewer than ``min_requests`` requests; ``requests`` (finished requests)."""
        assert model.engine is not None
        series = ENGINES[model.engine]
        # Ids unique per model, so one graph may hold the expressions of several models.
        tag = re.sub(r"[^a-z0-9]", "_", model.name)
        requests = self.metric(series.requests, model, period=period)
        guard = self.props.min_requests
        if key == "requests":
            return cloudwatch.MathExpression(expression=f"FILL(requests_{tag}, 0)",
                                             using_metrics={f"requests_{tag}": requests}, period=period,
                                             label=label or f"requests {model.name}")
        if key == "error_rate":
            failed = self.metric(series.failed, model, period=period, **series.failed_labels)
            return cloudwatch.MathExpression(
                expression=f"IF(requests_{tag} >= {guard}, 100 * FILL(failed_{tag}, 0) / requests_{tag}, 0)",
                using_metrics={f"requests_{tag}": requests, f"failed_{tag}": failed}, period=period,
                label=label or f"error-rate {model.name}")
        histogram = series.latency if key == "latency" else series.first_token
        return cloudwatch.MathExpression(
            expression=f"IF(count_{tag} >= {guard}, total_{tag} / count_{tag}, 0)",
            using_metrics={f"total_{tag}": self.metric(f"{histogram}_sum", model, period=period),
                           f"count_{tag}": self.metric(f"{histogram}_count", model, period=period)},
            period=period, label=label or f"{key.replace('_', '-')} {model.name}")
