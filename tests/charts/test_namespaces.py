"""One namespace per workload or team, as an option: each namespace gets the Pod Security level and the policies its
own pods need, each workload's roles trust its own namespace, and what the platform keeps in its own namespace (the
synced Hugging Face token) is not silently assumed elsewhere."""

from __future__ import annotations

from typing import Any

import pytest

from hyperpod_inference_iac.charts import ModelDeployment, PortableDeployment, plan_workloads
from hyperpod_inference_iac.charts.inference_chart import parse_models
from hyperpod_inference_iac.charts.pod_security import HOST_PATH_POLICY_LABEL
from hyperpod_inference_iac.charts.portable import capture_prefix_hash
from hyperpod_inference_iac.charts.render import namespace_objects
from hyperpod_inference_iac.foundation.validation import ConfigError, Problems
from tests.charts import samples


def _plan(*, model_namespace: str | None = None, portable: list[Any] | None = None, entries: int = 1) -> Any:
    problems = Problems()
    models = [ModelDeployment(model, path=path, namespace=model_namespace)
              for path, model in parse_models(samples.model_entries()[:entries], problems=problems)]
    servers = portable if portable is not None else [samples.portable_server(namespace="team-a")]
    plan = plan_workloads(samples.context(), models=models, problems=problems,
                          portable=[PortableDeployment(s, path=f"portable[{i}]") for i, s in enumerate(servers)])
    problems.raise_if_any()
    return plan


def _labels(objects: list[dict[str, Any]], namespace: str) -> dict[str, str]:
    (found,) = [o for o in objects if o["kind"] == "Namespace" and o["metadata"]["name"] == namespace]
    return found["metadata"]["labels"]


def test_a_portable_server_in_its_own_namespace_is_held_to_deny() -> None:
    plan = _plan()
    assert plan.namespaces == (samples.NAMESPACE, "team-a")
    objects = namespace_objects(plan)
    # The host-path policy denies in both: where the operator makes pods (the platform's namespace) too.
    assert _labels(objects, samples.NAMESPACE)[HOST_PATH_POLICY_LABEL] == "deny"
    assert _labels(objects, "team-a")[HOST_PATH_POLICY_LABEL] == "deny"
    policies = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objects if o["kind"] == "NetworkPolicy"}
    assert {("team-a", "default-deny"), ("team-a", "allow-dns"), (samples.NAMESPACE, "default-deny"),
            (samples.NAMESPACE, "operator-workloads")} <= policies
    assert ("team-a", "operator-workloads") not in policies  # no operator pods there
    assert sum(o["kind"] == "ValidatingAdmissionPolicy" for o in objects) == 1  # one for the cluster


def test_a_workload_s_roles_trust_and_its_capture_prefix_follow_its_namespace() -> None:
    (server,) = _plan().portable
    assert server.namespace == "team-a"
    assert {i.namespace for i in server.identities} == {"team-a"}
    assert server.loader_identity.role_name == "test-qwen3-8b"
    assert server.capture.prefix.endswith(
        f"{capture_prefix_hash(cluster_name=samples.CLUSTER_NAME, namespace='team-a', name='qwen3-8b')}/pod/")


def test_names_are_unique_across_namespaces() -> None:
    """A name also names the workload's roles, its API key in Secrets Manager, its alarms and its chart."""
    with pytest.raises(ConfigError) as raised:
        _plan(portable=[samples.portable_server(), samples.portable_server(namespace="team-a", hostname=None)])
    assert ("Model.DuplicateName", "portable[1].name") in [(p.code, p.path) for p in raised.value.problems]


def test_a_model_that_reads_the_synced_token_must_run_where_it_is_synced() -> None:
    entries = [e for e in samples.model_entries() if "tokenSecretRef" in str(e)]
    problems = Problems()
    models = [ModelDeployment(m, path="models[0]", namespace="team-b")
              for _, m in parse_models(entries[:1], problems=problems)]
    plan_workloads(samples.context(), models=models, problems=problems)
    (problem,) = problems
    assert problem.code == "HuggingFace.TokenSecretNotSynced"
    assert f"syncs its Secrets into {samples.NAMESPACE} only" in problem.message


def test_a_model_namespace_is_checked_at_its_own_key() -> None:
    problems = Problems()
    models = [ModelDeployment(m, path=p, namespace="Team B")
              for p, m in parse_models(samples.model_entries()[:1], problems=problems)]
    plan_workloads(samples.context(), models=models, problems=problems)
    assert [(p.code, p.path) for p in problems] == [("Model.NamespaceInvalid", "models[0].namespace")]
