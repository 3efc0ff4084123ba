"""Each property is stated once: in the construct's ``…Props`` dataclass (type, default, meaning, config key, rules).
Everything else is derived from it or checked here against it: the constructor's keyword arguments (names, types,
defaults), the documentation table, the app's config model and the names problems are reported under."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import pytest
from aws_cdk import App, Duration, Environment, Stack
from aws_cdk import aws_certificatemanager as acm
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_route53 as route53
from aws_cdk import aws_s3 as s3
from aws_cdk.lambda_layer_kubectl_v34 import KubectlV34Layer
from constructs import Construct

import hyperpod_inference_iac
from hyperpod_inference_iac import (
    AlarmSettings,
    AlarmTopic,
    AlarmTopicOptions,
    ApiKeySync,
    CaptureAlarms,
    CaptureAlarmsOptions,
    CaptureAlarmsProps,
    CapturePipeline,
    CapturePipelineOptions,
    CaptureSidecarMetrics,
    CaptureSidecarMetricsOptions,
    CaptureSidecarMetricsProps,
    CaptureStorage,
    CaptureStorageOptions,
    CaptureTables,
    CaptureTablesOptions,
    CertificateAlarms,
    CertificateAlarmsOptions,
    ConfigError,
    EndpointDomain,
    ExistingVpcProps,
    ExternalDns,
    ExternalDnsProps,
    GpuNodeGroup,
    HyperPodCluster,
    InferenceCluster,
    InferenceOperator,
    InstanceGroup,
    LambdaLogRetention,
    LambdaLogRetentionProps,
    LogRetentionOptions,
    PlatformVpc,
    Problems,
    SecretsOptions,
    SecretSync,
    TableReader,
    existing_vpc,
)
from hyperpod_inference_iac.foundation.props import Props, config_key
from platform_config import model
from platform_config.loader import parse_config
from tests.support.synth import REPO
from tests.unit.test_config import EXISTING_VPC, _delete, _set, _with
from tools import props_docs


def _constructs_with_props() -> list[type[Construct]]:
    found = []
    for name in hyperpod_inference_iac.__all__:
        value = getattr(hyperpod_inference_iac, name)
        if inspect.isclass(value) and issubclass(value, Construct) and "PROPS" in vars(value):
            found.append(value)
    return found


CONSTRUCTS = _constructs_with_props()


def test_constructs_declare_their_props() -> None:
    assert {GpuNodeGroup, InferenceCluster, HyperPodCluster, InferenceOperator, EndpointDomain, PlatformVpc,
            ExternalDns, CaptureStorage, CapturePipeline, CaptureTables, ApiKeySync,
            hyperpod_inference_iac.SecretsKey} <= set(CONSTRUCTS)


# Each construct's constructor, and existing_vpc (a function: its arguments are ExistingVpcProps).
SIGNATURES = [(cls.__init__, cls.PROPS, cls.__name__) for cls in CONSTRUCTS] + [
    (existing_vpc, ExistingVpcProps, "existing_vpc")]


@pytest.mark.parametrize(("function", "props"), [s[:2] for s in SIGNATURES], ids=[s[2] for s in SIGNATURES])
def test_the_constructor_takes_exactly_its_props(function: Any, props: type[Props]) -> None:
    """Same names, keyword-only, same type, same default: the signature repeats nothing the props do not say."""
    parameters = {name: p for name, p in inspect.signature(function).parameters.items()
                  if name not in ("self", "scope", "id")}
    fields = {field.name: field for field in props.fields()}
    assert sorted(parameters) == sorted(fields)
    for name, parameter in parameters.items():
        field = fields[name]
        assert parameter.kind is inspect.Parameter.KEYWORD_ONLY, name
        assert parameter.annotation == field.type, (name, parameter.annotation, field.type)
        expected = inspect.Parameter.empty if field.default is dataclasses.MISSING else field.default
        assert parameter.default == expected, name


@pytest.mark.parametrize("cls", CONSTRUCTS, ids=lambda c: c.__name__)
def test_the_page_shows_the_props_table(cls: Any) -> None:
    pages = [page for page in (REPO / "docs").rglob("*.md") if f"<!-- props:{cls.PROPS.__name__} -->" in
             page.read_text()]
    assert pages, f"no page carries <!-- props:{cls.PROPS.__name__} -->"


def test_every_props_table_is_current() -> None:
    assert props_docs.stale_pages() == [], "run: python -m tools.props_docs"


def test_every_prop_has_its_meaning() -> None:
    for props in props_docs.props_classes().values():
        for field in props.fields():
            info = field.metadata["prop"]
            assert info.doc.strip().endswith((".", ")")), (props.__name__, field.name)


def _cluster(stack: Stack) -> eks.ICluster:
    return eks.Cluster.from_cluster_attributes(
        stack, "C", cluster_name="c", kubectl_provider=eks.KubectlProvider.from_kubectl_provider_attributes(
            stack, "K", service_token="arn:aws:lambda:us-west-2:111122223333:function:k",
            role=iam.Role.from_role_arn(stack, "R", "arn:aws:iam::111122223333:role/k")))


def test_a_consumer_s_error_names_the_parameter_and_the_app_s_the_config_key() -> None:
    """One rule, one declaration: the same mistake is reported under the Python name to a Python consumer and under
    the config key to the app's config file."""
    stack = Stack(App())
    with pytest.raises(ConfigError) as consumer:
        GpuNodeGroup(stack, "G", cluster=_cluster(stack), name="gpu", instance_types=["g6e.12xlarge"], max_size=0)
    assert [(p.code, p.path) for p in consumer.value.problems] == [("GpuNodeGroup.Sizes", "max_size")]
    data = _with(lambda d: d["cluster"]["gpuNodeGroups"][0].update(maxSize=0))
    with pytest.raises(ConfigError) as app:
        parse_config(data)
    assert [(p.code, p.path) for p in app.value.problems] == [
        ("GpuNodeGroup.Sizes", "cluster.gpuNodeGroups[0].maxSize")]


