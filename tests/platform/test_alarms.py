"""The platform's alarms as a reviewer reads them: one table of every alarm's name, metric, threshold and window
(a snapshot, so a change to any of them is a readable diff), every alarm notifying the one topic, the sidecar
metrics agent applied by the cluster stack and staged in dist/ as the same objects."""

from __future__ import annotations

import json
from typing import Any

from hyperpod_inference_iac import alarm_table, describe_alarms
from tests.support.synth import Assembly

ACCOUNT, REGION = "111122223333", "us-west-2"


def _alarms(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["Properties"]["AlarmName"]: v["Properties"] for v in template["Resources"].values()
            if v["Type"] == "AWS::CloudWatch::Alarm"}


def test_alarm_table_snapshot(assembly: Assembly, snapshot: Any) -> None:
    assert alarm_table(assembly.templates) == snapshot


def test_every_alarm_has_a_fixed_name_a_runbook_and_notifies_the_alarm_topic(assembly: Assembly) -> None:
    storage = assembly.template("-storage")
    (topic_id,) = [k for k, v in storage["Resources"].items() if v["Type"] == "AWS::SNS::Topic"]
    (export,) = [o["Export"]["Name"] for o in storage["Outputs"].values()
                 if o.get("Value") == {"Ref": topic_id} and "Export" in o]
    for stack, template in assembly.templates.items():
        rows = describe_alarms(template)
        assert rows and all(not row.name.startswith("(generated") for row in rows), stack
        for name, props in _alarms(template).items():
            assert name.startswith("llm-platform-"), name
            assert "Runbook: docs/alarms.md" in props["AlarmDescription"], name
            topic = {"Ref": topic_id} if stack.endswith("-storage") else {"Fn::ImportValue": export}
            assert props["AlarmActions"] == [topic] and props["OKActions"] == [topic], name


def test_the_topic_is_named_encrypted_and_subscribed_from_the_config(assembly: Assembly) -> None:
    storage = assembly.template("-storage")
    (topic,) = [v["Properties"] for v in storage["Resources"].values() if v["Type"] == "AWS::SNS::Topic"]
    assert topic["TopicName"] == "llm-platform-alarms" and "KmsMasterKeyId" in topic
    (subscription,) = [v["Properties"] for v in storage["Resources"].values() if v["Type"] == "AWS::SNS::Subscription"]
    assert (subscription["Protocol"], subscription["Endpoint"]) == ("email", "ml-platform-oncall@example.com")
    assert storage["Outputs"]["AlarmTopicArn"]["Value"] == {"Ref": next(
        k for k, v in storage["Resources"].items() if v["Type"] == "AWS::SNS::Topic")}


def test_the_dashboard_shows_every_alarm_of_both_stacks(assembly: Assembly) -> None:
    cluster = assembly.template("-cluster")
    (dashboard,) = [v["Properties"] for v in cluster["Resources"].values() if v["Type"] == "AWS::CloudWatch::Dashboard"]
    assert dashboard["DashboardName"] == "llm-platform"
    body = json.dumps(dashboard["DashboardBody"])
    for name in _alarms(assembly.template("-storage")):  # another stack's alarms: by their fixed names
        assert f":alarm:{name}" in body, name
    for logical_id, resource in cluster["Resources"].items():  # its own: by reference
        if resource["Type"] == "AWS::CloudWatch::Alarm":
            assert json.dumps({"Fn::GetAtt": [logical_id, "Arn"]}) in body, logical_id


def test_the_sidecar_metrics_agent_is_in_dist_as_the_cluster_stack_applies_it(assembly: Assembly) -> None:
    cluster = assembly.template("-cluster")
    (applied,) = [json.loads(v["Properties"]["Manifest"]) for k, v in cluster["Resources"].items()
                  if v["Type"] == "Custom::AWSCDK-EKS-KubernetesResource" and "CaptureSidecarMetrics" in k]
    staged = assembly.manifests["capture-sidecar-metrics.k8s.yaml"]
    for obj in applied:
        obj["metadata"]["labels"] = {k: v for k, v in obj["metadata"]["labels"].items()
                                     if not k.startswith("aws.cdk.eks/prune-")}
    assert applied == staged
    (account,) = [o for o in staged if o["kind"] == "ServiceAccount"]
    role = account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
    assert role == f"arn:aws:iam::{ACCOUNT}:role/llm-platform-capture-metrics-agent"
    assert any(v["Type"] == "AWS::IAM::Role" and v["Properties"].get("RoleName") == role.split("/")[-1]
               for v in cluster["Resources"].values())
