"""Settings read from the Lambda's environment variables, validated once per invocation."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from capture_core.redaction import DEFAULT_RULES, RULES

DEFAULT_OUTPUT_PREFIX = "curated/"
DEFAULT_QUARANTINE_PREFIX = "quarantine/"
DEFAULT_REDACT = ",".join(DEFAULT_RULES)
NO_REDACTION = "none"
# Decoded bytes read from one object (a small gzip object can inflate a thousandfold); past it the
# rest is left in the source object and the quarantine says so. 2 GiB is minutes of work within
# the function's 15 and fits its 2 GiB of /tmp once compressed to Parquet.
DEFAULT_MAX_OBJECT_BYTES = 2 << 30
MAX_OBJECT_BYTES_RANGE = (1 << 20, 16 << 30)

_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
# A key ARN or alias ARN: what the bucket policy compares the SSE-KMS header with.
_KMS_KEY_ARN = re.compile(r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:(key/[A-Za-z0-9-]+|alias/[A-Za-z0-9/_-]+)$")


class ConfigurationError(ValueError):
    """The function's environment is wrong; every problem is listed with the variable to fix."""


@dataclass(frozen=True)
class Settings:
    output_bucket: str | None  # None: write next to the source object, in the source bucket
    output_prefix: str
    quarantine_prefix: str
    redaction_rules: tuple[str, ...]
    output_kms_key_id: str | None = None  # None: the bucket's default encryption
    max_object_bytes: int = DEFAULT_MAX_OBJECT_BYTES

    @property
    def upload_arguments(self) -> dict[str, object]:
        """boto3 ExtraArgs of every upload: SSE-KMS under the capture key (the managed transfer takes no
        Bucket Key argument; a few outputs per source object make that a few KMS calls)."""
        if self.output_kms_key_id is None:
            return {}
        return {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": self.output_kms_key_id}

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> Settings:
        problems: list[str] = []
        output_bucket = environ.get("OUTPUT_BUCKET") or None
        if output_bucket is not None and not _BUCKET_NAME.match(output_bucket):
            problems.append(f"OUTPUT_BUCKET must be an S3 bucket name, got {output_bucket!r}")
        output_prefix = environ.get("OUTPUT_PREFIX", DEFAULT_OUTPUT_PREFIX)
        quarantine_prefix = environ.get("QUARANTINE_PREFIX", DEFAULT_QUARANTINE_PREFIX)
        problems += _prefix_problems("OUTPUT_PREFIX", output_prefix)
        problems += _prefix_problems("QUARANTINE_PREFIX", quarantine_prefix)
        if output_prefix.startswith(quarantine_prefix) or quarantine_prefix.startswith(output_prefix):
            problems.append(
                f"OUTPUT_PREFIX and QUARANTINE_PREFIX must not contain each other, "
                f"got {output_prefix!r} and {quarantine_prefix!r}"
            )
        rules, rule_problems = _parse_redaction_rules(environ.get("REDACT", DEFAULT_REDACT))
        problems += rule_problems
        key_id = environ.get("OUTPUT_KMS_KEY_ID") or None
        if key_id is not None and not _KMS_KEY_ARN.match(key_id):
            problems.append(f"OUTPUT_KMS_KEY_ID must be a KMS key ARN or alias ARN, got {key_id!r}")
        max_object_bytes = _max_object_bytes(environ.get("MAX_OBJECT_BYTES"), problems)
        if problems:
            raise ConfigurationError(
                "capture processor configuration is invalid:\n" + "\n".join(f"  - {p}" for p in problems)
            )
        return cls(output_bucket, output_prefix, quarantine_prefix, rules, key_id, max_object_bytes)

    def output_bucket_for(self, source_bucket: str) -> str:
        return self.output_bucket or source_bucket


def _max_object_bytes(value: str | None, problems: list[str]) -> int:
    if value is None or value == "":
        return DEFAULT_MAX_OBJECT_BYTES
    low, high = MAX_OBJECT_BYTES_RANGE
    if not (value.isascii() and value.isdigit()) or not low <= int(value) <= high:
        problems.append(f"MAX_OBJECT_BYTES must be a whole number of bytes from {low} to {high}, got {value!r}")
        return DEFAULT_MAX_OBJECT_BYTES
    return int(value)


def _prefix_problems(name: str, prefix: str) -> list[str]:
    if not prefix or not prefix.endswith("/") or prefix.startswith("/"):
        return [f"{name} must be a non-empty key prefix ending in '/' and not starting with '/', got {prefix!r}"]
    return []


def _parse_redaction_rules(value: str) -> tuple[tuple[str, ...], list[str]]:
    names = tuple(name.strip() for name in value.split(",") if name.strip())
    if names == (NO_REDACTION,):
        return (), []
    if not names:
        return (), [f"REDACT is empty; list rules ({', '.join(RULES)}) or set it to '{NO_REDACTION}'"]
    unknown = [name for name in names if name not in RULES]
    if unknown:
        return (), [
            f"REDACT has unknown rule(s) {', '.join(unknown)}; known rules: {', '.join(RULES)} "
            f"(or '{NO_REDACTION}'), got {value!r}"
        ]
    return tuple(dict.fromkeys(names)), []