def test_the_app_s_config_model_is_the_construct_s_options() -> None:
    """The config file's node groups are the construct's own options: its keys, its defaults, its rules."""
    config = parse_config(_with(lambda d: None))
    (group,) = config.cluster.gpu_node_groups
    assert isinstance(group, hyperpod_inference_iac.GpuNodeGroupOptions)
    keys = {config_key(field) for field in type(group).config_fields()}
    assert {"minSize", "maxSize", "rootVolumeGiB", "localStorageStrategy"} <= keys


# ---- the alarm constructs (their options are the app's alarms: section) --------------------------------------------

FIVE = Duration.minutes(5)
CERTIFICATE = "arn:aws:acm:us-west-2:111122223333:certificate/6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"


def _alarm_stack() -> Stack:
    return Stack(App(), "Alarms", env=Environment(account="111122223333", region="us-west-2"))


def _pipeline(stack: Stack) -> CapturePipeline:
    key = kms.Key(stack, "Key", enable_key_rotation=True)
    return CapturePipeline(stack, "Pipeline", bucket=s3.Bucket(stack, "Captures", encryption_key=key),
                           encryption_key=key, pandas_layer_arn="arn:aws:lambda:us-west-2:336392948345:layer:"
                                                                "AWSSDKPandas-Python313-Arm64:15")


def _alarm_consumer_problems(build: Callable[[Stack], object]) -> list[tuple[str, str, str]]:
    with pytest.raises(ConfigError) as caught:
        build(_alarm_stack())
    return [(p.code, p.path, p.message) for p in caught.value.problems]


def _alarm_app_problems(change: Callable[[dict[str, Any]], None]) -> list[tuple[str, str, str]]:
    with pytest.raises(ConfigError) as caught:
        parse_config(_with(change))
    return [(p.code, p.path, p.message) for p in caught.value.problems]


