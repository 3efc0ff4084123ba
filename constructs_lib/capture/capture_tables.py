"""CaptureTables: the curated captures as Apache Iceberg tables in the Glue Data Catalog, with the Data Catalog's
managed optimizers, column-level reads through Lake Formation, and the Athena workgroups and named queries that
answer the questions of docs/capture-processor.md.

The tables live in the capture bucket under their own prefix (``curated-iceberg/``): the bucket policy, the capture
key and the access-log perimeter of :class:`~hyperpod_inference_iac.CaptureStorage` keep applying. The location is
registered with Lake Formation (full Lake Formation mode, not hybrid): a table reader is granted the table, or only
its usage and timing columns, by Lake Formation, and reads through the credentials Lake Formation vends; the bucket
and key policies admit no reader on ``curated-iceberg/`` directly. See docs/capture-processor.md#iceberg-tables for
the choice against S3 Tables, the costs and the migration from the per-object Parquet tables.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from aws_cdk import Stack
from aws_cdk import aws_athena as athena
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_glue as glue
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lakeformation as lakeformation
from aws_cdk import aws_lambda as _lambda
from aws_cdk import aws_s3 as s3
from constructs import Construct

from hyperpod_inference_iac.capture.capture_pipeline import (
    ALB_COLUMNS,
    CAPTURE_COLUMNS,
    GEN_AI_SEMCONV_VERSION,
    GLUE_NAME,
    CapturePipeline,
    GlueColumn,
)
from hyperpod_inference_iac.capture.capture_storage import (
    DEFAULT_ICEBERG_PREFIX,
    DEFAULT_QUERY_RESULTS_PREFIX,
    CaptureStorage,
)
from hyperpod_inference_iac.foundation.nag import (
    acknowledge,
    resource_evidence,
)
from hyperpod_inference_iac.foundation.patterns import (
    IAM_ROLE_ARN,
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
    ObjectAccess,
    bucket_guard,
    key_guard,
)
from hyperpod_inference_iac.security.s3_access import (
    KMS_WRITE_ACTIONS,
    SAME_ACCOUNT,
    admit_objects,
    bucket_arn,
    bucket_name,
    grant_key_through_s3,
    key_prefix_fault,
    objects_arn,
)

RECORDS_TABLE = "capture_records"
ALB_TABLE = "alb_access_logs"
# GPU capacity, one row per group and hour (GpuCost's sampler writes it; docs/usage-and-budgets.md#cost-per-team).
NODE_HOURS_TABLE = "gpu_node_hours"
NODE_HOURS_COLUMNS: tuple[GlueColumn, ...] = tuple(GlueColumn(name, type_) for name, type_ in (
    ("sample_time", "timestamp"),        # when the sampler counted the nodes
    ("hour", "timestamp"),               # the UTC hour the count stands for (sample_time truncated to the hour)
    ("capacity_kind", "string"),         # eks-nodegroup | hyperpod-instance-group
    ("cluster_name", "string"),          # the EKS cluster, or the HyperPod cluster
    ("group_name", "string"),            # the node group, or the instance group
    ("instance_type", "string"),
    ("nodes", "int"),                    # nodes counted (EKS: the group's desired size; HyperPod: its listed nodes)
    ("usd_per_node_hour", "double"),     # the price the config gave at the time (costs.instancePrices)
    ("models", "array<string>"),         # the models this capacity serves, as the usage table names them
    ("deployment_hash", "string"),       # the sampler's configuration (which prices and models it was given)
))
# Athena refuses a per-query limit under 10 MB; the ceiling only keeps a typo (bytes for GiB) out.
SCAN_LIMIT_GIB = (1, 10240)
ROW_RETENTION_DAYS = (1, 3650)
# Where the processor's deletions (scheduled retention) write their audit records (capture_core.capture_tables).
AUDIT_PREFIX = "audit/table-deletions/"
SNAPSHOT_RETENTION_DAYS = (1, 365)
ORPHAN_FILE_RETENTION_DAYS = (1, 365)
# What pyiceberg's Glue catalog calls on a commit (load, then UpdateTable with the version it read).
CATALOG_ACTIONS = ("glue:GetDatabase", "glue:GetTable", "glue:UpdateTable")
# Lake Formation permissions of the writers (the processor, the optimizers) on each table: full LF mode governs
# their catalog calls too (GetTable needs DESCRIBE or SELECT, UpdateTable ALTER).
WRITER_TABLE_PERMISSIONS = ("ALTER", "DELETE", "DESCRIBE", "INSERT", "SELECT")
# The log groups the Data Catalog's optimizers write to (docs.aws.amazon.com/glue/latest/dg/optimization-prerequisites)
OPTIMIZER_LOG_GROUPS = ("/aws-glue/iceberg-compaction/logs", "/aws-glue/iceberg-retention/logs",
                        "/aws-glue/iceberg-orphan-file-deletion/logs")


class ColumnAccess(enum.StrEnum):
    """What a table reader sees of the Iceberg tables."""

    #: every column, prompt and response text included
    ALL = "all"
    #: every column except the prompt and response text and what is derived from it (:data:`TEXT_COLUMNS`)
    USAGE = "usage"


# The columns a `usage` reader does not get, per table: the payload text, the decoder's notes on it (which quote
# what failed to decode) and the redaction rules that matched it (which say what kind of secret a prompt held);
# for the load balancer, the request's URL and query string (a GET request's parameters are its payload).
TEXT_COLUMNS: Mapping[str, tuple[str, ...]] = {
    RECORDS_TABLE: ("input_text", "output_text", "decode_error", "redaction_rules"),
    ALB_TABLE: ("request_url", "request_query", "redirect_url"),
    NODE_HOURS_TABLE: (),
}

# The columns a `usage` reader is granted, per table, named one by one (Lake Formation `ColumnNames`, not a wildcard
# minus TEXT_COLUMNS): a column the processor adds later is granted to no usage reader until the config names it in
# `capture.usageColumnsGranted` (docs/security.md, "Column grants fail closed"). Reviewed list: change it only with a
# review of what the column may carry; `make review` shows a usage grant gaining a column as a broadening.
USAGE_COLUMNS: Mapping[str, tuple[str, ...]] = {
    RECORDS_TABLE: (
        "event_id", "inference_id", "inference_time", "time_source", "event_version", "input_content_type",
        "input_encoding", "input_truncated", "output_content_type", "output_encoding", "output_truncated",
        "source_key", "deployment_hash", "gen_ai_operation_name", "gen_ai_request_model", "gen_ai_response_model",
        "gen_ai_usage_input_tokens", "gen_ai_usage_output_tokens", "gen_ai_response_finish_reasons", "streamed",
        "caller_id", "request_path", "http_response_status_code", "request_duration_ms", "time_to_first_chunk_ms",
        "partial", "partial_reason",
        # usage metadata of the sidecar's metering (issue 29): where the token counts came from, which limit refused
        "usage_source", "refused_by"),
    ALB_TABLE: (
        "type", "time", "time_source", "elb", "client_ip", "client_port", "target_ip", "target_port",
        "request_processing_time", "target_processing_time", "response_processing_time", "elb_status_code",
        "target_status_code", "received_bytes", "sent_bytes", "request_verb", "request_proto", "request_host",
        "request_port", "request_path", "user_agent", "ssl_cipher", "ssl_protocol", "target_group_arn", "trace_id",
        "domain_name", "chosen_cert_arn", "matched_rule_priority", "request_creation_time", "actions_executed",
        "error_reason", "target_port_list", "target_status_code_list", "classification", "classification_reason",
        "conn_trace_id", "transformed_host", "transformed_uri", "request_transform_status", "source_key",
        "deployment_hash"),
    # capacity and its price, no payload: every column, named one by one (a column added later fails closed)
    NODE_HOURS_TABLE: tuple(column.name for column in NODE_HOURS_COLUMNS),
}

# Hive type (Glue, Athena) -> Iceberg primitive type. timestamp: the processor writes UTC instants (timestamptz).
_ICEBERG_TYPES = {"string": "string", "boolean": "boolean", "int": "int", "bigint": "long", "double": "double",
                  "timestamp": "timestamptz"}


def iceberg_schema(columns: Sequence[GlueColumn]) -> list[dict[str, Any]]:
    """The Iceberg fields of ``columns`` as the Glue API takes them: ids 1..n in order, every field optional, a
    list's element id after the last field's (a list type is given as the JSON of Iceberg's list type)."""
    fields: list[dict[str, Any]] = []
    next_element_id = len(columns) + 1
    for field_id, column in enumerate(columns, start=1):
        if column.type.startswith("array<") and column.type.endswith(">"):
            element = _ICEBERG_TYPES[column.type[len("array<"):-1]]
            type_ = json.dumps({"type": "list", "element-id": next_element_id, "element": element,
                                "element-required": False}, separators=(",", ":"))
            next_element_id += 1
        else:
            type_ = _ICEBERG_TYPES[column.type]
        fields.append({"id": field_id, "name": column.name, "required": False, "type": type_})
    return fields


# Each table is partitioned by the day of its event time: a day's query reads one partition, and a deletion by age
# drops whole partitions' files.
_PARTITION_SOURCE = {RECORDS_TABLE: "inference_time", ALB_TABLE: "time", NODE_HOURS_TABLE: "hour"}
# The tables the capture processor writes (the node-hour table is GpuCost's sampler's alone).
PROCESSOR_TABLES = (RECORDS_TABLE, ALB_TABLE)


@dataclass(frozen=True, kw_only=True)
class TableReader(Props):
    """One reader of the Iceberg tables (``capture.tableReaders[]``): a role and what it sees."""

    CONSTRUCT: ClassVar[str] = "CaptureTables"

    role_arn: str = prop(doc="The IAM role ARN (analysts, FinOps, a privacy reviewer) granted SELECT on both tables "
                             "by Lake Formation. Its own IAM policy must allow `lakeformation:GetDataAccess`, "
                             "`glue:GetTable`/`GetDatabase` and Athena in the workgroup (docs/security.md).")
    columns: ColumnAccess = prop(
        ColumnAccess.USAGE,
        doc="`usage` (the default): a named list of columns, every column of today except the prompt and response "
            "text and what is derived from it (`input_text`, `output_text`, `decode_error`, `redaction_rules`; of "
            "the load balancer's table `request_url`, `request_query`, `redirect_url`), plus `usageColumnsGranted`; "
            "a column the processor adds later is not granted. Only the usage workgroup. `all`: every column, "
            "present and future, and both workgroups.")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        if not is_unresolved(self.role_arn) and not IAM_ROLE_ARN.match(self.role_arn):
            problems.add("CaptureTables.BadReaderRoleArn", at.at("role_arn"),
                         "must be an IAM role ARN such as arn:aws:iam::111122223333:role/finops", self.role_arn)
        if self.columns not in ColumnAccess._value2member_map_:
            problems.add("CaptureTables.UnknownColumnAccess", at.at("columns"),
                         f"must be one of {', '.join(ColumnAccess)}", self.columns)


@dataclass(frozen=True, kw_only=True)
class CaptureTablesOptions(Props):
    """:class:`CaptureTables`' properties a config file can set (``capture.*`` in the app's, beside the storage's
    and the pipeline's), and the names and prefixes only Python code sets (the app derives them from ``project`` and
    the storage)."""

    CONSTRUCT: ClassVar[str] = "CaptureTables"

    table_readers: Sequence[TableReader] = prop(
        (), doc="Readers of the Iceberg tables, each a `roleArn` and its `columns` (`TableReader`, below), granted "
                "through Lake Formation (no bucket or key policy lets them read `curated-iceberg/` directly); a role "
                "at most once.")
    usage_columns_granted: Sequence[str] = prop(
        (), key="usageColumnsGranted",
        doc="Columns granted to `usage` readers beyond the reviewed list (`USAGE_COLUMNS`), each `<table>.<column>` "
            "(`capture_records.some_new_column`): a column the processor adds is granted to no usage reader until "
            "it is named here. Never a text column (`input_text`, `output_text`, `decode_error`, "
            "`redaction_rules`, `request_url`, `request_query`, `redirect_url`).")
    query_scan_limit_gib: int = prop(
        10, key="queryScanLimitGiB",
        doc=f"The most data one Athena query of the workgroups may scan, in GiB ({SCAN_LIMIT_GIB[0]}.."
            f"{SCAN_LIMIT_GIB[1]}): a query over it is cancelled (and costs what it scanned until then).")
    tables_layer_arn: str | None = prop(
        None, key="tablesLayerArn", default_doc="none: the tables are made, and the processor does not write them yet",
        doc="The Lambda layer version with pyiceberg for the capture processor (built by `make capture-layer` from "
            "its hashed lock, published with `aws lambda publish-layer-version`: compiled wheels for Python 3.13 on "
            "arm64, which a synth cannot fetch offline). With it the processor writes both layouts this release "
            "(`CURATED_OUTPUT=both`); without it, Parquet only, and a warning says so.")
    row_retention_days: int | None = prop(
        None, config=False,
        default_doc="none: rows are deleted only on request (the app gives `capture.retentionDays`)",
        doc="With `tables_layer_arn`: a daily EventBridge rule (03:17 UTC) invokes the processor to delete the rows "
            "older than this many days from both tables, expire the snapshots that hold them and write an audit "
            f"record under `{AUDIT_PREFIX}` ({ROW_RETENTION_DAYS[0]}..{ROW_RETENTION_DAYS[1]}).")
    database_name: str = prop("inference_capture_iceberg", config=False,
                              doc="The Glue database of the two Iceberg tables (its own: today's database holds "
                                  "tables of the same names). No table in it gets Lake Formation's "
                                  "`IAM_ALLOWED_PRINCIPALS` grant.")
    iceberg_prefix: str = prop(DEFAULT_ICEBERG_PREFIX, config=False,
                               doc="The tables' warehouse in the capture bucket, as `<prefix><table>/`.")
    query_results_prefix: str = prop(DEFAULT_QUERY_RESULTS_PREFIX, config=False,
                                     doc="Where Athena writes query results, as `<prefix><workgroup>/`.")
    workgroup_name: str = prop("capture", config=False,
                               doc="The workgroup of `all` readers; the usage workgroup is `<name>-usage`.")
    snapshot_retention_days: int = prop(
        7, config=False, default_doc="7 (the app gives `capture.noncurrentVersionRetentionDays`)",
        doc=f"Snapshots older than this expire, with the files only they reference "
            f"({SNAPSHOT_RETENTION_DAYS[0]}..{SNAPSHOT_RETENTION_DAYS[1]}): a deleted row is gone from time travel "
            "after at most this long, as an overwritten capture object is.")
    orphan_file_retention_days: int = prop(
        3, config=False,
        doc=f"Files no snapshot references (a failed commit's) are deleted after this many days "
            f"({ORPHAN_FILE_RETENTION_DAYS[0]}..{ORPHAN_FILE_RETENTION_DAYS[1]}).")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        """Every rule of these properties."""
        code = "CaptureTables"
        readers = self.table_readers
        for index, reader in enumerate(readers):
            reader.check(problems, at.child("table_readers", index))
        arns = [reader.role_arn for reader in readers]
        for index, arn in enumerate(arns):
            if arn in arns[:index]:
                problems.add(f"{code}.DuplicateReader", at.at("table_readers", index),
                             "a role at most once (its columns are one choice): the role is listed twice",
                             arn)
        for index, entry in enumerate(self.usage_columns_granted):
            table, _, column = entry.partition(".")
            if table not in USAGE_COLUMNS or not GLUE_NAME.match(column):
                problems.add(f"{code}.BadUsageColumn", at.at("usage_columns_granted", index),
                             f"must be `<table>.<column>`, the table one of {', '.join(USAGE_COLUMNS)}", entry)
            elif column in TEXT_COLUMNS[table]:
                problems.add(f"{code}.TextColumnForUsage", at.at("usage_columns_granted", index),
                             "is a text column: grant it by making the reader `all`, not to every usage reader", entry)
        if self.row_retention_days is not None and not is_unresolved(self.row_retention_days) \
                and not ROW_RETENTION_DAYS[0] <= self.row_retention_days <= ROW_RETENTION_DAYS[1]:
            problems.add(f"{code}.OutOfRange", at.at("row_retention_days"),
                         f"must be an integer from {ROW_RETENTION_DAYS[0]} to {ROW_RETENTION_DAYS[1]} (days)",
                         self.row_retention_days)
        for name, value, (low, high), unit in (
                ("query_scan_limit_gib", self.query_scan_limit_gib, SCAN_LIMIT_GIB, "GiB"),
                ("snapshot_retention_days", self.snapshot_retention_days, SNAPSHOT_RETENTION_DAYS, "days"),
                ("orphan_file_retention_days", self.orphan_file_retention_days, ORPHAN_FILE_RETENTION_DAYS, "days")):
            if not is_unresolved(value) and not low <= value <= high:
                problems.add(f"{code}.OutOfRange", at.at(name), f"must be an integer from {low} to {high} ({unit})",
                             value)
        layer = self.tables_layer_arn
        if layer is not None and not is_unresolved(layer) and not LAMBDA_LAYER_VERSION_ARN.match(layer):
            problems.add(f"{code}.InvalidLayerArn", at.at("tables_layer_arn"),
                         "must be a Lambda layer version ARN "
                         "(arn:aws:lambda:<region>:<account>:layer:<name>:<version>)",
                         layer)
        if not is_unresolved(self.database_name) and not GLUE_NAME.match(self.database_name):
            problems.add(f"{code}.InvalidGlueName", at.at("database_name"),
                         "must be lower case letters, digits and underscores (Athena-compatible)", self.database_name)
        for name, prefix in (("iceberg_prefix", self.iceberg_prefix),
                             ("query_results_prefix", self.query_results_prefix)):
            fault = key_prefix_fault(prefix)
            if fault is not None:
                problems.add(f"{code}.BadPrefix", at.at(name), fault, prefix)


@dataclass(frozen=True, kw_only=True)
class CaptureTablesProps(CaptureTablesOptions):
    """:class:`CaptureTables`' properties: its options, and the objects only Python code passes."""

    pipeline: CapturePipeline = prop(
        config=False,
        doc="The capture pipeline whose processor writes the tables: its bucket and key are the tables' (the bucket "
            "must be guarded by CaptureStorage for the perimeter to hold), its role is granted the catalog and "
            "`curated-iceberg/`, its function gets the `ICEBERG_*` settings.")
    audit_trail: CaptureStorage | None = prop(
        None, config=False, default_doc="none: the retention runs write their records to the capture bucket only",
        doc="With `row_retention_days`: the storage whose audit bucket (S3 Object Lock) receives each retention "
            "run's records and the tables' daily manifest as links of the hash-chained trail "
            "(`AUDIT_TRAIL_BUCKET`; the role may append, never delete).")


def warn_capture_tables(warnings: RiskWarnings, at: KeyPaths = PROPS, *, tables_layer_arn: str | None = None) -> None:
    """The risky but legal choices of :class:`CaptureTables`' properties (the config check calls it with its keys)."""
    if tables_layer_arn is None:
        warnings.add("CaptureTables:notWritten", at.at("tables_layer_arn"),
                     "the Iceberg tables are made but the capture processor does not write them: it needs pyiceberg, "
                     "which a synth cannot fetch offline. Build the layer (make capture-layer), publish it "
                     "(aws lambda publish-layer-version) and give its ARN; until then readers keep today's tables")


@real_signature
class CaptureTables(Construct):
    """The Iceberg tables ``capture_records`` and ``alb_access_logs``, their optimizers, their Lake Formation
    grants and the Athena workgroups with the named queries.

    Properties: :class:`CaptureTablesProps` (each with its type, default and meaning); ``props`` keeps them.

    Attributes, as escape hatches: ``database``, ``tables`` (by table name), ``optimizers`` (by table name and
    kind), ``optimizer_role``, ``location_role`` (Lake Formation's, for the registered prefix), ``location``
    (the ``AWS::LakeFormation::Resource``), ``workgroups`` (``"all"``, ``"usage"``), ``named_queries`` (by name),
    ``reader_grants`` (the ``AWS::LakeFormation::PrincipalPermissions`` of the readers), ``warehouse``.
    Its cdk-nag findings (object wildcards under its prefix, ``lakeformation:GetDataAccess`` on ``*``) are
    acknowledged here with reasons.
    """

    PROPS: ClassVar[type[Props]] = CaptureTablesProps

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        pipeline: CapturePipeline,
        audit_trail: CaptureStorage | None = CaptureTablesProps.audit_trail,
        table_readers: Sequence[TableReader] = CaptureTablesProps.table_readers,
        usage_columns_granted: Sequence[str] = CaptureTablesProps.usage_columns_granted,
        query_scan_limit_gib: int = CaptureTablesProps.query_scan_limit_gib,
        tables_layer_arn: str | None = CaptureTablesProps.tables_layer_arn,
        row_retention_days: int | None = CaptureTablesProps.row_retention_days,
        database_name: str = CaptureTablesProps.database_name,
        iceberg_prefix: str = CaptureTablesProps.iceberg_prefix,
        query_results_prefix: str = CaptureTablesProps.query_results_prefix,
        workgroup_name: str = CaptureTablesProps.workgroup_name,
        snapshot_retention_days: int = CaptureTablesProps.snapshot_retention_days,
        orphan_file_retention_days: int = CaptureTablesProps.orphan_file_retention_days,
    ) -> None:
        """Create the construct. Its properties (:class:`CaptureTablesProps`, kept as ``self.props``):

        :param table_readers: Readers of the Iceberg tables, each a `roleArn` and its `columns` (`TableReader`,
            below), granted through Lake Formation (no bucket or key policy lets them read `curated-iceberg/`
            directly); a role at most once. Default: ``()``.
        :param usage_columns_granted: Columns granted to `usage` readers beyond the reviewed list
            (`USAGE_COLUMNS`), each `<table>.<column>` (`capture_records.some_new_column`): a column the
            processor adds is granted to no usage reader until it is named here. Never a text column
            (`input_text`, `output_text`, `decode_error`, `redaction_rules`, `request_url`, `request_query`,
            `redirect_url`). Default: ``()``.
        :param query_scan_limit_gib: The most data one Athena query of the workgroups may scan, in GiB
            (1..10240): a query over it is cancelled (and costs what it scanned until then). Default: ``10``.
        :param tables_layer_arn: The Lambda layer version with pyiceberg for the capture processor (built by
            `make capture-layer` from its hashed lock, published with `aws lambda publish-layer-version`:
            compiled wheels for Python 3.13 on arm64, which a synth cannot fetch offline). With it the processor
            writes both layouts this release (`CURATED_OUTPUT=both`); without it, Parquet only, and a warning
            says so. Default: ``None`` (none: the tables are made, and the processor does not write them yet).
        :param row_retention_days: With `tables_layer_arn`: a daily EventBridge rule (03:17 UTC) invokes the
            processor to delete the rows older than this many days from both tables, expire the snapshots that
            hold them and write an audit record under `audit/table-deletions/` (1..3650). Default: ``None``
            (none: rows are deleted only on request (the app gives ``capture.retentionDays``)).
        :param database_name: The Glue database of the two Iceberg tables (its own: today's database holds
            tables of the same names). No table in it gets Lake Formation's `IAM_ALLOWED_PRINCIPALS` grant.
            Default: ``'inference_capture_iceberg'``.
        :param iceberg_prefix: The tables' warehouse in the capture bucket, as `<prefix><table>/`. Default:
            ``'curated-iceberg/'``.
        :param query_results_prefix: Where Athena writes query results, as `<prefix><workgroup>/`. Default:
            ``'athena-results/'``.
        :param workgroup_name: The workgroup of `all` readers; the usage workgroup is `<name>-usage`. Default:
            ``'capture'``.
        :param snapshot_retention_days: Snapshots older than this expire, with the files only they reference
            (1..365): a deleted row is gone from time travel after at most this long, as an overwritten capture
            object is. Default: ``7`` (7 (the app gives ``capture.noncurrentVersionRetentionDays``)).
        :param orphan_file_retention_days: Files no snapshot references (a failed commit's) are deleted after
            this many days (1..365). Default: ``3``.
        :param pipeline: The capture pipeline whose processor writes the tables: its bucket and key are the
            tables' (the bucket must be guarded by CaptureStorage for the perimeter to hold), its role is
            granted the catalog and `curated-iceberg/`, its function gets the `ICEBERG_*` settings. Default:
            required.
        :param audit_trail: With `row_retention_days`: the storage whose audit bucket (S3 Object Lock) receives
            each retention run's records and the tables' daily manifest as links of the hash-chained trail
            (`AUDIT_TRAIL_BUCKET`; the role may append, never delete). Default: ``None`` (none: the retention
            runs write their records to the capture bucket only).
        """
        super().__init__(scope, id)
        self.props = props = CaptureTablesProps(
            pipeline=pipeline, audit_trail=audit_trail, table_readers=listed(table_readers),
            query_scan_limit_gib=query_scan_limit_gib, usage_columns_granted=listed(usage_columns_granted),
            tables_layer_arn=tables_layer_arn, row_retention_days=row_retention_days,
            database_name=database_name, iceberg_prefix=iceberg_prefix, query_results_prefix=query_results_prefix,
            workgroup_name=workgroup_name, snapshot_retention_days=snapshot_retention_days,
            orphan_file_retention_days=orphan_file_retention_days)
        props.raise_if_invalid(f"CaptureTables {self.node.path}")
        stack = Stack.of(self)
        bucket: s3.IBucket = pipeline.props.bucket
        key: kms.IKey | None = pipeline.props.encryption_key
        self._bucket_arn = bucket_arn(bucket)
        self._key = key
        account, region, partition = stack.account, stack.region, stack.partition
        prefix = props.iceberg_prefix
        self.warehouse = f"s3://{bucket_name(bucket)}/{prefix}"

        # Its own database: today's (pipeline.database) holds Hive tables of the same names for one more release.
        # No default grant to IAM_ALLOWED_PRINCIPALS on its tables: Lake Formation alone decides who reads them.
        self.database = glue.CfnDatabase(
            self, "Database", catalog_id=account,
            database_input=glue.CfnDatabase.DatabaseInputProperty(
                name=props.database_name,
                description="Curated inference capture (Apache Iceberg; columns granted by Lake Formation)",
                create_table_default_permissions=[]))
        catalog_arn = f"arn:{partition}:glue:{region}:{account}:catalog"
        database_arn = f"arn:{partition}:glue:{region}:{account}:database/{props.database_name}"
        table_arns = [f"arn:{partition}:glue:{region}:{account}:table/{props.database_name}/{name}"
                      for name in PROCESSOR_TABLES]
        self.tables = {
            RECORDS_TABLE: self._table("CaptureRecordsTable", RECORDS_TABLE, CAPTURE_COLUMNS,
                                       {"gen_ai_semconv_version": GEN_AI_SEMCONV_VERSION}),
            ALB_TABLE: self._table("AlbAccessLogsTable", ALB_TABLE, ALB_COLUMNS, {}),
            NODE_HOURS_TABLE: self._table("GpuNodeHoursTable", NODE_HOURS_TABLE, NODE_HOURS_COLUMNS, {}),
        }
        self._catalog_arns = (catalog_arn, database_arn)

        # Lake Formation's role for the registered prefix: the credentials it vends to Athena for a granted reader
        # (and to a writer it admits) are this role's, scoped down. Read, write and delete under the prefix only.
        self.location_role = iam.Role(
            self, "LocationRole", assumed_by=iam.ServicePrincipal("lakeformation.amazonaws.com", conditions={
                "StringEquals": {"aws:SourceAccount": account}}),
            description=f"Lake Formation's access to s3://{bucket_name(bucket)}/{prefix} (vended to granted readers)")
        self._grant_prefix(self.location_role, prefix, delete=True)
        self.location = lakeformation.CfnResource(
            self, "Location", resource_arn=f"{self._bucket_arn}/{prefix.rstrip('/')}", use_service_linked_role=False,
            role_arn=self.location_role.role_arn,
            # Full Lake Formation mode: no principal reads the tables by IAM permissions alone (docs/security.md).
            hybrid_access_enabled=False)

        # The processor: pyiceberg's Glue catalog loads the table, writes data and metadata files, and commits with
        # UpdateTable (optimistic: the version it read). Directly through S3 (IAM and the bucket's allowlist).
        writer = pipeline.role
        self._grant_prefix(writer, prefix, delete=True)
        iam.Grant.add_to_principal(grantee=writer, actions=list(CATALOG_ACTIONS),
                                   resource_arns=[catalog_arn, database_arn, *table_arns])
        writer_grants = self._writer_grants("Processor", writer.role_arn, PROCESSOR_TABLES)
        # The processor's settings (lambda/capture_processor/capture_core/settings.py reads these names).
        pipeline.function.add_environment("ICEBERG_CATALOG_ID", account)
        pipeline.function.add_environment("ICEBERG_DATABASE", props.database_name)
        pipeline.function.add_environment("ICEBERG_CAPTURE_TABLE", RECORDS_TABLE)
        pipeline.function.add_environment("ICEBERG_ALB_TABLE", ALB_TABLE)
        # This release writes both layouts (the Parquet tables stay for one release: docs/upgrading.md), once pyiceberg
        # reaches the function through its layer; without the layer, Parquet only (said by warn_capture_tables).
        if props.tables_layer_arn is not None:
            pipeline.function.add_layers(_lambda.LayerVersion.from_layer_version_arn(
                self, "TablesLayer", props.tables_layer_arn))
            pipeline.function.add_environment("CURATED_OUTPUT", "both")
            if props.row_retention_days is not None:
                self._schedule_retention(pipeline, bucket, props.row_retention_days)
        else:
            pipeline.function.add_environment("CURATED_OUTPUT", "parquet")
        warnings = RiskWarnings()
        warn_capture_tables(warnings, tables_layer_arn=props.tables_layer_arn)
        warnings.annotate(self)

        # The Data Catalog's optimizers: compaction, snapshot retention, orphan file deletion.
        self.optimizer_role = iam.Role(
            self, "OptimizerRole", assumed_by=iam.ServicePrincipal("glue.amazonaws.com", conditions={
                "StringEquals": {"aws:SourceAccount": account}}),
            description="The Glue Data Catalog's optimizers of the capture Iceberg tables")
        self._grant_prefix(self.optimizer_role, prefix, delete=True)
        iam.Grant.add_to_principal(grantee=self.optimizer_role, actions=["glue:GetTable", "glue:UpdateTable"],
                                   resource_arns=[catalog_arn, database_arn, *(
                                       f"arn:{partition}:glue:{region}:{account}:table/{props.database_name}/{name}"
                                       for name in self.tables)])
        log_arns = [f"arn:{partition}:logs:{region}:{account}:log-group:{group}:*" for group in OPTIMIZER_LOG_GROUPS]
        iam.Grant.add_to_principal(grantee=self.optimizer_role,
                                   actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"],
                                   resource_arns=log_arns)
        # On a registered location the optimizers may read through Lake Formation (no resource-level permissions).
        iam.Grant.add_to_principal(grantee=self.optimizer_role, actions=["lakeformation:GetDataAccess"],
                                   resource_arns=["*"])
        optimizer_grants = self._writer_grants("Optimizer", self.optimizer_role.role_arn, tuple(self.tables))
        self.optimizers: dict[str, glue.CfnTableOptimizer] = {}
        for name, table in self.tables.items():
            for kind, configuration in self._optimizer_configurations(name).items():
                optimizer = glue.CfnTableOptimizer(
                    self, f"{_camel(name)}{_camel(kind)}", catalog_id=account, database_name=props.database_name,
                    table_name=name, type=kind, table_optimizer_configuration=configuration)
                optimizer.node.add_dependency(table)
                for grant in optimizer_grants:
                    optimizer.node.add_dependency(grant)
                # (The role's policy must exist before the optimizer first assumes it.)
                optimizer.node.add_dependency(self.optimizer_role)
                self.optimizers[f"{name}/{kind}"] = optimizer
        for grant in writer_grants:
            grant.node.add_dependency(self.location)

        # Readers: Lake Formation grants, the usage readers' without the text columns. No S3 or KMS on the prefix.
        self.reader_grants: dict[str, lakeformation.CfnPrincipalPermissions] = {}
        for reader in props.table_readers:
            self._reader(reader)

        # Athena: one workgroup per column access, each with its own results prefix (a usage reader must not read
        # the results of an `all` reader's query), encrypted with the capture key.
        self.workgroups = {access: self._workgroup(access, key) for access in ColumnAccess}
        for reader in props.table_readers:
            self._admit_results(reader)
        self.named_queries = self._named_queries()
        self._acknowledge_reviewed_findings()

    # -- tables -----------------------------------------------------------------------------------------------
    def _table(self, construct_id: str, name: str, columns: Sequence[GlueColumn],
               properties: Mapping[str, str]) -> glue.CfnTable:
        fields = iceberg_schema(columns)
        source = _PARTITION_SOURCE[name]
        source_id = next(field["id"] for field in fields if field["name"] == source)
        table = glue.CfnTable(
            self, construct_id, catalog_id=self.database.catalog_id, database_name=self.props.database_name,
            name=name,
            open_table_format_input=glue.CfnTable.OpenTableFormatInputProperty(
                iceberg_input=glue.CfnTable.IcebergInputProperty(
                    metadata_operation="CREATE", version="2",
                    iceberg_table_input=glue.CfnTable.IcebergTableInputProperty(
                        location=f"{self.warehouse}{name}/",
                        schema=glue.CfnTable.IcebergSchemaProperty(
                            type="struct", schema_id=0,
                            fields=[glue.CfnTable.IcebergStructFieldProperty(**field) for field in fields]),
                        partition_spec=glue.CfnTable.IcebergPartitionSpecProperty(spec_id=0, fields=[
                            glue.CfnTable.IcebergPartitionFieldProperty(
                                name=f"{source}_day", source_id=source_id, transform="day", field_id=1000)]),
                        properties={
                            "write.format.default": "parquet",
                            "write.parquet.compression-codec": "zstd",
                            # Old metadata files go with the commits that replace them (not only by the optimizers).
                            "write.metadata.delete-after-commit.enabled": "true",
                            "write.metadata.previous-versions-max": "20",
                            **properties,
                        },
                    ))))
        table.node.add_dependency(self.database)
        return table

    def _optimizer_configurations(self, name: str) -> dict[str, Any]:
        props = self.props
        role_arn = self.optimizer_role.role_arn
        configuration = glue.CfnTableOptimizer.TableOptimizerConfigurationProperty
        return {
            # Binpack merges the processor's small files into files of the table's target size (512 MB default).
            "compaction": configuration(enabled=True, role_arn=role_arn, compaction_configuration=(
                glue.CfnTableOptimizer.CompactionConfigurationProperty(
                    iceberg_configuration=glue.CfnTableOptimizer.IcebergCompactionConfigurationProperty(
                        strategy="binpack")))),
            "retention": configuration(enabled=True, role_arn=role_arn, retention_configuration=(
                glue.CfnTableOptimizer.RetentionConfigurationProperty(
                    iceberg_configuration=glue.CfnTableOptimizer.IcebergRetentionConfigurationProperty(
                        snapshot_retention_period_in_days=props.snapshot_retention_days,
                        number_of_snapshots_to_retain=1, clean_expired_files=True)))),
            "orphan_file_deletion": configuration(enabled=True, role_arn=role_arn, orphan_file_deletion_configuration=(
                glue.CfnTableOptimizer.OrphanFileDeletionConfigurationProperty(
                    iceberg_configuration=glue.CfnTableOptimizer.IcebergConfigurationProperty(
                        location=f"{self.warehouse}{name}/",
                        orphan_file_retention_period_in_days=props.orphan_file_retention_days)))),
        }

    # -- grants ---------------------------------------------------------------------------------------------------
    def grant_erase(self, role: iam.IRole) -> None:
        """The tables' part of what ``capture_table_ops delete|verify|expire`` calls (the buckets' part is
        ``CaptureStorage.grant_erase``): the catalog calls pyiceberg makes (``glue:GetDatabase``, ``glue:GetTable``,
        ``glue:UpdateTable``) on this database and its two tables only; the objects under the tables' prefix (read,
        write the rewritten files and metadata, delete: pyiceberg drops replaced metadata files, the erasure every
        version of the files only expired snapshots held), every version listed and read (``verify``); the key
        through S3 for that prefix; and Lake Formation's ALTER, DELETE, DESCRIBE, INSERT, SELECT on both tables and
        DESCRIBE on the database, as the processor has (full Lake Formation mode governs the catalog calls)."""
        prefix, bucket = self.props.iceberg_prefix, self._bucket_arn
        self._grant_prefix(role, prefix, delete=True)
        iam.Grant.add_to_principal(grantee=role, actions=["s3:GetObjectVersion", "s3:DeleteObjectVersion"],
                                   resource_arns=[objects_arn(bucket, prefix)], conditions=SAME_ACCOUNT)
        iam.Grant.add_to_principal(grantee=role, actions=["s3:ListBucketVersions"], resource_arns=[bucket],
                                   conditions={"StringLike": {"s3:prefix": [f"{prefix}*"]}})
        stack = Stack.of(self)
        arn = f"arn:{stack.partition}:glue:{stack.region}:{stack.account}"
        iam.Grant.add_to_principal(grantee=role, actions=list(CATALOG_ACTIONS), resource_arns=[
            f"{arn}:catalog", f"{arn}:database/{self.props.database_name}",
            *(f"{arn}:table/{self.props.database_name}/{name}" for name in PROCESSOR_TABLES)])
        label = "Eraser" + hashlib.sha256(role.node.path.encode()).hexdigest()[:8].upper()
        for grant in self._writer_grants(label, role.role_arn, PROCESSOR_TABLES):
            grant.node.add_dependency(self.location)

    def _schedule_retention(self, pipeline: CapturePipeline, bucket: s3.IBucket, days: int) -> None:
        """The capture policy's retention as a table operation, daily: the processor deletes the older rows,
        expires the snapshots that hold them and writes one audit record per table (it may put those, nothing
        else, under the audit prefix)."""
        self.retention_rule = events.Rule(
            self, "Retention", schedule=events.Schedule.cron(minute="17", hour="3"),
            description=f"Deletes capture table rows older than {days} days (CaptureTables)")
        self.retention_rule.add_target(targets.LambdaFunction(pipeline.function, retry_attempts=4,
            event=events.RuleTargetInput.from_object(
                {"captureTablesRetention": {"olderThanDays": days, "bucket": bucket_name(bucket)}})))
        role, bucket_arn_ = pipeline.role, self._bucket_arn
        if self._key is not None:
            grant_key_through_s3(role, self._key, KMS_WRITE_ACTIONS, bucket_arn_, prefixes=(AUDIT_PREFIX,))
        iam.Grant.add_to_principal(grantee=role, actions=["s3:PutObject"],
                                   resource_arns=[objects_arn(bucket_arn_, AUDIT_PREFIX)], conditions=SAME_ACCOUNT)
        admit_objects(role, bucket_arn_, ObjectAccess.WRITE, AUDIT_PREFIX)
        acknowledge(role, "s3-object-wildcard-under-fixed-prefix", *resource_evidence(
            role, objects_arn(bucket_arn_, AUDIT_PREFIX)))
        if self.props.audit_trail is not None:  # the records and the daily manifest, chained, under Object Lock
            self.props.audit_trail.grant_append_audit_trail(role)
            pipeline.function.add_environment("AUDIT_TRAIL_BUCKET", bucket_name(self.props.audit_trail.audit_bucket))

    def _grant_prefix(self, role: iam.IRole, prefix: str, *, delete: bool) -> None:
        """Read, write (and delete) the objects under ``prefix``, list keys under it, the key through S3 for them
        only; each is listed on the bucket's and the key's allowlists for exactly that prefix."""
        bucket = self._bucket_arn
        if self._key is not None:
            grant_key_through_s3(role, self._key, KMS_WRITE_ACTIONS, bucket, prefixes=(prefix,))
        actions = ["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload", *(["s3:DeleteObject"] if delete else [])]
        iam.Grant.add_to_principal(grantee=role, actions=actions, resource_arns=[objects_arn(bucket, prefix)],
                                   conditions=SAME_ACCOUNT)
        # (Without ListBucket, S3 answers 403 for a missing key instead of 404: pyiceberg's exists() would fail.)
        iam.Grant.add_to_principal(grantee=role, actions=["s3:ListBucket"], resource_arns=[bucket],
                                   conditions={"StringLike": {"s3:prefix": [prefix.rstrip("/"), f"{prefix}*"]}})
        for access in (ObjectAccess.READ, ObjectAccess.WRITE, *([ObjectAccess.DELETE] if delete else [])):
            admit_objects(role, bucket, access, prefix)
        acknowledge(role, "s3-object-wildcard-under-fixed-prefix", *resource_evidence(role, objects_arn(bucket,
                                                                                                          prefix)))

    def _writer_grants(self, label: str, principal: str, tables: Sequence[str],
                       scope: Construct | None = None) -> list[lakeformation.CfnPrincipalPermissions]:
        """Lake Formation permissions of a writer on ``tables`` (full LF mode governs its catalog calls), made in
        ``scope`` (the writer's stack: a grant in this stack naming a role of another would be a reference the
        wrong way round)."""
        scope = scope or self
        same_stack = Stack.of(scope) is Stack.of(self)
        catalog = self.database.catalog_id if same_stack else Stack.of(scope).account
        grants = [lakeformation.CfnPrincipalPermissions(
            scope, f"{label}Writes{_camel(name)}", catalog=catalog,
            principal=lakeformation.CfnPrincipalPermissions.DataLakePrincipalProperty(
                data_lake_principal_identifier=principal),
            resource=lakeformation.CfnPrincipalPermissions.ResourceProperty(
                table=lakeformation.CfnPrincipalPermissions.TableResourceProperty(
                    catalog_id=catalog, database_name=self.props.database_name, name=name)),
            permissions=list(WRITER_TABLE_PERMISSIONS), permissions_with_grant_option=[])
            for name in tables]
        database = lakeformation.CfnPrincipalPermissions(
            scope, f"{label}DescribesDatabase", catalog=catalog,
            principal=lakeformation.CfnPrincipalPermissions.DataLakePrincipalProperty(
                data_lake_principal_identifier=principal),
            resource=lakeformation.CfnPrincipalPermissions.ResourceProperty(
                database=lakeformation.CfnPrincipalPermissions.DatabaseResourceProperty(
                    catalog_id=catalog, name=self.props.database_name)),
            permissions=["DESCRIBE"], permissions_with_grant_option=[])
        if same_stack:  # (another stack deploys after this one: its grants follow the tables anyway)
            for grant, name in zip(grants, tables, strict=True):
                grant.node.add_dependency(self.tables[name])
            database.node.add_dependency(self.database)
        return [*grants, database]

    def grant_table_writer(self, scope: Construct, label: str, role: iam.IRole, table: str) -> None:
        """Let ``role`` append to one table (``NODE_HOURS_TABLE``: GpuCost's sampler) and nothing else: its files
        under the table's own prefix (IAM, the bucket's and the key's allowlists), the catalog calls of a pyiceberg
        commit on that table, and the table's Lake Formation permissions, made in ``scope`` (the role's stack)."""
        if table not in self.tables:
            raise ValueError(f"{table} is not a table of {self.node.path}: {', '.join(self.tables)}")
        stack = Stack.of(self)
        # (delete: a commit removes the metadata files it replaces, write.metadata.delete-after-commit.enabled)
        self._grant_prefix(role, f"{self.props.iceberg_prefix}{table}/", delete=True)
        iam.Grant.add_to_principal(grantee=role, actions=list(CATALOG_ACTIONS), resource_arns=[
            *self._catalog_arns,
            f"arn:{stack.partition}:glue:{stack.region}:{stack.account}:table/{self.props.database_name}/{table}"])
        self._writer_grants(label, role.role_arn, (table,), scope)

    def _reader(self, reader: TableReader) -> None:
        """SELECT on both tables (a usage reader: the columns :func:`usage_columns` names) and DESCRIBE on the
        database. The logical ids follow the role, so a change of columns is an update the review reads."""
        suffix = hashlib.sha256(reader.role_arn.encode()).hexdigest()[:8].upper()
        catalog = self.database.catalog_id
        principal = lakeformation.CfnPrincipalPermissions.DataLakePrincipalProperty(
            data_lake_principal_identifier=reader.role_arn)
        for name, table in self.tables.items():
            columns = usage_columns(name, self.props.usage_columns_granted)
            every = lakeformation.CfnPrincipalPermissions.ColumnWildcardProperty(excluded_column_names=[])
            grant = lakeformation.CfnPrincipalPermissions(
                self, f"Reader{suffix}Selects{_camel(name)}", catalog=catalog, principal=principal,
                resource=lakeformation.CfnPrincipalPermissions.ResourceProperty(
                    table_with_columns=lakeformation.CfnPrincipalPermissions.TableWithColumnsResourceProperty(
                        catalog_id=catalog, database_name=self.props.database_name, name=name,
                        column_names=list(columns) if reader.columns == ColumnAccess.USAGE else None,
                        column_wildcard=None if reader.columns == ColumnAccess.USAGE else every)),
                permissions=["SELECT"], permissions_with_grant_option=[])
            grant.node.add_dependency(table)
            grant.node.add_dependency(self.location)
            self.reader_grants[f"{reader.role_arn}/{name}"] = grant
        database = lakeformation.CfnPrincipalPermissions(
            self, f"Reader{suffix}DescribesDatabase", catalog=catalog, principal=principal,
            resource=lakeformation.CfnPrincipalPermissions.ResourceProperty(
                database=lakeformation.CfnPrincipalPermissions.DatabaseResourceProperty(
                    catalog_id=catalog, name=self.props.database_name)),
            permissions=["DESCRIBE"], permissions_with_grant_option=[])
        database.node.add_dependency(self.database)
        self.reader_grants[f"{reader.role_arn}/database"] = database

    # -- Athena ---------------------------------------------------------------------------------------------------
    def results_prefix(self, access: ColumnAccess) -> str:
        """The key prefix of a workgroup's query results."""
        return f"{self.props.query_results_prefix}{self.workgroup_name(access)}/"

    def workgroup_name(self, access: ColumnAccess) -> str:
        return self.props.workgroup_name if access == ColumnAccess.ALL else f"{self.props.workgroup_name}-usage"

    def _workgroup(self, access: ColumnAccess, key: kms.IKey | None) -> athena.CfnWorkGroup:
        encryption = (athena.CfnWorkGroup.EncryptionConfigurationProperty(encryption_option="SSE_KMS",
                                                                          kms_key=key.key_arn)
                      if key is not None else
                      athena.CfnWorkGroup.EncryptionConfigurationProperty(encryption_option="SSE_S3"))
        who = "every column" if access == ColumnAccess.ALL else "usage and timing columns"
        return athena.CfnWorkGroup(
            self, "UsageWorkGroup" if access == ColumnAccess.USAGE else "WorkGroup",
            name=self.workgroup_name(access),
            description=f"Queries of the capture Iceberg tables by readers of {who}",
            work_group_configuration=athena.CfnWorkGroup.WorkGroupConfigurationProperty(
                # A client cannot override the results location, its encryption or the scan limit.
                enforce_work_group_configuration=True,
                publish_cloud_watch_metrics_enabled=True,
                bytes_scanned_cutoff_per_query=self.props.query_scan_limit_gib * 1024 ** 3,
                engine_version=athena.CfnWorkGroup.EngineVersionProperty(
                    selected_engine_version="Athena engine version 3"),
                result_configuration=athena.CfnWorkGroup.ResultConfigurationProperty(
                    output_location=f"s3://{bucket_name(self.props.pipeline.props.bucket)}/"
                                    f"{self.results_prefix(access)}",
                    expected_bucket_owner=Stack.of(self).account,
                    encryption_configuration=encryption)))

    def _admit_results(self, reader: TableReader) -> None:
        """The reader's query results: read and write under its workgroups' results prefixes, granted by the bucket
        and key policies themselves (the role's IAM policy is managed elsewhere), like the capture readers'."""
        accesses = [ColumnAccess.USAGE] + ([ColumnAccess.ALL] if reader.columns == ColumnAccess.ALL else [])
        guard = bucket_guard(self, self._bucket_arn)
        prefixes = tuple(self.results_prefix(access) for access in accesses)
        if guard is not None:
            for prefix in prefixes:
                guard.allow_in_bucket_policy(reader.role_arn, prefix, write=True)
        keys = key_guard(self._key) if self._key is not None else None
        if keys is not None:
            keys.admit(reader.role_arn, KMS_WRITE_ACTIONS, self._bucket_arn, named=True, prefixes=prefixes)

    def _named_queries(self) -> dict[str, athena.CfnNamedQuery]:
        queries: dict[str, athena.CfnNamedQuery] = {}
        for name, (access, description, sql) in named_queries(self.props.database_name).items():
            query = athena.CfnNamedQuery(
                self, f"Query{_camel(name)}", name=name, description=description, database=self.props.database_name,
                query_string=sql, work_group=self.workgroup_name(access))
            query.node.add_dependency(self.workgroups[access])
            queries[name] = query
        return queries

    def _acknowledge_reviewed_findings(self) -> None:
        acknowledge(self.optimizer_role, "lake-formation-get-data-access", "Resource::*")
        stack = Stack.of(self)
        acknowledge(self.optimizer_role, "glue-optimizer-log-streams", *resource_evidence(self.optimizer_role, *(
            f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:log-group:{group}:*"
            for group in OPTIMIZER_LOG_GROUPS)))


