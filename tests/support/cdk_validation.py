"""aws-cdk-lib's built-in CloudFormation validation in the tests' own process (docs/testing.md, "In-process apps").

At every synth, aws-cdk-lib checks the templates against CloudFormation's schemas in the jsii kernel (a WebAssembly
checker, about half the CPU of a small app's synth). Unless the app's context sets
``@aws-cdk/core:validateAgainstDefaultRules`` (cdk.json does), what it finds is only printed as a warning, which no
test reads. So an in-process app without that context is built without the validation, and an app given it (cdk.json's
context, as tests/cluster and tests/unit/test_platform_constructs.py pass) keeps it and fails on an invalid template
as ``cdk synth`` does. The switch is an ``App`` argument in this process, no environment variable: the CLI's synths
(tests/platform, the examples) run in processes of their own, with the validation, and their reports are asserted.
"""

from __future__ import annotations

import sys

VALIDATE_AGAINST_DEFAULT_RULES = "@aws-cdk/core:validateAgainstDefaultRules"


def validation_can_fail(kwargs: dict[str, object]) -> bool:
    """Whether an ``App(**kwargs)``'s built-in CloudFormation validation can fail its synth (not only warn)."""
    return any(isinstance(context, dict) and bool(context.get(VALIDATE_AGAINST_DEFAULT_RULES))
               for context in (kwargs.get("context"), kwargs.get("post_cli_context")))


def validate_only_where_it_can_fail() -> None:
    """Make ``aws_cdk.App`` default ``builtin_cloud_formation_validation`` to False where validation can only warn
    (an explicit value is kept). Idempotent; does nothing before aws-cdk-lib is imported."""
    aws_cdk = sys.modules.get("aws_cdk")
    if aws_cdk is None:
        return
    original = aws_cdk.App.__init__
    if getattr(original, "validation_can_fail", False):
        return

    def __init__(self: object, **kwargs: object) -> None:
        if kwargs.get("builtin_cloud_formation_validation") is None and not validation_can_fail(kwargs):
            kwargs["builtin_cloud_formation_validation"] = False
        original(self, **kwargs)

    __init__.validation_can_fail = True  # type: ignore[attr-defined]
    aws_cdk.App.__init__ = __init__
