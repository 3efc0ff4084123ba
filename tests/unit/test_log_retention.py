"""LambdaLogRetention: every Lambda function gets a log group with a retention, with or without the app's
feature flags, CDK's own helpers (raw CfnResource functions) included; a function's own choice is kept."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App, Aspects, RemovalPolicy, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs
from aws_cdk.assertions import Template
from aws_cdk.aws_s3_notifications import SqsDestination

from hyperpod_inference_iac import LambdaLogRetention, Problems, check_log_retention, retention_from_days
from hyperpod_inference_iac.foundation.log_retention import RETENTION_DAYS, days_of
from tests.support.synth import REPO

CONTEXT = json.loads((REPO / "cdk.json").read_text())["context"]
CODE = lambda_.Code.from_inline("def handler(event, context):\n    return None\n")


def _functions_and_groups(context: dict[str, Any], *, aspect_twice: bool = False) -> dict[str, Any]:
    """A stack with an L2 function, one that chose its own group, a raw-CfnResource provider function (as
    CDK's custom resources build them) and the bucket-notifications singleton (a bare CfnFunction)."""
    app = App(context=context)
    stack = Stack(app, "Probe")
    lambda_.Function(stack, "Plain", runtime=lambda_.Runtime.PYTHON_3_13, handler="index.handler", code=CODE)
    own = logs.LogGroup(stack, "OwnGroup", retention=logs.RetentionDays.ONE_WEEK)
    lambda_.Function(stack, "ChoseItsGroup", runtime=lambda_.Runtime.PYTHON_3_13, handler="index.handler", code=CODE,
                     log_group=own)
    # auto_delete_objects: CDK's Custom::S3AutoDeleteObjects provider, a raw CfnResource function.
    bucket = s3.Bucket(stack, "Bucket", auto_delete_objects=True, removal_policy=RemovalPolicy.DESTROY)
    bucket.add_event_notification(s3.EventType.OBJECT_CREATED, SqsDestination(sqs.Queue(stack, "Queue")))
    Aspects.of(app).add(LambdaLogRetention(logs.RetentionDays.THREE_MONTHS))
    if aspect_twice:
        Aspects.of(stack).add(LambdaLogRetention(logs.RetentionDays.THREE_MONTHS))
    return Template.from_stack(stack).to_json()


def _retention_of_each_function(template: dict[str, Any]) -> dict[str, int | None]:
    """Each function's log group retention: its LoggingConfig group, else the /aws/lambda/<name> group."""
    resources = template["Resources"]
    groups = {k: v for k, v in resources.items() if v["Type"] == "AWS::Logs::LogGroup"}
    result: dict[str, int | None] = {}
    for name, function in resources.items():
        if function["Type"] != "AWS::Lambda::Function":
            continue
        named = function["Properties"].get("LoggingConfig", {}).get("LogGroup")
        if named is not None:
            result[name] = groups[named["Ref"]]["Properties"].get("RetentionInDays")
            continue
        default_name = {"Fn::Join": ["", ["/aws/lambda/", {"Ref": name}]]}
        matching = [g for g in groups.values() if g["Properties"].get("LogGroupName") == default_name]
        result[name] = matching[0]["Properties"].get("RetentionInDays") if matching else None
    return result


@pytest.mark.parametrize("context", [CONTEXT, {}], ids=["app-feature-flags", "no-feature-flags"])
def test_every_function_gets_a_retention_whatever_the_flags(context: dict[str, Any]) -> None:
    template = _functions_and_groups(context)
    retentions = _retention_of_each_function(template)
    assert len(retentions) == 4
    chose = next(name for name in retentions if name.startswith("ChoseItsGroup"))
    assert retentions.pop(chose) == 7  # its owner's choice is kept
    assert set(retentions.values()) == {90}, retentions


def test_with_cdks_managed_group_no_second_group_is_made() -> None:
    """Under @aws-cdk/aws-lambda:useCdkManagedLogGroup the L2 function already has /aws/lambda/<name>:
    it gets the retention, and no empty second group exists beside it."""
    template = _functions_and_groups(CONTEXT)
    plain = [k for k, v in template["Resources"].items()
             if v["Type"] == "AWS::Logs::LogGroup" and k.startswith("Plain")]
    assert len(plain) == 1


def test_adding_it_twice_changes_nothing() -> None:
    assert _functions_and_groups({}, aspect_twice=True) == _functions_and_groups({})


def test_retention_days_are_cloudwatchs_values() -> None:
    for days, retention in RETENTION_DAYS.items():
        assert retention_from_days(days) is retention and days_of(retention) == days
        stack = Stack(App(), "Days")
        logs.LogGroup(stack, "Group", retention=retention)
        (group,) = Template.from_stack(stack).find_resources("AWS::Logs::LogGroup").values()
        assert group["Properties"]["RetentionInDays"] == days
    with pytest.raises(ValueError, match="finite"):
        days_of(logs.RetentionDays.INFINITE)


def test_a_retention_cloudwatch_refuses_is_one_problem_per_key() -> None:
    problems = Problems()
    check_log_retention(problems, retention=100, audit_retention=365)
    assert [(p.code, p.path, p.value) for p in problems] == [("Logs.RetentionDays", "retention", 100)]
