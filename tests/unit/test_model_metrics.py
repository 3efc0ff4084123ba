"""ModelServingMetrics: the agent keeps exactly the vLLM/SGLang series the alarms read, through the metrics relay (fed
recorded /metrics text, so a renamed metric fails here), kube-state-metrics exports the custom resources' status.state,
the manifests are valid Kubernetes 1.34 objects, and each model gets its alarms with the right metric math, missing-data
treatment and the topic's actions."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from aws_cdk.assertions import Template

from hyperpod_inference_iac import Engine, ModelServingMetrics, WatchedModel, model_metrics_manifests
from hyperpod_inference_iac.foundation.validation import ConfigError
from hyperpod_inference_iac.observability import model_metrics as module
from tests.support.k8s_schemas import validate_core
from tests.support.synth import REPO
from tests.unit.test_alarms import _alarms_by_name, _cluster_stack, _topic

sys.path.insert(0, str(REPO / "sidecar"))  # the relay, as the image runs it
from capture_sidecar import metrics_relay

FIXTURES = Path(__file__).parent / "fixtures"
MODELS = (WatchedModel(name="mistral-7b", namespace="inference", engine=Engine.VLLM, port=8000),
          WatchedModel(name="qwen3-sg", namespace="models", engine=Engine.SGLANG, port=30000),
          WatchedModel(name="llama3-8b", namespace="inference", kind="JumpStartModel"),
          WatchedModel(name="qwen3-8b", namespace="inference", engine=Engine.VLLM, port=8000, scales_to_zero=True))
RELAY_IMAGE = "111122223333.dkr.ecr.us-west-2.amazonaws.com/cdk-hnb659fds-container-assets:abc"


def _objects() -> list[dict[str, Any]]:
    return model_metrics_manifests(namespace="inference", cluster_name="c", region="us-west-2",
                                   role_arn="arn:aws:iam::111122223333:role/r", log_group_name="/g", models=MODELS,
                                   relay_image=RELAY_IMAGE, pod_cidrs=["10.0.0.0/16"])


def _relay_settings() -> metrics_relay.RelaySettings:
    """The relay's settings as its Deployment gives them."""
    (deployment,) = [o for o in _objects() if o["kind"] == "Deployment" and o["metadata"]["name"] == module.RELAY_NAME]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return metrics_relay.load_settings({e["name"]: e["value"] for e in container["env"]})


def _through_relay(file: str) -> str:
    """What the agent gets from a model server recorded in ``file``: the relay's answer."""
    text, skipped = metrics_relay.relay((FIXTURES / file).read_bytes(), _relay_settings())
    assert skipped == 0
    return text


def _configs() -> tuple[dict[str, Any], dict[str, Any]]:
    data = {o["metadata"]["name"]: o["data"] for o in _objects() if o["kind"] == "ConfigMap"}
    return (json.loads(data["model-metrics-agent-config"]["cwagentconfig.json"]),
            yaml.safe_load(data["model-metrics-agent-scrape"]["prometheus.yaml"]))


def _samples(text: str) -> list[tuple[str, dict[str, str], str]]:
    """(name, labels, type of its family) of each sample of an exposition."""
    types: dict[str, str] = {}
    samples = []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split()
            types[family] = kind
        elif line and not line.startswith("#"):
            name, _, rest = line.partition("{")
            labels = dict(re.findall(r'(\w+)="([^"]*)"', rest.rpartition("}")[0])) if rest else {}
            name = name.split()[0]
            family = next((f for f in (name, re.sub(r"_(bucket|sum|count)$", "", name)) if f in types), name)
            samples.append((name, labels, types.get(family, "unknown")))
    return samples


