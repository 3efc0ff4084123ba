"""CaptureTables: the Iceberg tables, their optimizers, the Lake Formation grants and the Athena workgroups, asserted
on the template; and the promises of docs/security.md#capture-tables tried against the bucket and key policies with
the policy evaluator (a usage-only reader reads no prompt text, by any path the perimeter governs)."""

from __future__ import annotations

import json
import re
from typing import Any

import pyarrow as pa
import pytest
from aws_cdk import App, Environment, Stack
from aws_cdk.assertions import Annotations, Match, Template

from hyperpod_inference_iac import (
    CapturePipeline,
    CaptureStorage,
    CaptureTables,
    ColumnAccess,
    ConfigError,
    TableReader,
)
from hyperpod_inference_iac.capture.capture_tables import (
    TEXT_COLUMNS,
    USAGE_COLUMNS,
    named_queries,
)
from tests.support.policy_eval import Request, decision
from tests.unit.test_data_perimeter import ACCOUNT, ADMIN, ANALYST, BUCKET, REGION, resolve

FINOPS = f"arn:aws:iam::{ACCOUNT}:role/finops"
PRIVACY = f"arn:aws:iam::{ACCOUNT}:role/privacy-review"
TABLE_DATA = "curated-iceberg/capture_records/data/inference_time_day=2026-12-01/00000-0-a.parquet"
TABLE_METADATA = "curated-iceberg/capture_records/metadata/00001-b.metadata.json"
USAGE_RESULT = "athena-results/capture-usage/3f1c.csv"
ALL_RESULT = "athena-results/capture/8e2d.csv"


def build(readers: tuple[TableReader, ...] = (TableReader(role_arn=FINOPS),
                                               TableReader(role_arn=PRIVACY, columns=ColumnAccess.ALL)),
          **props: Any) -> tuple[Stack, CaptureTables]:
    app = App()
    stack = Stack(app, "Storage", env=Environment(account=ACCOUNT, region=REGION))
    storage = CaptureStorage(stack, "Storage", capture_bucket_name=BUCKET, reader_role_arns=[ANALYST])
    pipeline = CapturePipeline(stack, "Pipeline", bucket=storage.capture_bucket, encryption_key=storage.key,
                               capture_prefixes=[storage.capture_prefix], output_prefix=storage.curated_prefix,
                               quarantine_prefix=storage.quarantine_prefix)
    tables = CaptureTables(stack, "Tables", pipeline=pipeline, table_readers=readers, **props)
    return stack, tables


@pytest.fixture(scope="module")
def default_stack() -> Stack:
    """The default build, once for the module (its template and its warnings are read, never changed)."""
    stack, _ = build()
    return stack


@pytest.fixture(scope="module")
def template(default_stack: Stack) -> dict[str, Any]:
    return Template.from_stack(default_stack).to_json()


def of_type(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == kind}


def role_arn(template: dict[str, Any], prefix: str) -> str:
    logical_id = next(k for k in of_type(template, "AWS::IAM::Role") if k.startswith(prefix))
    return f"arn:aws:iam::{ACCOUNT}:role/{logical_id}"


def policy_of(template: dict[str, Any], role_prefix: str) -> list[dict[str, Any]]:
    resources = template["Resources"]
    policy = next(r for r in of_type(template, "AWS::IAM::Policy").values()
                  if any(ref["Ref"].startswith(role_prefix) for ref in r["Properties"]["Roles"]))
    return _resolve(policy["Properties"]["PolicyDocument"]["Statement"], resources)  # type: ignore[no-any-return]


def _resolve(value: Any, resources: dict[str, Any]) -> Any:
    """:func:`resolve`, with the ARNs of other resources (a log group) as ``<id.Attr>``."""
    if isinstance(value, dict) and "Fn::GetAtt" in value and \
            resources[value["Fn::GetAtt"][0]]["Type"] not in ("AWS::S3::Bucket", "AWS::IAM::Role", "AWS::KMS::Key"):
        return "<{}.{}>".format(*value["Fn::GetAtt"])
    if isinstance(value, list):
        return [_resolve(v, resources) for v in value]
    if isinstance(value, dict) and not any(k.startswith("Fn::") or k == "Ref" for k in value):
        return {k: _resolve(v, resources) for k, v in value.items()}
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(str(_resolve(p, resources)) for p in parts)
    return resolve(value, resources)