def _alarms(**section: Any) -> Callable[[dict[str, Any]], None]:
    return lambda data: data.setdefault("alarms", {}).update(section)


# (construct, a consumer's mistake, the same mistake in the app's file, code, the consumer's path, the app's path)
ALARM_MISTAKES = [
    ("AlarmTopic", lambda s: AlarmTopic(s, "T", forward_to_topic_arns=["ops"]),
     _alarms(subscribers={"topicArns": ["ops"]}),
     "AlarmTopic.BadTopicArn", "forward_to_topic_arns[0]", "alarms.subscribers.topicArns[0]"),
    ("CaptureAlarms", lambda s: CaptureAlarms(
        s, "A", pipeline=_pipeline(s), alarm_name_prefix="p",
        quarantined_lines=AlarmSettings(threshold=0, period=Duration.seconds(90))),
     _alarms(capture={"quarantinedLines": {"periodMinutes": 0}}),
     "CaptureAlarms.AlarmPeriod", "quarantined_lines.period", "alarms.capture.quarantinedLines.periodMinutes"),
    ("CaptureAlarms (shared)", lambda s: CaptureAlarms(s, "A", pipeline=_pipeline(s), alarm_name_prefix="p",
                                                       runbook_url="docs/alarms.md"),
     _alarms(runbookUrl="docs/alarms.md"), "CaptureAlarms.BadRunbookUrl", "runbook_url", "alarms.runbookUrl"),
    ("CertificateAlarms", lambda s: CertificateAlarms(
        s, "C", certificates={"endpoints": acm.Certificate.from_certificate_arn(s, "Cert", CERTIFICATE)},
        alarm_name_prefix="p", days_to_expiry=AlarmSettings(threshold=0, period=Duration.days(1))),
     _alarms(certificate={"daysToExpiry": {"threshold": 0}}),
     "CertificateAlarms.ThresholdOutOfRange", "days_to_expiry.threshold", "alarms.certificate.daysToExpiry.threshold"),
    ("CaptureSidecarMetrics", lambda s: CaptureSidecarMetrics(
        s, "M", cluster=_cluster(s), namespace="inference", alarm_name_prefix="p",
        first_chunk_p99=AlarmSettings(threshold=7, period=FIVE)),
     _alarms(sidecar={"firstChunkP99": {"threshold": 7}}),
     "CaptureSidecarMetrics.FirstChunkBound", "first_chunk_p99.threshold", "alarms.sidecar.firstChunkP99.threshold"),
]


@pytest.mark.parametrize(("construct", "consumer", "app", "code", "prop", "key"), ALARM_MISTAKES,
                         ids=[case[0] for case in ALARM_MISTAKES])
def test_an_alarm_construct_s_mistake_is_named_by_the_property_and_by_the_config_key(
        construct: str, consumer: Callable[[Stack], object], app: Callable[[dict[str, Any]], None], code: str,
        prop: str, key: str) -> None:
    consumer_problems, app_problems = _alarm_consumer_problems(consumer), _alarm_app_problems(app)
    assert [(c, path) for c, path, _ in consumer_problems] == [(code, prop)]
    assert [(c, path) for c, path, _ in app_problems] == [(code, key)]
    assert consumer_problems[0][2] == app_problems[0][2]  # one rule, one message


def test_an_alarm_rule_names_the_other_settings_in_each_reader_s_vocabulary() -> None:
    """The rule on datapoints names the evaluation periods as the reader knows them."""
    consumer = _alarm_consumer_problems(lambda s: CaptureAlarms(
        s, "A", pipeline=_pipeline(s), alarm_name_prefix="p",
        throttles=AlarmSettings(threshold=0, period=FIVE, evaluation_periods=3, datapoints_to_alarm=4)))
    app = _alarm_app_problems(_alarms(capture={"throttles": {"datapointsToAlarm": 4}}))
    assert consumer == [("CaptureAlarms.DatapointsToAlarm", "throttles.datapoints_to_alarm",
                         "must be an integer from 1 to evaluation_periods")]
    assert app == [("CaptureAlarms.DatapointsToAlarm", "alarms.capture.throttles.datapointsToAlarm",
                    "must be an integer from 1 to evaluationPeriods")]


