"""The preflight against recorded AWS responses (botocore Stubber) and a stand-in Kubernetes API on loopback: every
check in both outcomes, and no traceback without credentials."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.loaders import create_loader
from botocore.stub import Stubber

from hyperpod_inference_iac.charts.crd_schema import crd_schema, vendored_schema
from hyperpod_inference_iac.preflight import (
    DEPLOY_TIME,
    PLAN_FILE,
    BootstrapNeed,
    InstanceNeed,
    KubeApi,
    Outcome,
    PreflightPlan,
    PriceNeed,
    _Aws,
    _Cluster,
    bootstrap_needs,
    check_addon_configuration,
    check_addon_version,
    check_bootstrap,
    check_certificate,
    check_crd_fields,
    check_dry_run,
    check_ec2_quotas,
    check_hosted_zone,
    check_hyperpod_quotas,
    check_lake_formation_admin,
    check_prices,
    check_sidecar_image,
    check_tables_layer,
    covers,
    deploy_time_placeholders,
    ec2_quota_of,
    main,
    operator_manifests,
    run_preflight,
)

ACCOUNT, REGION = "111122223333", "us-west-2"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/deploy"
LAYER = f"arn:aws:lambda:{REGION}:{ACCOUNT}:layer:capture-tables:3"
CERT = f"arn:aws:acm:{REGION}:{ACCOUNT}:certificate/6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
ADDON = "amazon-sagemaker-hyperpod-inference"
DIGEST = "sha256:" + "ab" * 32
IMAGE = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/capture-sidecar@{DIGEST}"
CONFIGURATION = {"executionRoleArn": {"Fn::GetAtt": ["ExecutionRole", "Arn"]}, "tlsCertificateS3Bucket": {"Ref": "B"},
                 "alb": {"enabled": True}, "inferenceGateway": {"enabled": True}}
SCHEMA = {"type": "object", "additionalProperties": False, "required": ["executionRoleArn", "tlsCertificateS3Bucket"],
          "properties": {"executionRoleArn": {"type": "string", "pattern": "^arn:aws:iam::[0-9]{12}:role/.+$"},
                         "tlsCertificateS3Bucket": {"type": "string", "pattern": "^[a-z0-9.-]{3,63}$"},
                         "alb": {"type": "object", "properties": {"enabled": {"type": "boolean"}}},
                         "inferenceGateway": {"type": "object", "properties": {"enabled": {"type": "boolean"}}}}}
MODEL = {"apiVersion": "inference.sagemaker.aws.amazon.com/v1", "kind": "InferenceEndpointConfig",
         "metadata": {"name": "llama", "namespace": "inference"},
         "spec": {"modelName": "llama", "inferenceGateway": {"enabled": True, "name": "igw"}}}


# One botocore data loader for every test's session: it keeps each service's model once parsed (EC2's alone is
# 0.2 s of CPU to parse), where a new session's own loader would parse them again in each test.
_MODELS = create_loader()


class StubSession:
    """A boto3 session whose clients are stubbed (each with its Stubber, activated)."""

    def __init__(self) -> None:
        self.session = boto3.Session(aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret",
                                     region_name=REGION)
        self.session._session.register_component("data_loader", _MODELS)
        self.clients: dict[str, Any] = {}
        self.stubs: dict[str, Stubber] = {}
        self.regions: dict[str, str | None] = {}  # the region each client was asked for

    def stub(self, service: str) -> Stubber:
        if service not in self.stubs:
            self.clients[service] = self.session.client(service, region_name=REGION)  # type: ignore[call-overload]
            self.stubs[service] = Stubber(self.clients[service])
            self.stubs[service].activate()
        return self.stubs[service]

    def client(self, service_name: str, region_name: str | None = None) -> Any:
        self.stub(service_name)
        self.regions[service_name] = region_name
        return self.clients[service_name]

    def get_credentials(self) -> Any:
        return self.session.get_credentials()

    def caller(self, arn: str = f"arn:aws:sts::{ACCOUNT}:assumed-role/deploy/ci") -> None:
        self.stub("sts").add_response("get_caller_identity", {"UserId": "AROAEXAMPLE:ci", "Account": ACCOUNT,
                                                              "Arn": arn})

    def assert_no_pending(self) -> None:
        for stub in self.stubs.values():
            stub.assert_no_pending_responses()


@pytest.fixture
def aws() -> Iterator[tuple[StubSession, _Aws]]:
    session = StubSession()
    yield session, _Aws(session, REGION)
    session.assert_no_pending()


def plan(**changes: Any) -> PreflightPlan:
    return PreflightPlan(account=ACCOUNT, region=REGION, **changes)


# --- bootstrap -----------------------------------------------------------------------------------------------------

BOOTSTRAP = (BootstrapNeed("llm-platform-storage", "/cdk-bootstrap/hnb659fds/version", 6),
             BootstrapNeed("llm-platform-cluster", "/cdk-bootstrap/hnb659fds/version", 21))


def _version(session: StubSession, value: str) -> None:
    session.stub("ssm").add_response("get_parameter", {"Parameter": {"Name": "/cdk-bootstrap/hnb659fds/version",
                                                                     "Type": "String", "Value": value}},
                                     {"Name": "/cdk-bootstrap/hnb659fds/version"})


def test_bootstrap_passes_at_the_highest_version_any_stack_needs(aws: tuple[StubSession, _Aws]) -> None:
    session, client = aws
    _version(session, "30")
    result = check_bootstrap(plan(bootstrap=BOOTSTRAP), client)
    assert result.outcome is Outcome.PASS and "needs >= 21" in result.detail


def test_bootstrap_fails_below_what_a_stack_needs(aws: tuple[StubSession, _Aws]) -> None:
    session, client = aws
    _version(session, "20")
    result = check_bootstrap(plan(bootstrap=BOOTSTRAP), client)
    assert result.outcome is Outcome.FAIL and "is 20" in result.detail and "cdk bootstrap aws://" in result.fix


def test_bootstrap_fails_when_the_account_is_not_bootstrapped(aws: tuple[StubSession, _Aws]) -> None:
    session, client = aws
    session.stub("ssm").add_client_error("get_parameter", "ParameterNotFound")
    result = check_bootstrap(plan(bootstrap=BOOTSTRAP), client)
    assert result.outcome is Outcome.FAIL and "not bootstrapped" in result.detail


def test_bootstrap_needs_come_from_the_cloud_assembly(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps({"artifacts": {
        "s": {"type": "aws:cloudformation:stack", "properties": {
            "requiresBootstrapStackVersion": 6, "bootstrapStackVersionSsmParameter": "/cdk-bootstrap/abc/version"}},
        "tree": {"type": "cdk:tree"}}}))
    assert bootstrap_needs(tmp_path) == (BootstrapNeed("s", "/cdk-bootstrap/abc/version", 6),)


# --- Lake Formation, tables layer -----------------------------------------------------------------------------------

def _admins(session: StubSession, *admins: str) -> None:
    session.stub("lakeformation").add_response("get_data_lake_settings", {"DataLakeSettings": {
        "DataLakeAdmins": [{"DataLakePrincipalIdentifier": admin} for admin in admins]}})


def test_lake_formation_admin_passes_for_the_assumed_roles_role(aws: tuple[StubSession, _Aws]) -> None:
    session, client = aws
    session.caller()
    _admins(session, ROLE)
    assert check_lake_formation_admin(plan(lake_formation_admin=True), client).outcome is Outcome.PASS


def test_lake_formation_admin_fails_for_another_role(aws: tuple[StubSession, _Aws]) -> None:
    session, client = aws
    session.caller()
    _admins(session, f"arn:aws:iam::{ACCOUNT}:role/someone-else")
    result = check_lake_formation_admin(plan(lake_formation_admin=True), client)
    assert result.outcome is Outcome.FAIL and ROLE in result.detail and "put-data-lake-settings" in result.fix


EXEC_ROLE = f"arn:aws:iam::{ACCOUNT}:role/cdk-hnb659fds-cfn-exec-role-{ACCOUNT}-{REGION}"


def test_lake_formation_admin_is_cloudformation_s_execution_role_when_the_assembly_names_it(
        aws: tuple[StubSession, _Aws], tmp_path: Path) -> None:
    session, client = aws
    (tmp_path / "manifest.json").write_text(json.dumps({"artifacts": {"s": {
        "type": "aws:cloudformation:stack", "properties": {
            "cloudFormationExecutionRoleArn": "arn:${AWS::Partition}:iam::111122223333:role/cdk-hnb659fds-cfn-exec-"
                                              "role-111122223333-us-west-2"}}}}))
    checked = plan(lake_formation_admin=True).with_assembly(tmp_path)
    assert checked.lake_formation_principals == (EXEC_ROLE,)
    _admins(session, ROLE)  # the deploying role is one, CloudFormation's is not: the grants would still fail
    result = check_lake_formation_admin(checked, client)
    assert result.outcome is Outcome.FAIL and EXEC_ROLE in result.detail and EXEC_ROLE in result.fix
    _admins(session, ROLE, EXEC_ROLE)
    assert check_lake_formation_admin(checked, client).outcome is Outcome.PASS


def test_tables_layer_passes_when_it_exists(aws: tuple[StubSession, _Aws]) -> None:
    session, client = aws
    session.stub("lambda").add_response("get_layer_version_by_arn", {"LayerVersionArn": LAYER, "Version": 3},
                                        {"Arn": LAYER})
    assert check_tables_layer(plan(tables_layer_arn=LAYER), client).outcome is Outcome.PASS


def test_tables_layer_fails_when_it_does_not_exist(aws: tuple[StubSession, _Aws]) -> None:
    session, client = aws
    session.stub("lambda").add_client_error("get_layer_version_by_arn", "ResourceNotFoundException",
                                            http_status_code=404)
    result = check_tables_layer(plan(tables_layer_arn=LAYER), client)
    assert result.outcome is Outcome.FAIL and "capture.tablesLayerArn" in result.fix


# --- quotas --------------------------------------------------------------------------------------------------------

EC2_NEEDS = (InstanceNeed("ec2", "g6e.12xlarge", 2, "gpu"), InstanceNeed("ec2", "m6i.large", 4, "system"))


def _ec2(session: StubSession, g_quota: float) -> None:
    session.stub("ec2").add_response("describe_instance_types", {"InstanceTypes": [
        {"InstanceType": "g6e.12xlarge", "VCpuInfo": {"DefaultVCpus": 48}},
        {"InstanceType": "m6i.large", "VCpuInfo": {"DefaultVCpus": 2}}]})
    quotas = session.stub("service-quotas")
    quotas.add_response("get_service_quota", {"Quota": {"QuotaCode": "L-1216C47A", "Value": 64.0}},
                        {"ServiceCode": "ec2", "QuotaCode": "L-1216C47A"})
    quotas.add_response("get_service_quota", {"Quota": {"QuotaCode": "L-DB2E81BA", "Value": g_quota}},
                        {"ServiceCode": "ec2", "QuotaCode": "L-DB2E81BA"})


def test_ec2_quotas_pass_when_the_families_cover_the_maximum_size(aws: tuple[StubSession, _Aws]) -> None:
    session, client = aws
    _ec2(session, 96.0)
    assert check_ec2_quotas(plan(instances=EC2_NEEDS), client).outcome is Outcome.PASS


def test_ec2_quotas_fail_below_the_vcpus_at_maximum_size(aws: tuple[StubSession, _Aws]) -> None:
    session, client = aws
    _ec2(session, 64.0)
    result = check_ec2_quotas(plan(instances=EC2_NEEDS), client)
    assert result.outcome is Outcome.FAIL and "64 vCPUs" in result.detail and "need 96" in result.detail


def test_ec2_quota_families() -> None:
    assert ec2_quota_of("g6e.12xlarge")[0] == "L-DB2E81BA"
    assert ec2_quota_of("p5.48xlarge")[0] == "L-417A185B"
    assert ec2_quota_of("inf2.xlarge")[0] == "L-1945791B"
    assert ec2_quota_of("dl1.24xlarge")[0] == "L-6E869C2A"
    assert ec2_quota_of("m6i.large")[0] == ec2_quota_of("c7i.large")[0] == "L-1216C47A"


def _sagemaker(session: StubSession, value: float) -> None:
    session.stub("service-quotas").add_response("list_service_quotas", {"Quotas": [
        {"QuotaName": "ml.g6e.12xlarge for cluster usage", "QuotaCode": "L-AAAA1111", "Value": value},
        {"QuotaName": "ml.g5.8xlarge for endpoint usage", "QuotaCode": "L-BBBB2222", "Value": 10.0}]},
        {"ServiceCode": "sagemaker"})


def test_hyperpod_quota_passes(aws: tuple[StubSession, _Aws]) -> None:
    session, client = aws
    _sagemaker(session, 4.0)
    result = check_hyperpod_quotas(plan(instances=(InstanceNeed("sagemaker", "ml.g6e.12xlarge", 2, "g"),)), client)
    assert result.outcome is Outcome.PASS


def test_hyperpod_quota_fails_below_the_count_and_for_an_unoffered_type(aws: tuple[StubSession, _Aws]) -> None:
    session, client = aws
    _sagemaker(session, 1.0)
    result = check_hyperpod_quotas(plan(instances=(InstanceNeed("sagemaker", "ml.g6e.12xlarge", 2, "g"),
                                                   InstanceNeed("sagemaker", "ml.g5.8xlarge", 1, "h"))), client)
    assert result.outcome is Outcome.FAIL
    assert "is 1, the instance groups need 2" in result.detail and "ml.g5.8xlarge for cluster usage" in result.detail


# --- zone and certificate --------------------------------------------------------------------------------------------

def _zone(session: StubSession, name: str) -> None:
    session.stub("route53").add_response("get_hosted_zone", {"HostedZone": {
        "Id": "/hostedzone/Z0123456789ABC", "Name": name, "CallerReference": "r"}}, {"Id": "Z0123456789ABC"})


def test_hosted_zone_passes_with_its_name(aws: tuple[StubSession, _Aws]) -> None:
    session, client = aws
    _zone(session, "inference.example.com.")
    result = check_hosted_zone(plan(hosted_zone_id="Z0123456789ABC", zone_name="inference.example.com"), client)
    assert result.outcome is Outcome.PASS


def test_hosted_zone_fails_with_another_name_or_none(aws: tuple[StubSession, _Aws]) -> None:
    session, client = aws
    _zone(session, "other.example.com.")
    session.stub("route53").add_client_error("get_hosted_zone", "NoSuchHostedZone", http_status_code=404)
    checked = plan(hosted_zone_id="Z0123456789ABC", zone_name="inference.example.com")
    assert "not inference.example.com" in check_hosted_zone(checked, client).detail
    assert "does not exist" in check_hosted_zone(checked, client).detail


def _certificate(session: StubSession, status: str, *names: str) -> None:
    session.stub("acm").add_response("describe_certificate", {"Certificate": {
        "CertificateArn": CERT, "DomainName": names[0], "SubjectAlternativeNames": list(names), "Status": status}},
        {"CertificateArn": CERT})


NAMES = ("llama.inference.example.com", "inference.example.com")


def test_certificate_passes_issued_and_covering_every_name(aws: tuple[StubSession, _Aws]) -> None:
    session, client = aws
    _certificate(session, "ISSUED", "inference.example.com", "*.inference.example.com")
    assert check_certificate(plan(certificate_arn=CERT, certificate_names=NAMES), client).outcome is Outcome.PASS


def test_certificate_fails_pending_or_not_covering(aws: tuple[StubSession, _Aws]) -> None:
    session, client = aws
    _certificate(session, "PENDING_VALIDATION", "*.example.com")
    result = check_certificate(plan(certificate_arn=CERT, certificate_names=NAMES), client)
    assert result.outcome is Outcome.FAIL and "PENDING_VALIDATION" in result.detail
    assert "does not cover llama.inference.example.com (it has" in result.detail  # (the wildcard covers the other)


def test_certificate_fails_in_another_account_or_region_without_asking(aws: tuple[StubSession, _Aws]) -> None:
    _, client = aws
    result = check_certificate(plan(certificate_arn=CERT.replace(REGION, "us-east-1")), client)
    assert result.outcome is Outcome.FAIL and "not in account" in result.detail


def test_a_wildcard_covers_one_label_only() -> None:
    assert covers(["*.example.com"], "a.example.com")
    assert not covers(["*.example.com"], "a.b.example.com")
    assert not covers(["*.example.com"], "example.com")
    assert covers(["Example.com."], "example.com")


# --- add-on ---------------------------------------------------------------------------------------------------------

ADDON_PLAN = {"addon_name": ADDON, "addon_version": "v2.0.0-eksbuild.2", "kubernetes_version": "1.34"}


def _addon_versions(session: StubSession, *versions: str) -> None:
    session.stub("eks").add_response("describe_addon_versions", {"addons": [
        {"addonName": ADDON, "addonVersions": [{"addonVersion": v} for v in versions]}]},
        {"addonName": ADDON, "kubernetesVersion": "1.34"})


def test_addon_version_passes_when_offered(aws: tuple[StubSession, _Aws]) -> None:
    session, client = aws
    _addon_versions(session, "v1.4.0-eksbuild.1", "v2.0.0-eksbuild.2")
    assert check_addon_version(plan(**ADDON_PLAN), client).outcome is Outcome.PASS


def test_addon_version_fails_when_not_offered(aws: tuple[StubSession, _Aws]) -> None:
    session, client = aws
    _addon_versions(session, "v1.4.0-eksbuild.1")
    result = check_addon_version(plan(**ADDON_PLAN), client)
    assert result.outcome is Outcome.FAIL and "offered: v1.4.0-eksbuild.1" in result.detail


def _addon_schema(session: StubSession, schema: Mapping[str, Any]) -> None:
    session.stub("eks").add_response("describe_addon_configuration", {
        "addonName": ADDON, "addonVersion": "v2.0.0-eksbuild.2", "configurationSchema": json.dumps(schema)},
        {"addonName": ADDON, "addonVersion": "v2.0.0-eksbuild.2"})


def test_addon_configuration_passes_with_deploy_time_values_in_place(aws: tuple[StubSession, _Aws]) -> None:
    session, client = aws
    _addon_schema(session, SCHEMA)
    configuration = deploy_time_placeholders(CONFIGURATION)
    assert configuration["tlsCertificateS3Bucket"] == DEPLOY_TIME
    result = check_addon_configuration(plan(**ADDON_PLAN, addon_configuration=configuration), client)
    assert result.outcome is Outcome.PASS and "prose keys confirmed" in result.detail


def test_addon_configuration_fails_on_a_key_the_schema_refuses(aws: tuple[StubSession, _Aws]) -> None:
    session, client = aws
    schema = copy.deepcopy(SCHEMA)
    del schema["properties"]["inferenceGateway"]  # an add-on version without the gateway
    _addon_schema(session, schema)
    result = check_addon_configuration(
        plan(**ADDON_PLAN, addon_configuration=deploy_time_placeholders(CONFIGURATION)), client)
    assert result.outcome is Outcome.FAIL and "'inferenceGateway' was unexpected" in result.detail
    assert "describe-addon-configuration" in result.fix


def test_addon_configuration_fails_on_a_prose_key_an_open_schema_does_not_declare(
        aws: tuple[StubSession, _Aws]) -> None:
    session, client = aws
    schema = copy.deepcopy(SCHEMA)
    schema["properties"]["alb"] = {"type": "object"}  # open: accepts anything, declares nothing
    _addon_schema(session, schema)
    result = check_addon_configuration(
        plan(**ADDON_PLAN, addon_configuration=deploy_time_placeholders(CONFIGURATION)), client)
    assert result.outcome is Outcome.FAIL and "alb.enabled (from prose" in result.detail


# --- the cluster: a stand-in Kubernetes API on loopback --------------------------------------------------------------

def _unknown_fields(value: Any, schema: Mapping[str, Any], path: str) -> Iterator[str]:
    """What a strict decoder of a structural schema refuses: keys a closed object does not declare."""
    if not isinstance(value, Mapping) or schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    properties = schema.get("properties")
    if properties is None:
        return
    for key, child in value.items():
        if key not in properties:
            yield f"{path}.{key}".lstrip(".")
        else:
            yield from _unknown_fields(child, properties[key], f"{path}.{key}")


class KubeStandIn:
    """A tiny API server: GET a CRD, POST a dry-run create judged strictly against that CRD's schema. ``schema``: one
    schema for every kind, or by plural (``{"inferenceendpointconfigs": (version, schema)}``)."""

    def __init__(self, schema: Mapping[str, Any], *, namespaces: tuple[str, ...] = ("inference", "default"),
                 status: int | None = None) -> None:
        self.schemas: Mapping[str, tuple[str, Mapping[str, Any]]] = (
            schema if all(isinstance(v, tuple) for v in schema.values()) and schema else {})
        self.schema, self.namespaces, self.status = schema, namespaces, status
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, body: Mapping[str, Any]) -> None:
                raw = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:
                stand_in.requests.append(("GET", self.path, dict(self.headers)))
                if stand_in.status:
                    return self._send(stand_in.status, {"message": "forbidden"})
                version, schema = stand_in.of(self.path.rsplit("/", 1)[1].split(".")[0])
                if schema is None:
                    return self._send(404, {"kind": "Status", "reason": "NotFound", "message": "not found"})
                crd = {"spec": {"versions": [{"name": version, "schema": {"openAPIV3Schema": schema}}]}}
                return self._send(200, crd)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stand_in.requests.append(("POST", self.path, dict(self.headers)))
                if stand_in.status:
                    return self._send(stand_in.status, {"message": "forbidden"})
                namespace = self.path.split("/namespaces/")[1].split("/")[0]
                if namespace not in stand_in.namespaces:
                    return self._send(404, {"kind": "Status", "reason": "NotFound", "message": "namespace not found",
                                            "details": {"name": namespace, "kind": "namespaces"}})
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                assert query == {"dryRun": ["All"], "fieldValidation": ["Strict"]}, query
                _, schema = stand_in.of(urllib.parse.urlsplit(self.path).path.rsplit("/", 1)[1])
                if schema is None:
                    return self._send(404, {"kind": "Status", "reason": "NotFound", "message": "no such resource"})
                unknown = list(_unknown_fields(body, schema, ""))
                if unknown:
                    return self._send(400, {"kind": "Status", "status": "Failure", "reason": "BadRequest", "code": 400,
                                            "message": f'{body["kind"]} in version "v1" cannot be handled as a '
                                                       f'{body["kind"]}: strict decoding error: unknown field '
                                                       f'"{unknown[0]}"'})
                return self._send(201, body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def of(self, plural: str) -> tuple[str, Mapping[str, Any] | None]:
        if not self.schemas:
            return "v1", self.schema
        return self.schemas.get(plural, ("v1", None))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def installed() -> Iterator[KubeStandIn]:
    """A cluster whose operator has the overlays' fields."""
    stand_in = KubeStandIn(crd_schema("InferenceEndpointConfig"))
    yield stand_in
    stand_in.close()


