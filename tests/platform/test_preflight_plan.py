"""The default platform's preflight plan (cdk.out/preflight-plan.json, written by the synth) holds what the stacks will
ask of the account, and the whole preflight over it passes against recorded responses of an account that has
everything and a stand-in cluster whose CRDs have every prose field (and fails on one that lacks them)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from hyperpod_inference_iac.charts.crd_schema import PLURALS, SCHEMA_VERSIONS, crd_schema, vendored_schema
from hyperpod_inference_iac.cluster.prose_fields import addon_rows
from hyperpod_inference_iac.preflight import PLAN_FILE, Outcome, PreflightPlan, run_preflight
from tests.support.synth import Assembly
from tests.unit.test_preflight import ACCOUNT, KubeStandIn, StubSession, _list_price


@pytest.fixture(scope="module")
def plan(assembly: Assembly) -> PreflightPlan:
    written = PreflightPlan.from_json((assembly.directory / PLAN_FILE).read_text())
    return written.with_assembly(assembly.directory, assembly.directory / "dist")


def test_the_plan_names_every_stack_s_bootstrap_need_and_cloudformation_s_role(plan: PreflightPlan) -> None:
    assert {need.stack for need in plan.bootstrap} == {"llm-platform-storage", "llm-platform-cluster"}
    assert plan.lake_formation_principals == (
        f"arn:aws:iam::{ACCOUNT}:role/cdk-hnb659fds-cfn-exec-role-{ACCOUNT}-us-west-2",)


def test_the_plan_holds_every_node_group_at_its_maximum_and_every_hyperpod_group(plan: PreflightPlan) -> None:
    by_service = {(need.service, need.instance_type, need.count) for need in plan.instances}
    assert ("ec2", "m6i.large", 4) in by_service  # the system nodes
    assert ("ec2", "g6e.12xlarge", 4) in by_service  # config/default.yaml's GPU group, maxSize 4
    assert ("sagemaker", "ml.g5.12xlarge", 2) in by_service


def test_the_plan_holds_the_prices_the_cost_sampler_is_given(plan: PreflightPlan) -> None:
    """config/default.yaml's costs: the g6e node group by its instance price, the HyperPod group by its own."""
    assert {(p.service, p.instance_type, p.usd_per_node_hour, p.group) for p in plan.prices} == {
        ("ec2", "g6e.12xlarge", 10.49, "gpu-g6e"), ("sagemaker", "ml.g5.12xlarge", 7.09, "inference-g5")}


def test_every_addon_key_the_platform_sets_is_a_prose_row(plan: PreflightPlan) -> None:
    assert plan.addon_configuration is not None
    rows = {".".join(row.path) for row in addon_rows()}
    assert _leaves(plan.addon_configuration) <= rows


def test_the_manifests_to_dry_run_are_the_operator_s_custom_resources_of_dist(plan: PreflightPlan) -> None:
    kinds = {manifest["kind"] for manifest in plan.manifests}
    assert {"InferenceEndpointConfig", "JumpStartModel", "InferenceGatewayConfig"} <= kinds


def _leaves(value: Any, prefix: str = "") -> set[str]:
    if isinstance(value, Mapping):
        return {leaf for key, child in value.items() for leaf in _leaves(child, f"{prefix}{key}.")}
    return {prefix.rstrip(".")}


def _schema_of(configuration: Mapping[str, Any]) -> dict[str, Any]:
    """A closed schema declaring exactly the prose rows (as an add-on version written as the guide says would)."""
    schema: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": {}}
    for row in addon_rows():
        node, value = schema, configuration
        for key in row.path:
            value = value.get(key, {}) if isinstance(value, Mapping) else {}
            node = node["properties"].setdefault(key, {"type": "object", "additionalProperties": False,
                                                       "properties": {}})
        if not isinstance(value, Mapping):
            node.clear()
            node["type"] = {bool: "boolean", str: "string"}.get(type(value), "string")
    return schema


