"""Run a consumer's CDK app with cdk-nag's AWS Solutions pack added to its App, the way a consumer who
runs cdk-nag would: ``cdk synth --app "python3 nag_app.py app.py"``. Findings go to the validation report.
The same patch as tests/examples/synth_driver.py's in-process synths (``cdk_nag_on``)."""

from __future__ import annotations

import runpy
import sys

from synth_driver import cdk_nag_on  # this file's folder is first on sys.path, as for any script

with cdk_nag_on():
    runpy.run_path(sys.argv[1], run_name="__main__")
