"""Gates every synthesized template must pass: cfn-lint, cdk-nag, determinism, no tokens in outputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.synth import REPO, Assembly, run_cdk_synth


def test_cfn_lint_reports_no_errors(assembly: Assembly) -> None:
    templates = sorted(str(p) for p in assembly.directory.glob("*.template.json"))
    assert templates
    result = subprocess.run(
        [sys.executable, "-m", "cfnlint", "--format", "json", "--", *templates],
        capture_output=True, text=True, check=False, cwd=REPO,
    )
    findings = json.loads(result.stdout or "[]")
    errors = [f for f in findings if f["Level"] == "Error"]
    assert errors == [], json.dumps(errors, indent=1)


def test_cdk_nag_reports_no_unacknowledged_findings(assembly: Assembly) -> None:
    # A finding would already have failed `cdk synth`; the report proves the plugin really ran.
    report = assembly.validation_report
    for plugin in report["pluginReports"]:
        assert plugin["pluginName"] == "AwsSolutions"
        assert plugin["violations"] == [], json.dumps(plugin["violations"], indent=1)
        for suppressed in plugin.get("suppressedViolations", []):
            assert suppressed.get("reason"), suppressed


def test_two_synths_are_byte_identical(assembly: Assembly, tmp_path: Path) -> None:
    second = tmp_path / "second"
    result = run_cdk_synth(second)
    assert result.returncode == 0, result.stderr
    first_files = sorted(p.relative_to(assembly.directory) for p in assembly.directory.rglob("*") if p.is_file())
    second_files = sorted(p.relative_to(second) for p in second.rglob("*") if p.is_file())
    assert first_files == second_files
    for name in first_files:
        assert (assembly.directory / name).read_bytes() == (second / name).read_bytes(), f"{name} differs"


def test_no_wildcard_trust_no_full_access_no_star_actions(assembly: Assembly) -> None:
    for name, template in assembly.templates.items():
        text = json.dumps(template)
        assert "system:serviceaccount:*" not in text, name
        assert "FullAccess" not in text, name
        assert '"Action": "*"' not in text, name
