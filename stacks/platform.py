"""The whole platform, composed from the config: one function both app.py and the tests call."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import App, Environment, Tags, Validations
from cdk_nag import AwsSolutionsChecks

from platform_config import PlatformConfig
from stacks.storage_stack import StorageStack


@dataclass(frozen=True)
class Platform:
    storage: StorageStack


def build_platform(app: App, config: PlatformConfig) -> Platform:
    env = Environment(account=config.environment.account, region=config.environment.region)
    storage = StorageStack(app, f"{config.project}-storage", config=config, env=env,
                           description="Captured inference data: KMS key, capture and TLS buckets")
    for key, value in sorted(config.tags.items()):
        Tags.of(app).add(key, value)
    return Platform(storage=storage)


def add_nag_checks(app: App) -> None:
    """cdk-nag's AWS Solutions pack judges every synth; unacknowledged findings fail it."""
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
