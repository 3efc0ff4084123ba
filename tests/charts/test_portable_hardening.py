"""The portable server cannot be reached around its capture sidecar, publishes TLS only to the allowed
sources, authenticates requests when asked, and runs with the least the runtimes allow."""

from __future__ import annotations

import dataclasses
import ipaddress
import json
from typing import Any

import cdk8s
import pytest

from hyperpod_inference_iac.charts import (
    PRESETS,
    ModelServerRuntime,
    PlatformContext,
    PortableApiKey,
    PortableModelServerChart,
    plan_workloads,
)
from hyperpod_inference_iac.charts.pod_security import POD_SECURITY_EXCEPTION_ANNOTATION
from hyperpod_inference_iac.charts.portable import SIDECAR_FIXED_MEMORY_MIB, sidecar_inflight_body_bytes
from hyperpod_inference_iac.charts.render import render_workloads
from hyperpod_inference_iac.foundation.platform_values import PlatformValue, PlatformValues
from tests.charts import samples

RUNTIMES = [runtime.value for runtime in ModelServerRuntime]


def _manifests(server: Any, values: PlatformValues = samples.VALUES, **chart: Any) -> list[dict[str, Any]]:
    app = cdk8s.Testing.app()
    chart_ = PortableModelServerChart(app, "portable", workload=samples.planned_portable(server),
                                      namespace=samples.NAMESPACE, values=values, **chart)
    return cdk8s.Testing.synth(chart_)


