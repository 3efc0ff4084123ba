"""Gates every synthesized template must pass: cfn-lint, cdk-nag, determinism, no tokens in outputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from hyperpod_inference_iac.foundation.nag import REASONS
from tests.support.synth import REPO, Assembly, fingerprint, run_cdk_synth


def test_cfn_lint_reports_no_errors(assembly: Assembly) -> None:
    templates = sorted(str(p) for p in assembly.directory.glob("*.template.json"))
    assert templates
    # The venv's cfn-lint script: cfn-lint 1.x has no `python -m cfnlint`, which printed nothing and so passed without
    # linting (found in issue 19). Its exit code is a bit mask: 2 errors, 4 warnings, 8 informational; 1 a failure.
    result = subprocess.run(
        [str(Path(sys.executable).with_name("cfn-lint")), "--format", "json", "--", *templates],
        capture_output=True, text=True, check=False, cwd=REPO,
    )
    findings = json.loads(result.stdout)
    errors = [f for f in findings if f["Level"] == "Error"]
    assert errors == [], json.dumps(errors, indent=1)
    assert result.returncode & ~(4 | 8) == 0, (result.returncode, result.stderr[-2000:])


def test_validation_report_has_no_unacknowledged_findings(assembly: Assembly) -> None:
    # cdk-nag, CloudFormation's own rules and construct warnings: a cdk-nag error already fails the
    # synth; here nothing may be left over at all, not even a warning.
    for plugin in assembly.validation_report["pluginReports"]:
        assert plugin["violations"] == [], json.dumps(plugin["violations"], indent=1)[:3000]


# Acknowledgments of a choice the default platform does not make, each with the test that records it.
NOT_IN_THE_DEFAULT_PLATFORM = {
    # An API key that is not rotated (secrets.apiKeyRotationDays 0, a server without capture):
    # tests/unit/test_api_key_sync.py::test_without_rotation_the_missing_schedule_is_acknowledged_and_warned
    "portable-api-key-rotation",
    # A rotated key without the sidecars' acceptance check (no metrics agent in its namespace): the rotation role's
    # only wildcard is GetRandomPassword (tests/unit/test_api_key_sync.py)
    "api-key-rotation-random-password",
    # PreflightPolicy, a consumer's (the app does not create it):
    # tests/unit/test_preflight_policy.py::test_cdk_nag_finds_only_the_acknowledged_wildcard
    "preflight-account-reads",
}


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
    unused = set(REASONS) - used - NOT_IN_THE_DEFAULT_PLATFORM
    assert unused == set(), f"acknowledgments no resource needs any more: {unused}"
    assert not used & NOT_IN_THE_DEFAULT_PLATFORM, "the default platform uses it: take it off the list"


# The CDK CLI has aws-cdk-lib write its own timings here (CDK_PERF_COUNTERS_FILE): not synth output.
NOT_OUTPUT = {Path("performance-counters.json")}


def test_two_synths_are_byte_identical(assembly: Assembly, tmp_path: Path) -> None:
    # The run's shared synth is as its synth left it (no test wrote into it): the first synth's bytes.
    assert fingerprint(assembly.directory) == assembly.recorded_fingerprint, "a test wrote into the shared synth"
    second = tmp_path / "second"
    # As if this synth were slow (a loaded runner): CDK would then write its timings into cdk.out.
    result = run_cdk_synth(second, context={"@aws-cdk/core.slowSynthThreshold": "0"})
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


# Functions whose logs may go without a retention, each with its reason. None: every function has one.
FUNCTIONS_WITHOUT_RETENTION: dict[str, str] = {}
BASIC_EXECUTION = "AWSLambdaBasicExecutionRole"


def _log_group_of(template: dict[str, Any], function_id: str) -> dict[str, Any] | None:
    """The group a function logs to: its LoggingConfig.LogGroup, else a group named /aws/lambda/<function>."""
    resources = template["Resources"]
    named = resources[function_id]["Properties"].get("LoggingConfig", {}).get("LogGroup")
    if named is not None:
        return resources[named["Ref"]]
    default = {"Fn::Join": ["", ["/aws/lambda/", {"Ref": function_id}]]}
    return next((r for r in resources.values()
                 if r["Type"] == "AWS::Logs::LogGroup" and r["Properties"].get("LogGroupName") == default), None)


def _may_write_logs(template: dict[str, Any], function_id: str, group_id: str) -> bool:
    """The function's role has the basic execution policy (every group) or a grant on its group."""
    resources = template["Resources"]
    role_id = resources[function_id]["Properties"]["Role"]["Fn::GetAtt"][0]
    if BASIC_EXECUTION in json.dumps(resources[role_id]["Properties"].get("ManagedPolicyArns", [])):
        return True
    policies = [r["Properties"] for r in resources.values()
                if r["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in r["Properties"]["Roles"]]
    return any(group_id in json.dumps(s["Resource"]) and "logs:PutLogEvents" in json.dumps(s["Action"])
               for policy in policies for s in policy["PolicyDocument"]["Statement"])


def test_every_lambda_function_logs_to_a_group_with_retention(assembly: Assembly) -> None:
    """CDK's helpers (kubectl provider, custom-resource providers, bucket notifications, the SDK-call
    provider) included: none may leave a group that keeps its events forever."""
    checked = 0
    for name, template in assembly.templates.items():
        for function_id, function in template["Resources"].items():
            if function["Type"] != "AWS::Lambda::Function" or function_id in FUNCTIONS_WITHOUT_RETENTION:
                continue
            checked += 1
            group = _log_group_of(template, function_id)
            assert group is not None, f"{name}/{function_id} has no log group of its own"
            assert group["Properties"].get("RetentionInDays") == 90, f"{name}/{function_id}"
            group_id = next(k for k, v in template["Resources"].items() if v is group)
            assert _may_write_logs(template, function_id, group_id), f"{name}/{function_id} cannot write its logs"
    assert checked == 9  # the API key's rotation function is the eighth, GpuCost's sampler the ninth


def test_every_log_group_of_the_app_has_a_retention_from_the_config(assembly: Assembly) -> None:
    """Not only the Lambda functions': the flow log, the control plane, the metrics agent, whatever a later
    construct adds. (HyperPod's own group is created by the service; its retention is an SDK call.)"""
    expected = {"/aws/eks/llm-platform/cluster": 365}
    groups = [(name, logical_id, group) for name, template in assembly.templates.items()
              for logical_id, group in template["Resources"].items() if group["Type"] == "AWS::Logs::LogGroup"]
    assert len(groups) >= 10
    for name, logical_id, group in groups:
        days = group["Properties"].get("RetentionInDays")
        group_name = group["Properties"].get("LogGroupName")
        wanted = (expected[group_name],) if isinstance(group_name, str) and group_name in expected else (90, 365)
        assert days in wanted, f"{name}/{logical_id}: {days}"