@pytest.fixture
def older() -> Iterator[KubeStandIn]:
    """A cluster whose operator has the vendored CRD only (no spec.inferenceGateway)."""
    stand_in = KubeStandIn(vendored_schema("InferenceEndpointConfig"), namespaces=("default",))
    yield stand_in
    stand_in.close()


def _cluster(session: StubSession, endpoint: str) -> None:
    session.stub("eks").add_response("describe_cluster", {"cluster": {
        "name": "llm-platform", "endpoint": endpoint, "certificateAuthority": {"data": ""}}}, {"name": "llm-platform"})


CLUSTER_PLAN = {"cluster_name": "llm-platform", "manifests": (MODEL,)}


def test_dry_run_and_crd_fields_pass_on_a_cluster_that_has_the_fields(aws: tuple[StubSession, _Aws],
                                                                      installed: KubeStandIn) -> None:
    session, client = aws
    _cluster(session, installed.endpoint)
    cluster, checked = _Cluster(), plan(**CLUSTER_PLAN)
    assert check_crd_fields(checked, client, cluster).outcome is Outcome.PASS
    result = check_dry_run(checked, client, cluster)
    assert result.outcome is Outcome.PASS, result.detail
    (post,) = [r for r in installed.requests if r[0] == "POST"]
    assert post[1].startswith("/apis/inference.sagemaker.aws.amazon.com/v1/namespaces/inference/"
                              "inferenceendpointconfigs?")
    assert post[2]["Authorization"].startswith("Bearer k8s-aws-v1.")