def usage_columns(table: str, granted: Sequence[str] = ()) -> tuple[str, ...]:
    """The columns of ``table`` a usage reader is granted: the reviewed :data:`USAGE_COLUMNS` and the
    ``<table>.<column>`` entries of ``capture.usageColumnsGranted``, never a text column."""
    extra = [entry.partition(".")[2] for entry in granted if entry.partition(".")[0] == table]
    columns = [*USAGE_COLUMNS[table], *(c for c in extra if c not in USAGE_COLUMNS[table])]
    return tuple(c for c in columns if c not in TEXT_COLUMNS[table])


def named_queries(database: str) -> dict[str, tuple[ColumnAccess, str, str]]:
    """The named queries: name -> (the workgroup's access, description, SQL). Each reads only columns its
    workgroup's readers are granted (a test runs them against the grants)."""
    records, alb = f"{database}.{RECORDS_TABLE}", f"{database}.{ALB_TABLE}"
    last_week = "current_timestamp - INTERVAL '7' DAY"
    return {
        "tokens-per-caller-per-day": (ColumnAccess.USAGE, "Tokens per caller, model and day (FinOps, chargeback)", (
            "SELECT date(inference_time) AS day, caller_id,\n"
            "       coalesce(gen_ai_response_model, gen_ai_request_model) AS model, count(*) AS requests,\n"
            "       sum(gen_ai_usage_input_tokens) AS input_tokens, sum(gen_ai_usage_output_tokens) AS output_tokens,\n"
            "       count_if(gen_ai_usage_output_tokens IS NULL AND gen_ai_operation_name <> 'embeddings')"
            " AS requests_without_usage\n"
            f"FROM {records}\n"
            f"WHERE inference_time >= {last_week} AND caller_id IS NOT NULL\n"
            "GROUP BY 1, 2, 3 ORDER BY 1, 2, 3")),
        "usage-per-caller-model-day": (ColumnAccess.USAGE, (
            "Per caller, model and day: requests, refused, errors, exact tokens, time to first token"), (
            "SELECT date(inference_time) AS day, caller_id,\n"
            "       coalesce(gen_ai_response_model, gen_ai_request_model) AS model, count(*) AS requests,\n"
            "       count_if(refused_by IS NOT NULL) AS refused,\n"
            "       count_if(http_response_status_code >= 400 AND refused_by IS NULL) AS errors,\n"
            "       sum(gen_ai_usage_input_tokens) AS input_tokens, sum(gen_ai_usage_output_tokens) AS output_tokens,\n"
            "       approx_percentile(time_to_first_chunk_ms, 0.5) AS ttft_p50_ms,\n"
            "       approx_percentile(time_to_first_chunk_ms, 0.99) AS ttft_p99_ms,\n"
            "       count_if(usage_source = 'none' AND refused_by IS NULL) AS requests_without_exact_usage\n"
            f"FROM {records}\n"
            f"WHERE inference_time >= {last_week} AND usage_source IS NOT NULL\n"
            "GROUP BY 1, 2, 3 ORDER BY 1, 2, 3")),
        "gpu-cost-per-caller-model-day": (ColumnAccess.USAGE, (
            "GPU cost per caller, model and day: node-hours priced and shared by tokens served; idle as its own row"),
            gpu_cost_query(database, last_week)),
        "latency-per-model": (ColumnAccess.USAGE, "Requests, latency and time to first chunk per model and day", (
            "SELECT date(inference_time) AS day, gen_ai_request_model AS model, count(*) AS requests,\n"
            "       approx_percentile(request_duration_ms, 0.5) AS duration_p50_ms,\n"
            "       approx_percentile(request_duration_ms, 0.99) AS duration_p99_ms,\n"
            "       approx_percentile(time_to_first_chunk_ms, 0.5) AS ttfc_p50_ms,\n"
            "       approx_percentile(time_to_first_chunk_ms, 0.99) AS ttfc_p99_ms\n"
            f"FROM {records}\n"
            f"WHERE inference_time >= {last_week}\n"
            "GROUP BY 1, 2 ORDER BY 1, 2")),
        "errors-and-partial-responses": (ColumnAccess.USAGE, "Errors and partial responses per model and day", (
            "SELECT date(inference_time) AS day, gen_ai_request_model AS model, partial_reason,\n"
            "       count(*) AS requests, count_if(http_response_status_code >= 500) AS errors_5xx,\n"
            "       count_if(http_response_status_code BETWEEN 400 AND 499) AS errors_4xx,\n"
            "       count_if(partial) AS partial_responses\n"
            f"FROM {records}\n"
            f"WHERE inference_time >= {last_week}\n"
            "GROUP BY 1, 2, 3 ORDER BY 1, 2, 3")),
        "load-balancer-latency": (ColumnAccess.USAGE, "p95 target latency and 5xx per hour from the load balancer", (
            "SELECT date_trunc('hour', time) AS hour, approx_percentile(target_processing_time, 0.95) AS p95_s,\n"
            "       count_if(elb_status_code >= 500) AS errors_5xx\n"
            f"FROM {alb}\n"
            f"WHERE time >= {last_week} AND target_processing_time >= 0\n"
            "GROUP BY 1 ORDER BY 1")),
        "redaction-rule-hits": (ColumnAccess.ALL, "Requests that hit a redaction rule, per rule and day (privacy)", (
            "SELECT date(inference_time) AS day, rule, count(*) AS requests, count(DISTINCT caller_id) AS callers\n"
            f"FROM {records}\n"
            "CROSS JOIN UNNEST(redaction_rules) AS t(rule)\n"
            f"WHERE inference_time >= {last_week} AND redaction_rules IS NOT NULL\n"
            "GROUP BY 1, 2 ORDER BY 1, 2")),
        "decode-errors": (ColumnAccess.ALL, "Records that needed the key's time, or failed to decode", (
            "SELECT source_key, time_source, decode_error, count(*) AS n\n"
            f"FROM {records}\n"
            f"WHERE inference_time >= {last_week} AND (time_source <> 'record' OR decode_error IS NOT NULL)\n"
            "GROUP BY 1, 2, 3")),
    }