def test_the_app_s_alarms_are_the_alarm_constructs_options() -> None:
    """Each part of the alarms: section is its construct's options, read by the keys and with the defaults the
    construct declares: an empty section is exactly the constructs' defaults."""
    alarms = parse_config(_with(lambda data: data.pop("alarms", None))).alarms
    assert alarms.subscribers == AlarmTopicOptions()
    assert alarms.capture == CaptureAlarmsOptions()
    assert alarms.certificate == CertificateAlarmsOptions()
    assert alarms.sidecar.kwargs(CaptureSidecarMetricsOptions) == CaptureSidecarMetricsOptions().kwargs()
    assert (alarms.runbook_url, alarms.notify_on_ok) == (CaptureAlarmsProps.runbook_url,
                                                         CaptureAlarmsProps.notify_on_ok)
    assert alarms.capture.throttles is CaptureAlarmsProps.throttles  # the construct's own default, not a copy


def test_an_alarm_block_is_read_over_that_alarm_s_default() -> None:
    """A block names only what it changes: its other keys keep that alarm's default (not AlarmSettings' own), a
    decimal threshold is a number, ``enabled: false`` leaves the alarm out, and a block that is no mapping is one
    problem."""
    alarms = parse_config(_with(_alarms(sidecar={"failedUploads": {"periodMinutes": 10},
                                                 "firstChunkP99": {"threshold": 0.5},
                                                 "noMetrics": {"enabled": False}}))).alarms
    failed_uploads = alarms.sidecar.failed_uploads
    assert failed_uploads is not None
    assert (failed_uploads.period.to_minutes(), failed_uploads.evaluation_periods) == (10, 3)
    assert alarms.sidecar.first_chunk_p99 == CaptureSidecarMetricsProps.first_chunk_p99.with_(threshold=0.5)
    assert alarms.sidecar.no_metrics is None
    assert [(c, path) for c, path, _ in _alarm_app_problems(_alarms(capture={"throttles": 5}))] == [
        ("Config.WrongType", "alarms.capture.throttles")]
    # A misspelt key of a block is reported there; the block's other keys are still read and checked.
    assert [(c, path) for c, path, _ in _alarm_app_problems(
        _alarms(capture={"throttles": {"thresold": 1, "evaluationPeriods": 0}}))] == [
        ("Config.UnknownKey", "alarms.capture.throttles.thresold"),
        ("CaptureAlarms.EvaluationPeriods", "alarms.capture.throttles.evaluationPeriods")]


def _vpc(stack: Stack) -> ec2.IVpc:
    return ec2.Vpc.from_vpc_attributes(stack, "Vpc", vpc_id="vpc-0123456789abcdef0", vpc_cidr_block="10.0.0.0/16",
                                       availability_zones=["us-west-2a", "us-west-2b"],
                                       private_subnet_ids=["subnet-01234567", "subnet-89abcdef"])


def _inference_cluster(stack: Stack) -> None:
    InferenceCluster(stack, "Eks", cluster_name="-llm", vpc=_vpc(stack))


def _hyperpod_cluster(stack: Stack) -> None:
    vpc = _vpc(stack)
    HyperPodCluster(stack, "HyperPod", cluster_name="hp", eks_cluster=_cluster(stack), vpc=vpc,
                    subnets=vpc.private_subnets,
                    security_groups=[ec2.SecurityGroup.from_security_group_id(stack, "Sg", "sg-0123456789abcdef0")],
                    instance_groups=[InstanceGroup(name="gpu", instance_type="ml.g5.12xlarge", ebs_volume_gib=0)])


