"""In-process apps and aws-cdk-lib's built-in CloudFormation validation (tests/support/cdk_validation.py): an app
given the context under which the validation fails a synth (cdk.json's ``@aws-cdk/core:validateAgainstDefaultRules``)
keeps it and fails on an invalid template as ``cdk synth`` does; an app without it, whose validation could only warn,
is built without it (about half the CPU of a small app's synth, docs/testing.md). The CLI's synths are not touched."""

from __future__ import annotations

import os

import pytest
from aws_cdk import App, CfnResource, Stack

from tests.support.cdk_validation import VALIDATE_AGAINST_DEFAULT_RULES, validation_can_fail


def _invalid_template(app: App) -> None:
    """A template CloudFormation's schema refuses: a bucket with a property AWS::S3::Bucket does not have."""
    stack = Stack(app, "Invalid")
    CfnResource(stack, "Bucket", type="AWS::S3::Bucket", properties={"NoSuchProperty": "x"})
    app.synth()


def test_an_app_with_the_context_that_makes_validation_fail_keeps_it() -> None:
    with pytest.raises(Exception, match="NoSuchProperty"):
        _invalid_template(App(context={VALIDATE_AGAINST_DEFAULT_RULES: True}))


def test_an_app_whose_validation_could_only_warn_is_built_without_it(capfd: pytest.CaptureFixture[str]) -> None:
    _invalid_template(App())
    assert "NoSuchProperty" not in "".join(capfd.readouterr())  # no validation ran, so no warning either


def test_control_the_same_app_with_the_validation_asked_for_is_warned(capfd: pytest.CaptureFixture[str]) -> None:
    """What the test above would see without the switch: the validation finds the property (and only warns)."""
    _invalid_template(App(builtin_cloud_formation_validation=True))
    assert "NoSuchProperty" in "".join(capfd.readouterr())


def test_which_apps_keep_the_validation() -> None:
    assert validation_can_fail({"context": {VALIDATE_AGAINST_DEFAULT_RULES: True}})
    assert validation_can_fail({"post_cli_context": {VALIDATE_AGAINST_DEFAULT_RULES: True}})
    assert not validation_can_fail({"context": {VALIDATE_AGAINST_DEFAULT_RULES: False}})
    assert not validation_can_fail({"context": {}})
    assert not validation_can_fail({})


def test_processes_the_tests_start_see_no_switch() -> None:
    """The switch is an App argument in this process, no environment variable a CLI synth would inherit."""
    assert "CDK_VALIDATION" not in os.environ
