"""In-process apps and aws-cdk-lib's built-in CloudFormation validation (tests/support/cdk_validation.py): an app
given the context under which the validation fails a synth (cdk.json's ``@aws-cdk/core:validateAgainstDefaultRules``)
keeps it and fails on an invalid template as ``cdk synth`` does; an app without it, whose validation could only warn,
is built without it (about half the CPU of a small app's synth, docs/testing.md). The CLI's synths are not touched."""

from __future__ import annotations

import os

import pytest
from aws_cdk import App, CfnResource, Stack

from tests.support.cdk_validation import VALIDATE_AGAINST_DEFAULT_RULES, validation_can_fail
from tests.support.waiting import eventually


def _invalid_template(app: App, name: str = "Invalid") -> None:
    """A template CloudFormation's schema refuses: a bucket with a property AWS::S3::Bucket does not have."""
    stack = Stack(app, name)
    CfnResource(stack, "Bucket", type="AWS::S3::Bucket", properties={"NoSuchProperty": "x"})
    app.synth()


def _warnings_until(capfd: pytest.CaptureFixture[str], text: str) -> str:
    """What the jsii kernel printed, read until ``text`` is in it: its console output reaches this process's stderr
    through a thread of the jsii runtime, after the synth call may have returned (a loaded machine shows it)."""
    seen: list[str] = []

    def printed() -> bool:
        seen.append("".join(capfd.readouterr()))
        return text in "".join(seen)

    assert eventually(printed), "".join(seen)
    return "".join(seen)


def test_an_app_with_the_context_that_makes_validation_fail_keeps_it() -> None:
    with pytest.raises(Exception, match="NoSuchProperty"):
        _invalid_template(App(context={VALIDATE_AGAINST_DEFAULT_RULES: True}))


def test_an_app_whose_validation_could_only_warn_is_built_without_it(capfd: pytest.CaptureFixture[str]) -> None:
    """Then an app that asks for the validation: the kernel's output is one ordered stream, so once the second
    app's warning is read, a warning of the first would have been read before it."""
    _invalid_template(App(), "Unchecked")
    _invalid_template(App(builtin_cloud_formation_validation=True), "Checked")
    printed = _warnings_until(capfd, "NoSuchProperty")
    assert "Unchecked" not in printed and "Checked" in printed  # no validation ran for the first, so no warning


def test_control_the_same_app_with_the_validation_asked_for_is_warned(capfd: pytest.CaptureFixture[str]) -> None:
    """What the test above would see without the switch: the validation finds the property (and only warns)."""
    _invalid_template(App(builtin_cloud_formation_validation=True))
    assert "NoSuchProperty" in _warnings_until(capfd, "NoSuchProperty")


def test_which_apps_keep_the_validation() -> None:
    assert validation_can_fail({"context": {VALIDATE_AGAINST_DEFAULT_RULES: True}})
    assert validation_can_fail({"post_cli_context": {VALIDATE_AGAINST_DEFAULT_RULES: True}})
    assert not validation_can_fail({"context": {VALIDATE_AGAINST_DEFAULT_RULES: False}})
    assert not validation_can_fail({"context": {}})
    assert not validation_can_fail({})


def test_processes_the_tests_start_see_no_switch() -> None:
    """The switch is an App argument in this process, no environment variable a CLI synth would inherit."""
    assert "CDK_VALIDATION" not in os.environ
