"""UsageStore, the budget store (ElastiCache Serverless for Valkey): its network path (the nodes' security group on
6379 only), TLS and IAM authentication, its size and snapshot settings, and its agreement with the plan: the
sidecars that use it (a gateway entry's too) get its address, and their own roles, no other, may connect to it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cdk8s
import pytest
from aws_cdk import App, Environment, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks

from hyperpod_inference_iac import InferenceWorkloads, PlatformValue, S3Location, UsageStore
from hyperpod_inference_iac.charts import (
    CallerLimit,
    DataCapture,
    ModelPodCapture,
    ModelServerRuntime,
    NvmeModelCache,
    PlatformContext,
    PortableDeployment,
    PortableModelServer,
    UsageLimits,
    UsageStoreRef,
    plan_workloads,
)
from hyperpod_inference_iac.charts.portable import PortableModelServerChart
from hyperpod_inference_iac.foundation.platform_values import PlatformValues
from hyperpod_inference_iac.foundation.validation import ConfigError, Problems
from tests.charts.test_gateway_entry import BUDGETS, STORE, _with_entry
from tests.charts.test_gateway_entry import _plan as entry_plan
from tests.security.gate import cloudformation_findings
from tests.unit.test_inference_workloads import _stack as cluster_stack
from tests.unit.test_inference_workloads import _statements_of

ACCOUNT = "123456789012"
CACHE = "demo-usage"
TEAM_A = CallerLimit(caller_id="team-a", tokens_per_day=1_000_000)


def _store(stack: Stack, **props: Any) -> tuple[UsageStore, ec2.ISecurityGroup]:
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2, nat_gateways=1)
    nodes = ec2.SecurityGroup(stack, "Nodes", vpc=vpc)
    return UsageStore(stack, "Store", vpc=vpc, clients=[nodes], cache_name=CACHE, **props), nodes


def _server(name: str, limits: UsageLimits | None) -> PortableModelServer:
    return PortableModelServer(
        name=name, runtime=ModelServerRuntime.VLLM,
        model_cache=NvmeModelCache(model_key=name, source_s3_uri=f"s3://weights-bucket/{name}/"),
        data_capture=DataCapture(model_pod=ModelPodCapture()), usage_limits=limits)


def _plan(*servers: PortableModelServer, store: UsageStoreRef | None, problems: Problems | None = None) -> Any:
    context = PlatformContext(cluster_name="c", namespace="inference", account=ACCOUNT, role_name_prefix="t",
                              capture=S3Location(PlatformValue.CAPTURE_BUCKET, "data-capture/"),
                              vpc_cidr="10.0.0.0/16", region="us-west-2", usage_store=store)
    return plan_workloads(context, portable=[PortableDeployment(s, path=f"portable.{s.name}") for s in servers],
                          problems=problems)


@dataclass(frozen=True)
class Built:
    stack: Stack
    store: UsageStore
    nodes: ec2.ISecurityGroup
    template: Template


@pytest.fixture(scope="module")
def built() -> Built:
    """The store with its defaults in a stack of its own, built once for the tests below that only read it."""
    stack = Stack(App(), "S", env=Environment(account=ACCOUNT, region="us-west-2"))
    store, nodes = _store(stack)
    return Built(stack, store, nodes, Template.from_stack(stack))


def test_the_cache_is_valkey_in_private_subnets_tls_only_without_snapshots_and_small(built: Built) -> None:
    stack, store, template = built.stack, built.store, built.template
    (cache,) = template.find_resources("AWS::ElastiCache::ServerlessCache").values()
    props = cache["Properties"]
    assert (props["Engine"], props["ServerlessCacheName"], props["MajorEngineVersion"]) == ("valkey", CACHE, "8")
    assert props["SnapshotRetentionLimit"] == 0 and "DailySnapshotTime" not in props
    assert props["CacheUsageLimits"] == {"DataStorage": {"Unit": "GB", "Maximum": 1},
                                         "ECPUPerSecond": {"Maximum": 5000}}
    private = {subnet.subnet_id for subnet in store.props.vpc.private_subnets}
    assert {stack.resolve(subnet)["Ref"] for subnet in props["SubnetIds"]} == {stack.resolve(s)["Ref"]
                                                                             for s in private}
    assert "KmsKeyId" not in props  # an AWS owned key (counters, no prompts); a customer key when given
    # Serverless takes TLS only: there is no setting to turn it off, and the sidecar is told rediss:// (below).
    assert "TransitEncryptionEnabled" not in props


def test_only_the_nodes_security_group_reaches_the_cache_and_only_on_6379(built: Built) -> None:
    stack, store, nodes, template = built.stack, built.store, built.nodes, built.template
    group = template.to_json()["Resources"][stack.get_logical_id(store.security_group.node.default_child)]
    ingress = group["Properties"].get("SecurityGroupIngress", [])
    standalone = [r["Properties"] for r in template.find_resources("AWS::EC2::SecurityGroupIngress").values()]
    rules = ingress + standalone
    assert len(rules) == 1
    (rule,) = rules
    assert (rule["IpProtocol"], rule["FromPort"], rule["ToPort"]) == ("tcp", 6379, 6379)
    assert rule["SourceSecurityGroupId"] == stack.resolve(nodes.security_group_id)
    assert "CidrIp" not in rule and "CidrIpv6" not in rule
    # No egress: the cache answers on its connections; it opens none (a CDK placeholder rule that matches nothing).
    egress = group["Properties"]["SecurityGroupEgress"]
    assert all(r.get("CidrIp") == "255.255.255.255/32" for r in egress)


def test_the_sidecar_user_authenticates_with_iam_and_an_unauthenticated_connection_can_do_nothing(
        built: Built) -> None:
    store, template = built.store, built.template
    users = {u["Properties"]["UserName"]: u["Properties"]
             for u in template.find_resources("AWS::ElastiCache::User").values()}
    sidecar = users[f"{CACHE}-sidecar"]
    assert sidecar["AuthenticationMode"] == {"Type": "iam"} and sidecar["UserId"] == sidecar["UserName"]
    assert sidecar["AccessString"].startswith("on ~budget:* -@all ")
    assert users["default"]["AccessString"] == "off -@all"
    (group,) = template.find_resources("AWS::ElastiCache::UserGroup").values()
    assert sorted(group["Properties"]["UserIds"]) == sorted(u["UserId"] for u in users.values())
    (cache,) = template.find_resources("AWS::ElastiCache::ServerlessCache").values()
    assert cache["Properties"]["UserGroupId"] == CACHE
    assert store.ref == UsageStoreRef(cache_name=CACHE, user_id=f"{CACHE}-sidecar")


def test_a_wrong_setting_is_one_error_naming_the_property() -> None:
    stack = Stack(App(), "S", env=Environment(account=ACCOUNT, region="us-west-2"))
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2)
    with pytest.raises(ConfigError) as raised:
        UsageStore(stack, "Store", vpc=vpc, clients=[], cache_name="Demo--Usage", max_data_gb=0,
                   max_ecpu_per_second=10)
    message = str(raised.value)
    for code, name in (("UsageStore.CacheNameInvalid", "cache_name"), ("UsageStore.MaxDataOutOfRange", "max_data_gb"),
                       ("UsageStore.MaxEcpuOutOfRange", "max_ecpu_per_second"), ("UsageStore.NoClients", "clients")):
        assert f"[{code}]" in message and name in message


def test_the_sidecars_that_use_the_store_get_its_address_and_only_their_roles_may_connect() -> None:
    stack, cluster = cluster_stack()
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2, nat_gateways=1)
    store = UsageStore(stack, "Store", vpc=vpc, clients=[ec2.SecurityGroup(stack, "Nodes", vpc=vpc)],
                       cache_name=CACHE)
    own_store = UsageLimits(store_url="rediss://own.example.com:6380", callers=(TEAM_A,))
    plan = _plan(_server("qwen", UsageLimits(callers=(TEAM_A,))), _server("llama", own_store),
                 _server("mistral", None), store=store.ref)
    assert [w.name for w in plan.usage_store_users] == ["qwen"]
    workloads = InferenceWorkloads(stack, "W", cluster=cluster, plan=plan, usage_store=store,
                                   capture_bucket=s3.Bucket.from_bucket_name(stack, "B", "captures"),
                                   sidecar_image="registry.example/sidecar:1")
    template = Template.from_stack(stack)
    connect = {name: "elasticache:Connect" in _statements_of(template, name) for name in workloads.identities}
    assert connect == {"t-qwen": False, "t-qwen-capture": True, "t-llama": False, "t-llama-capture": False,
                       "t-mistral": False, "t-mistral-capture": False}
    statement = next(s for p in template.find_resources("AWS::IAM::Policy").values()
                     for s in p["Properties"]["PolicyDocument"]["Statement"] if s["Action"] == "elasticache:Connect")
    # This cache and the sidecar's user, nothing else (the user's ARN from its id: what ElastiCache names it by).
    assert statement["Resource"] == [stack.resolve(store.cache_arn), stack.resolve(store.user_arn)]
    assert json.dumps(stack.resolve(store.user_arn)).endswith(f':user:{store.user_id}"]]}}')

    env = _sidecar_env(workloads, "portable-qwen")
    assert env["LIMITS_STORE_URL"] == f"rediss://{store.endpoint}:6379"  # (the same token: the cache's address)
    assert env["LIMITS_STORE_IAM_USER"] == store.user_id and env["LIMITS_STORE_IAM_CACHE"] == CACHE
    assert _sidecar_env(workloads, "portable-llama")["LIMITS_STORE_URL"] == "rediss://own.example.com:6380"
    assert "LIMITS_STORE_IAM_USER" not in _sidecar_env(workloads, "portable-llama")


def _sidecar_env(workloads: InferenceWorkloads, chart_id: str) -> dict[str, Any]:
    workload = next(w for w in workloads.plan.portable if w.chart_id == chart_id)
    chart = PortableModelServerChart(cdk8s.App(), chart_id, workload=workload, namespace="inference",
                                     values=workloads.values)
    deployment = next(m for m in chart.to_json() if m["kind"] == "Deployment")
    sidecar = next(c for c in deployment["spec"]["template"]["spec"]["initContainers"]
                   if c["name"] == "capture-sidecar")
    return {item["name"]: item.get("value") for item in sidecar["env"]}


def test_the_sidecar_is_told_the_address_the_store_outputs() -> None:
    ref = UsageStoreRef.of_cache(CACHE)
    plan = _plan(_server("qwen", UsageLimits(callers=(TEAM_A,))), store=ref)
    endpoint = "demo-usage-abc123.serverless.usw2.cache.amazonaws.com"
    values = PlatformValues({PlatformValue.SIDECAR_IMAGE: "registry.example/sidecar:1",
                             PlatformValue.CAPTURE_BUCKET: "captures", PlatformValue.USAGE_STORE_ENDPOINT: endpoint})
    (workload,) = plan.portable
    chart = PortableModelServerChart(cdk8s.App(), "p", workload=workload, namespace="inference", values=values)
    manifests = chart.to_json()
    deployment = next(m for m in manifests if m["kind"] == "Deployment")
    sidecar = next(c for c in deployment["spec"]["template"]["spec"]["initContainers"]
                   if c["name"] == "capture-sidecar")
    env = {item["name"]: item.get("value") for item in sidecar["env"]}
    assert env["LIMITS_STORE_URL"] == f"rediss://{endpoint}:6379"
    assert (env["LIMITS_STORE_IAM_USER"], env["LIMITS_STORE_IAM_CACHE"]) == (ref.user_id, CACHE)
    assert env["AWS_REGION"] == "us-west-2"  # (the region the token is signed for: the sidecar's credentials)
    policy = next(m for m in manifests if m["kind"] == "NetworkPolicy")
    assert {"to": [{"ipBlock": {"cidr": "10.0.0.0/16"}}], "ports": [{"port": 6379, "protocol": "TCP"}]} \
        in policy["spec"]["egress"]


def test_token_budgets_without_any_store_are_one_error_and_the_platforms_store_satisfies_them() -> None:
    problems = Problems()
    _plan(_server("qwen", UsageLimits(callers=(TEAM_A,))), store=None, problems=problems)
    assert [(p.code, p.path) for p in problems.items] == [("UsageLimits.NoStore", "portable.qwen.usageLimits.storeUrl")]
    problems = Problems()
    _plan(_server("qwen", UsageLimits(callers=(TEAM_A,))), store=UsageStoreRef.of_cache(CACHE), problems=problems)
    assert not problems.items
    # Concurrency limits alone are per replica: no store, none used.
    plan = _plan(_server("qwen", UsageLimits(callers=(CallerLimit(caller_id="*", concurrent_requests_per_replica=4),))),
                 store=UsageStoreRef.of_cache(CACHE))
    assert plan.usage_store_users == ()


def test_workloads_that_use_the_platform_store_refuse_to_build_without_it_or_with_another() -> None:
    stack, cluster = cluster_stack()
    plan = _plan(_server("qwen", UsageLimits(callers=(TEAM_A,))), store=UsageStoreRef.of_cache(CACHE))
    bucket = s3.Bucket.from_bucket_name(stack, "B", "captures")
    with pytest.raises(ConfigError, match=r"\[InferenceWorkloads.UsageStoreMissing\] usage_store"):
        InferenceWorkloads(stack, "W", cluster=cluster, plan=plan, capture_bucket=bucket, sidecar_image="r/s:1")
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2, nat_gateways=1)
    other = UsageStore(stack, "Other", vpc=vpc, clients=[ec2.SecurityGroup(stack, "Nodes", vpc=vpc)],
                       cache_name="other-usage")
    with pytest.raises(ConfigError, match=r"\[InferenceWorkloads.UsageStoreMismatch\] usage_store"):
        InferenceWorkloads(stack, "W2", cluster=cluster, plan=plan, capture_bucket=bucket, sidecar_image="r/s:1",
                           usage_store=other)


def test_cdk_nag_finds_nothing_unacknowledged_on_the_store() -> None:
    stack = Stack(App(), "S", env=Environment(account=ACCOUNT, region="us-west-2"))
    store, _ = _store(stack)
    report = AwsSolutionsChecks(stack.node.root).validate_scope(store)
    assert [(v.rule_name, v.violating_resources) for v in report.violations] == []


@pytest.mark.slow
def test_checkov_finds_nothing_on_the_store(tmp_path: Path) -> None:
    app = App(outdir=str(tmp_path))
    stack = Stack(app, "S", env=Environment(account=ACCOUNT, region="us-west-2"))
    _store(stack)
    findings, summary = cloudformation_findings(sorted(Path(app.synth().directory).glob("*.template.json")))
    assert summary["parsing_errors"] == 0 and summary["passed"] > 0
    assert [f for f in findings if "/Store/" in f.location] == []


def test_a_plan_whose_only_store_user_is_a_gateway_entry_refuses_to_build_without_the_store() -> None:
    plan = entry_plan(_with_entry(usageLimits=BUDGETS), platform={"usage_store": STORE})
    assert [user.name for user in plan.usage_store_users] == ["models-entry"]
    stack, cluster = cluster_stack()
    with pytest.raises(ConfigError, match=r"\[InferenceWorkloads.UsageStoreMissing\] usage_store: the plan's sidecars "
                                          r"models-entry share budgets"):
        InferenceWorkloads(stack, "W", cluster=cluster, plan=plan, sidecar_image="r/s:1",
                           capture_bucket=s3.Bucket.from_bucket_name(stack, "B", "captures"))
