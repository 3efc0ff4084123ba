"""ModelServingMetrics: alarms on what the users of the operator's models feel (failed requests, latency, time to
first token) and on each model's custom resource (failed, or not ready within the deployment time limit).

Path (decided for issue 19): CloudWatch, through the platform's existing metrics agent path, not the HyperPod
observability add-on (Amazon Managed Prometheus and Grafana). A CloudWatch agent with Prometheus scraping (the same
image and configuration style as :mod:`~hyperpod_inference_iac.observability.sidecar_metrics`) runs as one small
Deployment
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

Histograms do not arrive by themselves. The agent keeps counters, gauges and summaries and drops histogram
*families*: it looks a series' type up by the family's metadata under the name the series had before any
relabelling, so a family's ``_bucket``, ``_sum`` and ``_count`` all go, and renaming them in
``metric_relabel_configs`` does not help (the agent's ``metricsTypeHandler``; "Prometheus metric type conversion by
the CloudWatch agent"). vLLM's and SGLang's latencies are histograms only, and the model servers are the operator's.
So the agent does not scrape them itself: it scrapes the **metrics relay** ``model-metrics-relay`` (a Deployment and
Service beside the agent, running ``python -m capture_sidecar.metrics_relay`` from the capture sidecar's image), the
Prometheus multi-target exporter pattern: pod discovery finds each watched model server as before, relabelling
sends the scrape to the relay with ``?target=<pod IP>:<port>``, and the relay answers with the allow-listed counters
as they are and each allow-listed histogram ``<h>`` rewritten as the counters ``<h>_le_total{le}`` (its buckets, ``le``
written ``f"{X:g}"``), ``<h>_sum_total`` and ``<h>_count_total``, which the agent keeps. The latency and TTFT alarms
then read buckets like the capture sidecar's p99 alarm: "p90 above X s" is "more than 10 % of requests took longer
than X s", ``100 * (le=+Inf - le=X) / le=+Inf > 10``, exact when X is a bucket bound both engines publish
(:data:`LATENCY_BOUNDS`, :data:`FIRST_TOKEN_BOUNDS`; anything else is a configuration error) and correct across pods.
Only the two ``le`` values an alarm reads (``+Inf`` and X) are kept per histogram, so a model costs as many
metrics as before. The relay's bounds (SSRF, size, time, concurrency, parsing) are in its module docstring and
docs/security.md.

Missing data: a model that keeps at least one replica (every model not scaled to zero) sends its counters every
scrape, zeros included, so silence means the relay, the agent or the model server is broken: its three serving
alarms treat missing data as breaching. A model that scales to zero (``autoScalingSpec.minReplicaCount: 0``, such as
the default config's qwen3-8b) has no pod to scrape while idle: its serving alarms treat missing data as not
breaching (``WatchedModel.scales_to_zero``), and its outages stay visible through the state alarms and the
SageMaker endpoint's own metrics.

The Kubernetes objects come from :func:`model_metrics_manifests`, which both the construct (applied by the kubectl
provider) and the GitOps hand-off (``dist/``) render. :func:`operator_metrics_spec` is what an
``InferenceEndpointConfig`` must set (or may leave at its defaults) for this path.
"""

from __future__ import annotations

import enum
import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import yaml
from aws_cdk import Duration, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from constructs import Construct, IConstruct

