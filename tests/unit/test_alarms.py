"""The alarm constructs synthesized in small stacks: the topic and its key, every alarm's metric, threshold, window
and missing-data treatment, the sidecar metrics agent, the dashboard, validation codes and warnings, and that the
metric names are exactly the ones the capture processor and the capture sidecar emit."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import cdk8s
import pytest
import yaml
from aws_cdk import App, Duration, Environment, Stack
from aws_cdk import aws_certificatemanager as acm
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Annotations, Match, Template

from hyperpod_inference_iac import (
    AlarmSettings,
    AlarmTopic,
    CaptureAlarms,
    CapturePipeline,
    CaptureSidecarMetrics,
    CertificateAlarms,
    PlatformDashboard,
    alarm_table,
    describe_alarms,
    sidecar_metrics_manifests,
)
from hyperpod_inference_iac.charts import PortableModelServerChart
from hyperpod_inference_iac.foundation.validation import ConfigError
from hyperpod_inference_iac.observability import capture_alarms as capture_alarms_module
from hyperpod_inference_iac.observability import sidecar_metrics as sidecar_module
from tests.charts import samples
from tests.support.synth import REPO

ACCOUNT, REGION = "111122223333", "us-west-2"
ENV = Environment(account=ACCOUNT, region=REGION)
LAYER_ARN = f"arn:aws:lambda:{REGION}:336392948345:layer:AWSSDKPandas-Python313-Arm64:15"
CERTIFICATE_ARN = f"arn:aws:acm:{REGION}:{ACCOUNT}:certificate/6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
FORWARD_TOPIC = f"arn:aws:sns:{REGION}:{ACCOUNT}:central-ops"


def _stack(name: str = "Probe") -> Stack:
    return Stack(App(), name, env=ENV)


def _pipeline(stack: Stack) -> CapturePipeline:
    key = kms.Key(stack, "CaptureKey", enable_key_rotation=True)
    bucket = s3.Bucket(stack, "Captures", encryption_key=key, enforce_ssl=True)
    return CapturePipeline(stack, "Pipeline", bucket=bucket, encryption_key=key, pandas_layer_arn=LAYER_ARN)


def _topic(stack: Stack, **props: Any) -> AlarmTopic:
    defaults: dict[str, Any] = {"topic_name": "probe-alarms", "emails": ["oncall@example.com"]}
    return AlarmTopic(stack, "Topic", **(defaults | props))


def _alarms_by_name(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["Properties"]["AlarmName"]: v["Properties"] for v in template["Resources"].values()
            if v["Type"] == "AWS::CloudWatch::Alarm"}


def _joined(value: Any) -> str:
    """A template string with partition and region filled in, other references as ``<ref>``."""
    if isinstance(value, str):
        return value
    if "Fn::Join" in value:
        delimiter, parts = value["Fn::Join"]
        return delimiter.join(_joined(part) for part in parts)
    return {"AWS::Partition": "aws", "AWS::Region": REGION}.get(value.get("Ref"), "<ref>")


def _cluster_stack() -> tuple[Stack, Any]:
    from aws_cdk import aws_eks_v2 as eks

    stack = _stack()
    cluster = eks.Cluster.from_cluster_attributes(
        stack, "Cluster", cluster_name="gpu-cluster",
        kubectl_provider=eks.KubectlProvider.from_kubectl_provider_attributes(
            stack, "Kubectl", service_token=f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:gpu-cluster-kubectl",
            role=iam.Role.from_role_arn(stack, "KubectlRole", f"arn:aws:iam::{ACCOUNT}:role/gpu-cluster-kubectl")),
        open_id_connect_provider=iam.OpenIdConnectProvider.from_open_id_connect_provider_arn(
            stack, "Oidc", f"arn:aws:iam::{ACCOUNT}:oidc-provider/oidc.eks.{REGION}.amazonaws.com/id/EXAMPLE0123"),
    )
    return stack, cluster


# ---- AlarmTopic ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def topic_template() -> dict[str, Any]:
    stack = _stack()
    _topic(stack, https_endpoints=["https://events.example.com/sns"],
           lambda_function_arns=[f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:alarm-router"],
           forward_to_topic_arns=[FORWARD_TOPIC])
    return Template.from_stack(stack).to_json()


def _only(template: dict[str, Any], kind: str) -> dict[str, Any]:
    (found,) = [v["Properties"] for v in template["Resources"].values() if v["Type"] == kind]
    return found


def test_topic_key_lets_the_account_administer_it_and_only_cloudwatch_use_it(topic_template: dict[str, Any]) -> None:
    key = _only(topic_template, "AWS::KMS::Key")
    assert key["EnableKeyRotation"] is True
    admin, cloudwatch = key["KeyPolicy"]["Statement"]
    assert admin["Sid"] == "KeyAdministrationWithoutUse"
    assert not [a for a in admin["Action"] if a in ("kms:Decrypt", "kms:Encrypt", "kms:CreateGrant", "kms:*")
                or a.startswith("kms:GenerateDataKey")]
    assert cloudwatch == {
        "Sid": "CloudWatchAlarmsPublishEncrypted", "Effect": "Allow",
        "Principal": {"Service": "cloudwatch.amazonaws.com"}, "Action": ["kms:Decrypt", "kms:GenerateDataKey*"],
        "Resource": "*", "Condition": {"StringEquals": {"aws:SourceAccount": ACCOUNT}}}


def test_topic_is_encrypted_with_its_key_and_admits_only_this_accounts_alarms(topic_template: dict[str, Any]) -> None:
    topic = _only(topic_template, "AWS::SNS::Topic")
    assert topic["TopicName"] == "probe-alarms"
    assert topic["KmsMasterKeyId"]["Fn::GetAtt"][1] == "Arn"
    ssl, cloudwatch = _only(topic_template, "AWS::SNS::TopicPolicy")["PolicyDocument"]["Statement"]
    assert ssl["Effect"] == "Deny" and ssl["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert cloudwatch["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    assert cloudwatch["Action"] == "sns:Publish"
    assert cloudwatch["Condition"]["StringEquals"] == {"aws:SourceAccount": ACCOUNT}
    source = json.dumps(cloudwatch["Condition"]["ArnLike"]["aws:SourceArn"])
    assert f":cloudwatch:{REGION}:{ACCOUNT}:alarm:*" in source


def test_each_subscriber_kind_is_subscribed(topic_template: dict[str, Any]) -> None:
    subscriptions = sorted((p["Protocol"], p["Endpoint"]) for v in topic_template["Resources"].values()
                           if v["Type"] == "AWS::SNS::Subscription" for p in [v["Properties"]])
    assert subscriptions == [("email", "oncall@example.com"), ("https", "https://events.example.com/sns"),
                             ("lambda", f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:alarm-router")]
    permission = _only(topic_template, "AWS::Lambda::Permission")
    assert permission["Principal"] == "sns.amazonaws.com" and "SourceArn" in permission


@pytest.mark.parametrize(("props", "code", "path"), [
    ({"topic_name": "alarms.fifo!"}, "AlarmTopic.BadTopicName", "topic_name"),
    ({"emails": ["oncall"]}, "AlarmTopic.BadEmail", "emails[0]"),
    ({"emails": ["a@example.com", "a@example.com"]}, "AlarmTopic.DuplicateSubscriber", "emails[1]"),
    ({"https_endpoints": ["http://events.example.com/sns"]}, "AlarmTopic.BadHttpsEndpoint", "https_endpoints[0]"),
    ({"lambda_function_arns": ["alarm-router"]}, "AlarmTopic.BadLambdaArn", "lambda_function_arns[0]"),
    ({"forward_to_topic_arns": ["arn:aws:sqs:us-west-2:111122223333:q"]}, "AlarmTopic.BadTopicArn",
     "forward_to_topic_arns[0]"),
])
def test_topic_props_are_validated(props: dict[str, Any], code: str, path: str) -> None:
    with pytest.raises(ConfigError) as raised:
        _topic(_stack(), **props)
    assert [(p.code, p.path) for p in raised.value.problems] == [(code, path)]


def test_a_topic_nobody_is_subscribed_to_is_warned_about() -> None:
    stack = _stack()
    AlarmTopic(stack, "Topic")
    Annotations.from_stack(stack).has_warning(
        "/Probe/Topic", Match.string_like_regexp("nobody is subscribed.*@hyperpod-inference-iac/AlarmTopic:noSub"))


def test_an_imported_key_is_warned_about_and_an_own_key_gets_the_cloudwatch_statement() -> None:
    stack = _stack()
    imported = kms.Key.from_key_arn(stack, "Imported", f"arn:aws:kms:{REGION}:{ACCOUNT}:key/1a2b3c4d-0000")
    AlarmTopic(stack, "Topic", emails=["a@example.com"], encryption_key=imported)
    Annotations.from_stack(stack).has_warning("/Probe/Topic", Match.string_like_regexp(".*AlarmTopic:importedKey"))
    own_stack = _stack()
    own = kms.Key(own_stack, "Own", enable_key_rotation=True)
    AlarmTopic(own_stack, "Topic", emails=["a@example.com"], encryption_key=own)
    statements = _only(Template.from_stack(own_stack).to_json(), "AWS::KMS::Key")["KeyPolicy"]["Statement"]
    assert [s["Sid"] for s in statements if "Sid" in s] == ["CloudWatchAlarmsPublishEncrypted"]


# ---- CaptureAlarms -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def capture() -> tuple[dict[str, Any], CaptureAlarms]:
    stack = _stack()
    pipeline = _pipeline(stack)
    topic = _topic(stack, forward_to_topic_arns=[FORWARD_TOPIC])
    alarms = CaptureAlarms(stack, "CaptureAlarms", pipeline=pipeline, topic=topic, alarm_name_prefix="probe",
                           runbook_url="https://example.com/runbooks")
    return Template.from_stack(stack).to_json(), alarms


# name -> (namespace, metric, statistic, dimensions, comparison, threshold, period, evaluations, missing data)
EXPECTED_CAPTURE_ALARMS = {
    "probe-capture-dead-letters": ("AWS/SQS", "ApproximateNumberOfMessagesVisible", "Maximum", None,
                                   "GreaterThanThreshold", 0, 300, 1, "notBreaching"),
    "probe-capture-processor-errors": ("AWS/Lambda", "Errors", "Sum", None, "GreaterThanThreshold", 0, 300, 1,
                                       "notBreaching"),
    "probe-capture-failed-messages": ("HyperPodInference/CaptureProcessor", "FailedMessages", "Sum",
                                      [{"Name": "Pipeline", "Value": "Probe/Pipeline"}], "GreaterThanThreshold", 0,
                                      300, 1, "notBreaching"),
    "probe-capture-processor-throttles": ("AWS/Lambda", "Throttles", "Sum", None, "GreaterThanThreshold", 0, 300, 3,
                                          "notBreaching"),
    "probe-capture-duration-near-timeout": ("AWS/Lambda", "Duration", "Maximum", None, "GreaterThanThreshold",
                                            720000, 300, 1, "notBreaching"),
    "probe-capture-backlog-age": ("AWS/SQS", "ApproximateAgeOfOldestMessage", "Maximum", None,
                                  "GreaterThanThreshold", 3600, 300, 3, "notBreaching"),
    **{f"probe-capture-quarantined-lines-{tier}": (
        "HyperPodInference/CaptureProcessor", "QuarantinedLines", "Sum",
        [{"Name": "Pipeline", "Value": "Probe/Pipeline"}, {"Name": "Tier", "Value": tier}],
        "GreaterThanThreshold", 0, 3600, 1, "notBreaching") for tier in ("sme", "pod", "alb")},
    **{f"probe-capture-no-curated-output-{tier}": (
        "HyperPodInference/CaptureProcessor", "FilesWritten", "Sum",
        [{"Name": "Pipeline", "Value": "Probe/Pipeline"}, {"Name": "Tier", "Value": tier}],
        "LessThanThreshold", 1, 3600, 12, "breaching") for tier in ("sme", "pod", "alb")},
}


def test_capture_alarms_watch_what_the_issue_lists(capture: tuple[dict[str, Any], CaptureAlarms]) -> None:
    alarms = _alarms_by_name(capture[0])
    assert sorted(alarms) == sorted(EXPECTED_CAPTURE_ALARMS)
    for name, (namespace, metric, statistic, dimensions, comparison, threshold, period, evaluations,
               missing) in EXPECTED_CAPTURE_ALARMS.items():
        props = alarms[name]
        assert (props["Namespace"], props["MetricName"], props["Statistic"]) == (namespace, metric, statistic), name
        if dimensions is not None:
            assert props["Dimensions"] == dimensions, name
        assert (props["ComparisonOperator"], props["Threshold"], props["Period"]) == (comparison, threshold, period)
        assert (props["EvaluationPeriods"], props["TreatMissingData"]) == (evaluations, missing), name
        assert "Runbook: https://example.com/runbooks#" in props["AlarmDescription"], name


def test_the_pipelines_own_alarms_are_named_and_wired_not_duplicated(
        capture: tuple[dict[str, Any], CaptureAlarms]) -> None:
    template, alarms = capture
    assert alarms.alarms["dead_letters"] is alarms.pipeline.alarms["dead_letters"]
    assert alarms.alarms["processor_errors"] is alarms.pipeline.alarms["function_errors"]
    dead_letters = _alarms_by_name(template)["probe-capture-dead-letters"]
    assert dead_letters["AlarmDescription"].startswith("Capture objects failed processing 5 times")
    assert dead_letters["AlarmDescription"].endswith("#capture-dead-letters")


def test_every_capture_alarm_notifies_the_topic_and_its_forwarded_topic_on_alarm_and_ok(
        capture: tuple[dict[str, Any], CaptureAlarms]) -> None:
    for name, props in _alarms_by_name(capture[0]).items():
        for key in ("AlarmActions", "OKActions"):
            assert len(props[key]) == 2, (name, key)
            assert FORWARD_TOPIC in props[key], (name, key)
        assert "InsufficientDataActions" not in props


def test_alarm_names_are_exposed(capture: tuple[dict[str, Any], CaptureAlarms]) -> None:
    names = capture[1].alarm_names
    assert names["dead_letters"] == "probe-capture-dead-letters"
    assert names["no_curated_output_pod"] == "probe-capture-no-curated-output-pod"


def test_only_the_tiers_capture_is_on_for_get_tier_alarms_and_alarms_can_be_left_out() -> None:
    stack = _stack()
    CaptureAlarms(stack, "CaptureAlarms", pipeline=_pipeline(stack), alarm_name_prefix="p", expected_tiers=["pod"],
                  throttles=None, notify_on_ok=False,
                  no_curated_output=AlarmSettings(threshold=1, period=Duration.hours(1), evaluation_periods=24))
    alarms = _alarms_by_name(Template.from_stack(stack).to_json())
    assert sorted(alarms) == ["p-capture-backlog-age", "p-capture-dead-letters", "p-capture-duration-near-timeout",
                              "p-capture-failed-messages", "p-capture-no-curated-output-pod",
                              "p-capture-processor-errors", "p-capture-quarantined-lines-pod"]
    assert alarms["p-capture-no-curated-output-pod"]["EvaluationPeriods"] == 24
    assert "24 hours" in alarms["p-capture-no-curated-output-pod"]["AlarmDescription"]
    assert all("AlarmActions" not in props for props in alarms.values())  # no topic: no actions


def test_capture_is_off_no_tier_alarms() -> None:
    stack = _stack()
    CaptureAlarms(stack, "CaptureAlarms", pipeline=_pipeline(stack), alarm_name_prefix="p", expected_tiers=())
    assert not [n for n in _alarms_by_name(Template.from_stack(stack).to_json()) if "-sme" in n or "-pod" in n]


FIVE = Duration.minutes(5)


@pytest.mark.parametrize(("props", "code", "path"), [
    ({"alarm_name_prefix": "-p"}, "CaptureAlarms.BadNamePrefix", "alarm_name_prefix"),
    ({"runbook_url": "http://example.com/runbooks"}, "CaptureAlarms.BadRunbookUrl", "runbook_url"),
    ({"expected_tiers": ["s3"]}, "CaptureAlarms.UnknownTier", "expected_tiers[0]"),
    ({"duration_near_timeout": AlarmSettings(threshold=100, period=FIVE)}, "CaptureAlarms.ThresholdOutOfRange",
     "duration_near_timeout.threshold"),
    ({"quarantined_lines": AlarmSettings(threshold=0, period=Duration.seconds(90))}, "CaptureAlarms.AlarmPeriod",
     "quarantined_lines.period"),
    ({"throttles": AlarmSettings(threshold=0, period=FIVE, evaluation_periods=0)}, "CaptureAlarms.EvaluationPeriods",
     "throttles.evaluation_periods"),
    ({"throttles": AlarmSettings(threshold=0, period=FIVE, evaluation_periods=2, datapoints_to_alarm=3)},
     "CaptureAlarms.DatapointsToAlarm", "throttles.datapoints_to_alarm"),
    ({"backlog_age": AlarmSettings(threshold=60, period=FIVE, evaluation_periods=289)},
     "CaptureAlarms.EvaluationRange", "backlog_age.evaluation_periods"),
    ({"no_curated_output": AlarmSettings(threshold=1, period=Duration.hours(1), evaluation_periods=169)},
     "CaptureAlarms.EvaluationRange", "no_curated_output.evaluation_periods"),
])
def test_capture_alarm_props_are_validated(props: dict[str, Any], code: str, path: str) -> None:
    stack = _stack()
    pipeline = _pipeline(stack)
    with pytest.raises(ConfigError) as raised:
        CaptureAlarms(stack, "CaptureAlarms", pipeline=pipeline, **({"alarm_name_prefix": "p"} | props))
    assert [(p.code, p.path) for p in raised.value.problems] == [(code, path)]
    assert "(got " in str(raised.value)


def test_the_alarms_use_the_metrics_the_capture_processor_emits(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    """Namespace, dimensions and names as lambda/capture_processor writes them (EMF)."""
    sys.path.insert(0, str(REPO / "lambda" / "capture_processor"))
    from capture_core import telemetry
    from capture_core.processor import ObjectReport
    from capture_core.routing import Tier

    assert telemetry.METRICS_NAMESPACE == capture_alarms_module.PROCESSOR_NAMESPACE
    assert tuple(str(tier) for tier in Tier) == ("sme", "pod", "alb") == capture_alarms_module.TIERS
    emitted = ObjectReport("bucket", "key", tier="pod").metrics()
    assert set(capture_alarms_module.TIER_METRICS) <= set(emitted)
    assert "SkippedObjects" in ObjectReport("bucket", "key").metrics()
    # The handler's dimensions, from its own emission with the pipeline's environment, are the alarms' ones.
    import handler as processor_handler

    stack = _stack()
    pipeline = _pipeline(stack)
    environment = Template.from_stack(stack).find_resources("AWS::Lambda::Function")
    (function,) = [f for f in environment.values() if "METRICS_PIPELINE" in json.dumps(f)]
    assert function["Properties"]["Environment"]["Variables"]["METRICS_PIPELINE"] == pipeline.metrics_pipeline
    monkeypatch.setenv("METRICS_PIPELINE", pipeline.metrics_pipeline)
    processor_handler._report(ObjectReport("bucket", "key", tier="pod"))
    processor_handler._report(ObjectReport("bucket", "key"))
    documents = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    # Each EMF line's dimension set with its values, as CloudWatch would key the series.
    emitted = [{name: d[name] for name in d["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0]}
               for d in documents if "_aws" in d]
    for tier in (None, "pod"):
        metric = capture_alarms_module.processor_metric("FilesWritten", pipeline=pipeline.metrics_pipeline, tier=tier)
        wanted = {"Pipeline": pipeline.metrics_pipeline, **({"Tier": tier} if tier else {})}
        assert wanted in emitted
        assert metric.dimensions == wanted


# ---- CertificateAlarms ---------------------------------------------------------------------------------------

def _certificate(stack: Stack, arn: str = CERTIFICATE_ARN) -> acm.ICertificate:
    return acm.Certificate.from_certificate_arn(stack, "Certificate", arn)


def test_certificate_alarm_on_days_to_expiry() -> None:
    stack = _stack()
    alarms = CertificateAlarms(stack, "Certs", certificates={"endpoints": _certificate(stack)}, topic=_topic(stack),
                               alarm_name_prefix="probe")
    props = _alarms_by_name(Template.from_stack(stack).to_json())["probe-certificate-endpoints-days-to-expiry"]
    assert {k: props[k] for k in ("Namespace", "MetricName", "Statistic", "Period", "Threshold", "ComparisonOperator",
                                  "EvaluationPeriods", "TreatMissingData", "Dimensions")} == {
        "Namespace": "AWS/CertificateManager", "MetricName": "DaysToExpiry", "Statistic": "Minimum",
        "Period": 86400, "Threshold": 45, "ComparisonOperator": "LessThanThreshold", "EvaluationPeriods": 1,
        "TreatMissingData": "missing", "Dimensions": [{"Name": "CertificateArn", "Value": CERTIFICATE_ARN}]}
    # No datapoint at all: the certificate expired or was deleted, or the ARN names nothing.
    assert props["InsufficientDataActions"] and props["OKActions"] and props["AlarmActions"]
    assert alarms.alarm_names == {"endpoints": "probe-certificate-endpoints-days-to-expiry"}


@pytest.mark.parametrize(("certificates", "code", "path"), [
    ({}, "CertificateAlarms.NoCertificates", "certificates"),
    ({"Endpoints": CERTIFICATE_ARN}, "CertificateAlarms.BadLabel", "certificates"),
    ({"endpoints": CERTIFICATE_ARN.replace(REGION, "us-east-1")}, "CertificateAlarms.OtherRegion",
     "certificates.endpoints"),
    ({"endpoints": f"arn:aws:iam::{ACCOUNT}:server-certificate/x"}, "CertificateAlarms.BadCertificateArn",
     "certificates.endpoints"),
])
def test_certificate_props_are_validated(certificates: dict[str, str], code: str, path: str) -> None:
    stack = _stack()
    imported = {label: acm.Certificate.from_certificate_arn(stack, f"C{i}", arn)
                for i, (label, arn) in enumerate(certificates.items())}
    with pytest.raises(ConfigError) as raised:
        CertificateAlarms(stack, "Certs", certificates=imported, alarm_name_prefix="p")
    assert [(p.code, p.path) for p in raised.value.problems] == [(code, path)]


def test_a_threshold_before_managed_renewal_is_warned_about() -> None:
    stack = _stack()
    CertificateAlarms(stack, "Certs", certificates={"endpoints": _certificate(stack)}, alarm_name_prefix="p",
                      days_to_expiry=AlarmSettings(threshold=61, period=Duration.days(1)))
    Annotations.from_stack(stack).has_warning(
        "/Probe/Certs", Match.string_like_regexp(".*CertificateAlarms:beforeManagedRenewal"))


def test_a_certificate_created_in_the_stack_is_watched_by_its_reference() -> None:
    from aws_cdk import aws_route53 as route53

    stack = _stack()
    zone = route53.PublicHostedZone(stack, "Zone", zone_name="inference.example.com")
    certificate = acm.Certificate(stack, "Cert", domain_name="a.inference.example.com",
                                  validation=acm.CertificateValidation.from_dns(zone))
    CertificateAlarms(stack, "Certs", certificates={"endpoints": certificate}, alarm_name_prefix="p")
    (props,) = _alarms_by_name(Template.from_stack(stack).to_json()).values()
    assert props["Dimensions"][0]["Value"] == {"Ref": stack.get_logical_id(certificate.node.default_child)}


# ---- CaptureSidecarMetrics -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sidecar() -> tuple[dict[str, Any], CaptureSidecarMetrics]:
    stack, cluster = _cluster_stack()
    metrics = CaptureSidecarMetrics(stack, "SidecarMetrics", cluster=cluster, namespace="inference",
                                    cluster_name="gpu-cluster", role_name="gpu-capture-metrics-agent",
                                    topic=_topic(stack), alarm_name_prefix="probe")
    return Template.from_stack(stack).to_json(), metrics




def _objects(template: dict[str, Any]) -> list[dict[str, Any]]:
    (manifest,) = [v["Properties"]["Manifest"] for v in template["Resources"].values()
                   if v["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"]
    return json.loads(_joined(manifest))


def test_the_agent_is_applied_with_a_namespaced_role_and_pinned_image(
        sidecar: tuple[dict[str, Any], CaptureSidecarMetrics]) -> None:
    template, _ = sidecar
    objects = {(o["kind"], o["metadata"]["name"]): o for o in _objects(template)}
    agent = "capture-metrics-agent"
    assert sorted(objects) == [("ConfigMap", f"{agent}-config"), ("ConfigMap", f"{agent}-scrape"),
                               ("Deployment", agent), ("NetworkPolicy", agent), ("Role", agent),
                               ("RoleBinding", agent), ("ServiceAccount", agent)]
    # Nothing may connect to the agent; it reaches the sidecars' metrics ports and HTTPS, never the metadata service.
    assert objects[("NetworkPolicy", agent)]["spec"] == {
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": agent}}, "policyTypes": ["Ingress", "Egress"],
        "ingress": [],
        "egress": [
            {"to": [{"podSelector": {"matchLabels": {"hyperpod-inference-iac/workload": "portable-model-server"}}},
                    {"podSelector": {"matchLabels": {"hyperpod-inference-iac/workload": "gateway-entry"}}}],
             "ports": [{"protocol": "TCP", "port": 9090}]},
            {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.0.0/16"]}}],
             "ports": [{"protocol": "TCP", "port": 443}]}]}
    pod_labels = objects[("Deployment", agent)]["spec"]["template"]["metadata"]["labels"]
    assert pod_labels["hyperpod-inference-iac/workload"] == agent  # the platform's own pod, not the operator's
    assert all(o["metadata"]["namespace"] == "inference" for o in objects.values())
    assert objects[("Role", "capture-metrics-agent")]["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    account = objects[("ServiceAccount", "capture-metrics-agent")]
    assert account["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": f"arn:aws:iam::{ACCOUNT}:role/gpu-capture-metrics-agent"}
    (container,) = objects[("Deployment", "capture-metrics-agent")]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == sidecar_module.CLOUDWATCH_AGENT_IMAGE
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert objects[("Deployment", "capture-metrics-agent")]["spec"]["replicas"] == 1


def test_the_agent_role_may_only_write_its_own_log_group(
        sidecar: tuple[dict[str, Any], CaptureSidecarMetrics]) -> None:
    template, metrics = sidecar
    (policy,) = [v["Properties"]["PolicyDocument"] for v in template["Resources"].values()
                 if v["Type"] == "AWS::IAM::Policy"]
    actions = sorted(a for s in policy["Statement"] for a in (s["Action"] if isinstance(s["Action"], list)
                                                             else [s["Action"]]))
    assert actions == ["logs:CreateLogStream", "logs:DescribeLogStreams", "logs:PutLogEvents"]
    log_group = Stack.of(metrics).get_logical_id(metrics.log_group.node.default_child)
    assert all(s["Resource"] == {"Fn::GetAtt": [log_group, "Arn"]} for s in policy["Statement"])
    (group,) = [v["Properties"] for v in template["Resources"].values() if v["Type"] == "AWS::Logs::LogGroup"]
    assert group["LogGroupName"] == "/aws/containerinsights/gpu-cluster/capture-sidecar"
    assert group["RetentionInDays"] == 30
    (role,) = [v["Properties"] for v in template["Resources"].values()
               if v["Properties"].get("RoleName") == "gpu-capture-metrics-agent"]
    (statement,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"


def test_sidecar_alarms_on_dropped_records_and_failed_uploads(
        sidecar: tuple[dict[str, Any], CaptureSidecarMetrics]) -> None:
    alarms = _alarms_by_name(sidecar[0])
    dropped, failed = alarms["probe-sidecar-dropped-records"], alarms["probe-sidecar-failed-uploads"]
    base = [{"Name": "ClusterName", "Value": "gpu-cluster"}, {"Name": "Namespace", "Value": "inference"}]
    assert (dropped["Namespace"], dropped["MetricName"], dropped["Dimensions"]) == (
        "ContainerInsights/Prometheus", "capture_sidecar_records_dropped_total", base)
    assert (failed["MetricName"], failed["Dimensions"]) == (
        "capture_sidecar_uploads_total", [*base, {"Name": "result", "Value": "failed"}])
    assert (dropped["Statistic"], dropped["Threshold"], dropped["EvaluationPeriods"]) == ("Sum", 0, 1)
    assert (failed["Threshold"], failed["EvaluationPeriods"], failed["Period"]) == (0, 3, 300)
    rejected = alarms["probe-sidecar-rejected-requests"]
    assert (rejected["MetricName"], rejected["Dimensions"], rejected["Threshold"]) == (
        "capture_sidecar_requests_rejected_memory_total", base, 0)
    # A dead or hung agent sends nothing: the heartbeat is the captured-records series, and silence breaches.
    silent = alarms["probe-sidecar-no-metrics"]
    assert (silent["MetricName"], silent["Dimensions"], silent["Statistic"]) == (
        "capture_sidecar_records_captured_total", base, "SampleCount")
    assert (silent["ComparisonOperator"], silent["Threshold"], silent["Period"], silent["TreatMissingData"]) == (
        "LessThanThreshold", 1, 900, "breaching")
    assert len(alarms) == 4


def test_the_agent_publishes_the_series_the_alarms_and_the_dashboard_use() -> None:
    objects = sidecar_metrics_manifests(namespace="inference", cluster_name="c", region=REGION,
                                        role_arn="arn:aws:iam::111122223333:role/r", log_group_name="/g")
    configs = {o["metadata"]["name"]: o["data"] for o in objects if o["kind"] == "ConfigMap"}
    agent = json.loads(configs["capture-metrics-agent-config"]["cwagentconfig.json"])
    prometheus = agent["logs"]["metrics_collected"]["prometheus"]
    assert agent["agent"] == {"region": REGION}
    assert (prometheus["cluster_name"], prometheus["log_group_name"]) == ("c", "/g")
    declared = {(selector.strip("^$"), tuple(dims)) for d in prometheus["emf_processor"]["metric_declaration"]
                for selector in d["metric_selectors"] for dims in d["dimensions"]}
    assert ("capture_sidecar_records_dropped_total", ("ClusterName", "Namespace")) in declared
    assert ("capture_sidecar_records_dropped_total", ("ClusterName", "Namespace", "reason")) in declared
    assert ("capture_sidecar_uploads_total", ("ClusterName", "Namespace", "result")) in declared
    assert ("capture_sidecar_requests_rejected_memory_total", ("ClusterName", "Namespace")) in declared
    scrape = yaml.safe_load(configs["capture-metrics-agent-scrape"]["prometheus.yaml"])
    (job,) = scrape["scrape_configs"]
    assert job["kubernetes_sd_configs"] == [{"role": "pod", "namespaces": {"names": ["inference"]}}]
    assert job["relabel_configs"][0]["regex"] == "capture-sidecar;metrics"


def test_metric_names_and_labels_are_the_ones_the_sidecar_exposes() -> None:
    sys.path.insert(0, str(REPO / "sidecar"))
    from capture_sidecar import metrics

    exposition = metrics.SidecarMetrics().render()
    for name in (sidecar_module.RECORDS_CAPTURED, sidecar_module.RECORDS_UPLOADED, sidecar_module.RECORDS_DROPPED,
                 sidecar_module.UPLOADS, sidecar_module.REQUESTS_REJECTED):
        assert f"# TYPE {name} counter" in exposition, name
    assert sidecar_module.DROP_REASONS == metrics.DROP_REASONS
    for result in sidecar_module.UPLOAD_RESULTS:
        assert f'{sidecar_module.UPLOADS}{{result="{result}"}}' in exposition
    # The per-model series the new alarms read, with the labels they select on.
    for name in (sidecar_module.REQUESTS, sidecar_module.FIRST_CHUNKS, sidecar_module.TOKENS,
                 sidecar_module.PARTIAL_EXCHANGES):
        assert f"# TYPE {name} counter" in exposition, name
    assert sidecar_module.STATUS_CLASSES == metrics.STATUS_CLASSES
    for status_class in sidecar_module.STATUS_CLASSES:
        assert f'{sidecar_module.REQUESTS}{{model="unknown",status_class="{status_class}"}}' in exposition
    assert sidecar_module.FIRST_CHUNK_BUCKETS == metrics.TIME_TO_FIRST_CHUNK_BUCKETS
    for bound in sidecar_module.FIRST_CHUNK_BUCKETS:
        label = sidecar_module.format_bound(bound)
        assert label == metrics.format_bound(bound)
        assert f'{sidecar_module.FIRST_CHUNKS}{{model="unknown",le="{label}"}}' in exposition
    assert f'{sidecar_module.FIRST_CHUNKS}{{model="unknown",le="+Inf"}}' in exposition
    from capture_sidecar import settings

    assert sidecar_module.MODEL_NAME.pattern == settings.MODEL_NAME.pattern
    # What the agent drops before its EMF step is exactly the histograms (which it could not publish).
    histogram_series = {line.split("{")[0] for line in exposition.splitlines()
                        if line and not line.startswith("#") and re.fullmatch(sidecar_module.HISTOGRAM_SERIES,
                                                                                line.split("{")[0])}
    assert histogram_series == {f"capture_sidecar_{name}_seconds_{part}" for name in
                                ("request_duration", "time_to_first_chunk") for part in ("bucket", "sum", "count")}
    assert "# TYPE capture_sidecar_request_duration_seconds histogram" in exposition


@pytest.fixture(scope="module")
def model_alarms() -> dict[str, dict[str, Any]]:
    stack, cluster = _cluster_stack()
    CaptureSidecarMetrics(stack, "SidecarMetrics", cluster=cluster, namespace="inference", cluster_name="gpu-cluster",
                          topic=_topic(stack), alarm_name_prefix="probe", models=["llama", "org/qwen"],
                          first_chunk_p99=AlarmSettings(threshold=2, period=FIVE))
    return _alarms_by_name(Template.from_stack(stack).to_json())


def _math(alarm: dict[str, Any]) -> tuple[str, dict[str, tuple[str, dict[str, str], str, int]]]:
    """The returned expression and each input: metric name, dimensions, statistic, period."""
    expression = next(m["Expression"] for m in alarm["Metrics"] if "Expression" in m)
    inputs = {m["Id"]: (m["MetricStat"]["Metric"]["MetricName"],
                        {d["Name"]: d["Value"] for d in m["MetricStat"]["Metric"]["Dimensions"]},
                        m["MetricStat"]["Stat"], m["MetricStat"]["Period"])
              for m in alarm["Metrics"] if "MetricStat" in m}
    return expression, inputs


def test_each_model_gets_a_5xx_rate_and_a_p99_first_chunk_alarm(model_alarms: dict[str, dict[str, Any]]) -> None:
    names = sorted(name for name in model_alarms if name.startswith(("probe-sidecar-llama", "probe-sidecar-org")))
    assert names == ["probe-sidecar-llama-first-chunk-p99", "probe-sidecar-llama-server-error-rate",
                     "probe-sidecar-org-qwen-first-chunk-p99", "probe-sidecar-org-qwen-server-error-rate"]
    base = {"ClusterName": "gpu-cluster", "Namespace": "inference", "model": "org/qwen"}
    errors = model_alarms["probe-sidecar-org-qwen-server-error-rate"]
    assert _math(errors) == ("100 * errors / requests", {
        "errors": ("capture_sidecar_requests_total", {**base, "status_class": "5xx"}, "Sum", 300),
        "requests": ("capture_sidecar_requests_total", base, "Sum", 300)})
    assert (errors["Threshold"], errors["EvaluationPeriods"], errors["DatapointsToAlarm"]) == (5, 3, 2)
    assert (errors["ComparisonOperator"], errors["TreatMissingData"]) == ("GreaterThanThreshold", "notBreaching")
    assert "sidecar-server-error-rate" in errors["AlarmDescription"]
    # p99 above 2 s: more than 1 % of the 2xx responses outside the le="2" bucket.
    slow = model_alarms["probe-sidecar-org-qwen-first-chunk-p99"]
    assert _math(slow) == ("100 * (responses - within) / responses", {
        "responses": ("capture_sidecar_first_chunks_total", {**base, "le": "+Inf"}, "Sum", 300),
        "within": ("capture_sidecar_first_chunks_total", {**base, "le": "2"}, "Sum", 300)})
    assert (slow["Threshold"], slow["EvaluationPeriods"]) == (1, 1)
    assert "above 2 s" in slow["AlarmDescription"] and "sidecar-first-chunk-p99" in slow["AlarmDescription"]
    assert all(alarm["AlarmActions"] for alarm in model_alarms.values())


def test_the_agent_publishes_the_per_model_series() -> None:
    objects = sidecar_metrics_manifests(namespace="inference", cluster_name="c", region=REGION,
                                        role_arn="arn:aws:iam::111122223333:role/r", log_group_name="/g")
    configs = {o["metadata"]["name"]: o["data"] for o in objects if o["kind"] == "ConfigMap"}
    agent = json.loads(configs["capture-metrics-agent-config"]["cwagentconfig.json"])
    declared = {(selector.strip("^$"), tuple(dims)) for d in
                agent["logs"]["metrics_collected"]["prometheus"]["emf_processor"]["metric_declaration"]
                for selector in d["metric_selectors"] for dims in d["dimensions"]}
    model = ("ClusterName", "Namespace", "model")
    assert {(sidecar_module.REQUESTS, model), (sidecar_module.REQUESTS, (*model, "status_class")),
            (sidecar_module.FIRST_CHUNKS, (*model, "le")), (sidecar_module.TOKENS, (*model, "type")),
            (sidecar_module.PARTIAL_EXCHANGES, (*model, "reason"))} <= declared
    (job,) = yaml.safe_load(configs["capture-metrics-agent-scrape"]["prometheus.yaml"])["scrape_configs"]
    assert job["metric_relabel_configs"][1] == {"source_labels": ["__name__"], "action": "drop",
                                                "regex": sidecar_module.HISTOGRAM_SERIES}


def test_the_scrape_targets_are_the_portable_charts_sidecar_container_and_port() -> None:
    app = cdk8s.Testing.app()
    chart = PortableModelServerChart(app, "portable", workload=samples.planned_portable(samples.portable_server()),
                                     namespace=samples.NAMESPACE, values=samples.VALUES)
    (deployment,) = [o for o in chart.to_json() if o["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (sidecar_container,) = [c for c in pod.get("initContainers", []) if c["name"] == sidecar_module.SIDECAR_CONTAINER]
    assert sidecar_module.SIDECAR_METRICS_PORT_NAME in [p.get("name") for p in sidecar_container["ports"]]


@pytest.mark.parametrize(("props", "code", "path"), [
    ({"cluster_name": "-c"}, "CaptureSidecarMetrics.BadClusterName", "cluster_name"),
    ({"namespace": "Inference"}, "CaptureSidecarMetrics.BadNamespace", "namespace"),
    ({"role_name": "a role"}, "CaptureSidecarMetrics.BadRoleName", "role_name"),
    ({"image": "public.ecr.aws/cloudwatch-agent/cloudwatch-agent"}, "CaptureSidecarMetrics.UnpinnedImage", "image"),
    ({"scrape_interval": Duration.seconds(5)}, "CaptureSidecarMetrics.ScrapeInterval", "scrape_interval"),
    ({"dropped_records": AlarmSettings(threshold=-1, period=FIVE)}, "CaptureSidecarMetrics.ThresholdOutOfRange",
     "dropped_records.threshold"),
    ({"no_metrics": AlarmSettings(threshold=0, period=FIVE)}, "CaptureSidecarMetrics.ThresholdOutOfRange",
     "no_metrics.threshold"),
    ({"models": ["ok", 'bad"name']}, "CaptureSidecarMetrics.BadModelName", "models[1]"),
    ({"models": ["twice", "twice"]}, "CaptureSidecarMetrics.BadModelName", "models[1]"),
    ({"server_error_rate": AlarmSettings(threshold=101, period=FIVE)}, "CaptureSidecarMetrics.ThresholdOutOfRange",
     "server_error_rate.threshold"),
    ({"first_chunk_p99": AlarmSettings(threshold=3, period=FIVE)}, "CaptureSidecarMetrics.FirstChunkBound",
     "first_chunk_p99.threshold"),
])
def test_sidecar_metrics_props_are_validated(props: dict[str, Any], code: str, path: str) -> None:
    stack, cluster = _cluster_stack()
    with pytest.raises(ConfigError) as raised:
        CaptureSidecarMetrics(stack, "M", cluster=cluster, **({"namespace": "inference", "cluster_name": "c",
                                                               "alarm_name_prefix": "p"} | props))
    assert [(p.code, p.path) for p in raised.value.problems] == [(code, path)]


# ---- PlatformDashboard ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def dashboard_body() -> dict[str, Any]:
    app = App()
    storage = Stack(app, "Storage", env=ENV)
    pipeline = _pipeline(storage)
    topic = _topic(storage)
    capture = CaptureAlarms(storage, "CaptureAlarms", pipeline=pipeline, topic=topic, alarm_name_prefix="p",
                            expected_tiers=["pod"])
    other = Stack(app, "Cluster", env=ENV)
    certificate = _certificate(other)
    PlatformDashboard(other, "Dashboard", dashboard_name="p", pipeline=pipeline, tiers=["pod"],
                      certificates={"endpoints": certificate}, alarms=list(capture.alarms.values()))
    dashboard = _only(Template.from_stack(other).to_json(), "AWS::CloudWatch::Dashboard")
    assert dashboard["DashboardName"] == "p"
    return json.loads(_joined(dashboard["DashboardBody"]))


def test_dashboard_shows_volume_throughput_errors_quarantine_queues_and_certificate(
        dashboard_body: dict[str, Any]) -> None:
    widgets = {w["properties"]["title"]: w["properties"] for w in dashboard_body["widgets"]}
    metrics = {title: {m[1] for m in props.get("metrics", []) if isinstance(m[1], str)}
               for title, props in widgets.items()}
    assert metrics["Capture volume per tier (records)"] == {"Records"}
    assert metrics["Processor throughput"] == {"Objects", "FilesWritten"}
    assert metrics["Processor errors"] == {"FailedMessages", "Errors", "Throttles"}
    assert metrics["Quarantined lines per tier"] == {"QuarantinedLines"}
    assert metrics["Queues"] == {"ApproximateNumberOfMessagesVisible", "ApproximateAgeOfOldestMessage"}
    assert metrics["Certificate days left (ACM DaysToExpiry)"] == {"DaysToExpiry"}


def test_dashboard_lists_alarms_of_another_stack_by_their_fixed_names(dashboard_body: dict[str, Any]) -> None:
    (status,) = [w["properties"] for w in dashboard_body["widgets"] if w["type"] == "alarm"]
    assert f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:p-capture-dead-letters" in status["alarms"]
    assert len(status["alarms"]) == 8


def test_a_bad_dashboard_name_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"\[PlatformDashboard.BadName\] dashboard_name"):
        PlatformDashboard(_stack(), "Dashboard", dashboard_name="my dashboard")


# ---- review table --------------------------------------------------------------------------------------------

def test_alarm_table_lists_name_metric_condition_window_and_actions(
        capture: tuple[dict[str, Any], CaptureAlarms]) -> None:
    rows = {row.name: row for row in describe_alarms(capture[0])}
    row = rows["probe-capture-no-curated-output-pod"]
    assert row.metric == "HyperPodInference/CaptureProcessor FilesWritten Sum [Pipeline=Probe/Pipeline, Tier=pod]"
    assert (row.condition, row.window, row.missing_data, row.actions) == ("< 1", "12 of 12 x 1 h", "breaching",
                                                                          "ALARM, OK")
    table = alarm_table({"Probe": capture[0]})
    assert table.startswith("| stack | alarm |") and "| Probe | probe-capture-dead-letters |" in table


def test_alarm_settings_read_as_a_window() -> None:
    assert AlarmSettings(threshold=0, period=FIVE, evaluation_periods=3, datapoints_to_alarm=2).window == \
        "2 of 3 x 5 min"
    assert AlarmSettings(threshold=45, period=Duration.days(1)).window == "1 of 1 x 1 d"


def test_every_runbook_link_has_its_section_and_every_code_its_page(
        capture: tuple[dict[str, Any], CaptureAlarms], sidecar: tuple[dict[str, Any], CaptureSidecarMetrics],
        model_alarms: dict[str, dict[str, Any]]) -> None:
    runbooks = (REPO / "docs" / "alarms.md").read_text()
    sections = set(re.findall(r"^### ([a-z0-9-]+)$", runbooks, flags=re.MULTILINE))
    anchors = {props["AlarmDescription"].rsplit("#", 1)[-1] for props in _alarms_by_name(capture[0]).values()}
    anchors |= {props["AlarmDescription"].rsplit("section ", 1)[-1] for props in _alarms_by_name(sidecar[0]).values()}
    anchors |= {props["AlarmDescription"].rsplit("section ", 1)[-1] for props in model_alarms.values()}
    assert anchors | {"certificate-days-to-expiry"} <= sections
    sources = {name: (REPO / "constructs_lib" / "observability" / f"{module}.py").read_text() for name, module in (
        ("alarm-topic", "alarm_topic"), ("capture-alarms", "capture_alarms"),
        ("certificate-alarms", "certificate_alarms"), ("capture-sidecar-metrics", "sidecar_metrics"),
        ("platform-dashboard", "platform_dashboard"))}
    for page, source in sources.items():
        documented = (REPO / "docs" / "constructs" / f"{page}.md").read_text()
        for code in set(re.findall(r'f"\{code\}\.([A-Za-z]+)"', source)):
            assert f".{code}`" in documented or f"`{code}`" in documented or f", {code}" in documented, (page, code)


# ---- the app's config switch ---------------------------------------------------------------------------------

def test_alarms_off_in_the_config_leave_no_topic_and_no_actions(tmp_path: Path) -> None:
    from platform_config import parse_config
    from stacks.gitops import stage_dist
    from stacks.storage_stack import StorageStack

    data = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
    data["alarms"] = {"enabled": False}
    config = parse_config(data)
    stack = StorageStack(App(), "llm-platform-storage", config=config, env=ENV)
    template = Template.from_stack(stack).to_json()
    assert not [v for v in template["Resources"].values() if v["Type"].startswith("AWS::SNS::")]
    alarms = [v["Properties"] for v in template["Resources"].values() if v["Type"] == "AWS::CloudWatch::Alarm"]
    assert len(alarms) == 2 and not any("AlarmActions" in a or "AlarmName" in a for a in alarms)
    staged = stage_dist(config, outdir=tmp_path / "dist", sidecar_image="registry.invalid/sidecar:1")
    try:
        assert "capture-sidecar-metrics.k8s.yaml" not in staged.written
    finally:
        staged.discard()


def test_the_alarm_table_of_a_cloud_assembly_on_the_command_line(
        capture: tuple[dict[str, Any], CaptureAlarms], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hyperpod_inference_iac.observability.alarm_review import main

    (tmp_path / "Probe.template.json").write_text(json.dumps(capture[0]))
    assert main([str(tmp_path)]) == 0
    assert "| Probe | probe-capture-backlog-age |" in capsys.readouterr().out
    assert main([str(tmp_path / "nothing")]) == 2