def _one(manifests: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (found,) = [m for m in manifests if m["kind"] == kind and (name is None or m["metadata"]["name"] == name)]
    return found


def _pod(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    return _one(manifests, "Deployment")["spec"]["template"]["spec"]


def _container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in [*pod["containers"], *pod.get("initContainers", [])] if c["name"] == name)


def _capturing(runtime: str, **changes: Any) -> Any:
    return samples.portable_server(runtime=runtime, **changes)


def _plain(runtime: str, **changes: Any) -> Any:
    return samples.portable_server(runtime=runtime, data_capture=None, **changes)


# -- 1. capture cannot be bypassed -----------------------------------------------------------------------
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_with_capture_the_model_server_listens_on_loopback_only(runtime: str) -> None:
    args = _container(_pod(_manifests(_capturing(runtime))), "model-server")["args"]
    host_flag = PRESETS[ModelServerRuntime(runtime)].host_flag
    assert args[args.index(host_flag) + 1] == "127.0.0.1"
    assert {"vllm": "--host", "tgi": "--hostname", "sglang": "--host"}[runtime] == host_flag


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_without_capture_the_model_server_listens_on_the_pod_address(runtime: str) -> None:
    args = _container(_pod(_manifests(_plain(runtime))), "model-server")["args"]
    assert args[args.index(PRESETS[ModelServerRuntime(runtime)].host_flag) + 1] == "0.0.0.0"


def _probes(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {kind: container[f"{kind}Probe"] for kind in ("startup", "readiness", "liveness")}


def test_with_capture_the_probes_ask_the_sidecar_and_keep_the_30_minute_start_budget() -> None:
    probes = _probes(_container(_pod(_manifests(_capturing("vllm"))), "model-server"))
    for probe in probes.values():
        assert probe["httpGet"] == {"path": "/upstream/health", "port": 9090, "scheme": "HTTP"}
        assert probe["timeoutSeconds"] > 2  # longer than the sidecar's own check (UPSTREAM_HEALTH_TIMEOUT_SECONDS)
    startup = probes["startup"]
    assert startup["periodSeconds"] * startup["failureThreshold"] == 30 * 60


def test_without_capture_the_probes_go_to_the_model_server() -> None:
    for probe in _probes(_container(_pod(_manifests(_plain("tgi"))), "model-server")).values():
        assert probe["httpGet"]["path"] == "/health" and probe["httpGet"]["port"] == 8000


def _admits(policy: dict[str, Any], source_ip: str, port: int) -> bool:
    """Whether a NetworkPolicy of Ingress type admits TCP from ``source_ip`` to ``port`` (the rule kinds it uses)."""
    for rule in policy["spec"].get("ingress", []):
        ports = [p["port"] for p in rule.get("ports", [])]
        sources = [ipaddress.ip_network(peer["ipBlock"]["cidr"]) for peer in rule.get("from", [])]
        port_ok = not ports or port in ports
        source_ok = not sources or any(ipaddress.ip_address(source_ip) in net for net in sources)
        if port_ok and source_ok:
            return True
    return False


def test_with_capture_the_network_policy_admits_the_sidecar_never_the_model_port() -> None:
    manifests = _manifests(_capturing("vllm"))
    policy = _one(manifests, "NetworkPolicy")
    pod_labels = _one(manifests, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()  # selects the server's pods
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    anywhere, in_vpc = "192.168.7.7", "10.0.3.4"
    assert _admits(policy, anywhere, 8080) and _admits(policy, in_vpc, 8080)
    assert _admits(policy, in_vpc, 9090) and not _admits(policy, anywhere, 9090)
    assert not _admits(policy, in_vpc, 8000) and not _admits(policy, anywhere, 8000)
    assert not _admits(policy, in_vpc, 22)


@pytest.mark.parametrize("capture", [True, False])
def test_the_pods_may_send_only_https_outside_the_vpc(capture: bool) -> None:
    """S3 and STS for the loader and the sidecar; never another pod or node, the metadata service or plain HTTP (the
    namespace's own policies add DNS)."""
    policy = _one(_manifests(_capturing("vllm") if capture else _plain("vllm")), "NetworkPolicy")
    assert _sends(policy, "52.216.8.1", 443)  # S3
    assert not _sends(policy, "52.216.8.1", 80)
    assert not _sends(policy, "10.0.3.4", 443)  # a pod or node of the VPC
    assert not _sends(policy, "169.254.169.254", 80) and not _sends(policy, "169.254.169.254", 443)  # IMDS


def _sends(policy: dict[str, Any], destination_ip: str, port: int) -> bool:
    """Whether a NetworkPolicy of Egress type lets TCP go to ``destination_ip``:``port`` (ipBlock rules)."""
    address = ipaddress.ip_address(destination_ip)
    for rule in policy["spec"].get("egress", []):
        ports = [p["port"] for p in rule.get("ports", [])]
        blocks = [peer["ipBlock"] for peer in rule.get("to", []) if "ipBlock" in peer]
        in_block = any(address in ipaddress.ip_network(block["cidr"])
                       and not any(address in ipaddress.ip_network(x) for x in block.get("except", []))
                       for block in blocks)
        if (not ports or port in ports) and (not rule.get("to") or in_block):
            return True
    return False


def test_without_capture_the_network_policy_admits_only_the_model_port() -> None:
    policy = _one(_manifests(_plain("sglang")), "NetworkPolicy")
    assert _admits(policy, "192.168.7.7", 8000)
    assert not _admits(policy, "10.0.3.4", 8080) and not _admits(policy, "10.0.3.4", 9090)


# -- 2. TLS on the load balancer, metrics in the cluster -------------------------------------------------------
def test_a_hostname_gets_a_tls_only_nlb_on_the_platform_certificate_open_to_the_vpc() -> None:
    manifests = _manifests(_capturing("vllm"))
    service = _one(manifests, "Service", "qwen3-8b")
    annotations = service["metadata"]["annotations"]
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-ssl-cert"] == samples.CERTIFICATE_ARN
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-ssl-ports"] == "443"
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-ssl-negotiation-policy"] == (
        "ELBSecurityPolicy-TLS13-1-2-2021-06")
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-scheme"] == "internal"
    assert service["spec"]["ports"] == [{"name": "https", "port": 443, "targetPort": 8080}]  # no plain port
    assert service["spec"]["loadBalancerSourceRanges"] == [samples.VPC_CIDR]
    assert service["spec"]["allocateLoadBalancerNodePorts"] is False  # no plain node port on every node
    metrics = _one(manifests, "Service", "qwen3-8b-metrics")
    assert metrics["spec"]["type"] == "ClusterIP"
    assert metrics["spec"]["ports"] == [{"name": "metrics", "port": 9090, "targetPort": 9090}]
    assert metrics["spec"]["selector"] == service["spec"]["selector"]


def test_allowed_source_ranges_replace_the_vpc_default() -> None:
    server = _capturing("vllm", allowed_source_ranges=("10.0.8.0/24", "fd00:1::/64"))
    service = _one(_manifests(server), "Service", "qwen3-8b")
    assert service["spec"]["loadBalancerSourceRanges"] == ["10.0.8.0/24", "fd00:1::/64"]


def test_without_a_hostname_the_service_stays_plain_http_in_the_cluster() -> None:
    manifests = _manifests(_capturing("vllm", hostname=None))
    service = _one(manifests, "Service", "qwen3-8b")
    assert service["spec"]["type"] == "ClusterIP" and "annotations" not in service["metadata"]
    assert service["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": 8080}]
    assert "loadBalancerSourceRanges" not in service["spec"]


def test_a_certificate_known_only_after_a_deploy_makes_the_chart_wait() -> None:
    context = samples.context()
    plan = plan_workloads(context, portable=[_capturing("vllm")])
    values = PlatformValues({PlatformValue.SIDECAR_IMAGE: "registry.invalid/sidecar:1"})
    rendered = render_workloads(cdk8s.Testing.app(), plan, values)
    assert rendered.waiting["portable-qwen3-8b"].missing == (PlatformValue.CERTIFICATE_ARN,)
    assert rendered.charts == {}


# -- 3. request authentication -----------------------------------------------------------------------------------
def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container.get("env", [])}


