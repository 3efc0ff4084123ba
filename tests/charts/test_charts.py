"""What the charts emit: snapshots for review, and the properties a reviewer must not miss."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import cdk8s
import pytest

from hyperpod_inference_iac.charts import (
    CaptureContentTypeHeader,
    DataCapture,
    InferenceChart,
    ModelPodCapture,
    SageMakerEndpointCapture,
    capture_environment,
    capture_prefix_hash,
    parse_models,
    plan_workloads,
)
from hyperpod_inference_iac.charts.autoscaling import AutoScalingSpec, CloudWatchTrigger
from hyperpod_inference_iac.charts.placement import preferred_instance_types
from hyperpod_inference_iac.charts.routing import routing_replacement_reasons
from hyperpod_inference_iac.foundation.scaling_metrics import PrometheusWorkspace, ScalingMetrics
from hyperpod_inference_iac.foundation.validation import Problems
from tests.charts import samples


def _of_kind(manifests: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [m for m in manifests if m["kind"] == kind]


def test_inference_chart_snapshot(inference_manifests: list[dict[str, Any]], snapshot: Any) -> None:
    assert inference_manifests == snapshot


@pytest.mark.parametrize("runtime", ["vllm", "tgi", "sglang"])
def test_portable_chart_snapshot(
    portable_manifests: dict[str, list[dict[str, Any]]], runtime: str, snapshot: Any
) -> None:
    assert portable_manifests[runtime] == snapshot


def test_yaml_entries_come_out_as_the_same_crd_spec() -> None:
    """The config's camelCase shape is the CRD's: nothing renamed, dropped or defaulted."""
    entries = samples.model_entries()
    problems = Problems()
    models = [workload for _, workload in parse_models(entries, problems=problems)]
    assert not problems
    for entry, model in zip(entries[1:], models[1:], strict=True):  # models[0] expands its nvmeCache
        assert model.manifest(namespace=samples.NAMESPACE)["spec"] == entry["spec"]


def test_workload_service_account_is_user_assignable_and_bound_to_its_role(
    inference_manifests: list[dict[str, Any]],
) -> None:
    (account,) = _of_kind(inference_manifests, "ServiceAccount")
    assert account["metadata"] == {
        "name": "qwen3-8b-inference",
        "namespace": samples.NAMESPACE,
        "labels": {"sagemaker.amazonaws.com/user-assignable": "true"},
        "annotations": {"eks.amazonaws.com/role-arn": samples.SERVICE_ACCOUNTS[0].role_arn},
    }
    # A model server never calls the Kubernetes API: no API token mounted into the operator's model pods.
    assert account["automountServiceAccountToken"] is False


def test_nvme_cache_becomes_a_host_path_volume_and_a_fallback_under_the_workload_identity(
    inference_manifests: list[dict[str, Any]],
) -> None:
    spec = _of_kind(inference_manifests, "InferenceEndpointConfig")[0]["spec"]
    assert spec["modelSourceConfig"] == {"modelSourceType": "kubernetesVolume"}
    assert spec["kubernetes"]["volumes"] == [
        {"name": "model-weights", "hostPath": {"path": "/opt/dlami/nvme/qwen3-8b", "type": "DirectoryOrCreate"}},
        {"name": "nvme-loader-tmp", "emptyDir": {"sizeLimit": "256Mi"}},  # the loader's /tmp: read-only root
    ]
    (loader,) = spec["kubernetes"]["initContainers"]
    assert loader["image"].startswith("public.ecr.aws/aws-cli/aws-cli:2.")
    assert {"name": "MODEL_SOURCE_S3_URI", "value": "s3://example-model-weights/qwen3-8b/"} in loader["env"]
    assert spec["kubernetes"]["serviceAccountName"] == "qwen3-8b-inference"
    assert spec["worker"]["modelVolumeMount"] == {"name": "model-weights"}  # mountPath: CRD default


def test_capture_destination_and_key_go_where_they_belong() -> None:
    policy = DataCapture(
        sagemaker_endpoint=SageMakerEndpointCapture(),
        model_pod=ModelPodCapture(kms_key_id="alias/already-chosen"),
    )
    wired = policy.with_destination(bucket_name="captures", prefix="/team-a/", kms_key_arn=samples.KMS_KEY_ARN)
    assert wired.s3_uri == "s3://captures/team-a"
    assert wired.sagemaker_endpoint is not None and wired.sagemaker_endpoint.kms_key_id == samples.KMS_KEY_ARN
    assert wired.model_pod is not None and wired.model_pod.kms_key_id == "alias/already-chosen"


def test_extra_spec_and_json_patch_reach_the_emitted_resource() -> None:
    problems = Problems()
    ((_, model),) = parse_models(
        [{**samples.model_entries()[2], "extraSpec": {"kubernetes": {"schedulerName": "volcano"}, "replicas": 3}}],
        problems=problems,
    )
    assert not problems
    chart = InferenceChart(cdk8s.Testing.app(), "escape-hatches", namespace=samples.NAMESPACE, models=[model])
    chart.resources["llama-s3"].add_json_patch(cdk8s.JsonPatch.add("/spec/maxDeployTimeInSeconds", 1800))
    (resource,) = cdk8s.Testing.synth(chart)
    assert resource["spec"]["kubernetes"] == {"schedulerName": "volcano"}
    assert resource["spec"]["replicas"] == 3
    assert resource["spec"]["maxDeployTimeInSeconds"] == 1800
    assert resource["spec"]["modelName"] == "llama-s3"


def test_capture_prefix_hash_is_the_documented_sha256_prefix() -> None:
    expected = hashlib.sha256(b"gpu-cluster/inference/Deployment/qwen3-8b").hexdigest()[:16]
    assert capture_prefix_hash(cluster_name="gpu-cluster", namespace="inference", name="qwen3-8b") == expected
    assert capture_prefix_hash(cluster_name="gpu-cluster", namespace="other", name="qwen3-8b") != expected


def _deployment_pod(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = _of_kind(manifests, "Deployment")
    return deployment["spec"]["template"]["spec"]


def test_portable_sidecar_writes_the_tier3_layout_with_the_operator_knobs(
    portable_manifests: dict[str, list[dict[str, Any]]],
) -> None:
    pod = _deployment_pod(portable_manifests["vllm"])
    (sidecar,) = [c for c in pod["initContainers"] if c["name"] == "capture-sidecar"]
    env = {item["name"]: item["value"] for item in sidecar["env"]}
    prefix_hash = capture_prefix_hash(cluster_name=samples.CLUSTER_NAME, namespace=samples.NAMESPACE, name="qwen3-8b")
    assert env == {
        "UPSTREAM_URL": "http://127.0.0.1:8000",
        "UPSTREAM_HEALTH_PATH": "/health",  # the preset's, asked by GET /upstream/health for the probes
        "UPSTREAM_HEALTH_TIMEOUT_SECONDS": "2",
        "LISTEN_PORT": "8080",
        "METRICS_PORT": "9090",
        "CAPTURE_S3_URI": f"s3://example-capture/portable/{prefix_hash}/pod/",
        "SAMPLING_PERCENTAGE": "10",
        "CAPTURE_MODES": "Input,Output",
        "BATCH_SIZE": "10",
        "FLUSH_INTERVAL_SECONDS": "60",
        "MAX_PAYLOAD_SIZE_KB": "0",
        "KMS_KEY_ID": samples.KMS_KEY_ARN,
        "MAX_INFLIGHT_BODY_BYTES": str(88 * 1024 * 1024),  # from the 512Mi limit (test_portable_hardening.py)
        "MAX_REQUEST_BODY_BYTES": str(8 * 1024 * 1024),
        "SPOOL_DIR": "/tmp/capture-spool",  # on the pod's scratch volume, mounted at /tmp
        "SPOOL_MAX_BYTES": "268435456",
        "MODEL_NAME": "qwen3-8b",  # the served model name: the `model` label the per-model alarms select
        # Its own role and token (charts/pod_credentials.py), nobody else's.
        "AWS_ROLE_ARN": f"arn:aws:iam::{samples.ACCOUNT}:role/test-qwen3-8b-capture",
        "AWS_WEB_IDENTITY_TOKEN_FILE": "/var/run/secrets/hyperpod-inference-iac/capture-sidecar/token",
        "AWS_STS_REGIONAL_ENDPOINTS": "regional",
        "AWS_REGION": samples.REGION,
        "AWS_DEFAULT_REGION": samples.REGION,
    }
    assert sidecar["restartPolicy"] == "Always"  # native sidecar: outlives the model server on shutdown
    context = sidecar["securityContext"]
    assert context["runAsNonRoot"] is True and context["readOnlyRootFilesystem"] is True
    assert context["capabilities"] == {"drop": ["ALL"]}


def test_sidecar_content_types_follow_the_capture_policy_when_set() -> None:
    header = CaptureContentTypeHeader(json_content_types=("application/json", "application/x-ndjson"))
    env = capture_environment(ModelPodCapture(capture_content_type_header=header), "s3://bucket/p/0123/pod/", None)
    assert env["JSON_CONTENT_TYPES"] == "application/json,application/x-ndjson"
    assert "CSV_CONTENT_TYPES" not in env


def test_portable_service_sends_traffic_through_the_sidecar_only_when_capturing(
    portable_manifests: dict[str, list[dict[str, Any]]],
) -> None:
    capturing = next(m for m in _of_kind(portable_manifests["vllm"], "Service") if m["metadata"]["name"] == "qwen3-8b")
    (plain,) = _of_kind(portable_manifests["tgi"], "Service")
    assert capturing["spec"]["ports"] == [{"name": "https", "port": 443, "targetPort": 8080}]
    assert capturing["metadata"]["annotations"]["external-dns.alpha.kubernetes.io/hostname"] == (
        "qwen3-8b.portable.example.com"
    )
    assert plain["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": 8000}]


def test_portable_model_server_gets_its_gpus_toleration_and_graceful_shutdown(
    portable_manifests: dict[str, list[dict[str, Any]]],
) -> None:
    pod = _deployment_pod(portable_manifests["vllm"])
    (server,) = pod["containers"]
    assert server["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert server["resources"]["requests"]["nvidia.com/gpu"] == "2"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert server["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "15"]
    assert pod["terminationGracePeriodSeconds"] == 120
    assert {
        "name": "model-weights",
        "hostPath": {"path": "/mnt/k8s-disks/0/models/qwen3-8b", "type": "DirectoryOrCreate"},
    } in pod["volumes"]
    assert pod["initContainers"][0]["name"] == "nvme-weights-loader"


def test_only_the_loader_and_the_sidecar_hold_credentials_each_its_own(
    portable_manifests: dict[str, list[dict[str, Any]]],
) -> None:
    """The service account carries no role (the EKS webhook would give it to every container); the loader and the
    sidecar each mount a token of their own audience and name their own role; the model server has neither."""
    (account,) = _of_kind(portable_manifests["vllm"], "ServiceAccount")
    assert "annotations" not in account["metadata"]
    pod = _deployment_pod(portable_manifests["vllm"])
    assert pod["serviceAccountName"] == account["metadata"]["name"] and pod["automountServiceAccountToken"] is False
    workload = samples.planned_portable(samples.portable_server())
    assert workload.loader_identity.role_arn == f"arn:aws:iam::{samples.ACCOUNT}:role/test-qwen3-8b"
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    holders = {}
    for container in [*pod["initContainers"], *pod["containers"]]:
        env = {item["name"]: item.get("value") for item in container.get("env", [])}
        tokens = [m for m in container.get("volumeMounts", []) if "projected" in volumes[m["name"]]]
        if "AWS_ROLE_ARN" not in env:
            assert not tokens and not any(name.startswith("AWS_") for name in env), container["name"]
            continue
        (mount,) = tokens
        source = volumes[mount["name"]]["projected"]["sources"][0]["serviceAccountToken"]
        assert env["AWS_WEB_IDENTITY_TOKEN_FILE"] == f"{mount['mountPath']}/{source['path']}"
        assert mount["readOnly"] is True
        holders[container["name"]] = (env["AWS_ROLE_ARN"], source["audience"])
    assert holders == {
        "nvme-weights-loader": (workload.loader_identity.role_arn, "hyperpod-inference-iac/weights-loader"),
        "capture-sidecar": (workload.capture_identity.role_arn, "hyperpod-inference-iac/capture-sidecar"),
    }
    assert workload.capture_identity.role_arn != workload.loader_identity.role_arn


def test_manifests_hold_no_unresolved_tokens(
    inference_manifests: list[dict[str, Any]], portable_manifests: dict[str, list[dict[str, Any]]]
) -> None:
    assert "${Token[" not in json.dumps([inference_manifests, portable_manifests])


@pytest.mark.parametrize(("before", "after", "expected"), [
    ({}, {}, 0),
    ({"intelligentRoutingSpec": {"enabled": True}}, {"intelligentRoutingSpec": {"enabled": True}}, 0),
    ({}, {"intelligentRoutingSpec": {"enabled": True}}, 1),
    ({"intelligentRoutingSpec": {"enabled": True}}, {}, 1),
    ({"intelligentRoutingSpec": {"enabled": True}}, {"intelligentRoutingSpec": {"enabled": False}}, 1),
    ({"intelligentRoutingSpec": {"enabled": True, "autoScalingSpec": {"maxReplicaCount": 2}}},
     {"intelligentRoutingSpec": {"enabled": True, "autoScalingSpec": {"maxReplicaCount": 3}}}, 0),
])
def test_intelligent_routing_changes_that_need_a_new_resource(before: dict[str, Any], after: dict[str, Any],
                                                              expected: int) -> None:
    assert len(routing_replacement_reasons(before, after)) == expected


def test_preferred_instance_types_is_the_operators_fallback_as_node_affinity() -> None:
    affinity = preferred_instance_types(
        ["ml.g6e.12xlarge", "ml.g5.12xlarge"],
        extra_required=[{"key": "karpenter.sh/capacity-type", "operator": "NotIn", "values": ["spot"]}])
    (term,) = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"][0] == {"key": "node.kubernetes.io/instance-type", "operator": "In",
                                           "values": ["ml.g6e.12xlarge", "ml.g5.12xlarge"]}
    assert term["matchExpressions"][1]["key"] == "karpenter.sh/capacity-type"
    preferred = affinity["preferredDuringSchedulingIgnoredDuringExecution"]
    assert [(p["weight"], p["preference"]["matchExpressions"][0]["values"]) for p in preferred] == [
        (100, ["ml.g6e.12xlarge"]), (99, ["ml.g5.12xlarge"])]
    model = samples_model(2)
    placed = dataclasses.replace(model, spec=dataclasses.replace(model.spec, node_affinity=affinity))
    problems = Problems()
    plan_workloads(samples.context(), models=[placed], problems=problems)
    assert not problems, problems


@pytest.mark.parametrize("trigger", [
    CloudWatchTrigger.sagemaker_invocations(endpoint_name="qwen3-8b", target_value=30),
    CloudWatchTrigger.alb_request_count(load_balancer="app/k8s-inference-qwen/0123456789abcdef", target_value=100),
])
def test_the_documented_triggers_pass_every_rule_and_the_crd(trigger: CloudWatchTrigger) -> None:
    model = samples_model(0)
    scaling = AutoScalingSpec(min_replica_count=0, max_replica_count=2, cloud_watch_trigger_list=(trigger,))
    scaled = dataclasses.replace(model, spec=dataclasses.replace(model.spec, auto_scaling_spec=scaling, replicas=1))
    problems = Problems()
    plan = plan_workloads(samples.context(), models=[scaled], problems=problems)
    assert not problems, problems
    assert plan.scaling_metrics == ScalingMetrics(cloudwatch=True)


def test_the_plan_says_what_keda_reads_and_who_needs_the_gated_model_role() -> None:
    entries = samples.model_entries()
    entries[4]["gated"] = True
    problems = Problems()
    models = [workload for _, workload in parse_models(entries, problems=problems)]
    plan = plan_workloads(samples.context(), models=models, problems=problems)
    assert not problems, problems
    workspace = PrometheusWorkspace("us-east-1", "ws-0123abcd-4567-89ef-0123-456789abcdef")
    assert plan.scaling_metrics == ScalingMetrics(cloudwatch=True, prometheus_workspaces=(workspace,))
    assert plan.gated_model_namespaces == (samples.NAMESPACE,)
    entries[4]["spec"]["model"]["gatedModelDownloadRole"] = f"arn:aws:iam::{samples.ACCOUNT}:role/own-gated-role"
    models = [workload for _, workload in parse_models(entries, problems=problems)]
    assert plan_workloads(samples.context(), models=models, problems=problems).gated_model_namespaces == ()


def samples_model(index: int) -> Any:
    problems = Problems()
    models = [workload for _, workload in parse_models(samples.model_entries(), problems=problems)]
    problems.raise_if_any()
    return models[index]