# ---- the tables --------------------------------------------------------------------------------------------

_ICEBERG = {pa.string(): "string", pa.bool_(): "boolean", pa.int32(): "int", pa.int64(): "long",
            pa.float64(): "double", pa.timestamp("us", tz="UTC"): "timestamptz"}


def _iceberg_type(arrow: pa.DataType) -> str:
    return f"list<{_ICEBERG[arrow.value_type]}>" if pa.types.is_list(arrow) else _ICEBERG[arrow]


def _cfn_type(field: dict[str, Any]) -> str:
    if field["Type"].startswith("{"):
        parsed = json.loads(field["Type"])
        return f"{parsed['type']}<{parsed['element']}>"
    return str(field["Type"])


def test_iceberg_columns_match_the_parquet_the_lambda_writes(template: dict[str, Any]) -> None:
    from capture_core import alb_format, capture_format

    tables = {r["Properties"]["Name"]: r["Properties"] for r in of_type(template, "AWS::Glue::Table").values()
              if "OpenTableFormatInput" in r["Properties"]}
    for name, schema in (("capture_records", capture_format.CURATED_SCHEMA),
                         ("alb_access_logs", alb_format.CURATED_SCHEMA)):
        iceberg = tables[name]["OpenTableFormatInput"]["IcebergInput"]["IcebergTableInput"]
        fields = iceberg["Schema"]["Fields"]
        assert [(f["Name"], _cfn_type(f)) for f in fields] == [(f.name, _iceberg_type(f.type)) for f in schema]
        ids = [f["Id"] for f in fields] + [json.loads(f["Type"])["element-id"] for f in fields
                                           if f["Type"].startswith("{")]
        assert len(ids) == len(set(ids))  # Iceberg field ids, list elements' included, are unique
        assert iceberg["Location"] == f"s3://{BUCKET}/curated-iceberg/{name}/"
        assert tables[name]["OpenTableFormatInput"]["IcebergInput"]["Version"] == "2"
        (partition,) = iceberg["PartitionSpec"]["Fields"]
        assert partition["Transform"] == "day"
        assert set(TEXT_COLUMNS[name]) <= {f["Name"] for f in fields}  # every excluded column exists


def test_the_database_is_its_own_and_gives_iam_principals_nothing(template: dict[str, Any]) -> None:
    databases = [r["Properties"]["DatabaseInput"] for r in of_type(template, "AWS::Glue::Database").values()]
    iceberg = next(d for d in databases if d["Name"] == "inference_capture_iceberg")
    assert iceberg["CreateTableDefaultPermissions"] == []
    assert {d["Name"] for d in databases} == {"inference_capture", "inference_capture_iceberg"}  # today's stays


def test_three_optimizers_per_table_with_the_retentions(template: dict[str, Any]) -> None:
    optimizers = [r["Properties"] for r in of_type(template, "AWS::Glue::TableOptimizer").values()]
    assert sorted((o["TableName"], o["Type"]) for o in optimizers) == sorted(
        (t, k) for t in ("capture_records", "alb_access_logs", "gpu_node_hours")
        for k in ("compaction", "retention", "orphan_file_deletion"))
    for optimizer in optimizers:
        configuration = optimizer["TableOptimizerConfiguration"]
        assert configuration["Enabled"] is True
        assert configuration["RoleArn"]["Fn::GetAtt"][0].startswith("TablesOptimizerRole")
        if optimizer["Type"] == "retention":
            assert configuration["RetentionConfiguration"]["IcebergConfiguration"] == {
                "SnapshotRetentionPeriodInDays": 7, "NumberOfSnapshotsToRetain": 1, "CleanExpiredFiles": True}