def _hyperpod_taint(stack: Stack) -> None:
    """A mistake inside a list of props inside a list of props: a taint of an instance group."""
    vpc = _vpc(stack)
    taint = hyperpod_inference_iac.KubernetesTaint(key="example.com/dedicated", effect="NoScheduling")  # type: ignore[arg-type]
    HyperPodCluster(stack, "HyperPod", cluster_name="hp", eks_cluster=_cluster(stack), vpc=vpc,
                    subnets=vpc.private_subnets,
                    security_groups=[ec2.SecurityGroup.from_security_group_id(stack, "Sg", "sg-0123456789abcdef0")],
                    instance_groups=[InstanceGroup(name="gpu", instance_type="ml.g5.12xlarge",
                                                   kubernetes_taints=[taint])])


def _created_cluster(stack: Stack) -> eks.Cluster:
    """A cluster created here, with its kubectl provider (ExternalDns installs Helm releases through it)."""
    return eks.Cluster(stack, "Eks", version=eks.KubernetesVersion.V1_34, default_capacity=0,
                       default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
                       kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=KubectlV34Layer(stack, "L")))


def _inference_operator(stack: Stack) -> None:
    InferenceOperator(stack, "Operator", cluster=_created_cluster(stack), hyperpod_cluster_arn="arn",
                      tls_bucket=s3.Bucket.from_bucket_name(stack, "Tls", "hyperpod-tls-x"), addon_version="1.0.0")


def _endpoint_domain(stack: Stack) -> None:
    EndpointDomain(stack, "Domain", zone_name="Inference", endpoint_domains=["api.inference.example.com"])


def _platform_vpc(stack: Stack) -> None:
    PlatformVpc(stack, "Network", max_azs=1, nat_gateways=1)


def _platform_vpc_flow_logs(stack: Stack) -> None:
    PlatformVpc(stack, "Network", flow_log_traffic="REJECTED")  # type: ignore[arg-type]


def _existing_vpc(stack: Stack) -> None:
    existing_vpc(stack, "Network", **{**{"vpc_id": "vpc-0123456789abcdef0", "vpc_cidr": "10.0.0.0/16",
                                         "availability_zones": ["a", "b"],
                                         "private_subnet_ids": ["subnet-01234567", "subnet-89abcdef"]},
                                      "vpc_id": "vpc-x"})


# (construct, one mistake made by a Python consumer, its code and property; the same mistake in the app's config
# file, and its key path): one declaration names both.
MISTAKES: list[tuple[str, Callable[[Stack], None], str, str, Callable[[dict[str, Any]], None], str]] = [
    ("InferenceCluster", _inference_cluster, "InferenceCluster.BadName", "cluster_name",
     _set("cluster.name", "-llm"), "cluster.name"),
    ("HyperPodCluster", _hyperpod_cluster, "HyperPodCluster.VolumeSize", "instance_groups[0].ebs_volume_gib",
     _set("hyperpod.instanceGroups.0.ebsVolumeGiB", 0), "hyperpod.instanceGroups[0].ebsVolumeGiB"),
    ("HyperPodCluster.taint", _hyperpod_taint, "HyperPodCluster.TaintEffect",
     "instance_groups[0].kubernetes_taints[0].effect",
     _set("hyperpod.instanceGroups.0.kubernetesTaints", [{"key": "example.com/dedicated", "effect": "NoScheduling"}]),
     "hyperpod.instanceGroups[0].kubernetesTaints[0].effect"),
    ("InferenceOperator", _inference_operator, "InferenceOperator.AddonVersion", "addon_version",
     _set("operator.addonVersion", "1.0.0"), "operator.addonVersion"),
    ("EndpointDomain", _endpoint_domain, "EndpointDomain.BadZoneName", "zone_name",
     _set("domain.zoneName", "Inference"), "domain.zoneName"),
    ("PlatformVpc", _platform_vpc, "Network.ZoneCount", "max_azs", _set("network.newVpc.maxAzs", 1),
     "network.newVpc.maxAzs"),
    ("PlatformVpc.flowLogs", _platform_vpc_flow_logs, "Network.FlowLogTraffic", "flow_log_traffic",
     _set("network.flowLogs", "REJECTED"), "network.flowLogs"),
    ("existing_vpc", _existing_vpc, "Network.BadVpcId", "vpc_id",
     lambda d: d.update(network={"existingVpc": {**EXISTING_VPC, "vpcId": "vpc-x"}}), "network.existingVpc.vpcId"),
]