def test_dry_run_and_crd_fields_fail_on_a_cluster_without_the_prose_field(aws: tuple[StubSession, _Aws],
                                                                         older: KubeStandIn) -> None:
    session, client = aws
    _cluster(session, older.endpoint)
    cluster, checked = _Cluster(), plan(**CLUSTER_PLAN)
    fields = check_crd_fields(checked, client, cluster)
    assert fields.outcome is Outcome.FAIL and "has no spec.inferenceGateway (from prose" in fields.detail
    result = check_dry_run(checked, client, cluster)  # (in `default`: the workloads' namespace does not exist yet)
    assert result.outcome is Outcome.FAIL
    assert 'strict decoding error: unknown field "spec.inferenceGateway"' in result.detail


def test_a_forbidden_dry_run_says_which_permission(aws: tuple[StubSession, _Aws]) -> None:
    session, client = aws
    stand_in = KubeStandIn({}, status=403)
    try:
        _cluster(session, stand_in.endpoint)
        result = check_dry_run(plan(**CLUSTER_PLAN), client, _Cluster())
    finally:
        stand_in.close()
    assert result.outcome is Outcome.FAIL and "access entry" in result.fix


def test_the_cluster_checks_do_not_apply_before_the_cluster_exists(aws: tuple[StubSession, _Aws]) -> None:
    session, client = aws
    session.stub("eks").add_client_error("describe_cluster", "ResourceNotFoundException", http_status_code=404)
    cluster = _Cluster()
    assert check_dry_run(plan(**CLUSTER_PLAN), client, cluster).outcome is Outcome.NOT_APPLICABLE
    assert "does not exist yet" in check_crd_fields(plan(**CLUSTER_PLAN), client, cluster).detail


