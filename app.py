#!/usr/bin/env python3
"""CDK app entry point: `make synth` (or `cdk synth -c config=path/to/file.yaml`).

One synth writes both hand-offs from one plan: CloudFormation in cdk.out/ and the Kubernetes
manifests in dist/ (context `dist`, default `dist`; `-c outputs=cdk-outputs.json` after a deploy
fills values that exist only then, such as a certificate this app created). The config is checked
whole before anything is built; a run that fails changes nothing in cdk.out/ or dist/ (dist/ is
staged and replaces the old one only after the synth succeeded).
"""

from __future__ import annotations

import sys
from pathlib import Path

from aws_cdk import App

from hyperpod_inference_iac import ConfigError
from hyperpod_inference_iac.preflight import write_plan
from platform_config import load_config, read_stack_outputs
from platform_config.acknowledgments import review_warnings
from stacks.gitops import stage_dist
from stacks.platform import add_nag_checks, build_platform
from stacks.preflight_plan import preflight_plan

DEFAULT_CONFIG = "config/default.yaml"
# Stack traces of construct creation hold temporary paths of the jsii runtime, and a synth slower than 10 s a
# stack (a loaded CI runner) writes its timings to cdk.out/performance-counters.json: two synths would differ.
REPRODUCIBLE = {"aws:cdk:disable-creation-stack-traces": True, "aws:cdk:disable-stack-trace": True,
                "aws:cdk:performance-reporting": False}


def main() -> int:
    app = App(context=REPRODUCIBLE)
    context = app.node.try_get_context
    config_path = context("config") or DEFAULT_CONFIG
    outputs_path = context("outputs")
    try:
        config = load_config(config_path)
        # The risky choices the constructs warn about below, under this file's key paths (as the config check says).
        for line in review_warnings(config).warning_lines(config_path):
            print(line, file=sys.stderr)
        outputs = read_stack_outputs(config, Path(outputs_path)) if outputs_path else {}
        complete = f"make synth CONFIG={config_path} OUTPUTS=cdk-outputs.json"
        # Both hand-offs from the config alone: dist/ is staged first (nothing in it comes from a construct), and
        # what it finds (custom resources the operator would have to replace) is warned about at synth.
        dist = stage_dist(config, outdir=Path(context("dist") or "dist"), outputs=outputs, complete_with=complete)
        platform = build_platform(app, config, replacements=dist.replacements)
        add_nag_checks(app)
    except ConfigError as error:
        print(f"Configuration error: {error}", file=sys.stderr)
        return 2
    try:
        app.synth()
    except BaseException:
        dist.discard()
        raise
    dist.commit()
    # What the deploy will ask of the account, for `python -m hyperpod_inference_iac.preflight` (docs/deploying.md).
    write_plan(preflight_plan(config, platform), app.outdir)
    for name, awaiting in sorted(dist.waiting.items()):
        needs = ", ".join(value.output_name for value in awaiting.missing)
        print(f"dist/: {name} waits for values that exist only after `cdk deploy` ({needs}); render it with "
              f"`{complete}`", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
