#!/usr/bin/env python3
"""CDK app entry point: `make synth` (or `cdk synth -c config=path/to/file.yaml`)."""

from __future__ import annotations

import sys

from aws_cdk import App

from constructs_lib.validation import ConfigError
from platform_config import load_config
from stacks.platform import add_nag_checks, build_platform

DEFAULT_CONFIG = "config/default.yaml"


def main() -> int:
    app = App()
    config_path = app.node.try_get_context("config") or DEFAULT_CONFIG
    try:
        config = load_config(config_path)
        build_platform(app, config)
    except ConfigError as error:
        print(f"Configuration error: {error}", file=sys.stderr)
        return 2
    add_nag_checks(app)
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
