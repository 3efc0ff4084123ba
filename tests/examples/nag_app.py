"""Run a consumer's CDK app with cdk-nag's AWS Solutions pack added to its App, the way a consumer who
runs cdk-nag would: ``cdk synth --app "python3 nag_app.py app.py"``. Findings go to the validation report."""

from __future__ import annotations

import runpy
import sys

import aws_cdk
from cdk_nag import AwsSolutionsChecks

_synth = aws_cdk.App.synth


def _synth_with_nag(self: aws_cdk.App, *args: object, **kwargs: object) -> object:
    aws_cdk.Validations.of(self).add_plugins(AwsSolutionsChecks(self))
    return _synth(self, *args, **kwargs)


aws_cdk.App.synth = _synth_with_nag  # type: ignore[method-assign]
runpy.run_path(sys.argv[1], run_name="__main__")
