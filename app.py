#!/usr/bin/env python3
"""CDK app entry point: `make synth` (or `cdk synth -c config=path/to/file.yaml`).

One synth writes both hand-offs from one plan: CloudFormation in cdk.out/ and the Kubernetes
manifests in dist/ (context `dist`, default `dist`; `-c outputs=cdk-outputs.json` after a deploy
fills values that exist only then, such as a certificate this app created).
"""

from __future__ import annotations

import sys
from pathlib import Path

from aws_cdk import App

from hyperpod_inference_iac.validation import ConfigError
from platform_config import load_config
from stacks.platform import add_nag_checks, build_platform
from stacks.workloads import write_manifests

DEFAULT_CONFIG = "config/default.yaml"


# Stack traces of construct creation hold temporary paths of the jsii runtime: two synths would differ.
REPRODUCIBLE = {"aws:cdk:disable-creation-stack-traces": True, "aws:cdk:disable-stack-trace": True}


def main() -> int:
    app = App(context=REPRODUCIBLE)
    context = app.node.try_get_context
    try:
        config = load_config(context("config") or DEFAULT_CONFIG)
        platform = build_platform(app, config)
        add_nag_checks(app)
        app.synth()
        outputs = context("outputs")
        waiting = write_manifests(config, outdir=Path(context("dist") or "dist"),
                                  sidecar_image=platform.cluster.workloads.sidecar_image_uri,
                                  outputs_file=Path(outputs) if outputs else None)
    except ConfigError as error:
        print(f"Configuration error: {error}", file=sys.stderr)
        return 2
    for chart in waiting:
        print(f"dist/: {chart} waits for values that exist only after `cdk deploy`; render it with "
              f"`make synth OUTPUTS=cdk-outputs.json`", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
