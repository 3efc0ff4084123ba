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

from hyperpod_inference_iac._package_data import package_dir
from hyperpod_inference_iac.data_perimeter import how_to_name
from hyperpod_inference_iac.nag import acknowledge, managed_policy, stack_singletons
from hyperpod_inference_iac.patterns import LAMBDA_LAYER_VERSION_ARN
from hyperpod_inference_iac.risks import RiskWarnings
from hyperpod_inference_iac.s3_access import grant_object_reads, grant_object_writes
from hyperpod_inference_iac.validation import PROPS, KeyPaths, Problems, is_unresolved

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
PREFIX = re.compile(r"^[A-Za-z0-9!_.*'()/= -]*/$")  # S3 safe characters, ending in '/'
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclass(frozen=True)
class GlueColumn:
    name: str
    type: str  # Hive type as Glue and Athena spell it


def _columns(spec: str) -> tuple[GlueColumn, ...]:
    return tuple(GlueColumn(*line.split()) for line in spec.strip().splitlines())


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


def check_capture_pipeline(
    problems: Problems,
    at: KeyPaths = PROPS,
    *,
    region: str,
    capture_prefixes: Sequence[str] = ("data-capture/",),
    output_prefix: str = "curated/",
    quarantine_prefix: str = "quarantine/",
    memory_size: int = 1024,
    reserved_concurrency: int | None = None,
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    redact: Sequence[str] = DEFAULT_REDACTION_RULES,
    pandas_layer_arn: str | None = None,
    glue_database_name: str = "inference_capture",
    first_partition_date: str = "2025-01-01",
) -> None:
    """Every rule of :class:`CapturePipeline`'s properties (a config loader calls it with its key paths)."""
    code = "CapturePipeline"
    prefixes = {at.at("output_prefix"): output_prefix, at.at("quarantine_prefix"): quarantine_prefix}
    prefixes.update({at.at("capture_prefixes", index): prefix for index, prefix in enumerate(capture_prefixes)})
    if isinstance(capture_prefixes, str) or not capture_prefixes:
        problems.add(f"{code}.NoCapturePrefixes", at.at("capture_prefixes"), "list at least one key prefix",
                     capture_prefixes)
    valid = []
    for path, prefix in prefixes.items():
        if is_unresolved(prefix):
            continue
        if prefix == "":
            # (Not "the default": an empty prefix is the whole bucket, the outputs and the access logs included.)
            problems.add(f"{code}.EmptyPrefix", path, "must not be empty: that is the whole bucket, outputs "
                         "included; leave the key out for the default 'data-capture/', or name a prefix", prefix)
        elif not isinstance(prefix, str) or not PREFIX.match(prefix) or prefix == "/":
            problems.add(f"{code}.InvalidPrefix", path, "must be an S3 key prefix ending in '/', e.g. 'data/'", prefix)
        else:
            valid.append(path)
    paths = sorted(valid)  # (an invalid prefix is one problem, not also an overlap)
    for index, first in enumerate(paths):
        for second in paths[index + 1 :]:
            a, b = prefixes[first], prefixes[second]
            if a.startswith(b) or b.startswith(a):
                # Overlaps would loop (outputs re-trigger processing) or be rejected by S3
                # (overlapping notification filters for one event type).
                problems.add(f"{code}.OverlappingPrefixes", f"{first}, {second}", "prefixes must not overlap", (a, b))
    if not is_unresolved(memory_size) and not 128 <= memory_size <= 10240:
        problems.add(f"{code}.MemoryOutOfRange", at.at("memory_size"), "must be 128..10240 MiB (1024 advised)",
                     memory_size)
    if reserved_concurrency is not None and not is_unresolved(reserved_concurrency) and reserved_concurrency < 1:
        problems.add(f"{code}.ConcurrencyOutOfRange", at.at("reserved_concurrency"),
                     "must be at least 1 (0 would stop processing), or None", reserved_concurrency)
    if not is_unresolved(max_concurrency) and not MAX_CONCURRENCY[0] <= max_concurrency <= MAX_CONCURRENCY[1]:
        problems.add(f"{code}.ConcurrencyOutOfRange", at.at("max_concurrency"),
                     f"must be {MAX_CONCURRENCY[0]}..{MAX_CONCURRENCY[1]} (the SQS event source's maximum concurrency)",
                     max_concurrency)
    if isinstance(redact, str):
        problems.add(f"{code}.UnknownRedactionRule", at.at("redact"), "must be a list of rule names", redact)
    else:
        for index, rule in enumerate(redact):
            if rule not in RedactionRule._value2member_map_:
                problems.add(f"{code}.UnknownRedactionRule", at.at("redact", index),
                             f"must be one of {', '.join(RedactionRule)}", rule)
    if pandas_layer_arn is None:
        if not is_unresolved(region) and region not in PANDAS_LAYER_VERSIONS:
            problems.add(
                f"{code}.NoPandasLayerForRegion",
                at.at("pandas_layer_arn"),
                f"no {PANDAS_LAYER_NAME} version is mapped for {region} (mapped: "
                f"{', '.join(sorted(PANDAS_LAYER_VERSIONS))}); give the layer version ARN from "
                "https://aws-sdk-pandas.readthedocs.io/en/stable/layers.html",
                region,
            )
    elif not is_unresolved(pandas_layer_arn) and not LAMBDA_LAYER_VERSION_ARN.match(pandas_layer_arn):
        problems.add(f"{code}.InvalidLayerArn", at.at("pandas_layer_arn"),
                     f"must be a Lambda layer version ARN ({PANDAS_LAYER_NAME})", pandas_layer_arn)
    if not is_unresolved(glue_database_name) and not GLUE_NAME.match(glue_database_name):
        problems.add(f"{code}.InvalidGlueName", at.at("glue_database_name"),
                     "must be lower case letters, digits and underscores (Athena-compatible)", glue_database_name)
    if not DATE.match(first_partition_date):
        problems.add(f"{code}.InvalidDate", at.at("first_partition_date"), "must be YYYY-MM-DD", first_partition_date)