def _published(text: str, job: str, extra_labels: dict[str, str]) -> set[tuple[str, tuple[str, ...]]]:
    """What the agent would publish from ``text``: the scrape job's metric_relabel keep, the agent dropping histogram
    families (the type of the family before relabelling), then the EMF declarations (label matcher, selectors) as
    (metric name, dimensions)."""
    agent, scrape = _configs()
    (config,) = [j for j in scrape["scrape_configs"] if j["job_name"] == job]
    declarations = agent["logs"]["metrics_collected"]["prometheus"]["emf_processor"]["metric_declaration"]
    published = set()
    for name, labels, kind in _samples(text):
        labels = {**labels, **extra_labels, "job": job, "__name__": name}
        kept = True
        for rule in config.get("metric_relabel_configs", []):
            value = ";".join(labels.get(s, "") for s in rule["source_labels"])
            if rule["action"] == "keep" and not re.fullmatch(rule["regex"], value):
                kept = False
            elif rule["action"] == "replace":
                labels[rule["target_label"]] = value
        if not kept or kind == "histogram":
            continue
        assert job != module.SERVING_JOB or kind == "counter", (name, kind)  # what the relay answers
        for declaration in declarations:
            value = ";".join(labels.get(s, "") for s in declaration["source_labels"])
            if re.search(declaration["label_matcher"], value) and any(
                    re.search(selector, name) for selector in declaration["metric_selectors"]):
                published |= {(name, tuple(dims)) for dims in declaration["dimensions"]}
    return published


BASE = ("ClusterName", "Namespace", "model")


def _kept_bounds(text: str, name: str) -> set[str]:
    """The ``le`` values of ``name`` the scrape keeps."""
    _, scrape = _configs()
    (job,) = [j for j in scrape["scrape_configs"] if j["job_name"] == module.SERVING_JOB]
    keep = job["metric_relabel_configs"][0]["regex"]
    return {labels["le"] for sample, labels, _ in _samples(text)
            if sample == name and re.fullmatch(keep, f"{sample};{labels['le']}")}


def test_the_vllm_series_the_alarms_read_arrive_through_the_relay_and_nothing_else() -> None:
    text = _through_relay("vllm_metrics.txt")
    published = _published(text, module.SERVING_JOB, {"Namespace": "inference", "model": "mistral-7b"})
    assert published == {("vllm:request_success_total", BASE),
                         ("vllm:request_success_total", (*BASE, "finished_reason")),
                         ("vllm:e2e_request_latency_seconds_le_total", (*BASE, "le")),
                         ("vllm:time_to_first_token_seconds_le_total", (*BASE, "le"))}
    # Of the buckets, only the two each alarm reads (+Inf and its bound): as many metrics as the means cost before.
    assert _kept_bounds(text, "vllm:e2e_request_latency_seconds_le_total") == {"+Inf", "60"}
    assert _kept_bounds(text, "vllm:time_to_first_token_seconds_le_total") == {"+Inf", "10"}
    # Straight from the model server (no relay), the agent would drop every latency series: histogram families.
    direct = _published((FIXTURES / "vllm_metrics.txt").read_text(), module.SERVING_JOB,
                        {"Namespace": "inference", "model": "mistral-7b"})
    assert not any("latency" in name or "first_token" in name for name, _ in direct)


def test_the_sglang_series_the_alarms_read_arrive_through_the_relay() -> None:
    text = _through_relay("sglang_metrics.txt")
    published = _published(text, module.SERVING_JOB, {"Namespace": "models", "model": "qwen3-sg"})
    assert published == {("sglang:num_requests_total", BASE), ("sglang:num_aborted_requests_total", BASE),
                         ("sglang:e2e_request_latency_seconds_le_total", (*BASE, "le")),
                         ("sglang:time_to_first_token_seconds_le_total", (*BASE, "le"))}
    assert _kept_bounds(text, "sglang:e2e_request_latency_seconds_le_total") == {"+Inf", "60"}
    assert _kept_bounds(text, "sglang:time_to_first_token_seconds_le_total") == {"+Inf", "10"}