def test_the_processor_gets_the_iceberg_settings_it_reads(template: dict[str, Any]) -> None:
    """The names the construct sets are the names the runtime reads (capture_core/settings.py): the two sides agree."""
    from tests.support.synth import REPO

    function = next(r for k, r in of_type(template, "AWS::Lambda::Function").items() if k.startswith("PipelineFunc"))
    variables = function["Properties"]["Environment"]["Variables"]
    assert {k: v for k, v in variables.items() if k.startswith("ICEBERG_")} == {
        "ICEBERG_CATALOG_ID": ACCOUNT, "ICEBERG_DATABASE": "inference_capture_iceberg",
        "ICEBERG_CAPTURE_TABLE": "capture_records", "ICEBERG_ALB_TABLE": "alb_access_logs"}
    settings = (REPO / "lambda" / "capture_processor" / "capture_core" / "settings.py").read_text()
    read = set(re.findall(r'"((?:ICEBERG|CURATED)_[A-Z_]+)"', settings))
    assert {k for k in variables if k.startswith(("ICEBERG_", "CURATED_"))} <= read
    # Without pyiceberg's layer the processor writes Parquet only, and the construct says so.
    assert variables["CURATED_OUTPUT"] == "parquet"
    assert "Layers" not in function["Properties"] or len(function["Properties"]["Layers"]) == 1  # (pandas only)


def test_with_the_tables_layer_the_processor_writes_both_layouts() -> None:
    layer = f"arn:aws:lambda:{REGION}:{ACCOUNT}:layer:capture-tables:3"
    stack, _ = build(tables_layer_arn=layer)
    template = Template.from_stack(stack).to_json()
    function = next(r for k, r in of_type(template, "AWS::Lambda::Function").items() if k.startswith("PipelineFunc"))
    assert function["Properties"]["Environment"]["Variables"]["CURATED_OUTPUT"] == "both"
    assert layer in json.dumps(function["Properties"]["Layers"])
    warnings = Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp("CaptureTables:notWritten"))
    assert warnings == []


def test_without_the_tables_layer_the_construct_warns_that_the_tables_are_not_written(default_stack: Stack) -> None:
    warnings = Annotations.from_stack(default_stack).find_warning(
        "*", Match.string_like_regexp("CaptureTables:notWritten"))
    assert len(warnings) == 1


def _statements_for(statements: list[dict[str, Any]], action: str) -> list[dict[str, Any]]:
    return [s for s in statements if action in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])]


def test_the_processor_gets_exactly_what_the_glue_catalog_needs(template: dict[str, Any]) -> None:
    statements = policy_of(template, "PipelineRole")
    (glue,) = [s for s in statements if any(str(a).startswith("glue:") for a in _list(s["Action"]))]
    assert sorted(glue["Action"]) == ["glue:GetDatabase", "glue:GetTable", "glue:UpdateTable"]
    base = f"arn:aws:glue:{REGION}:{ACCOUNT}"
    assert sorted(glue["Resource"]) == sorted([
        f"{base}:catalog", f"{base}:database/inference_capture_iceberg",
        f"{base}:table/inference_capture_iceberg/capture_records",
        f"{base}:table/inference_capture_iceberg/alb_access_logs"])
    (objects,) = [s for s in _statements_for(statements, "s3:DeleteObject")]
    assert objects["Resource"] == f"arn:aws:s3:::{BUCKET}/curated-iceberg/*"
    prefixes = sorted(s["Condition"]["StringLike"]["s3:prefix"] for s in _statements_for(statements, "s3:ListBucket"))
    # the tables' prefix, and the erasure register the processor reads (CapturePipeline)
    assert prefixes == [["audit/erasure-register", "audit/erasure-register/*"],
                        ["curated-iceberg", "curated-iceberg/*"]]
    assert not any("lakeformation" in str(s["Action"]) for s in statements)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_the_optimizer_and_location_roles_are_scoped_to_the_prefix_and_the_key(template: dict[str, Any]) -> None:
    for prefix in ("TablesOptimizerRole", "TablesLocationRole"):
        for statement in policy_of(template, prefix):
            for resource in _list(statement["Resource"]):
                if resource.startswith("arn:aws:s3"):
                    assert resource in (f"arn:aws:s3:::{BUCKET}", f"arn:aws:s3:::{BUCKET}/curated-iceberg/*")
                if any(str(a).startswith("kms:") for a in _list(statement["Action"])):
                    assert statement["Condition"]["StringLike"]["kms:EncryptionContext:aws:s3:arn"] == [
                        f"arn:aws:s3:::{BUCKET}/curated-iceberg/*"]
    location = next(iter(of_type(template, "AWS::LakeFormation::Resource").values()))["Properties"]
    assert _resolve(location["ResourceArn"], template["Resources"]) == f"arn:aws:s3:::{BUCKET}/curated-iceberg"
    assert location["HybridAccessEnabled"] is False and location["UseServiceLinkedRole"] is False