def test_the_bearer_token_never_goes_to_a_plain_http_endpoint_off_loopback() -> None:
    with pytest.raises(ValueError, match="must be https"):
        KubeApi("http://10.0.0.1", "token")
    KubeApi("https://ABC.gr7.us-west-2.eks.amazonaws.com", "token")


def test_operator_manifests_are_read_from_dist(tmp_path: Path) -> None:
    (tmp_path / "inference").mkdir()
    (tmp_path / "inference" / "model.yaml").write_text(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: inference}\n---\n" + json.dumps(MODEL) + "\n")
    assert list(operator_manifests(tmp_path)) == [MODEL]


# --- the sidecar image -----------------------------------------------------------------------------------------------

def test_a_prebuilt_sidecar_image_passes_when_its_digest_exists(aws: tuple[StubSession, _Aws]) -> None:
    session, client = aws
    session.stub("ecr").add_response("describe_images", {"imageDetails": [{"imageDigest": DIGEST}]}, {
        "registryId": ACCOUNT, "repositoryName": "capture-sidecar", "imageIds": [{"imageDigest": DIGEST}]})
    assert check_sidecar_image(plan(sidecar_image=IMAGE), client).outcome is Outcome.PASS


def test_a_prebuilt_sidecar_image_fails_when_its_digest_is_missing(aws: tuple[StubSession, _Aws]) -> None:
    session, client = aws
    session.stub("ecr").add_client_error("describe_images", "ImageNotFoundException")
    result = check_sidecar_image(plan(sidecar_image=IMAGE), client)
    assert result.outcome is Outcome.FAIL and "capture.sidecarImage" in result.fix