def test_the_engines_publish_the_buckets_the_alarms_may_read() -> None:
    """The recorded expositions hold exactly the bucket lists ENGINES declares, and the allowed bounds are in both."""
    for file, engine in (("vllm_metrics.txt", Engine.VLLM), ("sglang_metrics.txt", Engine.SGLANG)):
        series = module.ENGINES[engine]
        samples = _samples((FIXTURES / file).read_text())
        for histogram, buckets in ((series.latency, series.latency_buckets),
                                   (series.first_token, series.first_token_buckets)):
            published = [float(labels["le"]) for name, labels, _ in samples if name == f"{histogram}_bucket"]
            assert published == [*buckets, float("inf")], histogram
    assert module.LATENCY.threshold in module.LATENCY_BOUNDS
    assert module.TIME_TO_FIRST_TOKEN.threshold in module.FIRST_TOKEN_BOUNDS
    assert module.FIRST_TOKEN_BOUNDS == (0.1, 1, 10, 20, 40, 80)


def test_the_relay_defaults_are_the_engines_series() -> None:
    assert set(metrics_relay.DEFAULT_HISTOGRAMS) == {h for e in module.ENGINES.values() for h in e.histograms}
    assert set(metrics_relay.DEFAULT_COUNTERS) == {c for e in module.ENGINES.values() for c in e.counters}
    for bound in (*module.LATENCY_BOUNDS, *module.FIRST_TOKEN_BOUNDS):
        assert metrics_relay.format_bound(bound) == module.format_bound(bound)


def test_every_series_an_alarm_reads_exists_in_the_recorded_expositions() -> None:
    exposed = {name for file in ("vllm_metrics.txt", "sglang_metrics.txt")
               for name, _, _ in _samples((FIXTURES / file).read_text())}
    for series in module.ENGINES.values():
        assert set(series.counters) <= exposed, series
        assert {f"{h}_bucket" for h in series.histograms} <= exposed, series
    labels = [labels for name, labels, _ in _samples((FIXTURES / "vllm_metrics.txt").read_text())
              if name == "vllm:request_success_total"]
    assert {"stop", "length", "abort"} <= {label["finished_reason"] for label in labels}