def _grants(template: dict[str, Any], principal: str) -> dict[str, dict[str, Any]]:
    return {(r["Properties"]["Resource"].get("TableWithColumns") or r["Properties"]["Resource"].get("Table")
             or r["Properties"]["Resource"]["Database"]).get("Name"): r["Properties"]
            for r in of_type(template, "AWS::LakeFormation::PrincipalPermissions").values()
            if r["Properties"]["Principal"]["DataLakePrincipalIdentifier"] == principal}


def test_usage_readers_get_an_explicit_column_list_and_all_readers_every_column(template: dict[str, Any]) -> None:
    usage, full = _grants(template, FINOPS), _grants(template, PRIVACY)
    for table in ("capture_records", "alb_access_logs"):
        for grants in (usage, full):
            assert grants[table]["Permissions"] == ["SELECT"] and grants[table]["PermissionsWithGrantOption"] == []
        listed = usage[table]["Resource"]["TableWithColumns"]
        assert "ColumnWildcard" not in listed  # a named list: nothing the processor adds later reaches it
        assert listed["ColumnNames"] == list(USAGE_COLUMNS[table])
        assert not set(listed["ColumnNames"]) & set(TEXT_COLUMNS[table])
        assert full[table]["Resource"]["TableWithColumns"]["ColumnWildcard"] == {"ExcludedColumnNames": []}
    for grants in (usage, full):
        assert grants["inference_capture_iceberg"]["Permissions"] == ["DESCRIBE"]
    assert {"input_text", "output_text"} <= set(TEXT_COLUMNS["capture_records"])


def test_every_column_of_today_is_either_granted_to_usage_or_a_text_column(template: dict[str, Any]) -> None:
    """Switching to a list took nothing from today's usage readers, and each column is one or the other."""
    from capture_core import alb_format, capture_format

    for table, schema in (("capture_records", capture_format.CURATED_SCHEMA),
                          ("alb_access_logs", alb_format.CURATED_SCHEMA)):
        assert set(schema.names) == set(USAGE_COLUMNS[table]) | set(TEXT_COLUMNS[table]), table
        assert not set(USAGE_COLUMNS[table]) & set(TEXT_COLUMNS[table])


