"""Gates every synthesized template must pass: cfn-lint, cdk-nag, determinism, no tokens in outputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hyperpod_inference_iac.nag import REASONS
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


def test_validation_report_has_no_unacknowledged_findings(assembly: Assembly) -> None:
    # cdk-nag, CloudFormation's own rules and construct warnings: a cdk-nag error already fails the
    # synth; here nothing may be left over at all, not even a warning.
    for plugin in assembly.validation_report["pluginReports"]:
        assert plugin["violations"] == [], json.dumps(plugin["violations"], indent=1)[:3000]


def test_acknowledged_findings_are_recorded_in_the_templates(assembly: Assembly) -> None:
    """The audit trail proves cdk-nag ran on the app and matched every acknowledgment to a resource."""
    recorded: set[tuple[str, str]] = set()
    for template in assembly.templates.values():
        for resource in template["Resources"].values():
            for rule in resource.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", []):
                if rule["id"].startswith("AwsSolutions-"):  # CDK records cfn-lint notes of its own here too
                    recorded.add((rule["id"], rule["reason"]))
    reasons = {reason for _, reason in REASONS.values()}
    assert recorded, "no acknowledged finding recorded: did cdk-nag run?"
    assert {reason for _, reason in recorded} <= reasons
    used = {key for key, (_, reason) in REASONS.items() if reason in {r for _, r in recorded}}
    unused = set(REASONS) - used
    assert unused == set(), f"acknowledgments no resource needs any more: {unused}"


# The CDK CLI has aws-cdk-lib write its own timings here (CDK_PERF_COUNTERS_FILE): not synth output.
NOT_OUTPUT = {Path("performance-counters.json")}


def test_two_synths_are_byte_identical(assembly: Assembly, tmp_path: Path) -> None:
    second = tmp_path / "second"
    result = run_cdk_synth(second)
    assert result.returncode == 0, result.stderr
    first_files = sorted(p.relative_to(assembly.directory) for p in assembly.directory.rglob("*")
                         if p.is_file() and p.relative_to(assembly.directory) not in NOT_OUTPUT)
    second_files = sorted(p.relative_to(second) for p in second.rglob("*")
                          if p.is_file() and p.relative_to(second) not in NOT_OUTPUT)
    assert first_files == second_files
    for name in first_files:
        assert (assembly.directory / name).read_bytes() == (second / name).read_bytes(), f"{name} differs"


def test_no_wildcard_trust_no_full_access_no_star_actions(assembly: Assembly) -> None:
    for name, template in assembly.templates.items():
        text = json.dumps(template)
        assert "system:serviceaccount:*" not in text, name
        assert "FullAccess" not in text, name
        assert '"Action": "*"' not in text, name
