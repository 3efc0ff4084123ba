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
# Where curated rows go (docs/capture-processor.md, "Iceberg tables"): today's per-object Parquet files, the
# Iceberg tables, or both (the migration release: the Glue tables of today's layout keep working meanwhile).
CURATED_OUTPUTS = ("parquet", "iceberg", "both")
DEFAULT_CURATED_OUTPUT = "parquet"
DEFAULT_CAPTURE_TABLE = "capture_records"
DEFAULT_ALB_TABLE = "alb_access_logs"
DEFAULT_COMMIT_RETRIES = 6
COMMIT_RETRIES_RANGE = (0, 20)
DEFAULT_RETRY_BASE_MS = 250
DEFAULT_RETRY_MAX_MS = 8000
# Arrow bytes held for one commit: past it the rows so far are committed (a second commit in the invocation), so
# a batch of large objects cannot exhaust the function's memory.
DEFAULT_MAX_COMMIT_BYTES = 256 << 20

_GLUE_NAME = re.compile(r"^[a-z0-9_]{1,255}$")
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
# A key ARN or alias ARN: what the bucket policy compares the SSE-KMS header with.
KMS_KEY_ARN = re.compile(r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:(key/[A-Za-z0-9-]+|alias/[A-Za-z0-9/_-]+)$")


class ConfigurationError(ValueError):
    """The function's environment is wrong; every problem is listed with the variable to fix."""


@dataclass(frozen=True)
class IcebergSettings:
    """The Glue Data Catalog's Iceberg tables the processor appends to (CURATED_OUTPUT iceberg or both)."""

    database: str
    capture_table: str = DEFAULT_CAPTURE_TABLE
    alb_table: str = DEFAULT_ALB_TABLE
    catalog_id: str | None = None  # None: the caller's account
    commit_retries: int = DEFAULT_COMMIT_RETRIES
    retry_base_ms: int = DEFAULT_RETRY_BASE_MS
    retry_max_ms: int = DEFAULT_RETRY_MAX_MS
    max_commit_bytes: int = DEFAULT_MAX_COMMIT_BYTES

    @classmethod
    def from_environment(cls, environ: Mapping[str, str], problems: list[str]) -> IcebergSettings:
        database = environ.get("ICEBERG_DATABASE", "")
        if not _GLUE_NAME.match(database):
            problems.append(f"ICEBERG_DATABASE must be a Glue database name ([a-z0-9_]), got {database!r}")
        tables = {}
        for variable, default in (("ICEBERG_CAPTURE_TABLE", DEFAULT_CAPTURE_TABLE), ("ICEBERG_ALB_TABLE",
                                                                                     DEFAULT_ALB_TABLE)):
            tables[variable] = environ.get(variable) or default
            if not _GLUE_NAME.match(tables[variable]):
                problems.append(f"{variable} must be a Glue table name ([a-z0-9_]), got {tables[variable]!r}")
        catalog_id = environ.get("ICEBERG_CATALOG_ID") or None
        if catalog_id is not None and not re.fullmatch(r"\d{12}", catalog_id):
            problems.append(f"ICEBERG_CATALOG_ID must be a 12-digit account id, got {catalog_id!r}")
        return cls(
            database,
            tables["ICEBERG_CAPTURE_TABLE"],
            tables["ICEBERG_ALB_TABLE"],
            catalog_id,
            _whole_number(environ, "ICEBERG_COMMIT_RETRIES", DEFAULT_COMMIT_RETRIES, COMMIT_RETRIES_RANGE, problems),
            _whole_number(environ, "ICEBERG_RETRY_BASE_MS", DEFAULT_RETRY_BASE_MS, (1, 60_000), problems),
            _whole_number(environ, "ICEBERG_RETRY_MAX_MS", DEFAULT_RETRY_MAX_MS, (1, 300_000), problems),
            _whole_number(environ, "ICEBERG_MAX_COMMIT_BYTES", DEFAULT_MAX_COMMIT_BYTES, (1 << 20, 2 << 30), problems),
        )


@dataclass(frozen=True)
class Settings:
    output_bucket: str | None  # None: write next to the source object, in the source bucket
    output_prefix: str
    quarantine_prefix: str
    redaction_rules: tuple[str, ...]
    output_kms_key_id: str | None = None  # None: the bucket's default encryption
    max_object_bytes: int = DEFAULT_MAX_OBJECT_BYTES
    curated_output: str = DEFAULT_CURATED_OUTPUT
    iceberg: IcebergSettings | None = None  # set when curated_output is iceberg or both

    @property
    def writes_parquet(self) -> bool:
        return self.curated_output in ("parquet", "both")

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
        if key_id is not None and not KMS_KEY_ARN.match(key_id):
            problems.append(f"OUTPUT_KMS_KEY_ID must be a KMS key ARN or alias ARN, got {key_id!r}")
        max_object_bytes = _whole_number(
            environ, "MAX_OBJECT_BYTES", DEFAULT_MAX_OBJECT_BYTES, MAX_OBJECT_BYTES_RANGE, problems, " of bytes"
        )
        curated_output = environ.get("CURATED_OUTPUT") or DEFAULT_CURATED_OUTPUT
        iceberg = None
        if curated_output not in CURATED_OUTPUTS:
            problems.append(f"CURATED_OUTPUT must be one of {', '.join(CURATED_OUTPUTS)}, got {curated_output!r}")
        elif curated_output != "parquet":
            iceberg = IcebergSettings.from_environment(environ, problems)
        if problems:
            raise ConfigurationError(
                "capture processor configuration is invalid:\n" + "\n".join(f"  - {p}" for p in problems)
            )
        return cls(
            output_bucket, output_prefix, quarantine_prefix, rules, key_id, max_object_bytes, curated_output, iceberg
        )

    def output_bucket_for(self, source_bucket: str) -> str:
        return self.output_bucket or source_bucket


def _whole_number(
    environ: Mapping[str, str], name: str, default: int, bounds: tuple[int, int], problems: list[str], unit: str = ""
) -> int:
    value = environ.get(name)
    if value is None or value == "":
        return default
    low, high = bounds
    if not (value.isascii() and value.isdigit()) or not low <= int(value) <= high:
        problems.append(f"{name} must be a whole number{unit} from {low} to {high}, got {value!r}")
        return default
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