def test_a_column_the_processor_adds_is_granted_to_nobody_until_the_config_grants_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The processor gains a text-bearing column (say `tool_arguments`): the table carries it, no usage reader is
    granted it; naming it in `usage_columns_granted` (capture.usageColumnsGranted) grants it."""
    from hyperpod_inference_iac.capture import capture_tables
    from hyperpod_inference_iac.capture.capture_pipeline import GlueColumn

    new_column = GlueColumn("tool_arguments", "string")
    monkeypatch.setattr(capture_tables, "CAPTURE_COLUMNS", (*capture_tables.CAPTURE_COLUMNS, new_column))
    stack, _ = build()
    template = Template.from_stack(stack).to_json()
    tables = {r["Properties"]["Name"]: r["Properties"] for r in of_type(template, "AWS::Glue::Table").values()
              if "OpenTableFormatInput" in r["Properties"]}
    schema = tables["capture_records"]["OpenTableFormatInput"]["IcebergInput"]["IcebergTableInput"]["Schema"]
    assert "tool_arguments" in {field["Name"] for field in schema["Fields"]}
    usage = _grants(template, FINOPS)["capture_records"]["Resource"]["TableWithColumns"]
    assert "tool_arguments" not in usage["ColumnNames"] and "ColumnWildcard" not in usage
    stack, _ = build(usage_columns_granted=["capture_records.tool_arguments"])
    usage = _grants(Template.from_stack(stack).to_json(), FINOPS)["capture_records"]["Resource"]["TableWithColumns"]
    assert usage["ColumnNames"] == [*USAGE_COLUMNS["capture_records"], "tool_arguments"]


def test_a_text_column_or_an_unknown_table_cannot_be_granted_to_usage_readers() -> None:
    with pytest.raises(ConfigError) as raised:
        build(usage_columns_granted=["capture_records.input_text", "alb_access_logs.request_query", "nope.x",
                                     "capture_records"])
    text = str(raised.value)
    assert text.count("[CaptureTables.TextColumnForUsage] usage_columns_granted[") == 2
    assert text.count("[CaptureTables.BadUsageColumn] usage_columns_granted[") == 2


def test_workgroups_enforce_encrypted_results_and_a_scan_limit(template: dict[str, Any]) -> None:
    workgroups = {r["Properties"]["Name"]: r["Properties"]["WorkGroupConfiguration"]
                  for r in of_type(template, "AWS::Athena::WorkGroup").values()}
    assert set(workgroups) == {"capture", "capture-usage"}
    for name, configuration in workgroups.items():
        assert configuration["EnforceWorkGroupConfiguration"] is True
        assert configuration["BytesScannedCutoffPerQuery"] == 10 * 1024 ** 3
        results = configuration["ResultConfiguration"]
        assert results["OutputLocation"] == f"s3://{BUCKET}/athena-results/{name}/"
        assert results["EncryptionConfiguration"]["EncryptionOption"] == "SSE_KMS"
        assert results["EncryptionConfiguration"]["KmsKey"]["Fn::GetAtt"][0].startswith("StorageKey")
        assert results["ExpectedBucketOwner"] == ACCOUNT


def test_named_queries_read_only_what_their_workgroups_readers_are_granted(template: dict[str, Any]) -> None:
    queries = {r["Properties"]["Name"]: r["Properties"] for r in of_type(template, "AWS::Athena::NamedQuery").values()}
    assert set(queries) == set(named_queries("inference_capture_iceberg"))
    text = {column for columns in TEXT_COLUMNS.values() for column in columns}
    for name, query in queries.items():
        words = set(re.findall(r"[a-z_]+", query["QueryString"]))
        if query["WorkGroup"] == "capture-usage":
            assert not words & text, name
        else:
            assert words & text, f"{name} reads no text column: it belongs in the usage workgroup"
        assert query["Database"] == "inference_capture_iceberg"


def test_a_reader_twice_a_bad_arn_and_limits_are_refused() -> None:
    with pytest.raises(ConfigError) as raised:
        build((TableReader(role_arn=FINOPS), TableReader(role_arn=FINOPS, columns=ColumnAccess.ALL),
               TableReader(role_arn="finops")), query_scan_limit_gib=0)
    codes = {p.code for p in raised.value.problems}
    assert codes == {"CaptureTables.DuplicateReader", "CaptureTables.BadReaderRoleArn", "CaptureTables.OutOfRange"}
    paths = {p.path for p in raised.value.problems}
    assert {"table_readers[1]", "table_readers[2].role_arn", "query_scan_limit_gib"} <= paths


def test_the_lifecycle_never_expires_the_tables_files(template: dict[str, Any]) -> None:
    bucket = next(r for k, r in of_type(template, "AWS::S3::Bucket").items() if k.startswith("StorageCaptureBucket"))
    rules = bucket["Properties"]["LifecycleConfiguration"]["Rules"]
    expiring = {r["Prefix"] for r in rules if "ExpirationInDays" in r}
    assert expiring == {"data-capture/", "curated/", "quarantine/", "athena-results/"}
    assert all("Prefix" in r for r in rules if "ExpirationInDays" in r)  # none for the whole bucket
    (purge,) = [r for r in rules if r["Id"] == "purge-old-versions"]
    assert "Prefix" not in purge
    assert purge["NoncurrentVersionExpiration"]["NoncurrentDays"] == 7 and "ExpirationInDays" not in purge


def test_retention_covers_every_place_an_erasure_covers() -> None:
    """Scheduled retention does the same per place: every place the erasure command covers by default is expired by
    the lifecycle (with its noncurrent versions), or is the tables' prefix, whose rows the daily run deletes."""
    from capture_core.erasure import Places

    stack, tables = build((), tables_layer_arn=f"arn:aws:lambda:{REGION}:{ACCOUNT}:layer:tables:1",
                          row_retention_days=30)
    template = Template.from_stack(stack).to_json()
    bucket = next(r for k, r in of_type(template, "AWS::S3::Bucket").items() if k.startswith("StorageCaptureBucket"))
    expiring = {r["Prefix"]: r for r in bucket["Properties"]["LifecycleConfiguration"]["Rules"]
                if "ExpirationInDays" in r}
    places = Places()
    assert set(expiring) == {places.curated, places.quarantine, *places.raw, places.athena_results}
    assert all(rule["NoncurrentVersionExpiration"]["NoncurrentDays"] == 7 for rule in expiring.values())
    assert places.iceberg == tables.props.iceberg_prefix
    [rule] = of_type(template, "AWS::Events::Rule").values()
    [target] = rule["Properties"]["Targets"]
    request = json.loads(target["Input"])["captureTablesRetention"]
    assert request == {"olderThanDays": 30, "bucket": BUCKET}


