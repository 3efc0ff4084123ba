"""The pieces of `make review`, without a synth: policy statements judged by direction, Kubernetes objects
compared field by field, the CDK's diff output read, and hand-made cloud assemblies diffed by the real
CDK CLI (offline), so each rule is shown against the CDK's own engine in seconds."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.synth import CDK, REPO, VENV_BIN
from tools.review import cdkdiff, cfn, k8s, render
from tools.review.model import Line, Review, merge_lines
from tools.review.policies import diff_documents
from tools.review.review import diff_dist, exit_status
from tools.review.synth import waiting_files
from tools.review.template import Template

ACCOUNT = "111122223333"
ANALYST = f"arn:aws:iam::{ACCOUNT}:role/ml-analysts"
NEWCOMER = f"arn:aws:iam::{ACCOUNT}:role/bi-dashboards"
EMPTY = Template.empty("demo")


def doc(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": list(statements)}


def changes(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[tuple[str, bool]]:
    return [(c.text, c.broadens) for c in diff_documents(old, new, EMPTY, EMPTY)]


# ---- policy statements ----------------------------------------------------------------------------

READ = {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/curated/*",
        "Principal": {"AWS": ANALYST}}
ALLOWLIST = {"Sid": "CapturesOnlyListedPrincipals", "Effect": "Deny", "Principal": "*",
             "Action": ["s3:GetObject*", "s3:PutObject*"], "Resource": "arn:aws:s3:::b/*",
             "Condition": {"ArnNotLike": {"aws:PrincipalArn": [ANALYST]}}}


def test_an_allow_gaining_a_principal_broadens() -> None:
    widened = {**READ, "Principal": {"AWS": [ANALYST, NEWCOMER]}}
    [(text, broadens)] = changes(doc(READ), doc(widened))
    assert broadens and f"principals + AWS:{NEWCOMER}" in text


def test_an_allow_losing_an_action_narrows() -> None:
    both = {**READ, "Action": ["s3:GetObject", "s3:GetObjectVersion"]}
    [(text, broadens)] = changes(doc(both), doc(READ))
    assert not broadens and "actions - s3:GetObjectVersion" in text


def test_a_principal_exempted_from_a_deny_broadens() -> None:
    exempt = copy.deepcopy(ALLOWLIST)
    exempt["Condition"]["ArnNotLike"]["aws:PrincipalArn"].append(NEWCOMER)
    [(text, broadens)] = changes(doc(ALLOWLIST), doc(exempt))
    assert broadens and text.startswith("CapturesOnlyListedPrincipals (Deny): now exempts " + NEWCOMER)


def test_a_principal_added_to_a_positive_deny_narrows() -> None:
    deny = {"Sid": "NoRead", "Effect": "Deny", "Principal": "*", "Action": "s3:GetObject*", "Resource": "*",
            "Condition": {"ArnLike": {"aws:PrincipalArn": [ANALYST]}}}
    more = copy.deepcopy(deny)
    more["Condition"]["ArnLike"]["aws:PrincipalArn"].append(NEWCOMER)
    [(_, broadens)] = changes(doc(deny), doc(more))
    assert not broadens


def test_a_condition_removed_from_an_allow_broadens_and_added_narrows() -> None:
    scoped = {**READ, "Condition": {"StringEquals": {"aws:ResourceAccount": ACCOUNT}}}
    [(text, broadens)] = changes(doc(scoped), doc(READ))
    assert broadens and "condition StringEquals aws:ResourceAccount" in text and text.endswith("removed")
    [(_, broadens)] = changes(doc(READ), doc(scoped))
    assert not broadens


def test_statements_added_and_removed_by_effect() -> None:
    assert changes(doc(), doc(READ)) == [(f"new statement: {changes(doc(), doc(READ))[0][0][15:]}", True)]
    assert changes(doc(READ), doc())[0][1] is False
    assert changes(doc(ALLOWLIST), doc())[0][1] is True  # a deny removed
    assert changes(doc(), doc(ALLOWLIST))[0][1] is False


def test_a_condition_it_cannot_order_counts_as_broadening() -> None:
    secure = {**READ, "Condition": {"Bool": {"aws:SecureTransport": "true"}}}
    other = {**READ, "Condition": {"Bool": {"aws:SecureTransport": "false"}}}
    [(text, broadens)] = changes(doc(secure), doc(other))
    assert broadens and "true → false" in text


def test_equal_documents_in_another_order_are_no_change() -> None:
    deny = {"Sid": "NoRead", "Effect": "Deny", "Principal": "*", "Action": "s3:GetObject*", "Resource": "*"}
    assert changes(doc(READ, deny), doc(deny, {**READ, "Action": ["s3:GetObject"]})) == []


def test_a_trust_condition_held_by_a_cfn_json_is_read() -> None:
    def template(subject: str) -> Template:
        return Template("demo", {"Resources": {
            "Trust": {"Type": "Custom::AWSCDKCfnJson", "Properties": {"Value": {"Fn::Join": ["", [
                '{"', {"Fn::Select": [1, {"Fn::Split": [":oidc-provider/", {"Ref": "Oidc"}]}]},
                f':sub":"system:serviceaccount:inference:{subject}"}}']]}}},
            "Oidc": {"Type": "AWS::IAM::OIDCProvider", "Properties": {}},
        }})
    trust = doc({"Effect": "Allow", "Action": "sts:AssumeRoleWithWebIdentity",
                 "Principal": {"Federated": {"Ref": "Oidc"}},
                 "Condition": {"StringEquals": {"Fn::GetAtt": ["Trust", "Value"]}}})
    [found] = diff_documents(trust, trust, template("qwen"), template("*"))
    assert "${Oidc.issuer}:sub + system:serviceaccount:inference:*" in found.text and found.broadens


# ---- Kubernetes objects -------------------------------------------------------------------------------

MODEL = {"apiVersion": "inference.sagemaker.aws.amazon.com/v1", "kind": "InferenceEndpointConfig",
         "metadata": {"name": "mistral-7b", "namespace": "inference"},
         "spec": {"worker": {"image": "vllm/vllm-openai:v0.11.0"}, "replicas": 1,
                  "dataCapture": {"s3Uri": "s3://captures/data-capture",
                                  "modelPod": {"enabled": True, "initialSamplingPercentage": 5,
                                               "payloadConfig": {"maxPayloadSizeKB": 256}},
                                  "loadBalancer": {"enabled": False}}}}


def objects(*docs: dict[str, Any]) -> dict[k8s.Key, dict[str, Any]]:
    return {k8s.key_of(d): d for d in docs}


def lines(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[tuple[str, str, str, bool]]:
    before, after = objects(old) if old else {}, objects(new) if new else {}
    return [(line.group, line.subject, line.text, line.broadens)
            for line in k8s.diff_objects(before, after, lambda key: ("dist/x.k8s.yaml",))]


def edited(obj: dict[str, Any], edit) -> dict[str, Any]:
    copied = copy.deepcopy(obj)
    edit(copied)
    return copied


def test_sampling_up_broadens_and_down_does_not() -> None:
    up = edited(MODEL, lambda o: o["spec"]["dataCapture"]["modelPod"].update(initialSamplingPercentage=100))
    assert lines(MODEL, up) == [("data_governance", "mistral-7b/modelPod", "sampling 5 % → 100 %", True)]
    assert lines(up, MODEL) == [("data_governance", "mistral-7b/modelPod", "sampling 100 % → 5 %", False)]


def test_sampling_removed_means_the_crd_default_of_100() -> None:
    default = edited(MODEL, lambda o: o["spec"]["dataCapture"]["modelPod"].pop("initialSamplingPercentage"))
    assert lines(MODEL, default) == [("data_governance", "mistral-7b/modelPod", "sampling 5 % (removed)", True)]


def test_a_tier_turned_on_and_a_payload_cap_lifted() -> None:
    on = edited(MODEL, lambda o: o["spec"]["dataCapture"]["loadBalancer"].update(enabled=True))
    assert lines(MODEL, on) == [("data_governance", "mistral-7b/loadBalancer",
                                 "capture off → on, sampling 100 % (the CRD's default)", True)]
    uncapped = edited(MODEL, lambda o: o["spec"]["dataCapture"]["modelPod"]["payloadConfig"].update(maxPayloadSizeKB=0))
    assert lines(MODEL, uncapped) == [("data_governance", "mistral-7b/modelPod",
                                       "payload cap 256 KB → 0 KB (no cap)", True)]


def test_workload_changes_read_as_workloads() -> None:
    def edit(o: dict[str, Any]) -> None:
        o["spec"]["worker"]["image"] = "vllm/vllm-openai:v0.12.0"
        o["spec"]["replicas"] = 2
    assert lines(MODEL, edited(MODEL, edit)) == [
        ("workloads", "mistral-7b", "replicas 1 → 2", False),
        ("workloads", "mistral-7b", "image vllm/vllm-openai tag v0.11.0 → v0.12.0", False)]


SIDECAR = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "qwen", "namespace": "inference"},
           "spec": {"template": {"spec": {"initContainers": [{"name": "capture-sidecar", "image": "sidecar:1", "env": [
               {"name": "SAMPLING_PERCENTAGE", "value": "10"}, {"name": "MAX_PAYLOAD_SIZE_KB", "value": "256"}]}]}}}}


def test_the_capture_sidecar_env_is_data_governance() -> None:
    def edit(o: dict[str, Any]) -> None:
        env = o["spec"]["template"]["spec"]["initContainers"][0]["env"]
        env[0]["value"], env[1]["value"] = "50", "64"
    assert lines(SIDECAR, edited(SIDECAR, edit)) == [
        ("data_governance", "qwen/capture-sidecar", "payload cap 256 KB → 64 KB", False),
        ("data_governance", "qwen/capture-sidecar", "sampling 10 % → 50 %", True)]


def test_exposure_of_services_and_network_policies() -> None:
    scheme = "service.beta.kubernetes.io/aws-load-balancer-scheme"
    service = {"apiVersion": "v1", "kind": "Service", "spec": {"type": "LoadBalancer"},
               "metadata": {"name": "qwen", "namespace": "inference", "annotations": {scheme: "internal"}}}
    public = edited(service, lambda o: o["metadata"]["annotations"].update({scheme: "internet-facing"}))
    assert lines(service, public) == [("exposure", "Service inference/qwen",
                                       "load balancer scheme internal → internet-facing", True)]
    policy = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
              "metadata": {"name": "deny", "namespace": "inference"}, "spec": {"podSelector": {}}}
    assert lines(policy, None) == [("exposure", "NetworkPolicy inference/deny", "removed", True)]
    # The first policy of a namespace only restricts (unselected pods admit everything); where another policy
    # exists, a new one may admit more (policies add up), so its rules are read.
    allow = edited(policy, lambda o: o["metadata"].update(name="allow") or o["spec"].update(
        ingress=[{"ports": [{"port": 8080}]}]))
    assert lines(None, allow) == [("exposure", "NetworkPolicy inference/allow",
                                   "new (the namespace had no policy: restricts the pods it selects)", False)]
    before, after = objects(policy), objects(policy) | objects(allow)
    ((_group, subject, text, broadens),) = [
        (line.group, line.subject, line.text, line.broadens)
        for line in k8s.diff_objects(before, after, lambda key: ("dist/x.k8s.yaml",)) if "ingress" in line.text]
    assert subject == "NetworkPolicy inference/allow" and broadens, text
    # Source ranges: none admit everyone, so a first list narrows; adding to a list or dropping it widens.
    ranged = edited(service, lambda o: o["spec"].update(loadBalancerSourceRanges=["10.42.0.0/16"]))
    wider = edited(ranged, lambda o: o["spec"]["loadBalancerSourceRanges"].append("0.0.0.0/0"))
    assert lines(service, ranged) == [("exposure", "Service inference/qwen", "source ranges 10.42.0.0/16 (new)",
                                       False)]
    assert [line[3] for line in lines(ranged, wider)] == [True]
    assert [line[3] for line in lines(ranged, service)] == [True]


def test_rbac_grants_are_identity() -> None:
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "agent", "namespace": "a"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}
    wider = edited(role, lambda o: o["rules"].append({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}))
    [(group, subject, text, broadens)] = lines(role, wider)
    assert (group, subject, broadens) == ("identity", "Role a/agent", True) and '"secrets"' in text
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "agent", "namespace": "a"}, "roleRef": {"kind": "Role", "name": "agent"},
               "subjects": [{"kind": "ServiceAccount", "name": "agent", "namespace": "a"}]}
    assert lines(None, binding) == [
        ("identity", "RoleBinding a/agent", "new: Role agent to ServiceAccount a/agent", True)]


def test_the_same_objects_are_no_change() -> None:
    assert lines(MODEL, copy.deepcopy(MODEL)) == []


def test_the_stacks_kubectl_labels_are_not_the_objects() -> None:
    labelled = edited(MODEL, lambda o: o["metadata"].update(labels={"aws.cdk.eks/prune-c8abc": ""}))
    assert k8s.strip_cdk_labels(labelled) == MODEL


def test_a_manifest_waiting_for_stack_outputs_is_not_removed(tmp_path: Path) -> None:
    import yaml

    for side in ("base", "head"):
        (tmp_path / side).mkdir()
    (tmp_path / "base" / "model-mistral-7b.k8s.yaml").write_text(yaml.safe_dump(MODEL))
    waits = waiting_files("dist/: model-mistral-7b waits for values that exist only after `cdk deploy` "
                          "(CertificateArn, HostedZoneId); render it with `make synth ...`\n")
    assert waits == {"dist/model-mistral-7b.k8s.yaml": "CertificateArn, HostedZoneId"}
    found = diff_dist(tmp_path / "base", tmp_path / "head", {}, waits)
    assert [(line.group, line.subject, line.text, line.broadens) for line in found] == [
        ("other", "InferenceEndpointConfig inference/mistral-7b",
         "now waits for stack outputs (CertificateArn, HostedZoneId) to be written to dist/", False)]
    assert [line.text for line in diff_dist(tmp_path / "base", tmp_path / "head")] == ["removed: replicas 1"]


# ---- the CDK's diff output, read -------------------------------------------------------------------------

SAMPLE = """\
Stack llm-platform-storage
IAM Statement Changes
┌───┬──────────┐
│ + │ ${X.Arn} │
└───┴──────────┘
Resources
[~] AWS::S3::Bucket CaptureStorage/Capture Bucket CaptureBucket6D4BDB8D
 └─ [~] LifecycleConfiguration
     └─ [~] .Rules:
[+] AWS::IAM::Role New/Role NewRole12345678
[-] AWS::Lambda::Function Old/Function OldFunctionABCDEF12 destroy

Outputs
[+] Output CaptureBucketName CaptureBucketName: {"Value":"x"}

✨  Number of stacks with differences: 1
"""


def test_the_diff_output_is_read_by_logical_id() -> None:
    diff = cdkdiff.parse("llm-platform-storage", SAMPLE, {"CaptureBucket6D4BDB8D", "NewRole12345678",
                                                          "OldFunctionABCDEF12"}, broadening=True)
    assert [(c.op, c.type, c.path, c.logical_id, c.properties, c.impact) for c in diff.resources] == [
        ("~", "AWS::S3::Bucket", "CaptureStorage/Capture Bucket", "CaptureBucket6D4BDB8D",
         ["LifecycleConfiguration"], ""),
        ("+", "AWS::IAM::Role", "New/Role", "NewRole12345678", [], ""),
        ("-", "AWS::Lambda::Function", "Old/Function", "OldFunctionABCDEF12", [], "destroy")]
    assert diff.others == [("Outputs", "+", 'Output CaptureBucketName CaptureBucketName: {"Value":"x"}')]


# ---- hand-made cloud assemblies through the real CDK CLI ---------------------------------------------------


def resource(type_: str, path: str, properties: dict[str, Any]) -> dict[str, Any]:
    return {"Type": type_, "Properties": properties, "Metadata": {"aws:cdk:path": f"demo/{path}/Resource"}}


BASE = {"Resources": {
    "CaptureBucket1234ABCD": resource("AWS::S3::Bucket", "CaptureStorage/CaptureBucket", {
        "BucketName": "captures",
        "BucketEncryption": {"ServerSideEncryptionConfiguration": [{"ServerSideEncryptionByDefault": {
            "SSEAlgorithm": "aws:kms", "KMSMasterKeyID": {"Fn::GetAtt": ["Key1234ABCD", "Arn"]}}}]},
        "LifecycleConfiguration": {"Rules": [{"Id": "expire-captures", "ExpirationInDays": 30, "Status": "Enabled"}]},
        "PublicAccessBlockConfiguration": {"BlockPublicAcls": True, "BlockPublicPolicy": True,
                                           "IgnorePublicAcls": True, "RestrictPublicBuckets": True}}),
    "Key1234ABCD": resource("AWS::KMS::Key", "CaptureStorage/Key", {"EnableKeyRotation": True, "KeyPolicy": doc(
        {"Sid": "Admin", "Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"},
         "Action": "kms:DescribeKey", "Resource": "*"})}),
    "Role1234ABCD": resource("AWS::IAM::Role", "Workload/Role", {"RoleName": "qwen", "AssumeRolePolicyDocument": doc(
        {"Effect": "Allow", "Action": "sts:AssumeRole", "Principal": {"Service": "lambda.amazonaws.com"}})}),
    "RolePolicy1234ABCD": resource("AWS::IAM::Policy", "Workload/Role/DefaultPolicy", {
        "PolicyName": "p", "Roles": [{"Ref": "Role1234ABCD"}], "PolicyDocument": doc(
            {"Effect": "Allow", "Action": "s3:PutObject", "Resource": "arn:aws:s3:::captures/data-capture/qwen/*",
             "Condition": {"StringEquals": {"aws:ResourceAccount": ACCOUNT}}})}),
    "Group1234ABCD": resource("AWS::EC2::SecurityGroup", "Network/Group", {"GroupDescription": "g",
                                                                           "SecurityGroupIngress": []}),
    "Processor1234ABCD": resource("AWS::Lambda::Function", "CapturePipeline/Function", {
        "MemorySize": 1024, "Environment": {"Variables": {"REDACT": "email,phone,access_token"}}}),
    "Alarm1234ABCD": resource("AWS::CloudWatch::Alarm", "CapturePipeline/DeadLetterAlarm", {
        "Namespace": "AWS/SQS", "MetricName": "ApproximateNumberOfMessagesVisible", "Statistic": "Maximum",
        "ComparisonOperator": "GreaterThanThreshold", "Threshold": 0, "Period": 300, "EvaluationPeriods": 1}),
}}


def head_template() -> dict[str, Any]:
    head = copy.deepcopy(BASE)
    r = head["Resources"]
    bucket = r["CaptureBucket1234ABCD"]["Properties"]
    bucket["BucketEncryption"] = {"ServerSideEncryptionConfiguration": [{"ServerSideEncryptionByDefault": {
        "SSEAlgorithm": "AES256"}}]}
    bucket["LifecycleConfiguration"]["Rules"][0]["ExpirationInDays"] = 90
    bucket["PublicAccessBlockConfiguration"]["RestrictPublicBuckets"] = False
    r["RolePolicy1234ABCD"]["Properties"]["PolicyDocument"]["Statement"][0].pop("Condition")
    r["Group1234ABCD"]["Properties"]["SecurityGroupIngress"] = [
        {"IpProtocol": "tcp", "FromPort": 443, "ToPort": 443, "CidrIp": "0.0.0.0/0"}]
    r["Processor1234ABCD"]["Properties"]["Environment"]["Variables"]["REDACT"] = "email,phone"
    r["Processor1234ABCD"]["Properties"]["MemorySize"] = 2048
    r["Alarm1234ABCD"]["Properties"].update(Threshold=5, Period=60, AlarmActions=[{"Ref": "Topic1234ABCD"}])
    r["Topic1234ABCD"] = resource("AWS::SNS::Topic", "Alarms/Topic", {"TopicName": "platform-alarms"})
    r["Subscription1234ABCD"] = resource("AWS::SNS::Subscription", "Alarms/Topic/oncall", {
        "Protocol": "email", "Endpoint": "oncall@example.com", "TopicArn": {"Ref": "Topic1234ABCD"}})
    return head


def assembly(directory: Path, template: dict[str, Any]) -> Path:
    directory.mkdir(parents=True)
    (directory / "demo.template.json").write_text(json.dumps(template))
    (directory / "manifest.json").write_text(json.dumps({"version": "55.0.0", "artifacts": {"demo": {
        "type": "aws:cloudformation:stack", "environment": f"aws://{ACCOUNT}/us-west-2",
        "properties": {"templateFile": "demo.template.json", "validateOnSynth": False}, "displayName": "demo"}}}))
    return directory


def review_of(tmp_path: Path, base: dict[str, Any], head: dict[str, Any]) -> tuple[Review, cdkdiff.StackDiff]:
    base_dir, head_dir = assembly(tmp_path / "base", base), assembly(tmp_path / "head", head)
    old, new = Template("demo", base), Template("demo", head)
    env = cdkdiff.cli_env()
    env["PATH"] = f"{VENV_BIN}:{env['PATH']}"
    diff = cdkdiff.run(CDK, "demo", base_dir / "demo.template.json", head_dir, cdkdiff.known_ids(old, new), REPO, env)
    return Review("base", "head", merge_lines(cfn.review_stack(diff, old, new))), diff


@pytest.mark.slow
def test_each_group_read_from_the_cdk_diff(tmp_path: Path) -> None:
    review, diff = review_of(tmp_path, BASE, head_template())
    assert diff.broadening  # the CDK's own verdict: a policy lost its condition, an ingress rule came
    found = {(line.group, line.subject, line.text, line.broadens) for line in review.lines}
    expected = {
        ("identity", "role qwen", "Allow s3:PutObject on arn:aws:s3:::captures/data-capture/qwen/*: condition "
         f"StringEquals aws:ResourceAccount = {ACCOUNT} removed", True),
        ("encryption", "bucket captures", "default encryption SSE-KMS (${CaptureStorage/Key.Arn}) → SSE-S3", True),
        ("exposure", "bucket captures", "public access block RestrictPublicBuckets true → false", True),
        ("exposure", "security group Network/Group", "ingress + tcp 443 from 0.0.0.0/0", True),
        ("data_governance", "captures (bucket captures)", "retention (expire-captures) 30 days → 90 days", True),
        ("data_governance", "capture processor CapturePipeline/Function",
         "redaction rules email, phone, access_token → email, phone (removed: access_token)", True),
        ("alarms", "alarm CapturePipeline/DeadLetterAlarm", "threshold 0 → 5", False),
        ("alarms", "alarm CapturePipeline/DeadLetterAlarm", "period 300 s → 60 s", False),
        ("alarms", "alarm CapturePipeline/DeadLetterAlarm", "alarm actions ${Alarms/Topic} (new)", False),
        ("alarms", "topic platform-alarms", "new", False),
        ("alarms", "subscription to ${Alarms/Topic}", "new: email oncall@example.com", False),
        ("other", "Function CapturePipeline/Function", "MemorySize 1024 → 2048", False),
    }
    assert found == expected
    where = {line.where for line in review.lines if line.subject == "role qwen"}
    assert where == {("demo/Workload/Role/DefaultPolicy",)}
    text, markdown = render.text(review), render.markdown(review)
    assert "alarms (5)" in text and "everything else (1)" in text and "[broadens]" in text
    assert "### alarms (5)" in markdown and "⚠️ **broadens**" in markdown


@pytest.mark.slow
def test_identical_templates_are_no_change(tmp_path: Path) -> None:
    review, diff = review_of(tmp_path, BASE, copy.deepcopy(BASE))
    assert diff.changes == 0 and not diff.broadening and review.lines == []
    assert render.text(review).startswith("No infrastructure changes")


def reviewed(op: str, logical_id: str, base: dict[str, Any], head: dict[str, Any], *properties: str) -> list[tuple]:
    old, new = Template("demo", base), Template("demo", head)
    type_ = (new.resource(logical_id) or old.resource(logical_id))["Type"]
    found = cfn.review_resource(cfn.Resource(cdkdiff.ResourceChange(op, type_, logical_id, "", list(properties)),
                                             old, new))
    return [(line.group, line.subject, line.text, line.broadens) for line in found]


def test_a_resource_removed_whole_is_one_line_unless_its_policy_governed_what_stays() -> None:
    head = copy.deepcopy(BASE)
    del head["Resources"]["Key1234ABCD"]
    assert reviewed("-", "Key1234ABCD", BASE, head) == [("encryption", "key CaptureStorage/Key", "removed", False)]
    deny = {"Effect": "Deny", "Principal": "*", "Action": "s3:*", "Resource": "*",
            "Condition": {"Bool": {"aws:SecureTransport": "false"}}}
    base = copy.deepcopy(BASE)
    base["Resources"]["Policy1234ABCD"] = resource("AWS::S3::BucketPolicy", "Other/Policy", {
        "Bucket": {"Ref": "CaptureBucket1234ABCD"}, "PolicyDocument": doc(deny)})
    found = reviewed("-", "Policy1234ABCD", base, BASE)
    assert found[0] == ("data_governance", "bucket policy Other/Policy", "removed", False)
    assert found[1][3] and found[1][2].startswith("statement removed: Deny s3:*")  # the bucket stays


def test_a_cdk_nag_acknowledgement_is_on_its_resources_line() -> None:
    head = copy.deepcopy(BASE)
    head["Resources"]["RolePolicy1234ABCD"]["Metadata"]["cdk_nag"] = {"rules_to_suppress": [
        {"id": "AwsSolutions-IAM5", "reason": "prefix of its own captures", "applies_to": ["Resource::*"]}]}
    assert reviewed("~", "RolePolicy1234ABCD", BASE, head, "Metadata") == [
        ("identity", "role qwen", "cdk-nag finding acknowledged: AwsSolutions-IAM5 on Resource::* "
         "(prefix of its own captures)", False)]


def test_a_block_removed_from_an_object_is_one_line() -> None:
    scaled = edited(MODEL, lambda o: o["spec"].update(autoScalingSpec={
        "minReplicaCount": 0, "maxReplicaCount": 2, "cooldownPeriod": 900, "pollingInterval": 15}))
    assert lines(scaled, MODEL) == [("workloads", "mistral-7b", "spec.autoScalingSpec removed (4 settings: "
                                     "cooldownPeriod 900, maxReplicaCount 2, minReplicaCount 0, pollingInterval 15)",
                                     False)]


# ---- the gate and the formats ------------------------------------------------------------------------------


def test_fail_on_broadening_only_when_a_line_broadens() -> None:
    quiet = Review("b", "h", [Line("workloads", "m", "replicas 1 → 2")])
    loud = Review("b", "h", [Line("data_governance", "m/modelPod", "sampling 5 % → 100 %", True)])
    assert [exit_status(r, "broadening") for r in (quiet, loud)] == [0, 1]
    assert [exit_status(r, "never") for r in (quiet, loud)] == [0, 0]
    assert exit_status(quiet, "any-change") == 1 and exit_status(Review("b", "h"), "any-change") == 0


def test_json_round_trips_and_markdown_escapes() -> None:
    review = Review("b", "h", [Line("identity", "role a_b", "Allow s3:* on <bucket>|x", True, ("s/p",))])
    assert Review.from_json(json.loads(render.as_json(review))) == review
    markdown = render.markdown(review)
    assert "role a\\_b" in markdown and "s3:\\* on &lt;bucket&gt;\\|x" in markdown


# ---- Lake Formation column grants ---------------------------------------------------------------------------

FINOPS = f"arn:aws:iam::{ACCOUNT}:role/finops"
TEXT = ["decode_error", "input_text", "output_text", "redaction_rules"]


def column_grant(principal: str = FINOPS, excluded: list[str] | None = None, names: list[str] | None = None,
                 permissions: tuple[str, ...] = ("SELECT",)) -> dict[str, Any]:
    table: dict[str, Any] = {"CatalogId": ACCOUNT, "DatabaseName": "llm_platform_capture_iceberg",
                             "Name": "capture_records"}
    if names is not None:
        table["ColumnNames"] = names
    else:
        table["ColumnWildcard"] = {"ExcludedColumnNames": excluded if excluded is not None else TEXT}
    return {"Resources": {"Grant1234ABCD": resource("AWS::LakeFormation::PrincipalPermissions", "Tables/Grant", {
        "Catalog": ACCOUNT, "Principal": {"DataLakePrincipalIdentifier": principal},
        "Resource": {"TableWithColumns": table}, "Permissions": list(permissions), "PermissionsWithGrantOption": []})}}


def grant_review(op: str, base: dict[str, Any] | None, head: dict[str, Any] | None) -> list[tuple]:
    empty: dict[str, Any] = {"Resources": {}}
    return reviewed(op, "Grant1234ABCD", base or empty, head or empty, "Resource")


def test_a_new_reader_of_a_table_broadens_and_a_removed_one_narrows() -> None:
    subject = f"Lake Formation grant to {FINOPS}"
    usage = ("SELECT on table llm_platform_capture_iceberg.capture_records, every column but decode_error, "
             "input_text, output_text, redaction_rules")
    assert grant_review("+", None, column_grant()) == [("data_governance", subject, f"new: {usage}", True)]
    assert grant_review("-", column_grant(), None) == [("data_governance", subject, f"removed: {usage}", False)]


def test_a_reader_seeing_more_columns_broadens_and_fewer_narrows() -> None:
    usage, everything = column_grant(), column_grant(excluded=[])
    ((group, _, text, broadens),) = grant_review("~", usage, everything)
    assert group == "data_governance" and broadens
    assert text.endswith("every column (columns gained: decode_error, input_text, output_text, redaction_rules)")
    ((_, _, text, broadens),) = grant_review("~", everything, usage)
    assert not broadens and "columns lost: decode_error, input_text, output_text, redaction_rules" in text
    # One column more or less excluded, a list of columns turned into a wildcard, a permission gained.
    assert grant_review("~", usage, column_grant(excluded=TEXT[1:]))[0][3] is True
    assert grant_review("~", usage, column_grant(excluded=[*TEXT, "caller_id"]))[0][3] is False
    assert grant_review("~", column_grant(names=["caller_id"]), usage)[0][3] is True
    assert grant_review("~", usage, column_grant(names=["caller_id"]))[0][3] is False
    assert grant_review("~", usage, column_grant(permissions=("SELECT", "DESCRIBE")))[0][3] is True
    assert grant_review("~", usage, column_grant(principal=ANALYST))[0][3] is True  # another reader
    assert grant_review("~", usage, column_grant()) == []


def test_a_usage_reader_s_column_list_gaining_a_column_broadens() -> None:
    """Usage readers are granted a named list (capture.usageColumnsGranted adds to it): the review shows a column
    added to the list as a broadening, naming the column, and the move from a wildcard to a list as a narrowing."""
    listed = column_grant(names=["caller_id", "event_id"])
    wider = column_grant(names=["caller_id", "event_id", "tool_args"])
    ((group, _, text, broadens),) = grant_review("~", listed, wider)
    assert group == "data_governance" and broadens and text.endswith("(columns gained: tool_args)")
    ((_, _, text, broadens),) = grant_review("~", column_grant(), listed)
    assert not broadens and "(any other column)" in text and "columns gained" not in text


# ---- the erasure role (capture.eraserPrincipals) --------------------------------------------------------------

PRIVACY = f"arn:aws:iam::{ACCOUNT}:role/privacy-officers"


def eraser_role(*principals: str) -> dict[str, Any]:
    trust = doc({"Effect": "Allow", "Action": "sts:AssumeRole", "Principal": {"AWS": list(principals)}})
    return {"Resources": {"Eraser1234ABCD": resource("AWS::IAM::Role", "Storage/CaptureEraser/Role", {
        "RoleName": "llm-platform-capture-eraser", "MaxSessionDuration": 3600, "AssumeRolePolicyDocument": trust})}}


def test_the_erasure_role_and_each_principal_added_to_it_broaden() -> None:
    empty: dict[str, Any] = {"Resources": {}}
    found = reviewed("+", "Eraser1234ABCD", empty, eraser_role(PRIVACY), "AssumeRolePolicyDocument")
    assert found and all(group == "identity" for group, *_ in found) and any(b for *_, b in found), found
    assert any(PRIVACY in text for _, _, text, _ in found), found
    more = reviewed("~", "Eraser1234ABCD", eraser_role(PRIVACY), eraser_role(PRIVACY, NEWCOMER),
                    "AssumeRolePolicyDocument")
    assert more and all(b for *_, b in more) and any(NEWCOMER in text for _, _, text, _ in more), more
    fewer = reviewed("~", "Eraser1234ABCD", eraser_role(PRIVACY, NEWCOMER), eraser_role(PRIVACY),
                     "AssumeRolePolicyDocument")
    assert fewer and not any(b for *_, b in fewer), fewer
