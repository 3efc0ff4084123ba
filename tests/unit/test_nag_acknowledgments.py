"""The cdk-nag gate must bite: an unacknowledged finding is reported, an acknowledged one is not."""

from __future__ import annotations

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_s3 as s3
from cdk_nag import AwsSolutionsChecks

from hyperpod_inference_iac.foundation import nag as nag_acknowledgments


def _stack_with_unlogged_bucket() -> tuple[Stack, s3.Bucket]:
    app = App()
    stack = Stack(app, "NagProbe")
    bucket = s3.Bucket(stack, "Unlogged", enforce_ssl=True)
    return stack, bucket


def _rules(stack: Stack) -> set[str]:
    report = AwsSolutionsChecks(stack.node.root).validate_scope(stack)
    return {violation.rule_name for violation in report.violations}


def test_unacknowledged_finding_is_reported() -> None:
    stack, _ = _stack_with_unlogged_bucket()
    assert "AwsSolutions-S1" in _rules(stack)


def test_acknowledgment_through_the_module_suppresses_exactly_that_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(nag_acknowledgments.REASONS, "probe", ("AwsSolutions-S1", "probe: logging not wanted"))
    stack, bucket = _stack_with_unlogged_bucket()
    nag_acknowledgments.acknowledge(bucket, "probe")
    assert "AwsSolutions-S1" not in _rules(stack)


def test_every_acknowledgment_has_a_rule_and_a_real_reason() -> None:
    for key, (rule, reason) in nag_acknowledgments.REASONS.items():
        assert rule.startswith(("AwsSolutions-", "Annotation::")), key
        assert len(reason) > 40, f"{key}: say why the finding is acceptable"
