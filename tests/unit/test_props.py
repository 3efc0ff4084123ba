"""Each property is stated once: in the construct's ``…Props`` dataclass (type, default, meaning, config key, rules).
Everything else is derived from it or checked here against it: the constructor's keyword arguments (names, types,
defaults), the documentation table, the app's config model and the names problems are reported under."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

import hyperpod_inference_iac
from hyperpod_inference_iac import ConfigError, GpuNodeGroup
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
