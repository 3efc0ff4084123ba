"""No feature flag dependence: every example and the platform app render the same security-relevant statements
with no context at all as with the project's cdk.json context (its feature flags).

Each app is synthesized twice, with no context and with the project's cdk.json context, and
:func:`~tests.support.security_view.security_view` of each template is compared. The examples are those
tests/examples/test_examples.py synthesizes once per run with the installed wheel (tests/support/consumer.py: the
wheel holds this checkout's library, built from a copy of its sources): each example's cdk.json holds the project's
context, and its copy without the ``context`` block gets only what the CDK CLI adds to every app's context
(``CLI_CONTEXT``: construct paths, asset metadata, version reporting; no feature flag), and cdk-nag, which reads the
construct tree and writes nothing into the templates (it adds no Aspect unless asked to write its suppressions). The
platform is synthesized in this process, ``App(context={})`` and ``App(context=<cdk.json's context>)``, through
``build_platform`` as app.py does. What is compared: IAM statements and trust policies, bucket, key and other
resource policies with their log delivery statements, encryption, public access blocks, security group rules, the
cluster's endpoint and OIDC provider.
What the flags may still change is how a statement is written (the partition as a token or a literal, statements
merged by ``@aws-cdk/aws-iam:minimizePolicies``), never what it allows.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aws_cdk
import pytest

from tests.examples.synth_driver import CLI_CONTEXT, app_context
from tests.support.consumer import ExamplesSynth, example_names
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


def _templates(app: aws_cdk.App) -> Templates:
    return {stack.stack_name: stack.template for stack in app.synth().stacks}


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


TARGETS = [*example_names(), "platform"]


@pytest.fixture(scope="module")
def synthesized(examples_synth: ExamplesSynth, tmp_path_factory: pytest.TempPathFactory
                ) -> Callable[[str, bool], Templates]:
    """``synthesized(target, flags)``: the target's templates with the project's context (``flags``) or none; each
    synthesized once per run (the examples, shared with test_examples.py) or per module (the platform)."""
    cache: dict[bool, Templates] = {}

    def get(target: str, flags: bool) -> Templates:
        if target != "platform":
            variant = "with-context" if flags else "without-context"
            context = app_context(examples_synth.outdir(target, variant).parent / "app")
            assert context == ({**PROJECT_CONTEXT, **CLI_CONTEXT} if flags else CLI_CONTEXT), target
            return examples_synth.templates(target, variant)
        if flags not in cache:
            outdir = tmp_path_factory.mktemp(f"platform-{'with' if flags else 'without'}-flags")
            cache[flags] = synth_platform(dict(PROJECT_CONTEXT) if flags else {}, outdir)
        return cache[flags]
    return get


def test_what_the_cli_adds_to_every_apps_context_is_no_feature_flag() -> None:
    """The examples' synths without the project's context still have ``CLI_CONTEXT``: none of it is a flag the
    project sets, so "without" means without any."""
    assert set(CLI_CONTEXT) & set(PROJECT_CONTEXT) == set()


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
