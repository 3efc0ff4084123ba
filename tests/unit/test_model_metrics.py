"""ModelServingMetrics: the agent keeps exactly the vLLM/SGLang series the alarms read (fed recorded /metrics text, so a
renamed metric fails here), kube-state-metrics exports the custom resources' status.state, the manifests are valid
Kubernetes 1.34 objects, and each model gets its alarms with the right metric math and the topic's actions."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from aws_cdk.assertions import Template

from hyperpod_inference_iac import Engine, ModelServingMetrics, WatchedModel, model_metrics_manifests
from hyperpod_inference_iac import model_metrics as module
from hyperpod_inference_iac.validation import ConfigError
from tests.support.k8s_schemas import validate_core
from tests.support.synth import REPO
from tests.unit.test_alarms import _alarms_by_name, _cluster_stack, _topic

FIXTURES = Path(__file__).parent / "fixtures"
MODELS = (WatchedModel(name="mistral-7b", namespace="inference", engine=Engine.VLLM, port=8000),
          WatchedModel(name="qwen3-sg", namespace="models", engine=Engine.SGLANG, port=30000),
          WatchedModel(name="llama3-8b", namespace="inference", kind="JumpStartModel"))


def _objects() -> list[dict[str, Any]]:
    return model_metrics_manifests(namespace="inference", cluster_name="c", region="us-west-2",
                                   role_arn="arn:aws:iam::111122223333:role/r", log_group_name="/g", models=MODELS)


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
        for declaration in declarations:
            value = ";".join(labels.get(s, "") for s in declaration["source_labels"])
            if re.search(declaration["label_matcher"], value) and any(
                    re.search(selector, name) for selector in declaration["metric_selectors"]):
                published |= {(name, tuple(dims)) for dims in declaration["dimensions"]}
    return published


BASE = ("ClusterName", "Namespace", "model")


def test_the_vllm_series_the_alarms_read_pass_the_agent_and_nothing_else() -> None:
    published = _published((FIXTURES / "vllm_metrics.txt").read_text(), module.SERVING_JOB,
                           {"Namespace": "inference", "model": "mistral-7b"})
    assert published == {("vllm:request_success_total", BASE),
                         ("vllm:request_success_total", (*BASE, "finished_reason"))}
    # The latency and TTFT series are kept by the scrape, but the agent drops histogram families (module docstring).
    _, scrape = _configs()
    (job,) = [j for j in scrape["scrape_configs"] if j["job_name"] == module.SERVING_JOB]
    keep = job["metric_relabel_configs"][0]["regex"]
    names = {name for name, _, _ in _samples((FIXTURES / "vllm_metrics.txt").read_text()) if re.fullmatch(keep, name)}
    assert names == {"vllm:request_success_total", "vllm:e2e_request_latency_seconds_sum",
                     "vllm:e2e_request_latency_seconds_count", "vllm:time_to_first_token_seconds_sum",
                     "vllm:time_to_first_token_seconds_count"}


def test_the_sglang_series_the_alarms_read_pass_the_agent() -> None:
    published = _published((FIXTURES / "sglang_metrics.txt").read_text(), module.SERVING_JOB,
                           {"Namespace": "models", "model": "qwen3-sg"})
    assert published == {("sglang:num_requests_total", BASE), ("sglang:num_aborted_requests_total", BASE)}


def test_every_series_an_alarm_reads_exists_in_the_recorded_expositions() -> None:
    exposed = {name for file in ("vllm_metrics.txt", "sglang_metrics.txt")
               for name, _, _ in _samples((FIXTURES / file).read_text())}
    for series in module.ENGINES.values():
        assert set(series.counters) <= exposed, series
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
    # The agent may list pods only in the namespaces of the models it scrapes, and reach their metrics ports.
    roles = sorted(o["metadata"]["namespace"] for o in _objects() if o["kind"] == "Role")
    assert roles == ["inference", "models"]
    scrape_policies = {o["metadata"]["namespace"]: o["spec"]["ingress"][0]["ports"] for o in _objects()
                       if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == "model-metrics-agent-scrape"}
    assert scrape_policies == {"inference": [{"protocol": "TCP", "port": 8000}],
                               "models": [{"protocol": "TCP", "port": 30000}]}


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
                        models=MODELS, topic=_topic(stack), alarm_name_prefix="probe")
    return _alarms_by_name(Template.from_stack(stack).to_json())


def test_each_model_gets_its_alarms(alarms: dict[str, dict[str, Any]]) -> None:
    assert sorted(alarms) == sorted(
        [f"probe-model-{m}-{a}" for m in ("mistral-7b", "qwen3-sg") for a in
         ("error-rate", "latency", "time-to-first-token", "model-failed", "deployment-time-exceeded")]
        + ["probe-model-llama3-8b-model-failed", "probe-model-llama3-8b-deployment-time-exceeded"])
    for props in alarms.values():
        assert props["AlarmActions"] and props["OKActions"] and props["TreatMissingData"] == "notBreaching"


def test_the_alarms_metric_math(alarms: dict[str, dict[str, Any]]) -> None:
    error = alarms["probe-model-mistral-7b-error-rate"]
    expression = next(m["Expression"] for m in error["Metrics"] if "Expression" in m)
    assert expression == ("IF(requests_mistral_7b >= 10, 100 * FILL(failed_mistral_7b, 0) / requests_mistral_7b, "
                          "0)")
    inputs = {m["Id"]: m["MetricStat"]["Metric"] for m in error["Metrics"] if "MetricStat" in m}
    assert inputs["failed_mistral_7b"]["MetricName"] == "vllm:request_success_total"
    assert {"Name": "finished_reason", "Value": "abort"} in inputs["failed_mistral_7b"]["Dimensions"]
    assert (error["Threshold"], error["EvaluationPeriods"], error["DatapointsToAlarm"]) == (5, 3, 2)
    latency = alarms["probe-model-qwen3-sg-latency"]
    inputs = {m["Id"]: m["MetricStat"]["Metric"]["MetricName"] for m in latency["Metrics"] if "MetricStat" in m}
    assert inputs == {"total_qwen3_sg": "sglang:e2e_request_latency_seconds_sum",
                      "count_qwen3_sg": "sglang:e2e_request_latency_seconds_count"}
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
])
def test_props_are_validated(props: dict[str, Any], code: str) -> None:
    stack, cluster = _cluster_stack()
    with pytest.raises(ConfigError) as raised:
        ModelServingMetrics(stack, "ModelMetrics", cluster=cluster, namespace="inference", alarm_name_prefix="p",
                            **props)
    assert code in str(raised.value)
