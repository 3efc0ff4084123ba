"""Every cdk-nag acknowledgment of this project, each with its reason, in one place.

Constructs never call ``Validations.of(...).acknowledge`` directly: they call :func:`acknowledge`
with a key of :data:`REASONS`, so a reviewer reads the whole list of accepted findings here.
Acknowledgments are attached to the one construct they concern (never a path, never a stack),
so a new resource with the same problem is still reported.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Validations
from constructs import IConstruct

REASONS: dict[str, tuple[str, str]] = {
    "access-log-bucket-has-no-own-logs": (
        "AwsSolutions-S1",
        "This bucket is the destination of the server access logs of the other buckets; logging it into "
        "itself would loop and a fourth bucket would only move the problem.",
    ),
}


def acknowledge(construct: IConstruct, reason_key: str) -> None:
    rule, reason = REASONS[reason_key]
    Validations.of(construct).acknowledge(Acknowledgment(id=rule, reason=reason))
