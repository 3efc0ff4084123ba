"""``make synth`` ends with a short summary (issue 26, 7): the stacks, their resources by service, what ``dist/``
holds and the manual steps left with their commands, printed and written to ``cdk.out/SUMMARY.md`` (the README links
it). Tested on a small cloud assembly written here; tests/platform/test_synth_summary.py reads the real one."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.synth import REPO
from tools import synth_summary

ENV = "aws://111122223333/us-west-2"


def _assembly(root: Path) -> tuple[Path, Path]:
    cdk_out, dist = root / "cdk.out", root / "dist"
    cdk_out.mkdir()
    dist.mkdir()
    manifest = {"version": "48.0.0", "artifacts": {
        "Tree": {"type": "cdk:tree", "properties": {"file": "tree.json"}},
        "llm-platform-storage": {"type": "aws:cloudformation:stack", "environment": ENV,
                                 "properties": {"templateFile": "llm-platform-storage.template.json"}},
        "llm-platform-cluster": {"type": "aws:cloudformation:stack", "environment": ENV,
                                 "properties": {"templateFile": "llm-platform-cluster.template.json",
                                                "stackName": "llm-platform-cluster"}}}}
    (cdk_out / "manifest.json").write_text(json.dumps(manifest))
    (cdk_out / "llm-platform-storage.template.json").write_text(json.dumps({"Resources": {
        "Key": {"Type": "AWS::KMS::Key"}, "Bucket": {"Type": "AWS::S3::Bucket"},
        "Logs": {"Type": "AWS::S3::Bucket"}, "Policy": {"Type": "AWS::S3::BucketPolicy"}}}))
    (cdk_out / "llm-platform-cluster.template.json").write_text(json.dumps({"Resources": {
        "Role": {"Type": "AWS::IAM::Role"}, "Manifest": {"Type": "Custom::AWSCDK-EKS-KubernetesResource"}}}))
    (dist / "README.md").write_text("# dist\n")
    (dist / "helm").mkdir()
    (dist / "helm" / "external-secrets.yaml").write_text("release: external-secrets\nchart: external-secrets\n")
    (dist / "model-qwen.k8s.yaml").write_text(
        "kind: InferenceEndpointConfig\nmetadata: {name: qwen}\n---\nkind: ServiceAccount\n---\nkind: ServiceAccount\n")
    return cdk_out, dist


def _config(root: Path, layer: str | None) -> str:
    path = root / "config.yaml"
    path.write_text("project: llm-platform\ncapture:\n  prefix: data-capture/\n"
                    + (f"  tablesLayerArn: {layer}\n" if layer else ""))
    return str(path)


def test_the_summary_names_stacks_services_dist_and_the_steps_left(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    cdk_out, dist = _assembly(tmp_path)
    assert synth_summary.main(["--cdk-out", str(cdk_out), "--dist", str(dist),
                               "--config", _config(tmp_path, None)]) == 0
    printed = capsys.readouterr().out
    assert "llm-platform-storage (111122223333/us-west-2): 4 resources: S3 3, KMS 1" in printed
    assert "llm-platform-cluster (111122223333/us-west-2): 2 resources: Custom 1, IAM 1" in printed
    assert "3 files, 4 documents (Helm release 1, InferenceEndpointConfig 1, ServiceAccount 2)" in printed
    for command in ("npx cdk bootstrap aws://111122223333/us-west-2",
                    "aws lakeformation put-data-lake-settings --region us-west-2",
                    "arn:aws:iam::111122223333:role/cdk-hnb659fds-cfn-exec-role-111122223333-us-west-2",
                    "make capture-layer", "aws lambda publish-layer-version --region us-west-2 --layer-name "
                    "llm-platform-capture-tables", "python -m hyperpod_inference_iac.preflight"):
        assert command in printed
    written = (cdk_out / "SUMMARY.md").read_text()
    assert "| `llm-platform-storage` | 111122223333 | us-west-2 | 4 | S3 3, KMS 1 |" in written
    assert "| `model-qwen.k8s.yaml` | InferenceEndpointConfig 1, ServiceAccount 2 |" in written
    assert "| `README.md` | - |" in written
    assert "| `helm/external-secrets.yaml` | Helm release 1 |" in written
    assert "npx cdk bootstrap aws://111122223333/us-west-2" in written


def test_a_layer_given_in_the_config_is_a_step_not_needed(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    cdk_out, dist = _assembly(tmp_path)
    layer = "arn:aws:lambda:us-west-2:111122223333:layer:llm-platform-capture-tables:3"
    assert synth_summary.main(["--cdk-out", str(cdk_out), "--dist", str(dist),
                               "--config", _config(tmp_path, layer)]) == 0
    printed = capsys.readouterr().out
    assert f"not needed, capture.tablesLayerArn is set ({layer})" in printed
    assert "make capture-layer" not in printed


def test_a_failed_run_changes_nothing_and_says_why_in_one_line(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """No manifest (no synth yet), or a template that cannot be read: exit 2, one line, no traceback, and the
    previous SUMMARY.md (of the synth cdk.out/ still holds) is left as it was, with no stray file beside it."""
    cdk_out, dist = _assembly(tmp_path)
    (cdk_out / "SUMMARY.md").write_text("previous\n")
    (cdk_out / "llm-platform-cluster.template.json").write_text("{not json")
    before = sorted(p.name for p in cdk_out.iterdir())
    assert synth_summary.main(["--cdk-out", str(cdk_out), "--dist", str(dist),
                               "--config", _config(tmp_path, None)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("synth summary: ") and error.count("\n") == 1 and "Traceback" not in error
    assert (cdk_out / "SUMMARY.md").read_text() == "previous\n"
    assert sorted(p.name for p in cdk_out.iterdir()) == before
    assert synth_summary.main(["--cdk-out", str(tmp_path / "missing"), "--dist", str(dist)]) == 2
    assert "run `make synth` first" in capsys.readouterr().err


def test_make_synth_ends_with_the_summary_and_the_readme_links_it() -> None:
    target = re.search(r"^synth:.*\n((?:\t.*\n)+)", (REPO / "Makefile").read_text(), re.M)
    assert target is not None
    recipe = target.group(1).strip().splitlines()
    assert "$(CDK) synth" in recipe[-2]  # (after the synth succeeded: make stops at a failure)
    assert "-m tools.synth_summary" in recipe[-1] and "--config $(CONFIG)" in recipe[-1]
    assert "cdk.out/SUMMARY.md" in (REPO / "README.md").read_text()