def _account(session: StubSession, plan: PreflightPlan, endpoint: str) -> None:
    """Recorded responses of an account that has everything the plan asks for, in the order the preflight asks."""
    session.caller()
    session.stub("ssm").add_response("get_parameter", {"Parameter": {"Value": "30"}})
    session.stub("lakeformation").add_response("get_data_lake_settings", {"DataLakeSettings": {"DataLakeAdmins": [
        {"DataLakePrincipalIdentifier": principal} for principal in plan.lake_formation_principals]}})
    session.stub("lambda").add_response("get_layer_version_by_arn", {"LayerVersionArn": plan.tables_layer_arn})
    session.stub("ec2").add_response("describe_instance_types", {"InstanceTypes": [
        {"InstanceType": "m6i.large", "VCpuInfo": {"DefaultVCpus": 2}},
        {"InstanceType": "g6e.12xlarge", "VCpuInfo": {"DefaultVCpus": 48}}]})
    quotas = session.stub("service-quotas")
    quotas.add_response("get_service_quota", {"Quota": {"QuotaCode": "L-1216C47A", "Value": 640.0}})
    quotas.add_response("get_service_quota", {"Quota": {"QuotaCode": "L-DB2E81BA", "Value": 960.0}})
    quotas.add_response("list_service_quotas", {"Quotas": [
        {"QuotaName": "ml.g5.12xlarge for cluster usage", "QuotaCode": "L-AAAA1111", "Value": 4.0}]})
    session.stub("route53").add_response("get_hosted_zone", {"HostedZone": {
        "Id": f"/hostedzone/{plan.hosted_zone_id}", "Name": f"{plan.zone_name}.", "CallerReference": "r"}})
    session.stub("acm").add_response("describe_certificate", {"Certificate": {
        "CertificateArn": plan.certificate_arn, "DomainName": f"*.{plan.zone_name}", "Status": "ISSUED"}})
    eks = session.stub("eks")
    eks.add_response("describe_addon_versions", {"addons": [{"addonVersions": [{"addonVersion": plan.addon_version}]}]})
    eks.add_response("describe_addon_configuration", {
        "configurationSchema": json.dumps(_schema_of(plan.addon_configuration or {}))})
    eks.add_response("describe_cluster", {"cluster": {"endpoint": endpoint, "certificateAuthority": {"data": ""}}})
    _list_price(session, "g6e.12xlarge", "10.4926000000")


def _cluster(schema: Any) -> KubeStandIn:
    return KubeStandIn({PLURALS[kind]: (SCHEMA_VERSIONS[kind], schema(kind)) for kind in PLURALS})


def test_the_preflight_of_the_default_platform_passes_on_an_account_that_has_everything(plan: PreflightPlan) -> None:
    session, cluster = StubSession(), _cluster(crd_schema)
    try:
        _account(session, plan, cluster.endpoint)
        report = run_preflight(plan, session, docker=lambda: True)
    finally:
        cluster.close()
    assert report.exit_code == 0, report.text()
    assert {r.name for r in report.results if r.outcome is Outcome.PASS} == {r.name for r in report.results}
    session.assert_no_pending()


def test_a_cluster_whose_operator_lacks_the_prose_fields_fails_before_anything_is_applied(
        plan: PreflightPlan) -> None:
    """The vendored CRDs without the overlays, and no InferenceGatewayConfig kind: what an older add-on installs."""
    session, cluster = StubSession(), _cluster(lambda kind: vendored_schema(kind) if kind != "InferenceGatewayConfig"
                                               else None)
    try:
        _account(session, plan, cluster.endpoint)
        report = run_preflight(plan, session, docker=lambda: True)
    finally:
        cluster.close()
    assert report.exit_code == 2
    assert [r.name for r in report.failed] == ["crd-fields", "dry-run"]
    assert "spec.inferenceGateway" in report.of("crd-fields").detail
    assert "inferencegatewayconfigs.inference.sagemaker.aws.amazon.com is not installed" in \
        report.of("crd-fields").detail
    assert "strict decoding error" in report.of("dry-run").detail
