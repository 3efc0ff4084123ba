"""Issue 17: the config check says exactly what the synth says. The platform's constructs, built from a config,
raise the same warnings (by id, as many) as the config check prints, because both come from the constructs'
``warn_*`` functions; the config's acknowledgments silence them in both stacks; and a real ``cdk synth`` of a
risky file prints each warning under its key path and its construct, exit 0."""

from __future__ import annotations

import collections
import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from aws_cdk import App

from platform_config import parse_config
from stacks.platform import build_platform
from tests.support.synth import REPO, run_cdk_synth

DEFAULT = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
CONTEXT = json.loads((REPO / "cdk.json").read_text())["context"]  # the app's flags, as `cdk synth` has them
OURS = "@hyperpod-inference-iac/"


def _risky() -> dict[str, Any]:
    """The default platform with every risky choice of issue 17 and the warnings that existed before."""
    data = copy.deepcopy(DEFAULT)
    data["capture"]["redact"] = []
    data["capture"]["readerRoleArns"].append("arn:aws:iam::444455556666:role/data-lake")
    data["capture"]["rawReaderRoleArns"] = ["arn:aws:iam::444455556666:role/privacy-review"]
    data["cluster"]["endpointAccess"] = "public_and_private"
    data["portable"][0]["apiKey"]["enabled"] = False
    data["portable"][0]["allowedSourceRanges"] = ["0.0.0.0/0", "8.0.0.0/8", "10.42.0.0/16"]
    data["alarms"] = {"subscribers": {}, "certificate": {"daysToExpiry": {"threshold": 61}}}
    data["models"][0]["spec"]["dataCapture"]["modelPod"]["initialSamplingPercentage"] = 100
    return data


def _construct_warnings(data: dict[str, Any]) -> collections.Counter[str]:
    """The warning ids the built platform's constructs hold (nothing acknowledged), each as often as raised."""
    app = App(context=CONTEXT)
    build_platform(app, parse_config(data))
    return collections.Counter(re.search(r"\[ack: (\S+)\]$", str(entry.data))[1]  # type: ignore[index]
                               for construct in app.node.find_all() for entry in construct.node.metadata
                               if entry.type == "aws:cdk:warning")


def _spot() -> dict[str, Any]:
    """The default platform with its HyperPod instance group on Spot (issue 19, 4)."""
    data = copy.deepcopy(DEFAULT)
    data["hyperpod"]["instanceGroups"][0]["capacityType"] = "Spot"
    return data


@pytest.mark.parametrize("name", ["default", "risky", "spot"])
def test_the_config_check_and_the_constructs_raise_the_same_warnings(name: str) -> None:
    data = {"default": lambda: copy.deepcopy(DEFAULT), "risky": _risky, "spot": _spot}[name]()
    data.pop("acknowledgedWarnings")
    from_config = collections.Counter(w.id for w in parse_config(data).warnings)
    assert _construct_warnings(data) == from_config
    if name == "risky":
        assert len(from_config) == 11  # every warning id the file can decide, but captureWithoutKmsKey
        assert from_config[OURS + "InferenceWorkloads:imageNotPinnedByDigest"] == 3
    if name == "spot":
        assert from_config[OURS + "HyperPodCluster:spotCapacity"] == 1


def test_the_config_s_acknowledgments_silence_the_warnings_of_both_stacks() -> None:
    data = _risky()
    raised = {w.id for w in parse_config(data).warnings}
    data["acknowledgedWarnings"] = [{"id": id_, "reason": "reviewed for this test platform"} for id_ in sorted(raised)]
    assert _construct_warnings(data) == collections.Counter()


def test_cdk_synth_of_a_risky_file_says_each_warning_under_its_key_path_and_exits_0(tmp_path: Path) -> None:
    data = _risky()
    data["acknowledgedWarnings"] += [
        {"id": OURS + "InferenceCluster:publicEndpoint", "reason": "CI runners outside the VPC reach the API"},
        {"id": OURS + "InferenceWorkloads:captureWithoutKmsKey", "reason": "no tier here lacks a key anyway"}]
    config = tmp_path / "risky.yaml"
    config.write_text(yaml.safe_dump(data))
    result = run_cdk_synth(tmp_path / "out", config=config)
    assert result.returncode == 0, result.stderr
    # The app, under the file's key paths (the same lines as the config check's) ...
    assert f"Warning: 9 risky choice(s) in {config} not acknowledged:" in result.stderr
    assert f"  - [{OURS}CapturePipeline:redactionOff] capture.redact: redaction is off" in result.stderr
    assert f"  - [{OURS}InferenceWorkloads:noApiKey] portable[0].apiKey.enabled: " in result.stderr
    assert (f"  - acknowledgedWarnings[2]: {OURS}InferenceWorkloads:captureWithoutKmsKey is not raised by anything "
            "in this file") in result.stderr
    # ... and the CDK CLI, under each construct, with the id to acknowledge.
    for construct, name in [("llm-platform-storage/CapturePipeline", "CapturePipeline:redactionOff"),
                            ("llm-platform-storage/CaptureStorage", "CaptureStorage:rawReaderInOtherAccount"),
                            ("llm-platform-cluster/Eks/Cluster/portable-qwen3-8b-portable",
                             "InferenceWorkloads:sourceRangeNotPrivate")]:
        assert re.search(rf"{construct} .*\n.*{OURS}{name}", result.stderr), (construct, name)
    assert "InferenceCluster:publicEndpoint" not in result.stderr  # acknowledged, with its reason