# ---- the perimeter: what the bucket and key policies let each principal do ------------------------------------


@pytest.fixture(scope="module")
def policies(template: dict[str, Any]) -> dict[str, Any]:
    resources = template["Resources"]
    bucket_policy = next(r for r in of_type(template, "AWS::S3::BucketPolicy").values()
                         if "CaptureBucket" in str(r["Properties"]["Bucket"]))
    key_id, key = next(iter(of_type(template, "AWS::KMS::Key").items()))
    return {"bucket": resolve(bucket_policy["Properties"]["PolicyDocument"]["Statement"], resources),
            "key": resolve(key["Properties"]["KeyPolicy"]["Statement"], resources),
            "key_arn": f"arn:aws:kms:{REGION}:{ACCOUNT}:key/{key_id}"}


def s3(policies: dict[str, Any], principal: str, action: str, key: str) -> str:
    context = {"s3:x-amz-server-side-encryption": "aws:kms",
               "s3:x-amz-server-side-encryption-aws-kms-key-id": policies["key_arn"]} if action == "s3:PutObject" \
        else {}
    return decision(policies["bucket"], Request(action, f"arn:aws:s3:::{BUCKET}/{key}", principal, None, context))


def kms(policies: dict[str, Any], principal: str, action: str, key: str) -> str:
    context = {"kms:ViaService": f"s3.{REGION}.amazonaws.com",
               "kms:EncryptionContext:aws:s3:arn": f"arn:aws:s3:::{BUCKET}/{key}"}
    return decision(policies["key"], Request(action, policies["key_arn"], principal, None, context))


def test_a_usage_reader_cannot_read_the_tables_files_directly(policies: dict[str, Any]) -> None:
    """The files hold every column: a usage reader reads them only through Lake Formation, which filters columns.
    Its own IAM policy cannot help it: the bucket policy denies, the key policy does not let it decrypt."""
    for key in (TABLE_DATA, TABLE_METADATA):
        for action in ("s3:GetObject", "s3:GetObjectVersion", "s3:PutObject", "s3:DeleteObject"):
            assert s3(policies, FINOPS, action, key) == "deny", (action, key)
        assert kms(policies, FINOPS, "kms:Decrypt", key) == "neutral"
    for key in ("curated/tier=pod/dt=2026-12-01/hour=10/p.parquet", "data-capture/a/pod/x.jsonl"):
        assert s3(policies, FINOPS, "s3:GetObject", key) == "deny"  # nor today's layout, nor the raw captures


def test_an_all_reader_too_reads_the_tables_only_through_lake_formation(policies: dict[str, Any]) -> None:
    for key in (TABLE_DATA, TABLE_METADATA):
        assert s3(policies, PRIVACY, "s3:GetObject", key) == "deny"
        assert kms(policies, PRIVACY, "kms:Decrypt", key) == "neutral"


