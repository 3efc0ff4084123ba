"""No CDK CLI call of the project sends telemetry or fetches notices (issue: "offline" synth still phoned home).

The pinned CLI (2.1100 and later) sends telemetry on every command unless ``CDK_DISABLE_CLI_TELEMETRY`` is set or
the context says ``cli-telemetry: false``; its trace says which (``Telemetry disabled`` / ``Telemetry sink
registered``, then ``Telemetry dispatched``). Each test runs the real CLI on an empty cloud assembly (no app, about
a second) with the trace on, the way one of the project's callers runs it, and its endpoint pointed at a closed
port on loopback so that even a failing check sends nothing anywhere. A control run without any setting proves the
trace line this relies on still exists in the pinned CLI."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.synth import CDK, REPO, TELEMETRY_TRAP, cli_env
from tools.review.cdkdiff import cli_env as review_env

pytestmark = pytest.mark.slow

def _assembly(root: Path) -> Path:
    """An empty cloud assembly: the CLI runs its whole command path (telemetry included) without an app, and ends
    with "This app contains no stacks"."""
    from aws_cdk.cloud_assembly_schema import Manifest

    folder = root / "cdk.out"
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps({"version": Manifest.version(), "artifacts": {}}))
    return folder


def _telemetry(folder: Path, env: dict[str, str]) -> str:
    """``disabled`` or ``sent`` for one ``cdk synth`` run in ``folder`` (its cdk.json applies)."""
    env = {**env, "TELEMETRY_ENDPOINT": TELEMETRY_TRAP}
    result = subprocess.run([str(CDK), "synth", "--app", str(_assembly(folder)), "--quiet", "-vvv", "--no-notices"],
                            cwd=folder, env=env, capture_output=True, text=True, timeout=120, check=False)
    output = result.stdout + result.stderr
    assert "This app contains no stacks" in output, output[-2000:]  # the whole command ran (status 1: no stacks)
    disabled, registered = "Telemetry disabled" in output, "Telemetry sink registered" in output
    assert disabled != registered, f"neither or both trace lines: {output[-2000:]}"
    return "disabled" if disabled else "sent"


def _bare_env() -> dict[str, str]:
    """The tests' environment without the variable that turns telemetry off: only the cdk.json under test decides."""
    env = cli_env()
    env.pop("CDK_DISABLE_CLI_TELEMETRY")
    return env


def test_the_control_a_cli_call_without_any_setting_sends_telemetry(tmp_path: Path) -> None:
    assert _telemetry(tmp_path, _bare_env()) == "sent"


@pytest.mark.parametrize("cdk_json", [REPO / "cdk.json", *sorted(REPO.glob("examples/*/cdk.json"))],
                         ids=lambda p: str(Path(p).parent.relative_to(REPO)) or "app")
def test_every_cdk_json_turns_telemetry_and_notices_off(tmp_path: Path, cdk_json: Path) -> None:
    """Whoever runs ``cdk`` in the repository or in an example (a consumer copying it) sends nothing."""
    settings = json.loads(cdk_json.read_text())
    assert settings["context"]["cli-telemetry"] is False and settings["notices"] is False
    shutil.copy(cdk_json, tmp_path / "cdk.json")
    assert _telemetry(tmp_path, _bare_env()) == "disabled"


@pytest.mark.parametrize("env", [cli_env, review_env], ids=["tests", "make review"])
def test_the_project_s_own_callers_turn_it_off_without_a_cdk_json(tmp_path: Path, env: object) -> None:
    """The tests' and `make review`'s CLI calls (the review synthesizes an older commit, whose cdk.json may not)."""
    assert _telemetry(tmp_path, env()) == "disabled"  # type: ignore[operator]


def test_the_makefile_and_ci_turn_it_off_for_every_call() -> None:
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^export CDK_DISABLE_CLI_TELEMETRY := true$", makefile, re.M)
    assert all("--no-notices" in line for line in makefile.splitlines() if re.search(r"\$\(CDK\) \w", line))
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "platform.yml").read_text())
    assert workflow["env"]["CDK_DISABLE_CLI_TELEMETRY"] == "true"
    runs = [step["run"] for job in workflow["jobs"].values() for step in job["steps"] if "run" in step]
    assert all("--no-notices" in run for run in runs if "cdk " in run and "node_modules/.bin/cdk" in run)
