"""Wrong types are one problem each, named by the property, before any rule (issue 26, 6).

A value of the wrong type reaching a construct is reported from the props' declared types as
``[CaptureStorage.WrongType] retention_days: must be an int (got str '14')``: never a traceback from inside the
construct or from jsii, never one problem per character of a string given for a list, and the range rule of the same
property is left out (one mistake, one problem). Checked generically over every props class of the library, then
with the mistakes issue 26 found against the constructs themselves, then through the app's config file (which keeps
naming the key path)."""

from __future__ import annotations

import dataclasses
import enum
import importlib
import pathlib
import pkgutil
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest
from aws_cdk import App, Duration, Environment, Stack
from aws_cdk import aws_s3 as s3

import hyperpod_inference_iac
import hyperpod_inference_iac.charts
from hyperpod_inference_iac import CaptureStorage, CaptureStorageOptions, ConfigError, GpuNodeGroup, Problems
from hyperpod_inference_iac.foundation.props import Props, construct_name
from tests.cluster.conftest import make_base
from tests.unit.test_props import _app_problems

ENV = Environment(account="111122223333", region="us-west-2")


def _every_props_class() -> list[type[Props]]:
    for package in (hyperpod_inference_iac, hyperpod_inference_iac.charts):
        for module in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
            importlib.import_module(module.name)
    found: set[type[Props]] = set()
    todo = [Props]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith("hyperpod_inference_iac"):
                found.add(sub)
            todo.append(sub)
    return sorted(found, key=lambda cls: cls.__name__)


PROPS_CLASSES = _every_props_class()


def test_the_library_s_props_classes_are_all_found() -> None:
    """The enumeration below reaches every construct's props (a control: an import path change would empty it)."""
    names = {cls.__name__ for cls in PROPS_CLASSES}
    assert {"CaptureStorageProps", "GpuNodeGroupProps", "HyperPodClusterProps", "InferenceOperatorProps",
            "CapturePipelineProps", "InferenceWorkloadsProps", "InstanceGroup"} <= names
    assert len(PROPS_CLASSES) >= 40