SECRET_REF = {"secretKeyRef": {"name": "qwen3-8b-api-key", "key": "api-key"}}


@pytest.mark.parametrize(("runtime", "variable", "args"), [
    ("vllm", "VLLM_API_KEY", []),
    ("tgi", "API_KEY", []),  # text-generation-launcher --api-key [env: API_KEY]
    ("sglang", "API_KEY", ["--api-key", "$(API_KEY)"]),  # a flag only: Kubernetes expands the variable
])
def test_without_capture_the_api_key_reaches_each_runtime_by_secret_reference(
        runtime: str, variable: str, args: list[str]) -> None:
    pod = _pod(_manifests(_plain(runtime, api_key=PortableApiKey())))
    server = _container(pod, "model-server")
    assert _env(server)[variable] == SECRET_REF
    if args:
        assert server["args"][-2:] == args
    else:
        assert "--api-key" not in server["args"]


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_with_capture_the_sidecar_checks_the_keys_from_a_file_it_re_reads(runtime: str) -> None:
    """The sidecar reads the synced Secret's list of accepted keys (current, pending, previous) from a whole-Secret
    volume, which the kubelet updates in place, so a rotated key needs no restart. The model server, on loopback
    behind it, gets no key: it would refuse a rotated one until restarted."""
    pod = _pod(_manifests(_capturing(runtime, api_key=PortableApiKey())))
    server = _container(pod, "model-server")
    assert not any("API_KEY" in name for name in _env(server)) and "--api-key" not in server["args"]
    assert "--host" in server["args"] or "--hostname" in server["args"]
    assert "127.0.0.1" in server["args"]  # reachable through the sidecar only
    sidecar = _container(pod, "capture-sidecar")
    env = _env(sidecar)
    assert "API_KEY" not in env and env["API_KEYS_FILE"] == "/etc/capture-sidecar/api-keys/api-keys"
    (mount,) = [m for m in sidecar["volumeMounts"] if m["mountPath"] == "/etc/capture-sidecar/api-keys"]
    assert mount["readOnly"] is True and "subPath" not in mount  # a subPath mount is never updated
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"] == {"secretName": "qwen3-8b-api-key", "defaultMode": 0o444,
                                "items": [{"key": "api-keys", "path": "api-keys"}]}
    assert not any(m["name"] == mount["name"] for m in server.get("volumeMounts", []))


def test_without_an_api_key_nothing_names_one() -> None:
    text = json.dumps(_manifests(_capturing("sglang")))
    assert "api-key" not in text and "API_KEY" not in text


# -- 4. the sidecar's memory bounds -------------------------------------------------------------------------------
def test_the_sidecar_bounds_follow_its_memory_limit_and_the_body_cap_is_per_server() -> None:
    pod = _pod(_manifests(_capturing("vllm", max_request_body_kb=16384)))
    sidecar = _container(pod, "capture-sidecar")
    limit_mib = int(sidecar["resources"]["limits"]["memory"].removesuffix("Mi"))
    env = _env(sidecar)
    inflight = int(env["MAX_INFLIGHT_BODY_BYTES"])
    assert limit_mib == 512
    assert inflight == sidecar_inflight_body_bytes(limit_mib) == 88 * 1024 * 1024
    assert SIDECAR_FIXED_MEMORY_MIB * 1024 * 1024 + inflight < limit_mib * 1024 * 1024 * 0.85  # headroom
    assert env["MAX_REQUEST_BODY_BYTES"] == str(16 * 1024 * 1024)


