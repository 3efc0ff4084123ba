"""Configuration validation: one test per error code, all errors at once, readable CLI failure."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperpod_inference_iac.capture_storage import CaptureStorage
from hyperpod_inference_iac.validation import ConfigError
from platform_config import load_config, parse_config
from tests.support.synth import REPO, run_cdk_synth

DEFAULT = yaml.safe_load((REPO / "config" / "default.yaml").read_text())


def _with(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    data = copy.deepcopy(DEFAULT)
    change(data)
    return data


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = data
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return change


def _delete(path: str) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = data
        for part in parents:
            node = node[part]
        del node[last]
    return change


CASES = [
    ("Config.NotAMapping", "environment", _set("environment", ["us-west-2"])),
    ("Config.MissingKey", "environment.account", _delete("environment.account")),
    ("Config.WrongType", "capture.retentionDays", _set("capture.retentionDays", "thirty")),
    ("Config.NotAllowed", "cluster.kubernetesVersion", _set("cluster.kubernetesVersion", "1.20")),
    ("Config.BadFormat", "environment.account", _set("environment.account", "1234")),
    ("Config.OutOfRange", "capture.retentionDays", _set("capture.retentionDays", 0)),
    ("Config.TooFewItems", "cluster.gpuNodeGroups", _set("cluster.gpuNodeGroups", [])),
    ("Config.UnknownKey", "capture.retentionDay", _set("capture.retentionDay", 3)),
    ("Config.BadFormat", "project", _set("project", "a-very-long-project-n")),
    ("Capture.UnknownRedactionRule", "capture.redact[1]", _set("capture.redact", ["email", "ssn"])),
    ("Network.BothVpcKinds", "network", _set("network.existingVpc", {
        "vpcId": "vpc-0123456789abcdef0", "vpcCidr": "10.0.0.0/16", "availabilityZones": ["a", "b"],
        "privateSubnetIds": ["subnet-01234567", "subnet-89abcdef"]})),
    ("Network.SubnetsPerZone", "network.existingVpc.privateSubnetIds", lambda d: d.update(network={"existingVpc": {
        "vpcId": "vpc-0123456789abcdef0", "vpcCidr": "10.0.0.0/16", "availabilityZones": ["a", "b", "c"],
        "privateSubnetIds": ["subnet-01234567", "subnet-89abcdef"]}})),
    ("Network.BadCidr", "network.newVpc.cidr", _set("network.newVpc.cidr", "10.0.0.0/8")),
    ("Cluster.NodeGroupSizes", "cluster.gpuNodeGroups[0]", _set("cluster.gpuNodeGroups.0.desiredSize", 9)),
    ("Cluster.DuplicateNodeGroup", "cluster.gpuNodeGroups",
     lambda d: d["cluster"]["gpuNodeGroups"].append(copy.deepcopy(d["cluster"]["gpuNodeGroups"][0]))),
    ("HyperPod.UnknownDeepHealthCheck", "hyperpod.instanceGroups[0].deepHealthChecks[0]",
     _set("hyperpod.instanceGroups.0.deepHealthChecks", ["Quick"])),
    ("Domain.BadDomainName", "domain.endpointDomains[0]", _set("domain.endpointDomains", ["*.inference.example.com"])),
    ("Domain.OutsideZone", "domain.endpointDomains[0]", _set("domain.endpointDomains", ["api.other.org"])),
]


@pytest.mark.parametrize(("code", "path", "change"), CASES, ids=[c[0] for c in CASES])
def test_each_error_code_names_key_path(code: str, path: str, change: Callable[[dict[str, Any]], None]) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(_with(change))
    matching = [p for p in caught.value.problems if p.code == code]
    assert matching, str(caught.value)
    assert matching[0].path == path, str(caught.value)
    assert f"[{code}] {path}:" in str(caught.value)


def test_default_config_is_valid() -> None:
    config = load_config(REPO / "config" / "default.yaml")
    assert config.tls_bucket_name.startswith("hyperpod-tls")


def test_all_errors_are_reported_at_once() -> None:
    data = _with(_set("capture.retentionDays", -1))
    data["environment"]["region"] = "mars-1"
    data["cluster"]["endpointAccess"] = "public"
    with pytest.raises(ConfigError) as caught:
        parse_config(data)
    assert {p.path for p in caught.value.problems} >= {
        "capture.retentionDays", "environment.region", "cluster.endpointAccess"}
    assert str(caught.value).startswith("3 problem(s)")


def test_invalid_yaml_reports_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("project: x\nenvironment: [unclosed\n")
    with pytest.raises(ConfigError) as caught:
        load_config(bad)
    assert caught.value.codes == ["Config.InvalidYaml"]
    assert caught.value.problems[0].path.startswith("line 3")


def test_missing_file_says_how_to_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot be read.*-c config="):
        load_config(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [({"tls_bucket_name": "my-certs"}, "CaptureStorage.TlsBucketPrefix"),
     ({"retention_days": 0}, "CaptureStorage.RetentionOutOfRange")],
)
def test_capture_storage_props_are_validated(kwargs: dict[str, Any], code: str) -> None:
    from aws_cdk import App, Stack

    props = {"capture_bucket_name": "c", "tls_bucket_name": "hyperpod-tls-x", "access_log_bucket_name": "l",
             "key_alias": "alias/x", "retention_days": 30, **kwargs}
    with pytest.raises(ConfigError) as caught:
        CaptureStorage(Stack(App(), "S"), "Storage", **props)
    assert caught.value.codes == [code]


@pytest.mark.xdist_group("cdk-synth")
def test_cdk_synth_with_bad_config_fails_readably(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_with(_set("capture.retentionDays", 99999))))
    result = run_cdk_synth(tmp_path / "out", config=bad)
    assert result.returncode != 0
    assert "[Config.OutOfRange] capture.retentionDays: must be an integer from 1 to 3650 (got 99999)" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not list((tmp_path / "out").glob("*.template.json")), "no half-written output"