def test_kube_state_metrics_exports_the_state_of_both_custom_resources() -> None:
    (config_map,) = [o for o in _objects() if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-config")
                     and "config.yaml" in o["data"]]
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    assert config["kind"] == "CustomResourceStateMetrics"
    kinds = {r["groupVersionKind"]["kind"]: r for r in config["spec"]["resources"]}
    assert set(kinds) == {"InferenceEndpointConfig", "JumpStartModel"}
    for kind, resource in kinds.items():
        assert resource["groupVersionKind"] == {"group": "inference.sagemaker.aws.amazon.com", "version": "v1",
                                                "kind": kind}
        (metric,) = resource["metrics"]
        assert metric["each"]["stateSet"]["path"] == ["status", "state"]
        crd = yaml.safe_load((REPO / "charts" / "crds" / f"inference.sagemaker.aws.amazon.com_"
                              f"{module.WATCHED_KINDS[kind]}.yaml").read_text())
        (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
        state = v1["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["state"]
        assert metric["each"]["stateSet"]["list"] == state["enum"]
    # What kube-state-metrics exports, as the agent sees it: the kept states only, per model.
    exposition = "\n".join(
        ["# TYPE hyperpod_inference_model_state gauge"]
        + [f'hyperpod_inference_model_state{{kind="JumpStartModel",model="llama3-8b",namespace="inference",'
           f'state="{state}"}} {int(state == "DeploymentComplete")}' for state in module.MODEL_STATES])
    published = _published(exposition, module.STATE_JOB, {})
    assert published == {(module.MODEL_STATE, (*BASE, "state"))}


def test_kube_state_metrics_may_only_read_the_two_custom_resources() -> None:
    objects = {(o["kind"], o["metadata"]["name"]): o for o in _objects()}
    assert objects[("ClusterRole", module.KSM_NAME)]["rules"] == [
        {"apiGroups": ["inference.sagemaker.aws.amazon.com"], "resources": ["inferenceendpointconfigs",
                                                                            "jumpstartmodels"],
         "verbs": ["list", "watch"]},
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
         "verbs": ["list", "watch"]}]
    spec = objects[("Deployment", module.KSM_NAME)]["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] and spec["securityContext"]["runAsNonRoot"]
    assert container["resources"]["limits"] and container["image"] == module.KSM_IMAGE
    assert "--namespaces=inference,models" in container["args"]
    # Only the agent may scrape it.
    policy = objects[("NetworkPolicy", module.KSM_NAME)]["spec"]
    assert policy["ingress"] == [{"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "model-"
                                                                                                        "metrics-agent"}}}],
                                  "ports": [{"protocol": "TCP", "port": 8080}]}]
    # The agent may list pods only in the namespaces of the models it scrapes; the relay reaches their metrics ports.
    roles = sorted(o["metadata"]["namespace"] for o in _objects() if o["kind"] == "Role")
    assert roles == ["inference", "models"]
    scrape_policies = {o["metadata"]["namespace"]: o["spec"]["ingress"][0] for o in _objects()
                       if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == "model-metrics-relay-scrape"}
    assert {at: rule["ports"] for at, rule in scrape_policies.items()} == {
        "inference": [{"protocol": "TCP", "port": 8000}], "models": [{"protocol": "TCP", "port": 30000}]}
    for rule in scrape_policies.values():
        assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "inference"}},
                                 "podSelector": {"matchLabels": {"app.kubernetes.io/name": module.RELAY_NAME}}}]
    # The agent reaches the relay and kube-state-metrics, no model server directly.
    agent_egress = objects[("NetworkPolicy", module.AGENT_NAME)]["spec"]["egress"]
    assert [rule["to"] for rule in agent_egress[:2]] == [
        [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": module.RELAY_NAME}}}],
        [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": module.KSM_NAME}}}]]


def test_the_relay_runs_the_sidecar_image_locked_down() -> None:
    objects = {(o["kind"], o["metadata"]["name"]): o for o in _objects()}
    spec = objects[("Deployment", module.RELAY_NAME)]["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["image"] == RELAY_IMAGE and container["command"] == ["python", "-m", module.RELAY_MODULE]
    assert spec["securityContext"]["runAsNonRoot"] and spec["automountServiceAccountToken"] is False
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                            "readOnlyRootFilesystem": True}
    assert container["resources"]["limits"] and spec["nodeSelector"] == {"kubernetes.io/arch": "amd64"}
    settings = _relay_settings()
    assert [str(n) for n in settings.target_networks] == ["10.0.0.0/16"]
    assert settings.target_ports == {8000, 30000} and settings.forbidden == metrics_relay.FORBIDDEN
    # Only the agent may probe it; it may reach only the models' metrics ports.
    policy = objects[("NetworkPolicy", module.RELAY_NAME)]["spec"]
    assert policy["ingress"] == [{"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name":
                                                                            module.AGENT_NAME}}}],
                                  "ports": [{"protocol": "TCP", "port": module.RELAY_PORT}]}]
    (egress,) = policy["egress"]
    assert egress["ports"] == [{"protocol": "TCP", "port": 8000}, {"protocol": "TCP", "port": 30000}]
    # The scrape goes to the relay, the pod's address as its target.
    _, scrape = _configs()
    (job,) = [j for j in scrape["scrape_configs"] if j["job_name"] == module.SERVING_JOB]
    assert job["metrics_path"] == "/probe"
    labels = {"__address__": "10.0.3.7:8000"}
    for rule in job["relabel_configs"][4:]:
        value = ";".join(labels.get(s, "") for s in rule.get("source_labels", []))
        labels[rule["target_label"]] = rule.get("replacement", "$1").replace("$1", value)
    assert labels == {"__address__": f"{module.RELAY_NAME}.inference.svc:{module.RELAY_PORT}",
                      "__param_target": "10.0.3.7:8000", "instance": "10.0.3.7:8000"}