def _wrong_value(hint: Any) -> Any:
    """A value that is not of ``hint``'s type, chosen without the library's own check: a number where text is
    declared, text where a number, a flag, a list, a mapping or an object is."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        arms = [arg for arg in args if arg is not type(None)]
        takes_text = any(arm is str or (isinstance(arm, type) and issubclass(arm, str | pathlib.PurePath))
                         for arm in arms)
        return 14 if takes_text else "a-name"
    if hint is str or (isinstance(hint, type) and issubclass(hint, enum.StrEnum)):
        return 14
    if hint in (int, float):
        return "14"
    if hint is bool:
        return 1
    if origin in (tuple, list, Sequence) or (origin is not None and issubclass(origin, Mapping)):
        return "g6e.12xlarge"
    return "a-name"  # an object (a bucket, a cluster, a Duration, a jsii enumeration member) given by its name


def _all_wrong(cls: type[Props]) -> Props:
    hints = typing.get_type_hints(cls)
    return cls(**{field.name: _wrong_value(hints[field.name]) for field in dataclasses.fields(cls)})  # type: ignore[arg-type]


@pytest.mark.parametrize("cls", PROPS_CLASSES, ids=lambda cls: cls.__name__)
def test_every_property_of_the_wrong_type_is_one_problem_naming_it(cls: type[Props]) -> None:
    """Every field of the class at once holds a value of the wrong type: each is reported once, under its name,
    with ``<Construct>.WrongType``, what it must be and what it got; nothing raises, and no rule adds a second
    problem about the same property."""
    props = _all_wrong(cls)
    problems = Problems()
    props.check(problems)
    names = [field.name for field in dataclasses.fields(cls)]  # type: ignore[arg-type]
    wrong = [p for p in problems if p.code == f"{construct_name(cls)}.WrongType"]
    assert sorted(p.path for p in wrong) == sorted(names)
    for problem in wrong:
        assert problem.message.startswith("must be ") and " (got " in problem.message, problem
    assert not [p for p in problems if p not in wrong and any(
        p.path == name or p.path.startswith((f"{name}.", f"{name}[")) for name in names)]


@pytest.mark.parametrize("cls", PROPS_CLASSES, ids=lambda cls: cls.__name__)
def test_the_declared_defaults_are_of_their_declared_types(cls: type[Props]) -> None:
    """A control for the check itself: each default passes it (a check that refused good values would make every
    construct unusable, so this fails first)."""
    hints = typing.get_type_hints(cls)
    from hyperpod_inference_iac.foundation.props import _faults
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        if field.default is not dataclasses.MISSING:
            assert list(_faults(field.default, hints[field.name])) == [], (cls.__name__, field.name)


def _problems_of(build: Callable[[], object]) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        build()
    return [str(p) for p in raised.value.problems]


def test_the_issue_s_examples_are_one_problem_each_from_the_constructs() -> None:
    """Issue 26: ``retention_days="14"`` was a TypeError inside capture_storage.py, ``14.5`` a jsii RuntimeError, a
    bucket name where a bucket is expected an AttributeError, and a string for a list one problem per character."""
    stack = Stack(App(), "Types", env=ENV)
    assert _problems_of(lambda: CaptureStorage(stack, "Text", retention_days="14")) == [  # type: ignore[arg-type]
        "[CaptureStorage.WrongType] retention_days: must be an int (got str '14')"]
    assert _problems_of(lambda: CaptureStorage(stack, "Float", retention_days=14.5)) == [  # type: ignore[arg-type]
        "[CaptureStorage.WrongType] retention_days: must be an int (got float 14.5)"]
    assert _problems_of(lambda: CaptureStorage(stack, "Name", access_logs_bucket="my-logs")) == [  # type: ignore[arg-type]
        "[CaptureStorage.WrongType] access_logs_bucket: must be an IBucket (got str 'my-logs')"]
    assert _problems_of(lambda: CaptureStorage(stack, "Flag", load_balancer_logs=1)) == [  # type: ignore[arg-type]
        "[CaptureStorage.WrongType] load_balancer_logs: must be a bool (got int 1)"]
    role = "arn:aws:iam::111122223333:role/a"
    assert _problems_of(lambda: CaptureStorage(stack, "Roles", reader_role_arns=role)) == [
        "[CaptureStorage.WrongType] reader_role_arns: must be a list of str (got str "
        "'arn:aws:iam::111122223333:role/a')"]
    # A bucket passes, and a range mistake beside a type mistake is still found (all mistakes in one run).
    bucket = s3.Bucket.from_bucket_name(stack, "Logs", "my-logs")
    assert _problems_of(lambda: CaptureStorage(stack, "Both", access_logs_bucket=bucket, retention_days="14",
                                               noncurrent_version_retention_days=0)) == [  # type: ignore[arg-type]
        "[CaptureStorage.WrongType] retention_days: must be an int (got str '14')",
        "[CaptureStorage.RetentionOutOfRange] noncurrent_version_retention_days: must be an integer from 1 to 365 "
        "(days) (got 0)"]


def test_a_string_for_a_list_of_instance_types_is_one_problem() -> None:
    base = make_base("WrongTypes")
    assert _problems_of(lambda: GpuNodeGroup(base.stack, "One", cluster=base.cluster, name="gpu",
                                             instance_types="g6e.12xlarge")) == [  # type: ignore[arg-type]
        "[GpuNodeGroup.WrongType] instance_types: must be a list of str (got str 'g6e.12xlarge')"]
    assert _problems_of(lambda: GpuNodeGroup(base.stack, "Flag", cluster=base.cluster, name="gpu",
                                             instance_types=["g6e.12xlarge"], max_size=True)) == [
        "[GpuNodeGroup.WrongType] max_size: must be an int (got bool True)"]
    assert _problems_of(lambda: GpuNodeGroup(base.stack, "Labels", cluster=base.cluster, name="gpu",
                                             instance_types=["g6e.12xlarge"], labels={"team": 7})) == [  # type: ignore[dict-item]
        "[GpuNodeGroup.WrongType] labels.team: must be a str (got int 7)"]


def test_a_token_passes_where_a_number_is_declared() -> None:
    """A CloudFormation parameter's number is a token (a float to Python): the service judges it, not the type
    check."""
    from aws_cdk import CfnParameter
    stack = Stack(App(), "Tokens", env=ENV)
    days = CfnParameter(stack, "Days", type="Number").value_as_number
    problems = Problems()
    CaptureStorageOptions(retention_days=days).check(problems)  # type: ignore[arg-type]
    assert list(problems) == []
    assert Duration.days(1)  # (the module's imports stay used by type checkers)


def test_the_app_s_config_keeps_naming_the_key_path() -> None:
    """The config reader reports the file's own shape problem, at the key path, once: the props' type check finds
    nothing more (the reader left the default there)."""
    assert _app_problems(lambda d: d["capture"].update(retentionDays="14")) == [
        ("Config.WrongType", "capture.retentionDays")]
