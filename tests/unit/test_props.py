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
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

import hyperpod_inference_iac
from hyperpod_inference_iac import (
    AlarmSettings,
    AlarmTopic,
    AlarmTopicOptions,
    CaptureAlarms,
    CaptureAlarmsOptions,
    CaptureAlarmsProps,
    CapturePipeline,
    CaptureSidecarMetrics,
    CaptureSidecarMetricsOptions,
    CaptureSidecarMetricsProps,
    CertificateAlarms,
    CertificateAlarmsOptions,
    ConfigError,
    GpuNodeGroup,
)
from hyperpod_inference_iac.props import Props, config_key
from platform_config.loader import parse_config
from tests.support.synth import REPO
from tests.unit.test_config import _with
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
    assert GpuNodeGroup in CONSTRUCTS


@pytest.mark.parametrize("cls", CONSTRUCTS, ids=lambda c: c.__name__)
def test_the_constructor_takes_exactly_its_props(cls: Any) -> None:
    """Same names, keyword-only, same type, same default: the signature repeats nothing the props do not say."""
    props: type[Props] = cls.PROPS
    parameters = {name: p for name, p in inspect.signature(cls.__init__).parameters.items()
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


def _consumer_problems(build: Callable[[Stack], object]) -> list[tuple[str, str, str]]:
    with pytest.raises(ConfigError) as caught:
        build(_alarm_stack())
    return [(p.code, p.path, p.message) for p in caught.value.problems]


def _app_problems(change: Callable[[dict[str, Any]], None]) -> list[tuple[str, str, str]]:
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
    consumer_problems, app_problems = _consumer_problems(consumer), _app_problems(app)
    assert [(c, path) for c, path, _ in consumer_problems] == [(code, prop)]
    assert [(c, path) for c, path, _ in app_problems] == [(code, key)]
    assert consumer_problems[0][2] == app_problems[0][2]  # one rule, one message


def test_an_alarm_rule_names_the_other_settings_in_each_reader_s_vocabulary() -> None:
    """The rule on datapoints names the evaluation periods as the reader knows them."""
    consumer = _consumer_problems(lambda s: CaptureAlarms(
        s, "A", pipeline=_pipeline(s), alarm_name_prefix="p",
        throttles=AlarmSettings(threshold=0, period=FIVE, evaluation_periods=3, datapoints_to_alarm=4)))
    app = _app_problems(_alarms(capture={"throttles": {"datapointsToAlarm": 4}}))
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
    assert [(c, path) for c, path, _ in _app_problems(_alarms(capture={"throttles": 5}))] == [
        ("Config.WrongType", "alarms.capture.throttles")]