def warn_capture_pipeline(warnings: RiskWarnings, at: KeyPaths = PROPS, *,
                          redact: Sequence[str] = DEFAULT_REDACTION_RULES) -> None:
    """The risky but legal choices of :class:`CapturePipeline`'s properties (a config loader calls it with its key
    paths; the construct turns them into CDK warnings)."""
    if not isinstance(redact, str) and len(redact) == 0:
        warnings.add("CapturePipeline:redactionOff", at.at("redact"),
                     "redaction is off: curated/, what readers and monitors read, holds prompts and responses as "
                     "captured (e-mail addresses, card numbers, access keys included); list the rules to apply (the "
                     "default is every rule but ip_address), or acknowledge that nothing captured needs redacting")


class CapturePipeline(Construct):
    """Post-processes captured inference data into Parquet, with redaction and a quarantine.

    Children, as escape hatches: ``queue``, ``dead_letter_queue``, ``function``,
    ``log_group``, ``database``, ``tables`` (``"capture_records"``, ``"alb_access_logs"``) and
    ``alarms`` (``"dead_letters"``, ``"function_errors"``; no actions: add your own); ``metrics_pipeline``, the
    value of the ``Pipeline`` dimension of the processor's metrics (this construct's path).
    Its cdk-nag findings (the object wildcards under its prefixes, the pinned runtime, CDK's
    bucket-notification handler) are acknowledged here, with reasons (:mod:`hyperpod_inference_iac.nag`).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        bucket: s3.IBucket,
        encryption_key: kms.IKey | None,
        capture_prefixes: Sequence[str] = ("data-capture/",),
        output_prefix: str = "curated/",
        quarantine_prefix: str = "quarantine/",
        memory_size: int = 1024,
        reserved_concurrency: int | None = None,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        redact: Sequence[RedactionRule | str] = DEFAULT_REDACTION_RULES,
        pandas_layer_arn: str | None = None,
        glue_database_name: str = "inference_capture",
        first_partition_date: str = "2025-01-01",
        log_retention: logs.RetentionDays = logs.RetentionDays.THREE_MONTHS,
        code: lambda_.Code | None = None,
    ) -> None:
        """
        :param bucket: holds the capture objects; outputs go to the same bucket. It must belong to this
            stack (or be imported into it): its notification configuration references the queue.
        :param encryption_key: the capture bucket's key; the function may decrypt and encrypt with it,
            through S3 only. None for an SSE-S3 bucket.
        :param capture_prefixes: key prefixes whose ObjectCreated events are processed; each ends in
            ``/`` and none overlaps another or the outputs. @default ``["data-capture/"]``
        :param output_prefix: where curated Parquet goes (``tier=/dt=/hour=`` below it). @default ``curated/``
        :param quarantine_prefix: where rejected lines go, as JSON Lines. @default ``quarantine/``
        :param memory_size: MiB; 1024 keeps a 1 GiB object within memory (see the docs). @default 1024
        :param reserved_concurrency: reserves (and caps) concurrency from the account's pool. @default None
        :param max_concurrency: the most invocations the queue drives at once (2..1000): a flood of captures
            cannot take the account's Lambda concurrency from other functions. @default 10
        :param redact: rules applied to payloads and URLs; empty switches redaction off.
            @default ``DEFAULT_REDACTION_RULES``: every :class:`RedactionRule` but ``ip_address``
        :param pandas_layer_arn: the AWS SDK for pandas layer for Python 3.13 on arm64.
            @default the version mapped for the stack's region (``PANDAS_LAYER_VERSIONS``); for a stack
            without an explicit region, a CloudFormation mapping of those regions
        :param glue_database_name: the Glue database holding the two tables. @default ``inference_capture``
        :param first_partition_date: earliest ``dt`` Athena projects (YYYY-MM-DD). @default 2025-01-01
        :param log_retention: how long the function's logs are kept. @default three months
        :param code: the function's code. @default the runtime shipped in this package
            (``hyperpod_inference_iac.capture_processor``)
        """
        super().__init__(scope, id)
        stack = Stack.of(self)
        region = stack.region
        problems = Problems()
        if Stack.of(bucket) is not stack:
            # The bucket's stack would hold the notification (referencing our queue) while we
            # reference the bucket: a cross-stack cycle that only surfaces at synth.
            problems.add("CapturePipeline.BucketInOtherStack", "bucket",
                         "must belong to the same stack as the pipeline (or be imported into it, e.g. "
                         "Bucket.from_bucket_name)", "another stack")
        check_capture_pipeline(
            problems, region=region, capture_prefixes=capture_prefixes, output_prefix=output_prefix,
            quarantine_prefix=quarantine_prefix, memory_size=memory_size, reserved_concurrency=reserved_concurrency,
            max_concurrency=max_concurrency, redact=redact, pandas_layer_arn=pandas_layer_arn,
            glue_database_name=glue_database_name, first_partition_date=first_partition_date)
        problems.raise_if_any(f"CapturePipeline {self.node.path}")
        warnings = RiskWarnings()
        warn_capture_pipeline(warnings, redact=redact)
        warnings.annotate(self)
        self.capture_prefixes = tuple(capture_prefixes)
        self.output_prefix = output_prefix
        self.quarantine_prefix = quarantine_prefix
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
        for prefix in capture_prefixes:
            bucket.add_event_notification(
                s3.EventType.OBJECT_CREATED,
                s3_notifications.SqsDestination(self.queue),
                s3.NotificationKeyFilter(prefix=prefix),
            )

        self.metrics_pipeline = self.node.path  # literal and unique in an account and region (the stack's name)
        self.log_group = logs.LogGroup(self, "Logs", retention=log_retention)
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
            code=code or lambda_.Code.from_asset(
                str(package_dir("hyperpod_inference_iac.capture_processor")),
                exclude=["**/__pycache__", "**/*.pyc", "__init__.py"]),
            layers=[lambda_.LayerVersion.from_layer_version_arn(self, "PandasLayer",
                                                                pandas_layer_arn or self._pandas_layer_arn(region))],
            memory_size=memory_size,
            timeout=FUNCTION_TIMEOUT,
            # Parquet partitions are staged in /tmp before upload; ~25% of the source size.
            ephemeral_storage_size=Size.gibibytes(2),
            reserved_concurrent_executions=reserved_concurrency,
            role=role,
            log_group=self.log_group,
            environment={
                "OUTPUT_PREFIX": output_prefix,
                "QUARANTINE_PREFIX": quarantine_prefix,
                "REDACT": ",".join(str(rule) for rule in redact) if redact else "none",
                # glibc keeps one malloc arena per thread (parsers, Parquet writer, uploads); two
                # arenas cut peak RSS by ~35 MiB for a 1 GiB object (docs/capture-processor.md).
                "MALLOC_ARENA_MAX": "2",
                # The value of the Pipeline dimension of its metrics: alarms and dashboards of this pipeline
                # read only its own series, however many pipelines the account has.
                "METRICS_PIPELINE": self.metrics_pipeline,
                # Outputs name the key explicitly: a bucket whose default is SSE-S3 (ALB access logs) still
                # gets curated data under the capture key, and its policy refuses writes that do not.
                **({"OUTPUT_KMS_KEY_ID": encryption_key.key_arn} if encryption_key is not None else {}),
            },
            description="Capture post-processing: S3 capture objects to curated Parquet (redacted)",
        )
        self.function.add_event_source(
            event_sources.SqsEventSource(
                self.queue,
                batch_size=10,
                max_batching_window=Duration.seconds(30),
                report_batch_item_failures=True,
                max_concurrency=max_concurrency,
            )
        )
        # Exact actions instead of CDK's grant_read/grant_put groups (GetObject*, List*, Abort*...): read the
        # captures, write curated and quarantined objects, nothing else; the key through S3 only. Through the
        # library's grants, so a guarded bucket (CaptureStorage) lists the role for exactly these prefixes.
        for prefix in capture_prefixes:
            grant_object_reads(role, bucket_arn=bucket.bucket_arn, prefix=prefix, key=encryption_key,
                               actions=("s3:GetObject", "s3:GetObjectVersion"), list_bucket=False)
        for prefix in (output_prefix, quarantine_prefix):
            grant_object_writes(role, bucket_arn=bucket.bucket_arn, prefix=prefix, key=encryption_key)
        self.role = role

        self.database, self.tables = self._glue_catalog(bucket, output_prefix, glue_database_name, first_partition_date)
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