@pytest.mark.parametrize(("consumer", "code", "prop", "change", "key"), [m[1:] for m in MISTAKES],
                         ids=[m[0] for m in MISTAKES])
def test_one_mistake_is_named_by_the_property_for_a_consumer_and_by_the_key_for_the_app(
        consumer: Callable[[Stack], None], code: str, prop: str, change: Callable[[dict[str, Any]], None],
        key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        consumer(Stack(App()))
    assert [(p.code, p.path) for p in caught.value.problems] == [(code, prop)]
    with pytest.raises(ConfigError) as app:
        parse_config(_with(change))
    assert [(p.code, p.path) for p in app.value.problems] == [(code, key)]


def test_external_dns_props_are_python_only_and_named_so() -> None:
    """ExternalDns has no config keys (the app derives its zones, owner and names from its plan and domain): its
    problems are named by the property, whoever passes it."""
    assert list(ExternalDnsProps.config_fields()) == []
    stack = Stack(App())
    zone = route53.HostedZone.from_hosted_zone_attributes(stack, "Zone", hosted_zone_id="Z0123456789ABC",
                                                          zone_name="inference.example.com")
    with pytest.raises(ConfigError) as caught:
        ExternalDns(stack, "Dns", cluster=_created_cluster(stack), hosted_zones=[zone], owner_id="c",
                    namespaces=["inference", "Bad_Namespace"], hostnames=["qwen.inference.example.com"])
    assert [(p.code, p.path) for p in caught.value.problems] == [("ExternalDns.BadNamespace", "namespaces[1]")]


def test_the_app_s_sections_are_the_constructs_options() -> None:
    """Each section is the construct's options class (or one that adds the app's own keys to it)."""
    config = parse_config(_with(lambda d: None))
    assert isinstance(config.cluster, hyperpod_inference_iac.InferenceClusterOptions)
    assert isinstance(config.hyperpod, hyperpod_inference_iac.HyperPodClusterOptions)
    assert all(isinstance(group, InstanceGroup) for group in config.hyperpod.instance_groups)
    assert isinstance(config.operator, hyperpod_inference_iac.InferenceOperatorOptions)
    assert isinstance(config.domain, hyperpod_inference_iac.EndpointDomainOptions)
    assert isinstance(config.vpc, hyperpod_inference_iac.PlatformVpcOptions)
    existing = parse_config(_with(lambda d: d.update(network={"existingVpc": EXISTING_VPC}))).vpc
    assert isinstance(existing, hyperpod_inference_iac.ExistingVpcOptions)
    assert (model.NewVpc, model.ExistingVpc, model.HyperPodConfig) == (
        hyperpod_inference_iac.PlatformVpcOptions, hyperpod_inference_iac.ExistingVpcOptions,
        hyperpod_inference_iac.HyperPodClusterOptions)


def test_a_missing_zone_is_one_problem() -> None:
    """Issue 18, 3: no stand-in zone, so no endpoint name (nor the portable server's hostname) is compared with it
    (a wrong zone is one problem too: the EndpointDomain case above)."""
    with pytest.raises(ConfigError) as caught:
        parse_config(_with(_delete("domain.zoneName")))
    assert [(p.code, p.path) for p in caught.value.problems] == [("Config.MissingKey", "domain.zoneName")]


def test_a_missing_field_of_a_list_entry_is_one_problem() -> None:
    """An instance group without its instance type: the key is missing, and no rule reports the stand-in."""
    with pytest.raises(ConfigError) as caught:
        parse_config(_with(_delete("hyperpod.instanceGroups.0.instanceType")))
    assert [(p.code, p.path) for p in caught.value.problems] == [
        ("Config.MissingKey", "hyperpod.instanceGroups[0].instanceType")]


def test_the_flow_logs_row_states_the_declared_defaults() -> None:
    """``network.flowLogs`` sits beside the VPC kind, so its row is written by hand (the generated tables leave it
    out): it must say each kind's declared default."""
    rows = [line for line in (REPO / "docs" / "configuration.md").read_text().splitlines()
            if line.startswith("| `network.flowLogs` |")]
    assert len(rows) == 1
    assert hyperpod_inference_iac.PlatformVpcOptions.flow_log_traffic == "ALL"
    assert hyperpod_inference_iac.ExistingVpcOptions.flow_log_traffic is None
    assert "`ALL` with `newVpc`, `off` with `existingVpc`" in rows[0]


# -- the capture constructs, the log retentions and the API keys (issue 18) ------------------------------------------
def _consumer_problems(build: Any) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as caught:
        build()
    return [(p.code, p.path) for p in caught.value.problems]


def _app_problems(change: Any) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as caught:
        parse_config(_with(change))
    return [(p.code, p.path) for p in caught.value.problems]


def test_capture_storage_names_the_property_for_a_consumer_and_the_key_for_the_app() -> None:
    stack = Stack(App())
    assert _consumer_problems(lambda: CaptureStorage(stack, "S", noncurrent_version_retention_days=0)) == [
        ("CaptureStorage.RetentionOutOfRange", "noncurrent_version_retention_days")]
    assert _app_problems(lambda d: d["capture"].update(noncurrentVersionRetentionDays=0)) == [
        ("CaptureStorage.RetentionOutOfRange", "capture.noncurrentVersionRetentionDays")]


def test_capture_pipeline_names_the_property_for_a_consumer_and_the_key_for_the_app() -> None:
    """`max_concurrency` is `capture.processorMaxConcurrency` in the file: the key its prop declares."""
    stack = Stack(App(), "P", env=Environment(account="111122223333", region="us-west-2"))
    bucket = s3.Bucket(stack, "B")
    assert _consumer_problems(lambda: CapturePipeline(stack, "P", bucket=bucket, encryption_key=None,
                                                      max_concurrency=1)) == [
        ("CapturePipeline.ConcurrencyOutOfRange", "max_concurrency")]
    assert _app_problems(lambda d: d["capture"].update(processorMaxConcurrency=1)) == [
        ("CapturePipeline.ConcurrencyOutOfRange", "capture.processorMaxConcurrency")]


def test_capture_tables_name_the_property_for_a_consumer_and_the_key_for_the_app() -> None:
    """`query_scan_limit_gib` is `capture.queryScanLimitGiB`; a reader's role is `capture.tableReaders[i].roleArn`."""
    stack = Stack(App(), "T", env=Environment(account="111122223333", region="us-west-2"))
    pipeline = _pipeline(stack)
    assert _consumer_problems(lambda: CaptureTables(stack, "T", pipeline=pipeline, query_scan_limit_gib=0,
                                                    table_readers=[TableReader(role_arn="finops")])) == [
        ("CaptureTables.BadReaderRoleArn", "table_readers[0].role_arn"),
        ("CaptureTables.OutOfRange", "query_scan_limit_gib")]
    assert _app_problems(lambda d: d["capture"].update(queryScanLimitGiB=0, tableReaders=[{"roleArn": "finops"}])) == [
        ("CaptureTables.BadReaderRoleArn", "capture.tableReaders[0].roleArn"),
        ("CaptureTables.OutOfRange", "capture.queryScanLimitGiB")]


def test_log_retentions_name_the_property_for_a_consumer_and_the_key_for_the_app() -> None:
    problems = Problems()
    LogRetentionOptions(audit_retention_days=100).check(problems)
    assert [(p.code, p.path) for p in problems] == [("Logs.RetentionDays", "audit_retention_days")]
    assert _consumer_problems(lambda: LambdaLogRetention(logs.RetentionDays.INFINITE)) == [
        ("Logs.RetentionDays", "retention")]
    assert _app_problems(lambda d: d["logging"].update(auditRetentionDays=100)) == [
        ("Logs.RetentionDays", "logging.auditRetentionDays")]


def test_api_key_rotation_names_the_property_for_a_consumer_and_the_key_for_the_app() -> None:
    """One rule of a rotation period: ApiKeySync's `rotation_days`, the platform's `api_key_rotation_days`
    (`secrets.apiKeyRotationDays`, 0 meaning never)."""
    stack = Stack(App())
    sync = SecretSync(namespace="inference", secrets_manager_name="p/qwen/api-key", kubernetes_secret_name="k",
                      reader_role_name="r", refresh_interval_seconds=120, keys_file="api-keys")
    assert _consumer_problems(lambda: ApiKeySync(stack, "ApiKey", cluster=_cluster(stack), sync=sync,
                                                 rotation_days=1001)) == [
        ("ApiKeySync.RotationDaysOutOfRange", "rotation_days")]
    problems = Problems()
    SecretsOptions(api_key_rotation_days=1001).check(problems)
    assert [(p.code, p.path) for p in problems] == [("ApiKeySync.RotationDaysOutOfRange", "api_key_rotation_days")]
    assert _app_problems(lambda d: d["secrets"].update(apiKeyRotationDays=1001)) == [
        ("ApiKeySync.RotationDaysOutOfRange", "secrets.apiKeyRotationDays")]


def test_the_aspect_takes_exactly_its_props() -> None:
    """LambdaLogRetention is an Aspect, not a construct: its one property may also be given by position."""
    (parameter,) = [p for name, p in inspect.signature(LambdaLogRetention.__init__).parameters.items()
                    if name != "self"]
    (field,) = LambdaLogRetentionProps.fields()
    assert (parameter.name, parameter.annotation, parameter.default) == (field.name, field.type, field.default)
    assert LambdaLogRetention.PROPS is LambdaLogRetentionProps


def test_the_app_s_capture_logging_and_secrets_sections_are_the_constructs_options() -> None:
    """capture: holds CaptureStorage's and CapturePipeline's own options, read from the one section by their declared
    keys; logging: and secrets: are the library's options classes. No key is stated twice: the two capture classes
    share none."""
    config = parse_config(_with(lambda d: None))
    assert isinstance(config.capture.storage, CaptureStorageOptions)
    assert isinstance(config.capture.pipeline, CapturePipelineOptions)
    assert isinstance(config.logging, LogRetentionOptions) and isinstance(config.secrets, SecretsOptions)
    assert isinstance(config.capture.tables, CaptureTablesOptions)
    storage_keys = {config_key(f) for f in CaptureStorageOptions.config_fields()}
    pipeline_keys = {config_key(f) for f in CapturePipelineOptions.config_fields()}
    table_keys = {config_key(f) for f in CaptureTablesOptions.config_fields()}
    assert not storage_keys & pipeline_keys and not (storage_keys | pipeline_keys) & table_keys
    assert storage_keys | pipeline_keys | table_keys == set(_with(lambda d: None)["capture"]) | {
        "noncurrentVersionRetentionDays", "rawReaderRoleArns", "breakGlassRoleArns", "pandasLayerArn",
        "processorMaxConcurrency", "tableReaders", "queryScanLimitGiB", "usageColumnsGranted", "auditLockMode",
        "auditLockRetentionDays"}
    assert config.capture.pipeline.capture_prefixes == (config.capture.prefix,)