def test_a_usage_reader_cannot_read_the_results_of_an_all_readers_query(policies: dict[str, Any]) -> None:
    """An `all` reader's query results may hold prompt text: they are in the other workgroup's prefix."""
    assert s3(policies, FINOPS, "s3:GetObject", USAGE_RESULT) == "allow"
    assert s3(policies, FINOPS, "s3:PutObject", USAGE_RESULT) == "allow"
    assert kms(policies, FINOPS, "kms:Decrypt", USAGE_RESULT) == "allow"
    assert s3(policies, FINOPS, "s3:GetObject", ALL_RESULT) == "deny"
    assert kms(policies, FINOPS, "kms:Decrypt", ALL_RESULT) == "neutral"
    for key in (USAGE_RESULT, ALL_RESULT):
        assert s3(policies, PRIVACY, "s3:GetObject", key) == "allow"
        assert s3(policies, PRIVACY, "s3:DeleteObject", key) == "deny"


def test_lake_formation_and_the_writers_reach_the_tables_prefix_only(policies: dict[str, Any],
                                                                     template: dict[str, Any]) -> None:
    location, optimizer = role_arn(template, "TablesLocationRole"), role_arn(template, "TablesOptimizerRole")
    processor = role_arn(template, "PipelineRole")
    for principal in (location, optimizer, processor):
        for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"):
            assert s3(policies, principal, action, TABLE_DATA) == "neutral"  # their IAM policies decide
        assert kms(policies, principal, "kms:Decrypt", TABLE_DATA) == "iam"
    for principal in (location, optimizer):
        for key in ("curated/tier=pod/dt=2026-12-01/hour=10/p.parquet", "data-capture/a/pod/x.jsonl", ALL_RESULT):
            assert s3(policies, principal, "s3:GetObject", key) == "deny", (principal, key)
            assert kms(policies, principal, "kms:Decrypt", key) == "neutral"
    assert s3(policies, processor, "s3:DeleteObject", "data-capture/a/pod/x.jsonl") == "deny"
    assert s3(policies, ADMIN, "s3:GetObject", TABLE_DATA) == "deny"


def test_the_capture_policys_retention_runs_daily_as_a_table_operation_with_only_audit_writes_added() -> None:
    layer = f"arn:aws:lambda:{REGION}:{ACCOUNT}:layer:capture-tables:3"
    stack, _ = build(tables_layer_arn=layer, row_retention_days=30)
    template = Template.from_stack(stack).to_json()
    [rule] = of_type(template, "AWS::Events::Rule").values()
    assert rule["Properties"]["ScheduleExpression"] == "cron(17 3 * * ? *)"
    [target] = rule["Properties"]["Targets"]
    assert json.loads(target["Input"]) == {"captureTablesRetention": {"olderThanDays": 30, "bucket": BUCKET}}
    statements = policy_of(template, "PipelineRole")
    audit = [s for s in statements if "audit/table-deletions/" in json.dumps(s["Resource"])]
    assert [s["Action"] for s in audit if "kms:" not in json.dumps(s["Action"])] == ["s3:PutObject"]
    # Without pyiceberg's layer nothing could run it: no rule.
    stack, _ = build(row_retention_days=30)
    assert of_type(Template.from_stack(stack).to_json(), "AWS::Events::Rule") == {}


