"""The shipped GitHub Actions workflow is valid, deploys only with OIDC credentials, and keeps its supply
chain closed: actions pinned to commit SHAs, hash-checked installs, least permissions, a protected
environment (docs/security-ci.md)."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pytest
import yaml

from tests.support.synth import REPO

WORKFLOW = REPO / ".github" / "workflows" / "platform.yml"
SECURITY_DOC = REPO / "docs" / "security-ci.md"
PINNED_USES = re.compile(r"^\s*(?:-\s+)?uses:\s+([\w.-]+/[\w./-]+)@([0-9a-f]{40}) # (v\d+\.\d+\.\d+)\s*$")


@pytest.mark.slow  # check-jsonschema, a Python process of its own
def test_workflow_matches_the_github_workflow_schema() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", str(WORKFLOW)],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow  # check-jsonschema, a Python process of its own
def test_dependabot_config_matches_its_schema_and_updates_the_action_pins() -> None:
    config = REPO / ".github" / "dependabot.yml"
    result = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.dependabot", str(config)],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert [u["package-ecosystem"] for u in yaml.safe_load(config.read_text())["updates"]] == ["github-actions"]


@pytest.mark.slow  # check-jsonschema, a Python process of its own
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


def _workflow() -> dict[str, Any]:
    return yaml.safe_load(WORKFLOW.read_text())


def _steps(job: str) -> list[dict[str, Any]]:
    return _workflow()["jobs"][job]["steps"]


def test_every_action_is_pinned_to_a_commit_sha_with_its_tag() -> None:
    lines = [line for line in WORKFLOW.read_text().splitlines() if re.match(r"^\s*(-\s+)?uses:", line)]
    assert lines
    unpinned = [line.strip() for line in lines if not PINNED_USES.match(line)]
    assert not unpinned, f"pin to a full commit SHA with the tag as a comment (docs/security-ci.md): {unpinned}"


def test_pins_are_the_ones_the_security_doc_lists_as_verified() -> None:
    pins = {PINNED_USES.match(line).groups() for line in WORKFLOW.read_text().splitlines()  # type: ignore[union-attr]
            if PINNED_USES.match(line)}
    table = set(re.findall(r"^\| `([\w.-]+/[\w.-]+)` \| `(v[\d.]+)` \| `([0-9a-f]{40})` \|",
                           SECURITY_DOC.read_text(), re.M))
    assert {(action, sha, tag) for action, tag, sha in table} == pins


def test_no_privileged_trigger_runs_pull_request_code() -> None:
    triggers = _workflow()[True]  # PyYAML reads the key `on` as True
    assert set(triggers) == {"pull_request", "push", "workflow_dispatch"}
    assert "pull_request_target" not in WORKFLOW.read_text() and "workflow_run" not in WORKFLOW.read_text()


def test_least_permissions_and_a_timeout_for_every_job() -> None:
    workflow = _workflow()
    assert workflow["permissions"] == {}
    for name, job in workflow["jobs"].items():
        assert isinstance(job.get("timeout-minutes"), int) and job["timeout-minutes"] <= 120, name
        assert job["permissions"]["contents"] == "read", name
    assert workflow["jobs"]["test"]["permissions"] == {"contents": "read"}
    assert workflow["jobs"]["deploy"]["permissions"] == {"contents": "read", "id-token": "write"}


def test_checkouts_do_not_persist_credentials() -> None:
    for job in _workflow()["jobs"].values():
        checkouts = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/checkout@")]
        assert checkouts
        assert all(s.get("with", {}).get("persist-credentials") is False for s in checkouts)


def test_deploy_runs_for_main_pushes_in_the_production_environment_one_at_a_time() -> None:
    deploy = _workflow()["jobs"]["deploy"]
    assert deploy["if"] == "github.event_name == 'push' && github.ref == 'refs/heads/main'"
    assert deploy["environment"] == "production"
    assert deploy["concurrency"] == {"group": "platform-deploy-production", "cancel-in-progress": False}


def test_deploy_installs_only_hash_checked_packages_before_it_has_credentials() -> None:
    steps = _steps("deploy")
    text = "\n".join(str(s.get("run", "")) for s in steps)
    assert "make setup" not in text and "make " not in text  # `make setup` resolves without hashes
    install = next(i for i, s in enumerate(steps) if "--require-hashes" in str(s.get("run", "")))
    run = " ".join(steps[install]["run"].replace("\\\n", " ").split())
    assert "pip install --disable-pip-version-check --require-hashes --only-binary :all: " \
           "-r requirements/deploy.lock" in run
    assert "pip install --disable-pip-version-check --no-deps --no-build-isolation -e ." in run
    assert "npm ci " in run and "--ignore-scripts" in run and "npm install" not in run
    credentials = next(i for i, s in enumerate(steps)
                       if str(s.get("uses", "")).startswith("aws-actions/configure-aws-credentials@"))
    assert install < credentials, "install before credentials exist: no package code runs with them"
    assert (REPO / "requirements" / "deploy.lock").is_file()


def test_deploy_installs_the_lock_in_dependency_order_then_the_project() -> None:
    """pip installs a package after its dependencies only when it resolves them: with ``--no-deps`` the order is
    pip's, and aws-cdk.cloud-assembly-schema's ``aws_cdk/cloud_assembly_schema/`` could land over aws-cdk-lib's
    (jsii then read Annotations' MetadataEntry as an unknown interface). Hash-checked all the same: with
    ``--require-hashes`` a dependency missing from the lock is refused, not fetched."""
    (install,) = [s for s in _steps("deploy") if "requirements/deploy.lock" in str(s.get("run", ""))]
    commands = [" ".join(c.split()) for c in install["run"].replace("\\\n", " ").splitlines() if "pip " in c]
    lock = next(i for i, c in enumerate(commands) if "-r requirements/deploy.lock" in c)
    project = next(i for i, c in enumerate(commands) if c.endswith(" -e ."))
    check = next(i for i, c in enumerate(commands) if "pip check" in c)
    assert "--require-hashes" in commands[lock] and "--only-binary :all:" in commands[lock]
    assert "--no-deps" not in commands[lock], "the lock is installed in dependency order"
    assert "--force-reinstall" not in " ".join(commands[lock + 1:])  # nothing reinstalled over it afterwards
    assert lock < project < check
    assert "--no-deps" in commands[project]  # the project's dependencies are the lock's, already installed
    lock_text = (REPO / "requirements" / "deploy.lock").read_text()
    for package in ("aws-cdk-lib==", "aws-cdk-cloud-assembly-schema=="):  # both in the lock, each with its hash
        block = lock_text.split(package, 1)[1].split("\n\n", 1)[0]
        assert "--hash=sha256:" in block.split("# via", 1)[0], package
