"""Every construct that takes a fixed role name applies IAM's one rule (patterns.IAM_ROLE_NAME)."""

from __future__ import annotations

import pytest

from hyperpod_inference_iac.github_deploy_role import check_github_deploy_role
from hyperpod_inference_iac.patterns import IAM_ROLE_NAME
from hyperpod_inference_iac.sidecar_metrics import check_capture_sidecar_metrics
from hyperpod_inference_iac.validation import Problems
from hyperpod_inference_iac.workload_identity import check_workload_identity


@pytest.mark.parametrize(("name", "valid"), [
    ("llm-platform-capture-metrics-agent", True), ("ops+metrics=a,b.c@team_1", True), ("r" * 64, True),
    ("r" * 65, False), ("", False), ("a role", False), ("rôle", False), ("a/b", False),
])
def test_the_rule_is_iams(name: str, valid: bool) -> None:
    assert bool(IAM_ROLE_NAME.match(name)) is valid


@pytest.mark.parametrize("name", ["ops+metrics=a,b.c@team_1", "rôle", "a role"])
def test_every_construct_judges_a_role_name_alike(name: str) -> None:
    verdicts = set()
    for check in (
        lambda p: check_workload_identity(p, namespace="inference", service_account="sa", role_name=name),
        lambda p: check_capture_sidecar_metrics(p, cluster_name=None, namespace=None, role_name=name,
                                                alarm_name_prefix="p"),
        lambda p: check_github_deploy_role(p, owner="octo", repository="repo", environment="production",
                                           role_name=name),
    ):
        problems = Problems()
        check(problems)
        verdicts.add(any(problem.code.endswith(".BadRoleName") for problem in problems))
    assert verdicts == {not IAM_ROLE_NAME.match(name)}