def test_the_scrape_keeps_only_the_watched_models_pods_on_their_ports() -> None:
    _, scrape = _configs()
    (job,) = [j for j in scrape["scrape_configs"] if j["job_name"] == module.SERVING_JOB]
    keep = job["relabel_configs"][0]
    assert re.fullmatch(keep["regex"], "inference;mistral-7b-5d8f7c9b4;8000")
    assert re.fullmatch(keep["regex"], "models;qwen3-sg-7b9c;30000")
    assert not re.fullmatch(keep["regex"], "inference;mistral-7b-5d8f7c9b4;9090")
    assert not re.fullmatch(keep["regex"], "inference;mistral-7b-extra-5d8f7c9b4;8000")
    assert not re.fullmatch(keep["regex"], "models;mistral-7b-5d8f7c9b4;8000")
    model = job["relabel_configs"][2]
    assert re.sub(f"^{model['regex']}$", model["replacement"].replace("$1", r"\1"), "mistral-7b-5d8f7c9b4") == \
        "mistral-7b"


def test_the_manifests_are_valid_kubernetes_objects() -> None:
    for manifest in _objects():
        validate_core(manifest)


def test_what_the_charts_must_set() -> None:
    assert module.operator_metrics_spec(MODELS[0]) == {"enabled": True,
                                                       "modelMetrics": {"port": 8000, "path": "/metrics"}}
    assert module.operator_metrics_spec(MODELS[2]) is None
    assert module.engine_of_image("vllm/vllm-openai:v0.11.0") is Engine.VLLM
    assert module.engine_of_image("lmsysorg/sglang:v0.5.3-cu126") is Engine.SGLANG
    assert module.engine_of_image("763104351884.dkr.ecr.us-west-2.amazonaws.com/djl-inference:0.33.0") is None


@pytest.fixture(scope="module")
def alarms() -> dict[str, dict[str, Any]]:
    stack, cluster = _cluster_stack()
    ModelServingMetrics(stack, "ModelMetrics", cluster=cluster, namespace="inference", cluster_name="gpu-cluster",
                        models=MODELS, topic=_topic(stack), alarm_name_prefix="probe", pod_cidrs=["10.0.0.0/16"],
                        relay_image=RELAY_IMAGE)
    return _alarms_by_name(Template.from_stack(stack).to_json())


def test_each_model_gets_its_alarms(alarms: dict[str, dict[str, Any]]) -> None:
    serving = ("error-rate", "latency", "time-to-first-token")
    assert sorted(alarms) == sorted(
        [f"probe-model-{m}-{a}" for m in ("mistral-7b", "qwen3-sg", "qwen3-8b") for a in
         (*serving, "model-failed", "deployment-time-exceeded")]
        + ["probe-model-llama3-8b-model-failed", "probe-model-llama3-8b-deployment-time-exceeded"])
    for name, props in alarms.items():
        assert props["AlarmActions"] and props["OKActions"]
        # No serving data from a model that keeps a replica is a fault; from one scaled to zero, it is idle.
        expected = "breaching" if name.endswith(serving) and "qwen3-8b" not in name else "notBreaching"
        assert props["TreatMissingData"] == expected, name


def test_the_alarms_metric_math(alarms: dict[str, dict[str, Any]]) -> None:
    error = alarms["probe-model-mistral-7b-error-rate"]
    expression = next(m["Expression"] for m in error["Metrics"] if "Expression" in m)
    assert expression == ("IF(requests_mistral_7b >= 10, 100 * FILL(failed_mistral_7b, 0) / requests_mistral_7b, "
                          "0)")
    inputs = {m["Id"]: m["MetricStat"]["Metric"] for m in error["Metrics"] if "MetricStat" in m}
    assert inputs["failed_mistral_7b"]["MetricName"] == "vllm:request_success_total"
    assert {"Name": "finished_reason", "Value": "abort"} in inputs["failed_mistral_7b"]["Dimensions"]
    assert (error["Threshold"], error["EvaluationPeriods"], error["DatapointsToAlarm"]) == (5, 3, 2)
    for key, histogram, bound in (("latency", "sglang:e2e_request_latency_seconds_le_total", "60"),
                                  ("time-to-first-token", "sglang:time_to_first_token_seconds_le_total", "10")):
        p90 = alarms[f"probe-model-qwen3-sg-{key}"]
        expression = next(m["Expression"] for m in p90["Metrics"] if "Expression" in m)
        assert expression == "IF(all_qwen3_sg >= 10, 100 * (all_qwen3_sg - within_qwen3_sg) / all_qwen3_sg, 0)"
        inputs = {m["Id"]: m["MetricStat"]["Metric"] for m in p90["Metrics"] if "MetricStat" in m}
        assert {i: m["MetricName"] for i, m in inputs.items()} == {"all_qwen3_sg": histogram,
                                                                  "within_qwen3_sg": histogram}
        assert {"Name": "le", "Value": "+Inf"} in inputs["all_qwen3_sg"]["Dimensions"]
        assert {"Name": "le", "Value": bound} in inputs["within_qwen3_sg"]["Dimensions"]
        # p90: fires when more than 10 % of the requests were slower than the bound.
        assert (p90["Threshold"], p90["ComparisonOperator"], p90["EvaluationPeriods"], p90["DatapointsToAlarm"]) == (
            10, "GreaterThanThreshold", 3, 2)
    stuck = alarms["probe-model-llama3-8b-deployment-time-exceeded"]
    assert (stuck["MetricName"], stuck["Statistic"], stuck["ComparisonOperator"], stuck["Threshold"],
            stuck["EvaluationPeriods"], stuck["Period"]) == (
        module.MODEL_STATE, "Maximum", "LessThanThreshold", 1, 6, 300)
    assert {"Name": "state", "Value": "DeploymentComplete"} in stuck["Dimensions"]
    failed = alarms["probe-model-llama3-8b-model-failed"]
    assert {"Name": "state", "Value": "DeploymentFailed"} in failed["Dimensions"]


