"""Every construct that takes a fixed role name applies IAM's one rule (patterns.IAM_ROLE_NAME)."""

from __future__ import annotations

import pytest

from hyperpod_inference_iac.foundation.patterns import IAM_ROLE_NAME
from hyperpod_inference_iac.foundation.validation import Problems
from hyperpod_inference_iac.observability.sidecar_metrics import check_capture_sidecar_metrics
from hyperpod_inference_iac.security.github_deploy_role import check_github_deploy_role
from hyperpod_inference_iac.security.workload_identity import check_workload_identity


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


def test_long_role_names_are_cut_with_a_hash_so_they_never_collide() -> None:
    from hyperpod_inference_iac.charts.plan import PlatformContext
    from hyperpod_inference_iac.foundation.patterns import iam_role_name

    assert iam_role_name("r" * 64) == "r" * 64  # what IAM takes stays as it is
    first, second = iam_role_name("p-" + "x" * 60 + "-one"), iam_role_name("p-" + "x" * 60 + "-two")
    assert first != second and len(first) == len(second) == 64 and IAM_ROLE_NAME.match(first)
    assert first == iam_role_name("p-" + "x" * 60 + "-one")  # the same on every synth
    # The two portable servers whose names share their first 51 characters that the review found: two roles.
    context = PlatformContext(
        cluster_name="c", namespace="inference", account="111122223333", role_name_prefix="llm-platform"
    )
    names = ["s" * 51 + "-a", "s" * 51 + "-b"]
    assert len({context.role_name(name) for name in names}) == 2
    assert all(len(context.role_name(name)) <= 64 for name in names)


def test_the_api_key_reader_role_and_the_operator_role_use_the_same_rule() -> None:
    import inspect

    from hyperpod_inference_iac.cluster import inference_operator
    from hyperpod_inference_iac.serving import api_keys

    for module in (api_keys, inference_operator):
        assert "[:64]" not in inspect.getsource(module), module.__name__