def test_the_sidecar_asset_needs_docker(aws: tuple[StubSession, _Aws]) -> None:
    _, client = aws
    needs = plan(needs_sidecar_image=True)
    assert check_sidecar_image(needs, client, docker=lambda: True).outcome is Outcome.PASS
    result = check_sidecar_image(needs, client, docker=lambda: False)
    assert result.outcome is Outcome.FAIL and "capture.sidecarImage" in result.fix
    assert check_sidecar_image(plan(), client).outcome is Outcome.NOT_APPLICABLE


# --- the whole run, the command, and credentials ---------------------------------------------------------------------

def test_every_check_is_not_applicable_for_an_empty_plan(aws: tuple[StubSession, _Aws]) -> None:
    session, _ = aws
    session.caller()
    report = run_preflight(plan(), session)
    assert {r.outcome for r in report.results} == {Outcome.NOT_APPLICABLE} and report.exit_code == 0
    assert len(report.results) == 13


def test_access_denied_fails_that_check_with_the_policy_to_attach(aws: tuple[StubSession, _Aws]) -> None:
    session, _ = aws
    session.caller()
    session.stub("lambda").add_client_error("get_layer_version_by_arn", "AccessDeniedException", http_status_code=403)
    report = run_preflight(plan(tables_layer_arn=LAYER), session)
    layer = report.of("tables-layer")
    assert layer.outcome is Outcome.FAIL and "lambda:GetLayerVersion" in layer.detail
    assert "PreflightPolicy" in layer.fix and report.exit_code == 2