def test_the_audit_bucket_is_locked_encrypted_and_the_retention_run_may_only_append_to_its_trail() -> None:
    """CaptureStorage's audit bucket: Object Lock with the configured mode and days, the capture key, versioned;
    the processor's role (the daily retention run) may put, read and list links under trail/, and nothing that
    would remove or unlock one (no delete, no retention change, no governance bypass)."""
    app = App()
    stack = Stack(app, "Storage", env=Environment(account=ACCOUNT, region=REGION))
    storage = CaptureStorage(stack, "Storage", capture_bucket_name=BUCKET, audit_bucket_name="audit-bucket",
                             audit_lock_mode="COMPLIANCE", audit_lock_retention_days=2555)
    pipeline = CapturePipeline(stack, "Pipeline", bucket=storage.capture_bucket, encryption_key=storage.key,
                               capture_prefixes=[storage.capture_prefix], output_prefix=storage.curated_prefix,
                               quarantine_prefix=storage.quarantine_prefix)
    CaptureTables(stack, "Tables", pipeline=pipeline, audit_trail=storage, row_retention_days=30,
                  tables_layer_arn=f"arn:aws:lambda:{REGION}:{ACCOUNT}:layer:capture-tables:3")
    template = Template.from_stack(stack).to_json()
    [audit] = [r["Properties"] for r in of_type(template, "AWS::S3::Bucket").values()
               if r["Properties"].get("BucketName") == "audit-bucket"]
    assert audit["ObjectLockEnabled"] is True
    assert audit["ObjectLockConfiguration"] == {"ObjectLockEnabled": "Enabled", "Rule": {
        "DefaultRetention": {"Mode": "COMPLIANCE", "Days": 2555}}}
    assert audit["VersioningConfiguration"] == {"Status": "Enabled"}
    [encryption] = audit["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert encryption["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms"
    assert audit["PublicAccessBlockConfiguration"]["RestrictPublicBuckets"] is True
    statements = policy_of(template, "PipelineRole")
    on_audit = [s for s in statements if "audit-bucket" in json.dumps(s["Resource"])]
    actions = {a for s in on_audit for a in _list(s["Action"])}
    assert actions == {"s3:PutObject", "s3:GetObject", "s3:GetObjectVersion", "s3:ListBucket", "s3:ListBucketVersions"}
    for statement in on_audit:
        for resource in _list(statement["Resource"]):
            assert resource in ("arn:aws:s3:::audit-bucket", "arn:aws:s3:::audit-bucket/trail/*")
    functions = of_type(template, "AWS::Lambda::Function").values()
    [variables] = [f["Properties"]["Environment"]["Variables"] for f in functions
                   if "ICEBERG_DATABASE" in f["Properties"].get("Environment", {}).get("Variables", {})]
    assert variables["AUDIT_TRAIL_BUCKET"] == "audit-bucket"


def test_the_audit_trail_prefix_is_the_runtime_s() -> None:
    from capture_core.trail import TRAIL_PREFIX
    from hyperpod_inference_iac.capture.capture_storage import AUDIT_TRAIL_PREFIX

    assert AUDIT_TRAIL_PREFIX == TRAIL_PREFIX


def test_the_erasure_prefixes_are_the_runtime_s() -> None:
    from capture_core.capture_tables import AUDIT_PREFIX
    from capture_core.erasure import ERASURE_AUDIT_PREFIX, REGISTER_PREFIX
    from hyperpod_inference_iac.capture.capture_storage import (
        ERASURE_RECORDS_PREFIX,
        ERASURE_REGISTER_PREFIX,
        TABLE_DELETIONS_PREFIX,
    )
    from hyperpod_inference_iac.capture.capture_tables import AUDIT_PREFIX as TABLES_AUDIT_PREFIX

    assert (ERASURE_REGISTER_PREFIX, ERASURE_RECORDS_PREFIX) == (REGISTER_PREFIX, ERASURE_AUDIT_PREFIX)
    assert TABLE_DELETIONS_PREFIX == AUDIT_PREFIX == TABLES_AUDIT_PREFIX


def test_the_erasure_role_names_its_principals_of_this_account() -> None:
    from hyperpod_inference_iac import CaptureEraser

    stack, tables = build()  # (one stack: each refused eraser is a construct of its own id)
    for index, (principals, code) in enumerate((
            ([], "CaptureEraser.NoPrincipals"), (["privacy"], "CaptureEraser.BadPrincipalArn"),
            (["arn:aws:iam::444455556666:role/privacy"], "CaptureEraser.PrincipalOtherAccount"))):
        with pytest.raises(ConfigError) as caught:
            CaptureEraser(stack, f"Eraser{index}", storage=tables.props.audit_trail or _storage(stack), tables=tables,
                          eraser_principals=principals)
        assert code in str(caught.value), caught.value


def _storage(stack: Stack) -> CaptureStorage:
    found = [child for child in stack.node.children if isinstance(child, CaptureStorage)]
    return found[0]


def test_a_bad_audit_lock_is_refused() -> None:
    app = App()
    stack = Stack(app, "Storage", env=Environment(account=ACCOUNT, region=REGION))
    with pytest.raises(ConfigError) as raised:
        CaptureStorage(stack, "Storage", capture_bucket_name=BUCKET, audit_lock_mode="governance",
                       audit_lock_retention_days=0)
    text = str(raised.value)
    assert "[CaptureStorage.BadAuditLockMode] audit_lock_mode" in text
    assert "[CaptureStorage.RetentionOutOfRange] audit_lock_retention_days" in text
