"""Each property is stated once: in the construct's ``…Props`` dataclass (type, default, meaning, config key, rules).
Everything else is derived from it or checked here against it: the constructor's keyword arguments (names, types,
defaults), the documentation table, the app's config model and the names problems are reported under."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest
from aws_cdk import App, Environment, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct

import hyperpod_inference_iac
from hyperpod_inference_iac import (
    ApiKeySync,
    CapturePipeline,
    CapturePipelineOptions,
    CaptureStorage,
    CaptureStorageOptions,
    ConfigError,
    GpuNodeGroup,
    LambdaLogRetention,
    LambdaLogRetentionProps,
    LogRetentionOptions,
    Problems,
    SecretsOptions,
    SecretSync,
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
    assert {GpuNodeGroup, CaptureStorage, CapturePipeline, ApiKeySync, hyperpod_inference_iac.SecretsKey} <= set(
        CONSTRUCTS)


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
    storage_keys = {config_key(f) for f in CaptureStorageOptions.config_fields()}
    pipeline_keys = {config_key(f) for f in CapturePipelineOptions.config_fields()}
    assert not storage_keys & pipeline_keys
    assert storage_keys | pipeline_keys == set(_with(lambda d: None)["capture"]) | {
        "noncurrentVersionRetentionDays", "rawReaderRoleArns", "breakGlassRoleArns", "pandasLayerArn",
        "processorMaxConcurrency"}
    assert config.capture.pipeline.capture_prefixes == (config.capture.prefix,)