# -- 5. pod hardening ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_every_container_is_confined_and_only_the_model_server_and_loader_run_as_root(runtime: str) -> None:
    manifests = _manifests(_capturing(runtime))
    pod = _pod(manifests)
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    assert _one(manifests, "ServiceAccount")["automountServiceAccountToken"] is False
    for container in [*pod["containers"], *pod["initContainers"]]:
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False and context["capabilities"] == {"drop": ["ALL"]}
        assert context["readOnlyRootFilesystem"] is True, container["name"]
        as_root = container["name"] in ("model-server", "nvme-weights-loader")
        assert context["runAsNonRoot"] is (not as_root), container["name"]
    sidecar = _container(pod, "capture-sidecar")["securityContext"]
    assert (sidecar["runAsUser"], sidecar["runAsGroup"]) == (65532, 65532)


def test_the_model_server_writes_only_to_its_bounded_tmp_and_home() -> None:
    pod = _pod(_manifests(_capturing("tgi")))
    server = _container(pod, "model-server")
    writable = {m["mountPath"]: m["name"] for m in server["volumeMounts"] if not m.get("readOnly")}
    assert writable == {"/dev/shm": "shm", "/tmp": "model-server-tmp", "/home/model-server": "model-server-home"}
    env = _env(server)
    assert env["HOME"] == "/home/model-server"
    assert env["HF_HOME"].startswith("/home/model-server/")  # TGI's image points it at /data
    sizes = {v["name"]: v["emptyDir"].get("sizeLimit") for v in pod["volumes"] if "emptyDir" in v}
    assert sizes["model-server-tmp"] and sizes["model-server-home"]


def test_a_read_only_root_filesystem_can_be_turned_off_for_an_image_that_needs_it() -> None:
    pod = _pod(_manifests(_capturing("vllm", read_only_root_filesystem=False)))
    assert _container(pod, "model-server")["securityContext"]["readOnlyRootFilesystem"] is False


def test_the_namespace_carries_the_pod_security_levels_and_names_the_exception() -> None:
    namespace = _one(_manifests(_capturing("vllm"), create_namespace=True), "Namespace")
    assert namespace["metadata"]["labels"] == {
        "pod-security.kubernetes.io/enforce": "privileged",  # hostPath (NVMe cache) is forbidden by baseline
        "pod-security.kubernetes.io/warn": "restricted",
        "pod-security.kubernetes.io/audit": "restricted",
        # baseline's other rules and the cache's own, enforced by admission: every pod here is the chart's own
        "hyperpod-inference-iac/host-path-policy": "deny",
    }
    assert "hostPath" in namespace["metadata"]["annotations"][POD_SECURITY_EXCEPTION_ANNOTATION]


def test_the_rendered_namespace_has_the_levels_and_the_caller_s_labels() -> None:
    context: PlatformContext = samples.context()
    plan = plan_workloads(context, portable=[dataclasses.replace(_plain("vllm"), hostname=None)])
    rendered = render_workloads(cdk8s.Testing.app(), plan, samples.VALUES,
                                namespace_labels={"app.kubernetes.io/managed-by": "platform"})
    namespace, *policies = cdk8s.Testing.synth(rendered.namespace)
    assert [p["metadata"]["name"] for p in policies] == [
        "default-deny", "allow-dns", "hyperpod-inference-iac-host-path", "hyperpod-inference-iac-host-path-deny",
        "hyperpod-inference-iac-host-path-warn", "hyperpod-inference-iac-token-audiences",
        "hyperpod-inference-iac-token-audiences-deny"]
    labels = namespace["metadata"]["labels"]
    assert labels["hyperpod-inference-iac/host-path-policy"] == "deny"  # only the platform's own pods here
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels["pod-security.kubernetes.io/audit"] == "restricted"
    assert labels["app.kubernetes.io/managed-by"] == "platform"
