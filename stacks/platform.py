"""The whole platform, composed from the config: one function both app.py and the tests call."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aws_cdk import Annotations, App, Aspects, Environment, Validations
from cdk_nag import AwsSolutionsChecks

from hyperpod_inference_iac import LambdaLogRetention, apply_tags
from platform_config import PlatformConfig
from stacks.cluster_stack import ClusterStack
from stacks.storage_stack import StorageStack


@dataclass(frozen=True)
class Platform:
    storage: StorageStack
    cluster: ClusterStack


def build_platform(app: App, config: PlatformConfig,
                   replacements: Mapping[str, Sequence[str]] | None = None) -> Platform:
    """Both stacks of the config's platform. ``replacements``: the custom resources the GitOps rendering found the
    operator cannot change in place (``StagedManifests.replacements``), warned about on their manifests."""
    env = Environment(account=config.environment.account, region=config.environment.region)
    storage = StorageStack(app, f"{config.project}-storage", config=config, env=env,
                           description="Captured inference data: KMS key, capture and TLS buckets")
    cluster = ClusterStack(app, f"{config.project}-cluster", config=config, env=env,
                           storage=storage.storage, pipeline=storage.pipeline, alarm_topic=storage.alarm_topic,
                           capture_alarms=storage.capture_alarms, tables=storage.tables, replacements=replacements,
                           description="EKS + HyperPod with NVMe GPU nodes, the inference operator and scoped IAM")
    # Warnings the config accepts, with its reasons: acknowledged for everything in both stacks (the storage stack's
    # redaction and reader warnings as much as the cluster's), also those added after this (warn_about_replacements).
    for stack in (storage, cluster):
        for warning in config.acknowledged_warnings:
            Annotations.of(stack).acknowledge_warning(warning.id, warning.reason)
    apply_tags(app, config.tags)
    # Every Lambda function, CDK's own helpers included, logs into a group with a retention.
    Aspects.of(app).add(LambdaLogRetention(config.logging.retention))
    return Platform(storage=storage, cluster=cluster)


def add_nag_checks(app: App) -> None:
    """cdk-nag's AWS Solutions pack judges every synth; unacknowledged findings fail it. The library's
    constructs acknowledge their own reviewed findings (hyperpod_inference_iac.foundation.nag); this app adds none.
    Accepted findings are also written into each resource's ``cdk_nag`` metadata, an audit trail."""
    Validations.of(app).add_plugins(AwsSolutionsChecks(app, write_suppressions_to_cloud_formation=True))