from hyperpod_inference_iac.charts.gateway import engine_of_image as gateway_engine_of_image
from hyperpod_inference_iac.charts.network_policies import HTTPS, LINK_LOCAL, WORKLOAD_LABEL
from hyperpod_inference_iac.foundation.cdk_types import ClusterLike
from hyperpod_inference_iac.foundation.patterns import (
    DNS1123_LABEL,
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
from hyperpod_inference_iac.observability.sidecar_metrics import (
    CLOUDWATCH_AGENT_IMAGE,
    METRICS_NAMESPACE,
    agent_configuration,
    check_agent_props,
    cloudwatch_agent_identity,
    cloudwatch_agent_objects,
    format_bound,
    scrape_configuration,
)

AGENT_NAME = "model-metrics-agent"
RELAY_NAME = "model-metrics-relay"
RELAY_PORT = 9400
RELAY_MODULE = "capture_sidecar.metrics_relay"
# The image's user (sidecar/Dockerfile: USER 10001).
RELAY_USER = 10001
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


def relayed_buckets(histogram: str) -> str:
    """The counter the metrics relay turns a histogram's ``_bucket`` series into (``le`` kept)."""
    return f"{histogram}_le_total"


@dataclass(frozen=True)
class EngineSeries:
    """An engine's series: all finished requests, the failed ones (with the label that says so), the two
    histograms (end-to-end latency and time to first token, which the relay re-exposes as counters) and the
    bucket bounds the engine publishes for each."""

    requests: str
    failed: str
    failed_labels: dict[str, str]
    latency: str
    first_token: str
    default_port: int
    latency_buckets: tuple[float, ...]
    first_token_buckets: tuple[float, ...]

    @property
    def counters(self) -> tuple[str, ...]:
        """The counters the relay passes as they are."""
        return (self.requests,) if self.failed == self.requests else (self.requests, self.failed)

    @property
    def histograms(self) -> tuple[str, str]:
        return (self.latency, self.first_token)


# vLLM (>= 0.9.2, its V1 engine): request_success_total counts every finished request by finished_reason ("stop",
# "length", "abort"; "error" in newer releases); "abort" is a request the engine gave up (client gone, engine error).
# SGLang (--enable-metrics): num_requests_total and num_aborted_requests_total. Both label model_name (the served
# name, not the resource's: not used as a dimension). The bucket bounds are the engines' own defaults: vLLM's V1
# engine (vllm/v1/metrics/loggers.py: request_latency_buckets; the time-to-first-token list up to 2560 s), SGLang's
# TokenizerMetricsCollector (python/sglang/srt/metrics/collector.py: bucket_e2e_request_latency,
# bucket_time_to_first_token); tests/unit/fixtures hold both as the servers write them.
ENGINES = {
    Engine.VLLM: EngineSeries(
        requests="vllm:request_success_total", failed="vllm:request_success_total",
        failed_labels={"finished_reason": "abort"}, latency="vllm:e2e_request_latency_seconds",
        first_token="vllm:time_to_first_token_seconds", default_port=8000,
        latency_buckets=(0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680),
        first_token_buckets=(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20,
                             40, 80, 160, 640, 2560)),
    Engine.SGLANG: EngineSeries(
        requests="sglang:num_requests_total", failed="sglang:num_aborted_requests_total", failed_labels={},
        latency="sglang:e2e_request_latency_seconds", first_token="sglang:time_to_first_token_seconds",
        default_port=30000,
        latency_buckets=(0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800,
                         2400),
        first_token_buckets=(0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)),
}
# The thresholds an alarm may use: bounds every engine publishes (one threshold serves models of either engine).
LATENCY_BOUNDS = tuple(sorted(set.intersection(*(set(e.latency_buckets) for e in ENGINES.values()))))
FIRST_TOKEN_BOUNDS = tuple(sorted(set.intersection(*(set(e.first_token_buckets) for e in ENGINES.values()))))
# p90: the share of requests slower than the bound, in percent, above which the alarm fires.
P90_SLOWER_SHARE_PERCENT = 10.0
FAILED_REASONS = ("abort", "error")  # vLLM finished_reason values kept as a dimension

ONE_MINUTE = Duration.minutes(1)
FIVE_MINUTES = Duration.minutes(5)
# Per model: failed requests above 5 % of its requests, p90 end-to-end latency above 60 s, p90 time to first token
# above 10 s (bounds both engines publish; SGLang has no 5 s TTFT bucket), each in 2 of 3 five-minute periods, and
# only in periods with at least `min_requests` requests (a quiet model's one slow or aborted request is not a page).
ERROR_RATE = AlarmSettings(threshold=5, period=FIVE_MINUTES, evaluation_periods=3, datapoints_to_alarm=2)
LATENCY = AlarmSettings(threshold=60, period=FIVE_MINUTES, evaluation_periods=3, datapoints_to_alarm=2)
TIME_TO_FIRST_TOKEN = AlarmSettings(threshold=10, period=FIVE_MINUTES, evaluation_periods=3, datapoints_to_alarm=2)
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
    # Its autoscaling may take it to zero replicas: no pod, no series, so missing data is not a fault then.
    scales_to_zero: bool = False

    @property
    def metrics_port(self) -> int | None:
        """Where the model server serves ``/metrics``: its invocation port (vLLM and SGLang serve both on one)."""
        if self.engine is None:
            return None
        return self.port or ENGINES[self.engine].default_port


def engine_of_image(image: str) -> Engine | None:
    """The engine a worker image runs (``vllm/vllm-openai:...``, ``lmsysorg/sglang:...``), or None: the Inference
    Gateway's reading of an image (:func:`hyperpod_inference_iac.charts.gateway.engine_of_image`), as an Engine."""
    engine, _ = gateway_engine_of_image(image)
    return Engine(engine) if engine is not None else None


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
                            models: Sequence[WatchedModel], relay_image: str, pod_cidrs: Sequence[str],
                            image: str = CLOUDWATCH_AGENT_IMAGE, state_image: str = KSM_IMAGE,
                            scrape_interval_seconds: int = 60, latency_bound: float = LATENCY.threshold,
                            first_token_bound: float = TIME_TO_FIRST_TOKEN.threshold) -> list[dict[str, Any]]:
    """The agent (ServiceAccount with IRSA, a Role and RoleBinding per models' namespace that may list and watch its
    pods, its two ConfigMaps, Deployment, NetworkPolicy), the metrics relay (ServiceAccount without a token,
    Deployment, Service, NetworkPolicy admitting the agent only; ``relay_image`` is the capture sidecar's,
    ``pod_cidrs`` where the model servers' pods get their IPs), kube-state-metrics (ServiceAccount, a ClusterRole that
    may only list and watch the two custom resources and their definitions, its ClusterRoleBinding, ConfigMap,
    Deployment, Service, NetworkPolicy admitting the agent only), and in each models' namespace a NetworkPolicy
    admitting the relay to the model servers' metrics ports. ``latency_bound`` and ``first_token_bound``: the bucket
    bound each alarm reads (the only ``le`` kept beside ``+Inf``)."""
    labels = {"app.kubernetes.io/part-of": "hyperpod-inference-iac"}
    model_namespaces = sorted({m.namespace for m in models})
    served = [m for m in models if m.metrics_port is not None]
    engines = [e for e in Engine if any(m.engine is e for m in served)]

    def meta(name: str, at: str = namespace, component: str = AGENT_NAME) -> dict[str, Any]:
        return {"name": name, "namespace": at, "labels": {"app.kubernetes.io/name": component, **labels}}

    def declaration(job: str, dimensions: list[list[str]], selectors: Sequence[str],
                    matcher: str | None = None, extra: Sequence[str] = ()) -> dict[str, Any]:
        return {"source_labels": ["job", *extra], "label_matcher": matcher or f"^{job}$", "dimensions": dimensions,
                "metric_selectors": [f"^{re.escape(s)}$" for s in selectors]}

    base = ["ClusterName", "Namespace", "model"]
    bounds = {"+Inf", format_bound(latency_bound), format_bound(first_token_bound)}
    declarations = []
    # The series the scrape keeps: "<name>;<le>" (le empty but for the relayed buckets, of which only the bounds an
    # alarm reads).
    kept: list[str] = []
    for engine in engines:
        series = ENGINES[engine]
        buckets = [relayed_buckets(h) for h in series.histograms]
        declarations.append(declaration(SERVING_JOB, [base], series.counters))
        declarations.append(declaration(SERVING_JOB, [[*base, "le"]], buckets,
                                        matcher=f"^{SERVING_JOB};({'|'.join(re.escape(b) for b in sorted(bounds))})$",
                                        extra=["le"]))
        if series.failed_labels:
            (label, _), = series.failed_labels.items()
            declarations.append(declaration(
                SERVING_JOB, [[*base, label]], [series.failed],
                matcher=f"^{SERVING_JOB};({'|'.join(FAILED_REASONS)})$", extra=[label]))
        kept += [f"{re.escape(name)};" for name in series.counters]
        for histogram, bound in zip(series.histograms, (latency_bound, first_token_bound), strict=True):
            kept.append(f"{re.escape(relayed_buckets(histogram))};(\\+Inf|{re.escape(format_bound(bound))})")
    if models:
        declarations.append(declaration(STATE_JOB, [[*base, "state"]], [MODEL_STATE],
                                        matcher=f"^{STATE_JOB};({'|'.join(KEPT_STATES)})$", extra=["state"]))
    relay_address = f"{RELAY_NAME}.{namespace}.svc:{RELAY_PORT}"
    scrape_configs: list[dict[str, Any]] = []
    if served:
        scrape_configs.append({
            "job_name": SERVING_JOB,
            "sample_limit": 5000,
            # The relay's probe: the model server's /metrics with its histograms as counters (module docstring).
            "metrics_path": "/probe",
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
                # The pod's <IP>:<port> becomes the relay's target (and the series' instance); the relay is scraped.
                {"source_labels": ["__address__"], "action": "replace", "target_label": "__param_target"},
                {"source_labels": ["__address__"], "action": "replace", "target_label": "instance"},
                {"action": "replace", "target_label": "__address__", "replacement": relay_address},
            ],
            "metric_relabel_configs": [
                {"source_labels": ["__name__", "le"], "separator": ";", "action": "keep",
                 "regex": "(" + "|".join(kept) + ")"}],
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
    # Out: the relay and kube-state-metrics (the model servers only through the relay).
    egress: list[dict[str, Any]] = [
        {"to": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": KSM_NAME}}}],
         "ports": [{"protocol": "TCP", "port": KSM_PORT}]}]
    if served:
        egress.insert(0, {"to": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": RELAY_NAME}}}],
                          "ports": [{"protocol": "TCP", "port": RELAY_PORT}]})
    objects = cloudwatch_agent_objects(
        name=AGENT_NAME, namespace=namespace, labels=meta(AGENT_NAME)["labels"], role_arn=role_arn, image=image,
        agent_config=agent_configuration(region=region, cluster_name=cluster_name, log_group_name=log_group_name,
                                         declarations=declarations),
        scrape_config=scrape_configuration(scrape_configs, scrape_interval_seconds), rbac=rbac, egress=egress)
    https_out = {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": [LINK_LOCAL]}}],
                 "ports": [{"protocol": "TCP", "port": HTTPS}]}
    if served:
        objects += _relay_objects(namespace, served, relay_image, pod_cidrs, labels, agent_pods)
    if models:
        objects += _state_metrics_objects(namespace, model_namespaces, state_image, labels, agent_pods, https_out)
    return objects


def _one_pod(metadata: dict[str, Any], name: str, labels: dict[str, str], pod: dict[str, Any]) -> dict[str, Any]:
    """A Deployment of one pod ``pod`` selected by ``app.kubernetes.io/name``, labelled as the platform's own
    workload (the namespace's policies tell it from the operator's)."""
    pods = {"app.kubernetes.io/name": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata,
            "spec": {"replicas": 1, "selector": {"matchLabels": pods},
                     "template": {"metadata": {"labels": {**pods, **labels, WORKLOAD_LABEL: name}}, "spec": pod}}}


def _relay_objects(namespace: str, served: Sequence[WatchedModel], image: str, pod_cidrs: Sequence[str],
                   labels: dict[str, str], agent_pods: dict[str, str]) -> list[dict[str, Any]]:
    """The metrics relay: ServiceAccount (no token: it calls no API), Service, NetworkPolicy (in: the agent only;
    out: the model servers' metrics ports), Deployment; and in each models' namespace a NetworkPolicy admitting it
    (beside the namespace's own operator-workloads policy, which admits the VPC; policies add up)."""
    relay_pods = {"app.kubernetes.io/name": RELAY_NAME}
    operator_pods = {"matchExpressions": [{"key": WORKLOAD_LABEL, "operator": "DoesNotExist"}]}
    ports = sorted({m.metrics_port for m in served if m.metrics_port is not None})
    engines = [ENGINES[e] for e in Engine if any(m.engine is e for m in served)]

    def meta(name: str, at: str = namespace) -> dict[str, Any]:
        return {"name": name, "namespace": at, "labels": {**relay_pods, **labels}}

    env = {"RELAY_PORT": str(RELAY_PORT), "RELAY_TARGET_CIDRS": ",".join(pod_cidrs),
           "RELAY_TARGET_PORTS": ",".join(map(str, ports)),
           "RELAY_HISTOGRAMS": ",".join(h for e in engines for h in e.histograms),
           "RELAY_COUNTERS": ",".join(c for e in engines for c in e.counters)}
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(RELAY_NAME),
         "automountServiceAccountToken": False},
        {"apiVersion": "v1", "kind": "Service", "metadata": meta(RELAY_NAME),
         "spec": {"selector": relay_pods, "ports": [{"name": "relay", "port": RELAY_PORT, "targetPort": "relay"}]}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta(RELAY_NAME),
         "spec": {"podSelector": {"matchLabels": relay_pods}, "policyTypes": ["Ingress", "Egress"],
                  "ingress": [{"from": [{"podSelector": {"matchLabels": agent_pods}}],
                               "ports": [{"protocol": "TCP", "port": RELAY_PORT}]}],
                  "egress": [{"to": [{"namespaceSelector": {"matchExpressions": [{
                      "key": "kubernetes.io/metadata.name", "operator": "In",
                      "values": sorted({m.namespace for m in served})}]}, "podSelector": operator_pods}],
                      "ports": [{"protocol": "TCP", "port": port} for port in ports]}]}},
        _one_pod(meta(RELAY_NAME), RELAY_NAME, labels, {
                     "serviceAccountName": RELAY_NAME,
                     "automountServiceAccountToken": False,
                     "securityContext": {"runAsNonRoot": True, "runAsUser": RELAY_USER, "runAsGroup": RELAY_USER,
                                         "seccompProfile": {"type": "RuntimeDefault"}},
                     # The capture sidecar's image is built for x86_64 only (SIDECAR_IMAGE_PLATFORM).
                     "nodeSelector": {"kubernetes.io/arch": "amd64"},
                     "containers": [{
                         "name": "metrics-relay",
                         "image": image,
                         "imagePullPolicy": "IfNotPresent",
                         "command": ["python", "-m", RELAY_MODULE],
                         "env": [{"name": k, "value": v} for k, v in env.items()],
                         "ports": [{"name": "relay", "containerPort": RELAY_PORT, "protocol": "TCP"}],
                         # At most 4 probes of at most 4 MiB each at once (the relay's own bounds).
                         "resources": {"requests": {"cpu": "10m", "memory": "48Mi"},
                                       "limits": {"cpu": "250m", "memory": "256Mi"}},
                         "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                             "readOnlyRootFilesystem": True},
                         "livenessProbe": {"httpGet": {"path": "/healthz", "port": "relay"},
                                           "initialDelaySeconds": 5, "timeoutSeconds": 5},
                         "readinessProbe": {"httpGet": {"path": "/healthz", "port": "relay"}, "timeoutSeconds": 5},
                     }],
                 }),
    ]
    for at in sorted({m.namespace for m in served}):
        at_ports = sorted({m.metrics_port for m in served if m.namespace == at and m.metrics_port is not None})
        objects.append({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta(f"{RELAY_NAME}-scrape", at),
            "spec": {"podSelector": operator_pods, "policyTypes": ["Ingress"],
                     "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {
                         "kubernetes.io/metadata.name": namespace}}, "podSelector": {"matchLabels": relay_pods}}],
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
        _one_pod(meta(KSM_NAME), KSM_NAME, labels, {
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
                 }),
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
        LATENCY, threshold=(0, 3600), unit="seconds, p90 end-to-end latency (a bucket bound)",
        doc="Per model with a known engine: p90 end-to-end request latency above the threshold, i.e. more than 10 % "
            "of its requests took longer (`e2e_request_latency_seconds` buckets through the metrics relay: "
            "`IF(all >= minRequests, 100 * (all - within) / all, 0) > 10`, `all` the `le=+Inf` bucket, `within` "
            "`le=threshold`). The threshold must be a bucket bound both engines publish, `LATENCY_BOUNDS`: "
            + ", ".join(format_bound(b) for b in LATENCY_BOUNDS) + ".")
    time_to_first_token: AlarmSettings | None = alarm_prop(
        TIME_TO_FIRST_TOKEN, threshold=(0, 3600), unit="seconds, p90 time to first token (a bucket bound)",
        doc="Per model with a known engine: p90 time to first token above the threshold (`time_to_first_token_"
            "seconds` buckets, the same expression as `latency`). The threshold must be a bucket bound both engines "
            "publish, `FIRST_TOKEN_BOUNDS`: " + ", ".join(format_bound(b) for b in FIRST_TOKEN_BOUNDS) + ".")
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
        for key, settings, bounds, suffix in (("latency", self.latency, LATENCY_BOUNDS, "LatencyBound"),
                                              ("time_to_first_token", self.time_to_first_token, FIRST_TOKEN_BOUNDS,
                                               "FirstTokenBound")):
            if isinstance(settings, AlarmSettings) and settings.threshold not in bounds:
                problems.add(f"{code}.{suffix}", at.at(key, "threshold"),
                             "must be a bucket bound both vLLM and SGLang publish (the p90 alarm reads that bucket): "
                             + ", ".join(format_bound(b) for b in bounds), settings.threshold)
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
    relay_image: str | None = prop(None, config=False, default_doc="the capture sidecar image, built here",
                                   doc="The metrics relay's image: the capture sidecar's (it runs "
                                       "`python -m capture_sidecar.metrics_relay`); pass the URI of one built "
                                       "already.")
    pod_cidrs: Sequence[str] | None = prop(None, config=False, default_doc="`cluster.vpc.vpc_cidr_block`",
                                           doc="The IPv4 CIDRs the model servers' pods get their IPs from: the only "
                                               "addresses the relay fetches (add a custom-networking secondary "
                                               "CIDR here).")
    scrape_interval: Duration = prop(ONE_MINUTE, config=False, doc="How often each target is scraped (10 s to 5 min, "
                                                                   "whole seconds).")
    depends_on: Sequence[IConstruct] = prop((), config=False, doc="What must exist first (the namespaces' manifest).")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        code = "ModelServingMetrics"
        check_agent_props(self, problems, at, code)
        AlarmWiringProps.check(self, problems, at)
        for index, cidr in enumerate(self.pod_cidrs or ()):
            if is_unresolved(cidr):
                continue
            try:
                network = ipaddress.IPv4Network(cidr, strict=True)
            except (TypeError, ValueError):
                network = None
            if network is None or network.prefixlen < 8 or network.is_loopback or network.is_link_local \
                    or network.overlaps(ipaddress.IPv4Network("169.254.0.0/16")):
                problems.add(f"{code}.BadPodCidr", at.at("pod_cidrs", index),
                             "must be an IPv4 CIDR of /8 or narrower with its host bits zero, not loopback or "
                             "link-local (the relay fetches nothing outside these)", cidr)
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
        prefix = self.alarm_name_prefix
        if isinstance(prefix, str) and not is_unresolved(prefix) and not problems.has_at_or_below(at.at("models")):
            # Two models of one name in two namespaces would give one name (the namespace is not in it).
            check_alarm_names(problems, [PlannedAlarm(alarm_name(prefix, suffix), at.at("models", index))
                                         for index, _, suffix in model_alarm_suffixes(list(self.models), self)], code)


