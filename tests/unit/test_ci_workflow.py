"""The shipped GitHub Actions workflow is valid and deploys only with OIDC credentials."""

from __future__ import annotations

import subprocess
import sys

import yaml

from tests.support.synth import REPO

WORKFLOW = REPO / ".github" / "workflows" / "platform.yml"


def test_workflow_matches_the_github_workflow_schema() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", str(WORKFLOW)],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_schema_check_rejects_a_broken_workflow(tmp_path) -> None:  # the validator really validates
    broken = tmp_path / "broken.yml"
    broken.write_text("on: push\njobs:\n  test:\n    steps: 3\n")
    result = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", str(broken)],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode != 0


def test_deploy_uses_oidc_and_no_stored_keys() -> None:
    text = WORKFLOW.read_text()
    workflow = yaml.safe_load(text)
    deploy = workflow["jobs"]["deploy"]
    assert deploy["permissions"]["id-token"] == "write"
    assert deploy["needs"] == "test"
    assert "aws-access-key-id" not in text and "AWS_SECRET_ACCESS_KEY" not in text
    credentials = next(s for s in deploy["steps"] if str(s.get("uses", "")).startswith(
        "aws-actions/configure-aws-credentials"))
    assert set(credentials["with"]) == {"role-to-assume", "role-session-name", "aws-region"}


def test_workflow_runs_the_readme_test_command() -> None:
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["test"]["steps"]
    assert any(s.get("run") == "make test" for s in steps)
    assert "make test" in (REPO / "README.md").read_text()
