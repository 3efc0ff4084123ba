"""The CI deploy fits (issue 26, 5): one synthesized assembly, the preflight first, then stack by stack, each
`cdk deploy` right after credentials of its own (a fresh role session, so each deploy runs within its lifetime)."""

from __future__ import annotations

from typing import Any

import yaml

from tests.unit.test_ci_workflow import WORKFLOW


def _deploy_steps() -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = yaml.safe_load(WORKFLOW.read_text())["jobs"]["deploy"]["steps"]
    return steps


def _is_credentials(step: dict[str, Any]) -> bool:
    return str(step.get("uses", "")).startswith("aws-actions/configure-aws-credentials@")


def test_the_preflight_runs_first_with_credentials_of_its_own() -> None:
    steps = _deploy_steps()
    preflight = next(i for i, s in enumerate(steps) if "hyperpod_inference_iac.preflight" in str(s.get("run", "")))
    deploys = [i for i, s in enumerate(steps) if "cdk deploy" in str(s.get("run", ""))]
    assert deploys and preflight < min(deploys)
    assert _is_credentials(steps[preflight - 1])
    synth = next(i for i, s in enumerate(steps) if "cdk synth" in str(s.get("run", "")))
    assert synth < preflight and not any(_is_credentials(s) for s in steps[:synth])  # synth holds no credentials


def test_each_stack_is_deployed_alone_right_after_fresh_credentials() -> None:
    steps = _deploy_steps()
    deploys = [i for i, s in enumerate(steps) if "cdk deploy" in str(s.get("run", ""))]
    assert len(deploys) == 2  # the storage stack, then the cluster stack
    for index in deploys:
        run = " ".join(steps[index]["run"].replace("\\\n", " ").split())
        assert "--all" not in run and "--app cdk.out \"$STACK\" --exclusively" in run
        assert _is_credentials(steps[index - 1])
    sessions = [s["with"]["role-session-name"] for s in steps if _is_credentials(s)]
    assert len(sessions) == len(set(sessions)) == 3


def test_no_docker_step_and_the_preflight_may_leave_a_private_cluster_out() -> None:
    assert not any("docker" in str(step.get("run", "")).lower() for step in _deploy_steps())
    text = WORKFLOW.read_text()
    assert "--skip-cluster" in text and "vars.PREFLIGHT_SKIP_CLUSTER" in text
