"""Shared fixtures. Every test runs with fake credentials and a fixed region, so nothing can
reach a real AWS account by accident."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.s3server import moto_server

# Set at import time (before any boto3 client or jsii process starts).
os.environ.update(
    {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "CDK_DISABLE_VERSION_CHECK": "true",
    }
)
os.environ.pop("AWS_PROFILE", None)


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """URL of a moto server (S3, SQS, ...) on loopback, shared by the whole session."""
    with moto_server() as url:
        yield url