IDLE_CALLER = "(idle)"


def gpu_cost_query(database: str, since: str) -> str:
    """Athena SQL (Trino; DuckDB runs it too): per day, capacity group, caller and model, the node-hours and their
    cost, allocated hour by hour. Each group-hour (the last sample of the hour in ``gpu_node_hours``) costs
    ``nodes * usd_per_node_hour``; it is shared among the callers by their tokens (input + output, refused requests
    left out) on the models the group serves in that hour; an hour in which those models served no token is the
    caller ``(idle)``. So for every group and day, the callers' costs and the idle row add up to its node-hours
    times its price (``tests/capture_processor/test_gpu_cost.py`` checks it on sample rows)."""
    hours, records = f"{database}.{NODE_HOURS_TABLE}", f"{database}.{RECORDS_TABLE}"
    return (
        "WITH capacity AS (\n"
        "  SELECT hour, capacity_kind, cluster_name, group_name,\n"
        "         max_by(instance_type, sample_time) AS instance_type, max_by(nodes, sample_time) AS nodes,\n"
        "         max_by(usd_per_node_hour, sample_time) AS usd_per_node_hour,\n"
        "         max_by(models, sample_time) AS models\n"
        f"  FROM {hours}\n"
        f"  WHERE hour >= {since}\n"
        "  GROUP BY 1, 2, 3, 4),\n"
        "served AS (\n"
        "  SELECT date_trunc('hour', inference_time) AS hour, coalesce(caller_id, '-') AS caller_id,\n"
        "         coalesce(gen_ai_response_model, gen_ai_request_model) AS model,\n"
        "         sum(coalesce(gen_ai_usage_input_tokens, 0) + coalesce(gen_ai_usage_output_tokens, 0)) AS tokens\n"
        f"  FROM {records}\n"
        f"  WHERE inference_time >= {since} AND refused_by IS NULL\n"
        "  GROUP BY 1, 2, 3),\n"
        "shares AS (\n"
        "  SELECT c.hour, c.capacity_kind, c.cluster_name, c.group_name, s.caller_id, s.model, s.tokens,\n"
        "         sum(s.tokens) OVER (PARTITION BY c.hour, c.capacity_kind, c.cluster_name, c.group_name)"
        " AS group_tokens\n"
        "  FROM capacity c CROSS JOIN UNNEST(c.models) AS m(model)\n"
        "  JOIN served s ON s.hour = c.hour AND s.model = m.model\n"
        "  WHERE s.tokens > 0)\n"
        "SELECT CAST(c.hour AS date) AS day, c.capacity_kind, c.cluster_name, c.group_name, c.instance_type,\n"
        f"       coalesce(s.caller_id, '{IDLE_CALLER}') AS caller_id, s.model, s.caller_id IS NULL AS idle,\n"
        "       sum(coalesce(s.tokens, 0)) AS tokens,\n"
        "       sum(c.nodes * coalesce(CAST(s.tokens AS double) / s.group_tokens, 1.0)) AS node_hours,\n"
        "       sum(c.nodes * c.usd_per_node_hour * coalesce(CAST(s.tokens AS double) / s.group_tokens, 1.0))"
        " AS cost_usd\n"
        "FROM capacity c LEFT JOIN shares s ON s.hour = c.hour AND s.capacity_kind = c.capacity_kind\n"
        "  AND s.cluster_name = c.cluster_name AND s.group_name = c.group_name\n"
        "WHERE c.nodes > 0\n"
        "GROUP BY 1, 2, 3, 4, 5, 6, 7, 8 ORDER BY 1, 2, 3, 4, 5, 8, 6, 7")


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.replace("-", "_").split("_"))