# The alarms on a model server's own series (a known engine only), and on its custom resource's state.
ENGINE_ALARMS = ("error_rate", "latency", "time_to_first_token")
STATE_ALARMS = ("model_failed", "deployment_time_exceeded")


def model_alarm_suffixes(models: Sequence[WatchedModel], options: ModelServingMetricsOptions,
                         ) -> list[tuple[int, str, str]]:
    """The alarms :class:`ModelServingMetrics` creates, as (index of the model, key, name suffix): per model
    ``model-<name>-<what>`` (the name is ``<alarm_name_prefix>-<suffix>``; the namespace is not in it), the engine's
    three only with a known engine; an alarm whose settings are None is not created. The construct names its alarms
    with it; a loader plans them with it (docs/alarms.md#alarm-names)."""
    suffixes = []
    for index, model in enumerate(models):
        for key in (*(ENGINE_ALARMS if model.engine is not None else ()), *STATE_ALARMS):
            if getattr(options, key) is not None:
                suffixes.append((index, key, f"model-{model.name}-{key.replace('_', '-')}"))
    return suffixes


@real_signature
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
        relay_image: str | None = ModelServingMetricsProps.relay_image,
        pod_cidrs: Sequence[str] | None = ModelServingMetricsProps.pod_cidrs,
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
        """Create the construct. Its properties (:class:`ModelServingMetricsProps`, kept as ``self.props``):

        :param runbook_url: The runbook page (`https://`, no fragment): each alarm's description links
            `<url>#<section>`. Default: ``None`` (descriptions name the library's docs/alarms.md).
        :param notify_on_ok: Also notify when an alarm recovers. Default: ``True``.
        :param topic: Where the alarms notify; an [AlarmTopic](alarm-topic.md) also forwards to its other
            topics. Default: ``None`` (the alarms change state without actions).
        :param alarm_name_prefix: Every alarm's name starts with `<prefix>-` (1-128 letters, digits, '.', '_',
            '-'). Default: required.
        :param min_requests: The error-rate, latency and TTFT alarms judge only periods in which the model
            finished at least this many requests (1 to 1,000,000). Default: ``10``.
        :param error_rate: Per model with a known engine: its failed requests (vLLM `finished_reason="abort"`,
            SGLang aborted) in percent of all its finished requests, `IF(requests >= minRequests, 100 *
            FILL(failed, 0) / requests, 0)`. Threshold: percent of a model's finished requests that failed (0 to
            100). Default: threshold 5, 2 of 3 x 5 min.
        :param latency: Per model with a known engine: p90 end-to-end request latency above the threshold, i.e.
            more than 10 % of its requests took longer (`e2e_request_latency_seconds` buckets through the
            metrics relay: `IF(all >= minRequests, 100 * (all - within) / all, 0) > 10`, `all` the `le=+Inf`
            bucket, `within` `le=threshold`). The threshold must be a bucket bound both engines publish,
            `LATENCY_BOUNDS`: 0.8, 1, 2, 10, 20, 40, 60. Threshold: seconds, p90 end-to-end latency (a bucket
            bound) (0 to 3600). Default: threshold 60, 2 of 3 x 5 min.
        :param time_to_first_token: Per model with a known engine: p90 time to first token above the threshold
            (`time_to_first_token_seconds` buckets, the same expression as `latency`). The threshold must be a
            bucket bound both engines publish, `FIRST_TOKEN_BOUNDS`: 0.1, 1, 10, 20, 40, 80. Threshold: seconds,
            p90 time to first token (a bucket bound) (0 to 3600). Default: threshold 10, 2 of 3 x 5 min.
        :param model_failed: Per custom resource: its `status.state` is `DeploymentFailed` (Maximum of the state
            series). Threshold: `status.state` DeploymentFailed, 1 when it is (0 to 1). Default: threshold 0, 1
            of 1 x 5 min.
        :param deployment_time_exceeded: Per custom resource: not `DeploymentComplete` in any sample for
            `periodMinutes x evaluationPeriods` (the deployment time limit, 30 minutes by default; missing data
            is not breaching, so a deleted resource does not fire). Threshold: `status.state`
            DeploymentComplete, fires below 1 (1 to 1). Default: threshold 1, 6 of 6 x 5 min.
        :param cluster: The cluster the models run in (an `eks.Cluster` or `eks.ICluster`; its kubectl provider
            applies the agent). Default: required.
        :param namespace: Where the agent and kube-state-metrics run (the platform's namespace). Default:
            required.
        :param models: The watched custom resources (`WatchedModel`: name, namespace, kind, engine, port); each
            gets the two state alarms, and the three serving alarms when its engine is known. Default: ``()``.
        :param cluster_name: The `ClusterName` dimension and the agent's cluster name; give the literal name so
            the dashboard and dist/ need no token. Default: ``None`` (``cluster.cluster_name``).
        :param role_name: Fixed name of the agent's role, so GitOps manifests can name it. Default: ``None``
            (generated).
        :param log_retention: How long the agent's metric log events are kept. Default:
            ``RetentionDays.ONE_MONTH``.
        :param image: The CloudWatch agent image, pinned by tag or digest. Default:
            ``'public.ecr.aws/cloudwatch-agent/cloudwatch-agent:1.300066.1b1374'``.
        :param state_image: The kube-state-metrics image, pinned by tag or digest (`KSM_IMAGE`). Default:
            ``'registry.k8s.io/kube-state-metrics/kube-state-metrics:v2.15.0'``.
        :param relay_image: The metrics relay's image: the capture sidecar's (it runs `python -m
            capture_sidecar.metrics_relay`); pass the URI of one built already. Default: ``None`` (the capture
            sidecar image, built here).
        :param pod_cidrs: The IPv4 CIDRs the model servers' pods get their IPs from: the only addresses the
            relay fetches (add a custom-networking secondary CIDR here). Default: ``None``
            (``cluster.vpc.vpc_cidr_block``).
        :param scrape_interval: How often each target is scraped (10 s to 5 min, whole seconds). Default: ``1
            minute``.
        :param depends_on: What must exist first (the namespaces' manifest). Default: ``()``.
        """
        super().__init__(scope, id)
        stack = Stack.of(self)
        self.props = props = ModelServingMetricsProps(
            cluster=cluster, namespace=namespace, models=listed(models), cluster_name=cluster_name or
            cluster.cluster_name, role_name=role_name, log_retention=log_retention, image=image,
            state_image=state_image, relay_image=relay_image,
            pod_cidrs=listed(pod_cidrs), scrape_interval=scrape_interval,
            topic=topic, alarm_name_prefix=alarm_name_prefix,
            runbook_url=runbook_url, notify_on_ok=notify_on_ok, min_requests=min_requests, error_rate=error_rate,
            latency=latency, time_to_first_token=time_to_first_token, model_failed=model_failed,
            deployment_time_exceeded=deployment_time_exceeded, depends_on=listed(depends_on))
        props.raise_if_invalid(f"ModelServingMetrics {self.node.path}")
        assert props.cluster_name is not None
        self.cluster_name = cluster_name = props.cluster_name
        self.namespace = props.namespace
        self.models: tuple[WatchedModel, ...] = tuple(props.models)
        self.log_group, self.role, role_arn = cloudwatch_agent_identity(
            self, cluster=props.cluster, namespace=self.namespace, service_account=AGENT_NAME,
            log_group_name=model_metrics_log_group_name(cluster_name), retention=props.log_retention,
            role_name=props.role_name,
            description=f"CloudWatch agent: operator model metrics into one log group ({self.namespace})")
        self.relay_image: ecr_assets.DockerImageAsset | None = None
        relay_image = props.relay_image
        if relay_image is None and any(m.metrics_port is not None for m in self.models):
            # Local import: inference_workloads is the larger module and never needs this one.
            from hyperpod_inference_iac.serving.inference_workloads import sidecar_image_asset, sidecar_image_uri

            self.relay_image = sidecar_image_asset(self, "RelayImage")
            relay_image = sidecar_image_uri(stack, self.relay_image)
        pod_cidrs = props.pod_cidrs
        if pod_cidrs is None and any(m.metrics_port is not None for m in self.models):
            try:
                pod_cidrs = (props.cluster.vpc.vpc_cidr_block,)
            except RuntimeError:  # an imported cluster without its VPC
                raise ValueError(f"ModelServingMetrics {self.node.path}: pod_cidrs is required when the cluster does "
                                 "not name its VPC (the CIDRs the model servers' pods get their IPs from)") from None
        objects = model_metrics_manifests(
            namespace=self.namespace, cluster_name=cluster_name, region=stack.region, role_arn=role_arn,
            log_group_name=model_metrics_log_group_name(cluster_name), models=self.models, image=props.image,
            state_image=props.state_image, relay_image=relay_image or "", pod_cidrs=pod_cidrs or (),
            scrape_interval_seconds=int(props.scrape_interval.to_seconds()),
            latency_bound=self.bound("latency"), first_token_bound=self.bound("time_to_first_token"))
        self.manifest = props.cluster.add_manifest("ModelServingMetrics", *objects)
        self.manifest.node.add_dependency(self.role)
        for dependency in props.depends_on:
            self.manifest.node.add_dependency(dependency)

        wiring = AlarmWiring(props.alarm_name_prefix, topic_actions(props.topic), props.notify_on_ok, props.runbook_url)
        above = cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD
        below = cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD
        quiet = cloudwatch.TreatMissingData.NOT_BREACHING
        breaching = cloudwatch.TreatMissingData.BREACHING
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        guard = props.min_requests
        suffixes = {(index, key): suffix for index, key, suffix in model_alarm_suffixes(self.models, props)}
        for index, model in enumerate(self.models):
            where = f"Model {model.name} ({model.kind}) in {model.namespace}"
            # Serving data missing from a model that keeps a replica: the relay, the agent or the server is broken.
            silent = quiet if model.scales_to_zero else breaching
            specs: list[tuple[str, str, AlarmSettings | None, cloudwatch.IMetric, Any, str, Any, float | None]] = []
            if model.engine is not None:
                for key, settings in (("error_rate", props.error_rate), ("latency", props.latency),
                                      ("time_to_first_token", props.time_to_first_token)):
                    if settings is None:
                        continue
                    text = {
                        "error_rate": f"{where}: more than {settings.threshold:g} % of its finished requests failed "
                                      f"(aborted by the {model.engine} engine), in periods with at least {guard} "
                                      "requests.",
                        "latency": f"{where}: p90 end-to-end request latency above {settings.threshold:g} s (more "
                                   f"than {P90_SLOWER_SHARE_PERCENT:g} % of its requests took longer), in periods "
                                   f"with at least {guard} requests.",
                        "time_to_first_token": f"{where}: p90 time to first token above {settings.threshold:g} s "
                                               f"(more than {P90_SLOWER_SHARE_PERCENT:g} % of its requests waited "
                                               f"longer), in periods with at least {guard} requests.",
                    }[key]
                    if not model.scales_to_zero:
                        text += " No data counts as breaching (the relay, the agent or the model server is down)."
                    specs.append((key, "".join(p.title() for p in key.split("_")), settings,
                                  self.math(key, model, settings.period), above, text, silent,
                                  None if key == "error_rate" else P90_SLOWER_SHARE_PERCENT))
            if props.model_failed is not None:
                specs.append(("model_failed", "ModelFailed", props.model_failed,
                              self.metric(MODEL_STATE, model, statistic="Maximum", state="DeploymentFailed"), above,
                              f"{where}: status.state is DeploymentFailed (the operator gave up deploying it).",
                              quiet, None))
            if props.deployment_time_exceeded is not None:
                settings = props.deployment_time_exceeded
                minutes = int(settings.period.to_minutes()) * settings.evaluation_periods
                specs.append(("deployment_time_exceeded", "DeploymentTimeExceeded", settings,
                              self.metric(MODEL_STATE, model, statistic="Maximum", state="DeploymentComplete"), below,
                              f"{where}: not DeploymentComplete for {minutes} minutes (the deployment time limit).",
                              quiet, None))
            for key, construct_id, settings, metric, comparison, text, missing, threshold in specs:
                assert settings is not None
                kebab = key.replace("_", "-")
                self.alarms[f"{key}:{model.name}"] = wiring.alarm(
                    self, f"{construct_id}-{model.namespace}-{model.name}", suffix=suffixes[(index, key)],
                    anchor=f"model-{kebab}", text=text, metric=metric, settings=settings, comparison=comparison,
                    missing=missing, threshold=threshold)
        self.alarm_names = alarm_names(self.alarms)

    def metric(self, name: str, model: WatchedModel, *, statistic: str = "Sum", period: Duration = FIVE_MINUTES,
               label: str | None = None, **labels: str) -> cloudwatch.Metric:
        """One series of ``model`` (``MODEL_STATE`` with ``state=``, an engine's counter)."""
        return model_metric(name, cluster_name=self.cluster_name, namespace=model.namespace, model=model.name,
                            statistic=statistic, period=period, label=label, **labels)

    def bound(self, key: str) -> float:
        """The bucket bound the ``latency`` or ``time_to_first_token`` alarm (or, without it, the dashboard) reads."""
        settings = getattr(self.props, key) or (LATENCY if key == "latency" else TIME_TO_FIRST_TOKEN)
        return float(settings.threshold)

    def math(self, key: str, model: WatchedModel, period: Duration = FIVE_MINUTES,
             label: str | None = None) -> cloudwatch.MathExpression:
        """``error_rate`` (percent), ``latency`` or ``time_to_first_token`` (percent of requests slower than the
        alarm's bound: above 10, p90 is above the bound) of a model with an engine, 0 in periods with fewer than
        ``min_requests`` requests; ``requests`` (finished requests)."""
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
        histogram = relayed_buckets(series.latency if key == "latency" else series.first_token)
        bound = format_bound(self.bound(key))
        # `within` is not filled: a bound the server does not publish gives no data (breaching where data is
        # expected), never a made-up 100 %.
        return cloudwatch.MathExpression(
            expression=f"IF(all_{tag} >= {guard}, 100 * (all_{tag} - within_{tag}) / all_{tag}, 0)",
            using_metrics={f"all_{tag}": self.metric(histogram, model, period=period, le="+Inf"),
                           f"within_{tag}": self.metric(histogram, model, period=period, le=bound)},
            period=period, label=label or f"{key.replace('_', '-')} over {bound} s (%) {model.name}")