@pytest.mark.parametrize(("props", "code"), [
    ({"min_requests": 0}, "ModelServingMetrics.MinRequests"),
    ({"models": [WatchedModel(name="Bad_Name", namespace="inference")]}, "ModelServingMetrics.BadModel"),
    ({"state_image": "registry.k8s.io/kube-state-metrics/kube-state-metrics"}, "ModelServingMetrics.UnpinnedImage"),
    ({"latency": replace(module.LATENCY, threshold=45)}, "ModelServingMetrics.LatencyBound"),
    ({"time_to_first_token": replace(module.TIME_TO_FIRST_TOKEN, threshold=5)}, "ModelServingMetrics.FirstTokenBound"),
    ({"pod_cidrs": ["0.0.0.0/0"]}, "ModelServingMetrics.BadPodCidr"),
    ({"pod_cidrs": ["169.254.0.0/16"]}, "ModelServingMetrics.BadPodCidr"),
    ({"pod_cidrs": ["10.0.0.1/16"]}, "ModelServingMetrics.BadPodCidr"),
])
def test_props_are_validated(props: dict[str, Any], code: str) -> None:
    stack, cluster = _cluster_stack()
    with pytest.raises(ConfigError) as raised:
        ModelServingMetrics(stack, "ModelMetrics", cluster=cluster, namespace="inference", alarm_name_prefix="p",
                            **props)
    assert code in str(raised.value)


def test_without_an_image_the_construct_builds_the_sidecar_image_for_the_relay() -> None:
    stack, cluster = _cluster_stack()
    metrics = ModelServingMetrics(stack, "ModelMetrics", cluster=cluster, namespace="inference", models=MODELS[:1],
                                  alarm_name_prefix="p", pod_cidrs=["10.0.0.0/16"])
    assert metrics.relay_image is not None
    from hyperpod_inference_iac.serving.inference_workloads import sidecar_image_hash
    assert metrics.relay_image.asset_hash == sidecar_image_hash()  # the capture sidecar's image, the same build
    # An imported cluster that does not name its VPC: the CIDRs must be given.
    stack, cluster = _cluster_stack()
    with pytest.raises(ValueError, match="pod_cidrs"):
        ModelServingMetrics(stack, "ModelMetrics", cluster=cluster, namespace="inference", models=MODELS[:1],
                            alarm_name_prefix="p", relay_image=RELAY_IMAGE)
    # No model server to scrape: no relay, no image.
    stack, cluster = _cluster_stack()
    assert ModelServingMetrics(stack, "ModelMetrics", cluster=cluster, namespace="inference", models=MODELS[2:3],
                               alarm_name_prefix="p").relay_image is None