def _write_plan(tmp_path: Path, checked: PreflightPlan) -> Path:
    (tmp_path / PLAN_FILE).write_text(checked.to_json())
    return tmp_path


def test_the_plan_survives_its_file(tmp_path: Path) -> None:
    checked = plan(bootstrap=BOOTSTRAP, instances=EC2_NEEDS, certificate_names=NAMES, manifests=(MODEL,),
                   addon_configuration={"a": 1})
    assert PreflightPlan.from_json(checked.to_json()) == checked


def test_main_exits_2_on_a_failure_and_prints_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     aws: tuple[StubSession, _Aws]) -> None:
    session, _ = aws
    session.caller()
    session.stub("lambda").add_client_error("get_layer_version_by_arn", "ResourceNotFoundException",
                                            http_status_code=404)
    out = _write_plan(tmp_path, plan(tables_layer_arn=LAYER))
    assert main(["--cdk-out", str(out), "--dist", str(tmp_path / "none")], session=session) == 2
    printed = capsys.readouterr().out
    assert "[FAIL] tables-layer" in printed and "fix: build and publish the layer" in printed and "1 fail" in printed


@pytest.mark.parametrize("code", ["ExpiredToken", "InvalidClientTokenId"])
def test_expired_or_invalid_credentials_end_in_one_line(code: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    session = StubSession()
    session.stub("sts").add_client_error("get_caller_identity", code, http_status_code=403)
    assert main(["--cdk-out", str(_write_plan(tmp_path, plan()))], session=session) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1 and code in captured.err


def test_a_missing_plan_says_to_synthesize(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--cdk-out", str(tmp_path)], session=StubSession()) == 2
    assert "run `make synth` first" in capsys.readouterr().err


@pytest.mark.slow
def test_the_command_without_credentials_prints_one_line_and_no_traceback(tmp_path: Path) -> None:
    """``python -m hyperpod_inference_iac.preflight`` as CI runs it, with no credentials anywhere."""
    _write_plan(tmp_path, plan(tables_layer_arn=LAYER))
    env = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
    env |= {"AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
            "AWS_EC2_METADATA_DISABLED": "true"}
    done = subprocess.run([sys.executable, "-m", "hyperpod_inference_iac.preflight", "--cdk-out", str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    lines = [line for line in done.stderr.splitlines() if line.startswith("preflight:")]
    assert len(lines) == 1 and "no usable AWS credentials" in lines[0]


def test_skip_cluster_leaves_the_cluster_checks_out_saying_so(aws: tuple[StubSession, _Aws]) -> None:
    session, _ = aws
    session.caller()
    report = run_preflight(plan(**CLUSTER_PLAN), session, cluster=False)
    for name in ("crd-fields", "dry-run"):
        assert report.of(name).outcome is Outcome.NOT_APPLICABLE and "--skip-cluster" in report.of(name).detail


def test_an_unreachable_endpoint_fails_naming_skip_cluster(aws: tuple[StubSession, _Aws]) -> None:
    session, _ = aws
    session.caller()
    _cluster(session, "http://127.0.0.1:9")  # (discard: nothing listens)
    report = run_preflight(plan(**CLUSTER_PLAN), session)
    for name in ("crd-fields", "dry-run"):
        assert report.of(name).outcome is Outcome.FAIL and "--skip-cluster" in report.of(name).fix


def test_an_unexpected_answer_fails_that_check_only(aws: tuple[StubSession, _Aws]) -> None:
    session, _ = aws
    session.caller()
    session.stub("eks").add_response("describe_addon_versions", {"addons": []})
    session.stub("eks").add_response("describe_addon_configuration", {"configurationSchema": "not json"})
    report = run_preflight(plan(addon_name=ADDON, addon_version="v2.0.0-eksbuild.2", kubernetes_version="1.34",
                                addon_configuration={"alb": {"enabled": True}}), session)
    assert report.of("addon-version").outcome is Outcome.FAIL and "offered: none" in report.of("addon-version").detail
    configuration = report.of("addon-configuration")
    assert configuration.outcome is Outcome.FAIL and "could not check: JSONDecodeError" in configuration.detail


# --- prices --------------------------------------------------------------------------------------------------------

def _list_price(session: StubSession, instance_type: str, *usd: str) -> None:
    products = [json.dumps({"product": {"attributes": {"instanceType": instance_type, "regionCode": REGION}},
                            "terms": {"OnDemand": {f"SKU{i}.TERM": {"priceDimensions": {f"SKU{i}.DIM": {
                                "unit": "Hrs", "pricePerUnit": {"USD": price}}}}}}}) for i, price in enumerate(usd)]
    filters = [{"Type": "TERM_MATCH", "Field": field, "Value": value} for field, value in (
        ("instanceType", instance_type), ("regionCode", REGION), ("operatingSystem", "Linux"), ("tenancy", "Shared"),
        ("preInstalledSw", "NA"), ("capacitystatus", "Used"))]
    session.stub("pricing").add_response("get_products", {"PriceList": products, "FormatVersion": "aws_v1"},
                                         {"ServiceCode": "AmazonEC2", "Filters": filters, "MaxResults": 10})


PRICES = (PriceNeed("ec2", "g6e.12xlarge", 10.49, "gpu-g6e"), PriceNeed("sagemaker", "ml.g5.12xlarge", 7.09,
                                                                         "inference-g5"))


def test_prices_pass_between_a_quarter_of_the_list_price_and_the_list_price(aws: tuple[StubSession, _Aws]) -> None:
    session, client = aws
    _list_price(session, "g6e.12xlarge", "10.4926000000")
    result = check_prices(plan(prices=PRICES), client)
    assert result.outcome is Outcome.PASS, result.line()
    assert "gpu-g6e (g6e.12xlarge): 10.49 USD/h, 100% of the list's 10.4926" in result.detail
    assert "inference-g5 (ml.g5.12xlarge): 7.09 USD/h, not compared (HyperPod)" in result.detail
    assert session.regions["pricing"] == "us-east-1"  # the Price List's endpoint, whatever the platform's region


def test_prices_fail_above_the_list_price_below_a_quarter_of_it_and_for_an_unlisted_type(
        aws: tuple[StubSession, _Aws]) -> None:
    session, client = aws
    _list_price(session, "g6e.12xlarge", "10.4926000000")
    _list_price(session, "g6e.48xlarge", "30.1311000000")
    _list_price(session, "p9.48xlarge")
    needs = (PriceNeed("ec2", "g6e.12xlarge", 13.5, "too-dear"), PriceNeed("ec2", "g6e.48xlarge", 3.77, "per-gpu"),
             PriceNeed("ec2", "p9.48xlarge", 50.0, "unlisted"))
    result = check_prices(plan(prices=needs), client)
    assert result.outcome is Outcome.FAIL
    assert "too-dear: 13.5 USD/h for g6e.12xlarge is above its on-demand list price in" in result.detail
    assert "per-gpu: 3.77 USD/h for g6e.48xlarge is 13% of its on-demand list price" in result.detail
    assert "unlisted: the Price List has no on-demand Linux price for p9.48xlarge" in result.detail
    assert "costs.instancePrices" in result.fix


def test_prices_do_not_apply_without_a_cost_per_team_and_round_trip_through_the_plan_file(
        aws: tuple[StubSession, _Aws]) -> None:
    assert check_prices(plan(), aws[1]).outcome is Outcome.NOT_APPLICABLE
    with_prices = plan(prices=PRICES)
    assert PreflightPlan.from_json(with_prices.to_json()) == with_prices


def test_the_price_list_is_asked_in_us_east_1_under_a_policy_held_to_it() -> None:
    from aws_cdk import App, Stack

    from hyperpod_inference_iac import PreflightPolicy
    from hyperpod_inference_iac.preflight import PRICE_LIST_REGION
    from hyperpod_inference_iac.security import preflight_policy

    assert preflight_policy.PRICE_LIST_REGION == PRICE_LIST_REGION == "us-east-1"
    stack = Stack(App(), "S", env={"account": ACCOUNT, "region": "eu-west-1"})
    policy = PreflightPolicy(stack, "Preflight")
    document = stack.resolve(policy.policy.document.to_json())
    (statement,) = [s for s in document["Statement"] if s.get("Sid") == "PriceList"]
    assert statement == {"Sid": "PriceList", "Effect": "Allow", "Action": "pricing:GetProducts", "Resource": "*",
                         "Condition": {"StringEquals": {"aws:RequestedRegion": "us-east-1"}}}
