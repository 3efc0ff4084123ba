"""No feature flag dependence: every example and the platform app render the same security-relevant statements
with no context at all as with the project's cdk.json context (its feature flags).

Each app is synthesized in this process twice, ``App(context={})`` and ``App(context=<cdk.json's context>)`` (the
examples through their own ``app.py``, with ``aws_cdk.App`` handing them the context; the platform through
``build_platform``, as app.py does), and :func:`~tests.support.security_view.security_view` of each template is
compared: IAM statements and trust policies, bucket, key and other resource policies with their log delivery
statements, encryption, public access blocks, security group rules, the cluster's endpoint and OIDC provider.
What the flags may still change is how a statement is written (the partition as a token or a literal, statements
merged by ``@aws-cdk/aws-iam:minimizePolicies``), never what it allows. tests/test_examples.py synthesizes the same
examples from the built wheel with the real CLI, with and without the context, under cdk-nag.
"""

from __future__ import annotations

import json
import runpy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aws_cdk
import pytest

from tests.support.security_view import normalise, security_view, statement_atoms
from tests.support.synth import REPO

EXAMPLES = REPO / "examples"
PROJECT_CONTEXT: dict[str, Any] = json.loads((REPO / "cdk.json").read_text())["context"]
# Resources an example makes for its own constructs, which follow the example's own flags (the consumer's choice, not
# the library's): the hyperpod-operator example's own aws_eks_v2 cluster makes its OIDC provider as
# @aws-cdk/aws-eks:useNativeOidcProvider says, with a Lambda-backed provider when unset. The library's roles trust
# that provider whichever it is (security_view names it by its cluster, and compares its client IDs).
OWN_RESOURCES = {
    "hyperpod-operator": ("HyperPodOperatorExample/Custom::AWSCDKOpenIdConnectProviderCustomResourceProvider/",),
}
# Not a feature flag: the construct paths in the templates' metadata (the CLI asks for them too), read by security_view.
PATHS = {"aws:cdk:enable-path-metadata": True}
Templates = dict[str, dict[str, Any]]


@contextmanager
def _app_with_context(context: dict[str, Any], outdir: Path) -> Iterator[list[aws_cdk.App]]:
    """``aws_cdk.App`` for the code run meanwhile, with ``context`` (an app's own context wins) and ``outdir``."""
    original = aws_cdk.App
    apps: list[aws_cdk.App] = []

    class App(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["context"] = {**context, **(kwargs.get("context") or {}), **PATHS}
            kwargs["outdir"] = str(outdir / str(len(apps)))
            super().__init__(*args, **kwargs)
            apps.append(self)

    aws_cdk.App = App  # type: ignore[misc]
    try:
        yield apps
    finally:
        aws_cdk.App = original  # type: ignore[misc]


def _templates(app: aws_cdk.App) -> Templates:
    return {stack.stack_name: stack.template for stack in app.synth().stacks}


def synth_example(name: str, context: dict[str, Any], outdir: Path) -> Templates:
    """Run ``examples/<name>/app.py`` (its ``app.synth()`` included) with ``context``."""
    with _app_with_context(context, outdir) as apps:
        runpy.run_path(str(EXAMPLES / name / "app.py"), run_name="__main__")
    (app,) = apps
    return _templates(app)


def synth_platform(context: dict[str, Any], outdir: Path) -> Templates:
    """The platform's stacks from config/default.yaml, built as app.py builds them (without dist/ and cdk-nag)."""
    from platform_config import load_config
    from stacks.platform import build_platform

    app = aws_cdk.App(context={**context, **PATHS}, outdir=str(outdir))
    build_platform(app, load_config(str(REPO / "config" / "default.yaml")))
    return _templates(app)


def _views(templates: Templates, exclude: tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
    return {stack: security_view(template, exclude_paths=exclude) for stack, template in templates.items()}


def _differences(without: dict[str, Any], with_flags: dict[str, Any]) -> list[str]:
    lines = []
    for stack in sorted(set(without) | set(with_flags)):
        a, b = without.get(stack, {}), with_flags.get(stack, {})
        for resource in sorted(set(a) | set(b)):
            if a.get(resource) != b.get(resource):
                lines.append(f"{stack} {resource}:\n  without flags: {json.dumps(a.get(resource))[:1500]}\n"
                             f"  with flags:    {json.dumps(b.get(resource))[:1500]}")
    return lines


TARGETS: dict[str, Callable[[dict[str, Any], Path], Templates]] = {
    **{p.name: (lambda context, outdir, name=p.name: synth_example(name, context, outdir))
       for p in sorted(EXAMPLES.iterdir()) if (p / "app.py").is_file()},
    "platform": synth_platform,
}


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, bool], Templates]:
    """``synthesized(target, flags)``: the target's templates with the project's context (``flags``) or none; each
    synthesized once per module."""
    cache: dict[tuple[str, bool], Templates] = {}

    def get(target: str, flags: bool) -> Templates:
        if (target, flags) not in cache:
            outdir = tmp_path_factory.mktemp(f"{target}-{'with' if flags else 'without'}-flags")
            cache[target, flags] = TARGETS[target](dict(PROJECT_CONTEXT) if flags else {}, outdir)
        return cache[target, flags]
    return get


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_security_statements_are_the_same_without_the_projects_feature_flags(
        target: str, synthesized: Callable[[str, bool], Templates]) -> None:
    exclude = OWN_RESOURCES.get(target, ())
    without = _views(synthesized(target, False), exclude)
    with_flags = _views(synthesized(target, True), exclude)
    assert sorted(without) == sorted(with_flags)
    assert any(view for view in with_flags.values()), "nothing security-relevant was extracted"
    differences = _differences(without, with_flags)
    assert differences == [], "\n".join(differences)


def test_the_platform_admits_log_delivery_from_each_of_its_buckets_without_any_flag(
        synthesized: Callable[[str, bool], Templates]) -> None:
    """The bug behind this test: without @aws-cdk/core:enablePartitionLiterals the HyperPod lifecycle bucket (cluster
    stack) got no statement in the access-log bucket's policy (storage stack), and a warning that called it imported."""
    templates = synthesized("platform", False)
    storage = next(t for name, t in templates.items() if name.endswith("-storage"))
    (policy,) = [r for r in storage["Resources"].values() if r["Type"] == "AWS::S3::BucketPolicy"
                 and "/AccessLogBucket/" in r["Metadata"]["aws:cdk:path"]]
    delivery = [json.loads(atom) for atom in statement_atoms(normalise(policy["Properties"]["PolicyDocument"]))
                if '"logging.s3.amazonaws.com"' in atom]
    sources = sorted(atom["Condition"]["ArnLike"]["aws:SourceArn"] for atom in delivery)
    assert sources == sorted(f"arn:aws:s3:::{name}" for name in _logged_bucket_names(templates))
    assert len(sources) == 4  # the capture, TLS and audit trail buckets (storage stack), the lifecycle bucket (cluster)
    for atom in delivery:
        assert atom["Condition"]["StringEquals"]["aws:SourceAccount"] == "111122223333"


def _logged_bucket_names(templates: Templates) -> list[str]:
    return [bucket["Properties"]["BucketName"] for template in templates.values()
            for bucket in template["Resources"].values()
            if bucket["Type"] == "AWS::S3::Bucket" and "LoggingConfiguration" in bucket["Properties"]]
