"""CapturePipeline: S3 capture objects -> SQS -> the capture processor Lambda -> curated Parquet,
queryable at once in Athena through Glue tables with partition projection.

The Lambda's runtime code lives in ``lambda/capture_processor`` (see docs/capture-processor.md
for the record formats, the output schema and the redaction rules). It is deployed as a plain
folder asset; pyarrow comes from the AWS SDK for pandas managed layer.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from aws_cdk import Aws, CfnMapping, Duration, Size, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_glue as glue
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_notifications as s3_notifications
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from hyperpod_inference_iac.capture.capture_storage import (
    DEFAULT_CAPTURE_PREFIX,
    DEFAULT_CURATED_PREFIX,
    DEFAULT_QUARANTINE_PREFIX,
)
from hyperpod_inference_iac.foundation._package_data import (
    package_dir,
)
from hyperpod_inference_iac.foundation.agreement import (
    PipelinePart,
    agree,
)
from hyperpod_inference_iac.foundation.nag import (
    acknowledge,
    managed_policy,
    stack_singletons,
)
from hyperpod_inference_iac.foundation.patterns import (
    LAMBDA_LAYER_VERSION_ARN,
)
from hyperpod_inference_iac.foundation.props import (
    Props,
    listed,
    prop,
    real_signature,
)
from hyperpod_inference_iac.foundation.risks import (
    RiskWarnings,
)
from hyperpod_inference_iac.foundation.validation import (
    PROPS,
    KeyPaths,
    Problems,
    is_unresolved,
)
from hyperpod_inference_iac.security.data_perimeter import (
    bucket_guard,
    how_to_name,
)
from hyperpod_inference_iac.security.s3_access import (
    grant_object_reads,
    grant_object_writes,
    key_prefix_fault,
)

# The runtime must match the layer's Python: the layer ships compiled pyarrow for one version.
LAMBDA_RUNTIME = lambda_.Runtime.PYTHON_3_13
PANDAS_LAYER_NAME = "AWSSDKPandas-Python313-Arm64"
PANDAS_LAYER_ACCOUNT = "336392948345"
# Layer versions differ per region. Source: https://aws-sdk-pandas.readthedocs.io/en/stable/layers.html
# (release 3.16.1). Only versions read from that page are listed: for any other region pass
# pandas_layer_arn (find it on that page, or see docs/capture-processor.md).
PANDAS_LAYER_VERSIONS: Mapping[str, int] = {
    "af-south-1": 11,
    # Not read from that page but seen in public deployments of the same layer name (a published layer
    # version stays available); check with `aws lambda get-layer-version-by-arn` before relying on them.
    "ca-central-1": 15,
    "us-east-1": 16,
    "us-west-2": 15,
}

# The SQS event source invokes at most this many functions at once (its own bound: unlike reserved
# concurrency it takes nothing from the account's pool, so it works in accounts with a small quota).
DEFAULT_MAX_CONCURRENCY = 10
MAX_CONCURRENCY = (2, 1000)
FUNCTION_TIMEOUT = Duration.minutes(15)  # a 1 GiB object takes minutes at 1 GiB of memory
MAX_RECEIVE_COUNT = 5
GLUE_NAME = re.compile(r"^[a-z0-9_]{1,255}$")
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclass(frozen=True)
class GlueColumn:
    name: str
    type: str  # Hive type as Glue and Athena spell it


def _columns(spec: str) -> tuple[GlueColumn, ...]:
    return tuple(GlueColumn(*line.split()) for line in spec.strip().splitlines())


# Where erasures are registered in the output bucket (capture_core.erasure.REGISTER_PREFIX; a test keeps them equal).
ERASURE_REGISTER_PREFIX = "audit/erasure-register/"

# The OpenTelemetry GenAI semantic conventions the gen_ai_* columns follow (the processor's
# openai_format.SEMCONV_VERSION; a test keeps them in step).
GEN_AI_SEMCONV_VERSION = "1.36.0"
# Mirrors the Parquet schemas written by lambda/capture_processor (a test keeps them in step).
CAPTURE_COLUMNS = _columns(
    """
    event_id string
    inference_id string
    inference_time timestamp
    time_source string
    event_version string
    input_content_type string
    input_encoding string
    input_text string
    input_truncated boolean
    output_content_type string
    output_encoding string
    output_text string
    output_truncated boolean
    decode_error string
    source_key string
    deployment_hash string
    gen_ai_operation_name string
    gen_ai_request_model string
    gen_ai_response_model string
    gen_ai_usage_input_tokens bigint
    gen_ai_usage_output_tokens bigint
    gen_ai_response_finish_reasons array<string>
    streamed boolean
    caller_id string
    request_path string
    http_response_status_code int
    request_duration_ms double
    time_to_first_chunk_ms double
    partial boolean
    partial_reason string
    redaction_rules array<string>
    usage_source string
    refused_by string
    """
)
ALB_COLUMNS = _columns(
    """
    type string
    time timestamp
    time_source string
    elb string
    client_ip string
    client_port int
    target_ip string
    target_port int
    request_processing_time double
    target_processing_time double
    response_processing_time double
    elb_status_code int
    target_status_code int
    received_bytes bigint
    sent_bytes bigint
    request_verb string
    request_url string
    request_proto string
    request_host string
    request_port int
    request_path string
    request_query string
    user_agent string
    ssl_cipher string
    ssl_protocol string
    target_group_arn string
    trace_id string
    domain_name string
    chosen_cert_arn string
    matched_rule_priority int
    request_creation_time timestamp
    actions_executed string
    redirect_url string
    error_reason string
    target_port_list string
    target_status_code_list string
    classification string
    classification_reason string
    conn_trace_id string
    transformed_host string
    transformed_uri string
    request_transform_status string
    source_key string
    deployment_hash string
    """
)


class RedactionRule(enum.StrEnum):
    """What the capture processor masks in payloads and URLs (lambda/capture_processor's rule names)."""

    EMAIL = "email"
    PHONE = "phone"
    ACCESS_TOKEN = "access_token"
    AWS_SECRET_KEY = "aws_secret_key"
    PRIVATE_KEY = "private_key"
    PAYMENT_CARD = "payment_card"
    US_SSN = "us_ssn"
    IBAN = "iban"
    IP_ADDRESS = "ip_address"


# Every rule but ip_address: client addresses are often wanted in prompts' context (abuse, geography)
# and the ALB table has them anyway; add it where prompts must not carry them.
DEFAULT_REDACTION_RULES: tuple[RedactionRule, ...] = tuple(
    rule for rule in RedactionRule if rule is not RedactionRule.IP_ADDRESS
)


@dataclass(frozen=True, kw_only=True)
class CapturePipelineOptions(Props):
    """:class:`CapturePipeline`'s properties a config file can set (``capture.*`` in the app's, beside
    :class:`~hyperpod_inference_iac.CaptureStorageOptions`), and the prefixes and settings its rules read that only
    Python code sets (the app gives the storage's prefixes and derives the Glue database's name from ``project``)."""

    CONSTRUCT: ClassVar[str] = "CapturePipeline"

    redact: Sequence[RedactionRule | str] = prop(
        DEFAULT_REDACTION_RULES, default_doc="`DEFAULT_REDACTION_RULES`: every rule but `ip_address`",
        doc="Redaction rules of the capture processor, applied to the decoded payloads, URLs and user agents "
            "(docs/capture-processor.md#redaction): `email`, `phone`, `access_token`, `aws_secret_key`, "
            "`private_key`, `payment_card`, `us_ssn`, `iban`, `ip_address` (add it to redact client addresses in "
            "prompts too). An empty list switches redaction off (`REDACT=none`; warned: "
            "`CapturePipeline:redactionOff`).")
    pandas_layer_arn: str | None = prop(
        None, default_doc="the version mapped for the stack's region in `PANDAS_LAYER_VERSIONS`",
        doc=f"The `{PANDAS_LAYER_NAME}` layer version ARN (AWS SDK for pandas, Python 3.13, arm64). Required in "
            f"regions without a mapped version (mapped: {', '.join(sorted(PANDAS_LAYER_VERSIONS))}); for a stack "
            "without an explicit region, a CloudFormation mapping of the mapped regions picks it.")
    max_concurrency: int = prop(
        DEFAULT_MAX_CONCURRENCY, key="processorMaxConcurrency",
        doc=f"The most invocations the SQS event source drives at once ({MAX_CONCURRENCY[0]}..{MAX_CONCURRENCY[1]}): "
            "a flood of captures cannot take the account's Lambda concurrency from other functions. Unlike reserved "
            "concurrency it takes nothing from the account's pool.")
    capture_prefixes: Sequence[str] = prop(
        (DEFAULT_CAPTURE_PREFIX,), config=False,
        doc="Key prefixes whose `ObjectCreated` events are processed: S3 key prefixes (S3's safe characters and "
            "`/`, ending in `/`, not starting with `/`, no `*`), none overlapping another or the outputs (the app "
            "gives the storage's `capture.prefix`).")
    output_prefix: str = prop(DEFAULT_CURATED_PREFIX, config=False,
                              doc="Where curated Parquet goes, as `tier=/dt=/hour=` below it.")
    quarantine_prefix: str = prop(DEFAULT_QUARANTINE_PREFIX, config=False,
                                  doc="Where rejected lines go, as JSON Lines.")
    memory_size: int = prop(1024, config=False,
                            doc="Function memory in MiB (128..10240). 1024 keeps a 1 GiB object within memory.")
    reserved_concurrency: int | None = prop(None, config=False, default_doc="none",
                                            doc="Reserves (and caps) concurrency from the account's pool.")
    glue_database_name: str = prop("inference_capture", config=False,
                                   doc="The Glue database holding the two tables (Athena-compatible: lower case "
                                       "letters, digits and `_`).")
    first_partition_date: str = prop("2025-01-01", config=False,
                                     doc="Earliest `dt` Athena projects (`YYYY-MM-DD`).")

    def check(self, problems: Problems, at: KeyPaths = PROPS, *, region: str | None = None) -> None:
        """Every rule of these properties. ``region``: the stack's (None or a token: the pandas layer's mapping is
        not checked)."""
        code = "CapturePipeline"
        capture_prefixes = self.capture_prefixes
        prefixes = {at.at("output_prefix"): self.output_prefix, at.at("quarantine_prefix"): self.quarantine_prefix}
        prefixes.update({at.at("capture_prefixes", index): prefix for index, prefix in enumerate(capture_prefixes)})
        if isinstance(capture_prefixes, str) or not capture_prefixes:
            problems.add(f"{code}.NoCapturePrefixes", at.at("capture_prefixes"), "list at least one key prefix",
                         capture_prefixes)
        valid = []
        for path, prefix in prefixes.items():
            fault = key_prefix_fault(prefix)  # (the storage's rule too: one rule for every prefix)
            if fault is None:
                if not is_unresolved(prefix):
                    valid.append(path)
            else:
                # (Not "the default": an empty prefix is the whole bucket, the outputs and the access logs included.)
                problems.add(f"{code}.EmptyPrefix" if prefix == "" else f"{code}.InvalidPrefix", path, fault, prefix)
        paths = sorted(valid)  # (an invalid prefix is one problem, not also an overlap)
        for index, first in enumerate(paths):
            for second in paths[index + 1 :]:
                a, b = prefixes[first], prefixes[second]
                if a.startswith(b) or b.startswith(a):
                    # Overlaps would loop (outputs re-trigger processing) or be rejected by S3
                    # (overlapping notification filters for one event type).
                    problems.add(f"{code}.OverlappingPrefixes", f"{first}, {second}", "prefixes must not overlap",
                                 (a, b))
        memory_size = self.memory_size
        if not is_unresolved(memory_size) and not 128 <= memory_size <= 10240:
            problems.add(f"{code}.MemoryOutOfRange", at.at("memory_size"), "must be 128..10240 MiB (1024 advised)",
                         memory_size)
        reserved = self.reserved_concurrency
        if reserved is not None and not is_unresolved(reserved) and reserved < 1:
            problems.add(f"{code}.ConcurrencyOutOfRange", at.at("reserved_concurrency"),
                         "must be at least 1 (0 would stop processing), or None", reserved)
        low, high = MAX_CONCURRENCY
        if not is_unresolved(self.max_concurrency) and not low <= self.max_concurrency <= high:
            problems.add(f"{code}.ConcurrencyOutOfRange", at.at("max_concurrency"),
                         f"must be {low}..{high} (the SQS event source's maximum concurrency)", self.max_concurrency)
        if isinstance(self.redact, str):
            problems.add(f"{code}.UnknownRedactionRule", at.at("redact"), "must be a list of rule names", self.redact)
        else:
            for index, rule in enumerate(self.redact):
                if rule not in RedactionRule._value2member_map_:
                    problems.add(f"{code}.UnknownRedactionRule", at.at("redact", index),
                                 f"must be one of {', '.join(RedactionRule)}", rule)
        layer = self.pandas_layer_arn
        if layer is None:
            if region is not None and not is_unresolved(region) and region not in PANDAS_LAYER_VERSIONS:
                problems.add(
                    f"{code}.NoPandasLayerForRegion",
                    at.at("pandas_layer_arn"),
                    f"no {PANDAS_LAYER_NAME} version is mapped for {region} (mapped: "
                    f"{', '.join(sorted(PANDAS_LAYER_VERSIONS))}); give the layer version ARN from "
                    "https://aws-sdk-pandas.readthedocs.io/en/stable/layers.html",
                    region,
                )
        elif not is_unresolved(layer) and not LAMBDA_LAYER_VERSION_ARN.match(layer):
            problems.add(f"{code}.InvalidLayerArn", at.at("pandas_layer_arn"),
                         f"must be a Lambda layer version ARN ({PANDAS_LAYER_NAME})", layer)
        if not is_unresolved(self.glue_database_name) and not GLUE_NAME.match(self.glue_database_name):
            problems.add(f"{code}.InvalidGlueName", at.at("glue_database_name"),
                         "must be lower case letters, digits and underscores (Athena-compatible)",
                         self.glue_database_name)
        if not DATE.match(self.first_partition_date):
            problems.add(f"{code}.InvalidDate", at.at("first_partition_date"), "must be YYYY-MM-DD",
                         self.first_partition_date)


@dataclass(frozen=True, kw_only=True)
class CapturePipelineProps(CapturePipelineOptions):
    """:class:`CapturePipeline`'s properties: its options, and the objects only Python code passes."""

    bucket: s3.IBucket = prop(
        config=False,
        doc="Holds the capture objects; outputs go to the same bucket. It must belong to this stack or be imported "
            "into it: its notification configuration references the queue.")
    encryption_key: kms.IKey | None = prop(
        config=False,
        doc="The bucket's key (pass `None` for an SSE-S3 bucket). The function may decrypt and encrypt with it, "
            "through S3 only.")
    log_retention: logs.RetentionDays = prop(logs.RetentionDays.THREE_MONTHS, config=False,
                                             doc="How long the function's logs are kept.")
    code: lambda_.Code | None = prop(
        None, config=False,
        default_doc="the runtime shipped in the package, `hyperpod_inference_iac.capture_processor`",
        doc="The function's code.")


def processor_code() -> lambda_.Code:
    """The capture processor's code asset (``hyperpod_inference_iac.capture_processor``): the processor's handler
    and GpuCost's sampler (``node_hours_sampler``) ship in it, so a stack with both uploads it once (one hash)."""
    return lambda_.Code.from_asset(str(package_dir("hyperpod_inference_iac.capture_processor")),
                                   exclude=["**/__pycache__", "**/*.pyc", "__init__.py"])


def output_key_environment(encryption_key: kms.IKey | None) -> dict[str, str]:
    """The one rule for whether a writer of the capture bucket names the capture key (``OUTPUT_KMS_KEY_ID``), for
    the processor and every other writer of its tables (GpuCost's sampler): with the pipeline's key, every write
    names it (a bucket whose default is SSE-S3, as with ALB access logs, refuses any other); without a key, none
    does (the bucket's default encryption applies)."""
    return {"OUTPUT_KMS_KEY_ID": encryption_key.key_arn} if encryption_key is not None else {}


def check_capture_pipeline(problems: Problems, at: KeyPaths = PROPS, *, region: str, **options: Any) -> None:
    """:meth:`CapturePipelineOptions.check` of these options (kept for callers of 0.2.0)."""
    CapturePipelineOptions(**options).check(problems, at, region=region)


def warn_capture_pipeline(warnings: RiskWarnings, at: KeyPaths = PROPS, *,
                          redact: Sequence[str] = DEFAULT_REDACTION_RULES) -> None:
    """The risky but legal choices of :class:`CapturePipeline`'s properties (a config loader calls it with its key
    paths; the construct turns them into CDK warnings)."""
    if not isinstance(redact, str) and len(redact) == 0:
        warnings.add("CapturePipeline:redactionOff", at.at("redact"),
                     "redaction is off: curated/, what readers and monitors read, holds prompts and responses as "
                     "captured (e-mail addresses, card numbers, access keys included); list the rules to apply (the "
                     "default is every rule but ip_address), or acknowledge that nothing captured needs redacting")


@real_signature
class CapturePipeline(Construct):
    """Post-processes captured inference data into Parquet, with redaction and a quarantine.

    Children, as escape hatches: ``queue``, ``dead_letter_queue``, ``function``,
    ``log_group``, ``database``, ``tables`` (``"capture_records"``, ``"alb_access_logs"``) and
    ``alarms`` (``"dead_letters"``, ``"function_errors"``; no actions: add your own); ``metrics_pipeline``, the
    value of the ``Pipeline`` dimension of the processor's metrics (this construct's path).
    Its cdk-nag findings (the object wildcards under its prefixes, the pinned runtime, CDK's
    bucket-notification handler) are acknowledged here, with reasons (:mod:`hyperpod_inference_iac.foundation.nag`).
    """

    PROPS: ClassVar[type[Props]] = CapturePipelineProps

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        bucket: s3.IBucket,
        encryption_key: kms.IKey | None,
        capture_prefixes: Sequence[str] = CapturePipelineProps.capture_prefixes,
        output_prefix: str = CapturePipelineProps.output_prefix,
        quarantine_prefix: str = CapturePipelineProps.quarantine_prefix,
        memory_size: int = CapturePipelineProps.memory_size,
        reserved_concurrency: int | None = CapturePipelineProps.reserved_concurrency,
        max_concurrency: int = CapturePipelineProps.max_concurrency,
        redact: Sequence[RedactionRule | str] = CapturePipelineProps.redact,
        pandas_layer_arn: str | None = CapturePipelineProps.pandas_layer_arn,
        glue_database_name: str = CapturePipelineProps.glue_database_name,
        first_partition_date: str = CapturePipelineProps.first_partition_date,
        log_retention: logs.RetentionDays = CapturePipelineProps.log_retention,
        code: lambda_.Code | None = CapturePipelineProps.code,
    ) -> None:
        """Create the construct. Its properties (:class:`CapturePipelineProps`, kept as ``self.props``):

        :param redact: Redaction rules of the capture processor, applied to the decoded payloads, URLs and user
            agents (docs/capture-processor.md#redaction): `email`, `phone`, `access_token`, `aws_secret_key`,
            `private_key`, `payment_card`, `us_ssn`, `iban`, `ip_address` (add it to redact client addresses in
            prompts too). An empty list switches redaction off (`REDACT=none`; warned:
            `CapturePipeline:redactionOff`). Default: ``[email, phone, access_token, aws_secret_key,
            private_key, payment_card, us_ssn, iban]`` (``DEFAULT_REDACTION_RULES``: every rule but
            ``ip_address``).
        :param pandas_layer_arn: The `AWSSDKPandas-Python313-Arm64` layer version ARN (AWS SDK for pandas,
            Python 3.13, arm64). Required in regions without a mapped version (mapped: af-south-1, ca-central-1,
            us-east-1, us-west-2); for a stack without an explicit region, a CloudFormation mapping of the
            mapped regions picks it. Default: ``None`` (the version mapped for the stack's region in
            ``PANDAS_LAYER_VERSIONS``).
        :param max_concurrency: The most invocations the SQS event source drives at once (2..1000): a flood of
            captures cannot take the account's Lambda concurrency from other functions. Unlike reserved
            concurrency it takes nothing from the account's pool. Default: ``10``.
        :param capture_prefixes: Key prefixes whose `ObjectCreated` events are processed: S3 key prefixes (S3's
            safe characters and `/`, ending in `/`, not starting with `/`, no `*`), none overlapping another or
            the outputs (the app gives the storage's `capture.prefix`). Default: ``('data-capture/',)``.
        :param output_prefix: Where curated Parquet goes, as `tier=/dt=/hour=` below it. Default:
            ``'curated/'``.
        :param quarantine_prefix: Where rejected lines go, as JSON Lines. Default: ``'quarantine/'``.
        :param memory_size: Function memory in MiB (128..10240). 1024 keeps a 1 GiB object within memory.
            Default: ``1024``.
        :param reserved_concurrency: Reserves (and caps) concurrency from the account's pool. Default: ``None``
            (none).
        :param glue_database_name: The Glue database holding the two tables (Athena-compatible: lower case
            letters, digits and `_`). Default: ``'inference_capture'``.
        :param first_partition_date: Earliest `dt` Athena projects (`YYYY-MM-DD`). Default: ``'2025-01-01'``.
        :param bucket: Holds the capture objects; outputs go to the same bucket. It must belong to this stack or
            be imported into it: its notification configuration references the queue. Default: required.
        :param encryption_key: The bucket's key (pass `None` for an SSE-S3 bucket). The function may decrypt and
            encrypt with it, through S3 only. Default: required.
        :param log_retention: How long the function's logs are kept. Default: ``RetentionDays.THREE_MONTHS``.
        :param code: The function's code. Default: ``None`` (the runtime shipped in the package,
            ``hyperpod_inference_iac.capture_processor``).
        """
        super().__init__(scope, id)
        stack = Stack.of(self)
        region = stack.region
        self.props = props = CapturePipelineProps(
            bucket=bucket, encryption_key=encryption_key,
            capture_prefixes=listed(capture_prefixes),
            output_prefix=output_prefix, quarantine_prefix=quarantine_prefix, memory_size=memory_size,
            reserved_concurrency=reserved_concurrency, max_concurrency=max_concurrency,
            redact=listed(redact), pandas_layer_arn=pandas_layer_arn,
            glue_database_name=glue_database_name, first_partition_date=first_partition_date,
            log_retention=log_retention, code=code)
        problems = Problems()
        props.check(problems, region=region)
        if not problems.has_at_or_below("bucket") and Stack.of(bucket) is not stack:
            # The bucket's stack would hold the notification (referencing our queue) while we
            # reference the bucket: a cross-stack cycle that only surfaces at synth.
            problems.add("CapturePipeline.BucketInOtherStack", "bucket",
                         "must belong to the same stack as the pipeline (or be imported into it, e.g. "
                         "Bucket.from_bucket_name)", "another stack")
        guard = bucket_guard(self, bucket.bucket_arn)
        if encryption_key is None and guard is not None and guard.requires_named_key:
            # Its default is SSE-S3 (it accepts ALB access logs): every write must name the capture key, the
            # Parquet layout's, the quarantine's and the Iceberg tables' (OUTPUT_KMS_KEY_ID) included.
            problems.add("CapturePipeline.KeyRequired", "encryption_key",
                         "must be the capture key: the bucket accepts ALB access logs (SSE-S3 default) and refuses "
                         "every write that does not name its key", "None")
        problems.raise_if_any(f"CapturePipeline {self.node.path}")
        agree(self, PipelinePart(construct=f"CapturePipeline {self.node.path}", capture_bucket=bucket,
                                 capture_prefixes=tuple(props.capture_prefixes)))
        warnings = RiskWarnings()
        warn_capture_pipeline(warnings, redact=props.redact)
        warnings.annotate(self)
        self.capture_prefixes = tuple(props.capture_prefixes)
        self.output_prefix = props.output_prefix
        self.quarantine_prefix = props.quarantine_prefix
        # SQS-managed encryption (SSE-SQS), not the capture key: S3 can deliver to a KMS-encrypted
        # queue only if the key policy trusts s3.amazonaws.com for this bucket. With one key for
        # both bucket and queue that policy references the bucket, which references the key (a
        # dependency cycle CloudFormation rejects), and an imported key's policy cannot be edited
        # here at all. The messages hold object keys and sizes only, never captured payloads.
        self.dead_letter_queue = sqs.Queue(
            self,
            "DeadLetterQueue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=Duration.days(14),
        )
        self.queue = sqs.Queue(
            self,
            "Queue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            # AWS guidance for SQS event sources: at least 6x the function timeout, so a message
            # is not redelivered while an invocation (and its retries) still holds it.
            visibility_timeout=Duration.seconds(FUNCTION_TIMEOUT.to_seconds() * 6),
            dead_letter_queue=sqs.DeadLetterQueue(queue=self.dead_letter_queue, max_receive_count=MAX_RECEIVE_COUNT),
        )
        for prefix in props.capture_prefixes:
            bucket.add_event_notification(
                s3.EventType.OBJECT_CREATED,
                s3_notifications.SqsDestination(self.queue),
                s3.NotificationKeyFilter(prefix=prefix),
            )

        self.metrics_pipeline = self.node.path  # literal and unique in an account and region (the stack's name)
        # pyarrow for the function (and for GpuCost's sampler, which writes the capture tables too)
        self.pandas_layer_arn: str = props.pandas_layer_arn or self._pandas_layer_arn(region)
        self.log_group = logs.LogGroup(self, "Logs", retention=props.log_retention)
        # An own role instead of the default one: the default attaches the managed
        # AWSLambdaBasicExecutionRole, which may write to every log group in the account.
        role = iam.Role(self, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
        how_to_name(role, "create the CapturePipeline in the stack of its bucket (the processor's role has no fixed "
                          "name a guarded bucket of another stack could list)")
        self.log_group.grant_write(role)
        self.function = lambda_.Function(
            self,
            "Function",
            runtime=LAMBDA_RUNTIME,
            architecture=lambda_.Architecture.ARM_64,
            handler="handler.handler",
            code=props.code or processor_code(),
            layers=[lambda_.LayerVersion.from_layer_version_arn(self, "PandasLayer", self.pandas_layer_arn)],
            memory_size=props.memory_size,
            timeout=FUNCTION_TIMEOUT,
            # Parquet partitions are staged in /tmp before upload; ~25% of the source size.
            ephemeral_storage_size=Size.gibibytes(2),
            reserved_concurrent_executions=props.reserved_concurrency,
            role=role,
            log_group=self.log_group,
            environment={
                "OUTPUT_PREFIX": props.output_prefix,
                "QUARANTINE_PREFIX": props.quarantine_prefix,
                "REDACT": ",".join(str(rule) for rule in props.redact) if props.redact else "none",
                # glibc keeps one malloc arena per thread (parsers, Parquet writer, uploads); two
                # arenas cut peak RSS by ~35 MiB for a 1 GiB object (docs/capture-processor.md).
                "MALLOC_ARENA_MAX": "2",
                # The value of the Pipeline dimension of its metrics: alarms and dashboards of this pipeline
                # read only its own series, however many pipelines the account has.
                "METRICS_PIPELINE": self.metrics_pipeline,
                # Outputs name the key explicitly: a bucket whose default is SSE-S3 (ALB access logs) still
                # gets curated data under the capture key, and its policy refuses writes that do not.
                **output_key_environment(props.encryption_key),
            },
            description="Capture post-processing: S3 capture objects to curated Parquet (redacted)",
        )
        self.function.add_event_source(
            event_sources.SqsEventSource(
                self.queue,
                batch_size=10,
                max_batching_window=Duration.seconds(30),
                report_batch_item_failures=True,
                max_concurrency=props.max_concurrency,
            )
        )
        # Exact actions instead of CDK's grant_read/grant_put groups (GetObject*, List*, Abort*...): read the
        # captures, write curated and quarantined objects, nothing else; the key through S3 only. Through the
        # library's grants, so a guarded bucket (CaptureStorage) lists the role for exactly these prefixes.
        for prefix in props.capture_prefixes:
            grant_object_reads(role, bucket_arn=bucket.bucket_arn, prefix=prefix, key=props.encryption_key,
                               actions=("s3:GetObject", "s3:GetObjectVersion"), list_bucket=False)
        for prefix in (props.output_prefix, props.quarantine_prefix):
            grant_object_writes(role, bucket_arn=bucket.bucket_arn, prefix=prefix, key=props.encryption_key)
        # The erasure register (capture_core.erasure): the processor lists and reads it on every invocation and
        # drops the rows an erasure covers; it cannot write it (the erasure command does).
        grant_object_reads(role, bucket_arn=bucket.bucket_arn, prefix=ERASURE_REGISTER_PREFIX,
                           key=props.encryption_key, actions=("s3:GetObject",))
        self.role = role

        self.database, self.tables = self._glue_catalog(bucket, props.output_prefix, props.glue_database_name,
                                                        props.first_partition_date)
        self.alarms = self._alarms()
        self._acknowledge_reviewed_findings()

    def _pandas_layer_arn(self, region: str) -> str:
        if not is_unresolved(region):
            return _pandas_layer_arn(region)
        # No region at synth (an environment-agnostic stack): CloudFormation picks the version.
        mapping = CfnMapping(self, "PandasLayerVersions", mapping={
            name: {"arn": _pandas_layer_arn(name)} for name in sorted(PANDAS_LAYER_VERSIONS)})
        return mapping.find_in_map(Aws.REGION, "arn")

    def _acknowledge_reviewed_findings(self) -> None:
        # (The role's object wildcards are acknowledged by the grants that add them.)
        acknowledge(self.function, "capture-processor-runtime")
        for handler in stack_singletons(Stack.of(self), "BucketNotificationsHandler"):
            acknowledge(handler, "cdk-bucket-notifications-handler",
                        managed_policy("service-role/AWSLambdaBasicExecutionRole"))

    def _glue_catalog(
        self, bucket: s3.IBucket, output_prefix: str, database_name: str, first_date: str
    ) -> tuple[glue.CfnDatabase, dict[str, glue.CfnTable]]:
        account = Stack.of(self).account
        database = glue.CfnDatabase(
            self,
            "Database",
            catalog_id=account,
            database_input=glue.CfnDatabase.DatabaseInputProperty(
                name=database_name, description="Curated inference capture (Parquet)"
            ),
        )
        location = f"s3://{bucket.bucket_name}/{output_prefix}"
        tables = {
            "capture_records": self._projected_table(
                "CaptureRecordsTable",
                database,
                "capture_records",
                CAPTURE_COLUMNS,
                location,
                ("sme", "pod"),
                first_date,
                # The gen_ai_* column names follow this version of the OpenTelemetry GenAI semantic
                # conventions (Development status): a reader can tell which names a file carries.
                {"gen_ai_semconv_version": GEN_AI_SEMCONV_VERSION},
            ),
            "alb_access_logs": self._projected_table(
                "AlbAccessLogsTable", database, "alb_access_logs", ALB_COLUMNS, location, ("alb",), first_date
            ),
        }
        return database, tables

    def _projected_table(
        self,
        construct_id: str,
        database: glue.CfnDatabase,
        name: str,
        columns: Sequence[GlueColumn],
        location: str,
        tiers: Sequence[str],
        first_date: str,
        extra_parameters: dict[str, str] | None = None,
    ) -> glue.CfnTable:
        # Partition projection: Athena computes partitions from these rules, so new hours are
        # queryable the moment their files land, with no crawler and no MSCK REPAIR.
        parameters = {
            "classification": "parquet",
            "parquet.compression": "ZSTD",
            "projection.enabled": "true",
            "projection.tier.type": "enum",
            "projection.tier.values": ",".join(tiers),
            "projection.dt.type": "date",
            "projection.dt.format": "yyyy-MM-dd",
            "projection.dt.range": f"{first_date},NOW",
            "projection.dt.interval": "1",
            "projection.dt.interval.unit": "DAYS",
            "projection.hour.type": "integer",
            "projection.hour.range": "0,23",
            "projection.hour.digits": "2",
            "storage.location.template": f"{location}tier=${{tier}}/dt=${{dt}}/hour=${{hour}}/",
            **(extra_parameters or {}),
        }
        table = glue.CfnTable(
            self,
            construct_id,
            catalog_id=database.catalog_id,
            database_name=database.ref,
            table_input=glue.CfnTable.TableInputProperty(
                name=name,
                table_type="EXTERNAL_TABLE",
                parameters=parameters,
                partition_keys=[
                    glue.CfnTable.ColumnProperty(name="tier", type="string"),
                    glue.CfnTable.ColumnProperty(name="dt", type="string"),
                    glue.CfnTable.ColumnProperty(name="hour", type="string"),
                ],
                storage_descriptor=glue.CfnTable.StorageDescriptorProperty(
                    location=location,
                    input_format="org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat",
                    output_format="org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat",
                    serde_info=glue.CfnTable.SerdeInfoProperty(
                        serialization_library="org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
                    ),
                    columns=[glue.CfnTable.ColumnProperty(name=c.name, type=c.type) for c in columns],
                ),
            ),
        )
        return table

    def _alarms(self) -> dict[str, cloudwatch.Alarm]:
        dead_letters = cloudwatch.Alarm(
            self,
            "DeadLetterAlarm",
            alarm_description="Capture objects failed processing 5 times; see the DLQ and the function logs",
            metric=self.dead_letter_queue.metric_approximate_number_of_messages_visible(
                period=Duration.minutes(5), statistic="Maximum"
            ),
            threshold=0,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        function_errors = cloudwatch.Alarm(
            self,
            "FunctionErrorAlarm",
            alarm_description="The capture processor failed (e.g. a configuration error)",
            metric=self.function.metric_errors(period=Duration.minutes(5), statistic="Sum"),
            threshold=0,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        return {"dead_letters": dead_letters, "function_errors": function_errors}


def _pandas_layer_arn(region: str) -> str:
    return f"arn:aws:lambda:{region}:{PANDAS_LAYER_ACCOUNT}:layer:{PANDAS_LAYER_NAME}:{PANDAS_LAYER_VERSIONS[region]}"
