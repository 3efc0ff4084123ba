"""Preflight: what no offline check can know, asked of the real account and cluster before a deploy, read-only.

``python -m hyperpod_inference_iac.preflight`` (after a synth: it reads ``cdk.out/`` and ``dist/``) or, from Python,
:func:`run_preflight` with a :class:`PreflightPlan`. Each check says pass, fail or not applicable, and how to fix a
failure; the command exits 2 on any failure. Missing, expired or refused credentials end in one line, never a
traceback. The IAM permissions it needs are :class:`~hyperpod_inference_iac.PreflightPolicy`'s (read-only).

Checks, in order (``docs/deploying.md`` says what each one guards):

* ``bootstrap``: the CDK bootstrap stack's version (SSM ``/cdk-bootstrap/<qualifier>/version``) is at least what
  the synthesized stacks require (``cdk.out/manifest.json``);
* ``lake-formation-admin``: the deploying role is a Lake Formation administrator (the capture tables' grants);
* ``tables-layer``: the capture tables' Lambda layer exists (``lambda:GetLayerVersionByArn``);
* ``quota-ec2`` / ``quota-hyperpod``: the EC2 vCPU quotas of the planned node groups' families at their maximum
  size, and the SageMaker HyperPod "<type> for cluster usage" quota of each instance group;
* ``hosted-zone`` / ``certificate``: the zone exists and has the configured name; the certificate is in the
  configured account and region, ``ISSUED``, and covers every endpoint name (a wildcard covers one label);
* ``addon-version`` / ``addon-configuration``: the inference add-on version exists for the cluster's Kubernetes
  version, and its configuration schema accepts the configuration the platform sets (``jsonschema``), every prose
  key of :data:`~hyperpod_inference_iac.cluster.prose_fields.PROSE_FIELDS` among them;
* ``crd-fields`` / ``dry-run``: the cluster's CRDs have every prose field, and a server-side dry run
  (``dryRun=All&fieldValidation=Strict``) accepts every operator custom resource of ``dist/`` (not applicable before
  the cluster exists);
* ``sidecar-image``: the prebuilt capture sidecar image exists in ECR by its digest, or Docker is available to build
  the image asset;
* ``prices``: each configured price of the cost per team (``costs.instancePrices``, a group's ``usdPerNodeHour``) of
  an EC2 node group's instance type lies between a quarter of its on-demand Linux list price in the region and that
  price (AWS Price List Query API, ``pricing:GetProducts`` in us-east-1): no discount makes a price higher than on
  demand, and none goes below a quarter of it (the deepest Savings Plan, EC2 Instance, is up to 72 % off), so a
  figure outside is a typo, another region's price or a per-GPU price. HyperPod instance groups' ``ml.`` prices are
  listed, not compared: the Price List's attributes for HyperPod cluster instances are not verified here
  (docs/usage-and-budgets.md, "Prices").

The Kubernetes client is ``urllib`` with the cluster's CA and an EKS bearer token (a presigned
``sts:GetCallerIdentity``, as ``aws eks get-token`` makes): the preflight needs two requests of the API, which do not
justify the ``kubernetes`` package.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import enum
import ipaddress
import json
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import jsonschema
import yaml

from hyperpod_inference_iac.cluster.prose_fields import ProseField, addon_rows, crd_rows

PLAN_FILE = "preflight-plan.json"
OPERATOR_GROUP_SUFFIX = "sagemaker.aws.amazon.com"
# A deploy-time value (a CloudFormation reference) in the add-on configuration: its form cannot be checked before the
# deploy, its presence and type can (schema errors about its pattern or format are not failures).
DEPLOY_TIME = "deploy-time-value"
_DEPLOY_TIME_ARN = "arn:aws:iam::000000000000:role/deploy-time-value"
_CREDENTIAL_CODES = {
    "ExpiredToken": "the AWS credentials have expired: refresh them (aws sso login, or assume the role again)",
    "ExpiredTokenException": "the AWS credentials have expired: refresh them (aws sso login, or assume the role "
                             "again)",
    "InvalidClientTokenId": "the AWS access key is not valid: check AWS_ACCESS_KEY_ID / the profile",
    "UnrecognizedClientException": "the AWS access key is not valid: check AWS_ACCESS_KEY_ID / the profile",
    "SignatureDoesNotMatch": "the AWS secret key does not match its access key: check the profile",
}
# botocore's exceptions for credentials it could not find or load (by name: botocore is imported only when used).
_NO_CREDENTIALS = {"NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError", "NoRegionError",
                   "ProfileNotFound", "SSOTokenLoadError", "UnauthorizedSSOTokenError", "TokenRetrievalError"}
_ACCESS_DENIED = {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "AuthorizationError"}


class Outcome(enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    NOT_APPLICABLE = "not applicable"


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """One check's outcome, what it found, and (on a failure) how to fix it."""

    name: str
    outcome: Outcome
    detail: str
    fix: str = ""

    def line(self) -> str:
        text = f"[{self.outcome.value.upper()}] {self.name}: {self.detail}"
        return f"{text}\n    fix: {self.fix}" if self.fix and self.outcome is Outcome.FAIL else text


@dataclasses.dataclass(frozen=True)
class PreflightReport:
    results: tuple[CheckResult, ...]

    @property
    def failed(self) -> tuple[CheckResult, ...]:
        return tuple(result for result in self.results if result.outcome is Outcome.FAIL)

    @property
    def exit_code(self) -> int:
        return 2 if self.failed else 0

    def of(self, name: str) -> CheckResult:
        (result,) = [result for result in self.results if result.name == name]
        return result

    def text(self) -> str:
        counts = {outcome: sum(r.outcome is outcome for r in self.results) for outcome in Outcome}
        summary = ", ".join(f"{count} {outcome.value}" for outcome, count in counts.items())
        return "\n".join([*(result.line() for result in self.results), f"preflight: {summary}"])


@dataclasses.dataclass(frozen=True)
class BootstrapNeed:
    """What one synthesized stack requires of the bootstrap stack (``cdk.out/manifest.json``)."""

    stack: str
    parameter: str
    minimum: int


@dataclasses.dataclass(frozen=True)
class InstanceNeed:
    """Instances the platform plans: ``ec2`` (a node group at its maximum size) or ``sagemaker`` (a HyperPod
    instance group, ``ml.`` type)."""

    service: str
    instance_type: str
    count: int
    group: str


@dataclasses.dataclass(frozen=True)
class PriceNeed:
    """A price of the cost per team (:class:`~hyperpod_inference_iac.GpuCost`): ``usd_per_node_hour`` for
    ``instance_type`` as ``group`` is priced, ``ec2`` (an EKS node group) or ``sagemaker`` (a HyperPod instance
    group)."""

    service: str
    instance_type: str
    usd_per_node_hour: float
    group: str


@dataclasses.dataclass(frozen=True)
class PreflightPlan:
    """What the deploy will ask of the account: the preflight's input (the app writes it into ``cdk.out/`` as
    ``preflight-plan.json``; a consumer of the library builds one). ``None`` or empty: that check does not apply."""

    account: str
    region: str
    bootstrap: tuple[BootstrapNeed, ...] = ()
    lake_formation_admin: bool = False
    # Who makes the Lake Formation grants: CloudFormation's execution role of the bootstrap (from the assembly);
    # empty: the caller's role.
    lake_formation_principals: tuple[str, ...] = ()
    tables_layer_arn: str | None = None
    instances: tuple[InstanceNeed, ...] = ()
    hosted_zone_id: str | None = None
    zone_name: str | None = None
    certificate_arn: str | None = None
    certificate_names: tuple[str, ...] = ()
    cluster_name: str | None = None
    kubernetes_version: str | None = None
    addon_name: str | None = None
    addon_version: str | None = None
    addon_configuration: Mapping[str, Any] | None = None
    manifests: tuple[Mapping[str, Any], ...] = ()
    sidecar_image: str | None = None
    needs_sidecar_image: bool = False
    prices: tuple[PriceNeed, ...] = ()

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> PreflightPlan:
        data = json.loads(text)
        data["bootstrap"] = tuple(BootstrapNeed(**item) for item in data.get("bootstrap", ()))
        data["instances"] = tuple(InstanceNeed(**item) for item in data.get("instances", ()))
        data["prices"] = tuple(PriceNeed(**item) for item in data.get("prices", ()))
        for key in ("certificate_names", "manifests", "lake_formation_principals"):
            data[key] = tuple(data.get(key, ()))
        return cls(**data)

    def with_assembly(self, cdk_out: Path | None = None, dist: Path | None = None) -> PreflightPlan:
        """This plan with the bootstrap needs of a cloud assembly and the operator custom resources of ``dist/``."""
        plan = self
        if cdk_out is not None and (cdk_out / "manifest.json").is_file():
            plan = dataclasses.replace(plan, bootstrap=bootstrap_needs(cdk_out),
                                       lake_formation_principals=execution_roles(cdk_out, plan))
        if dist is not None and dist.is_dir():
            plan = dataclasses.replace(plan, manifests=tuple(operator_manifests(dist)))
        return plan


def bootstrap_needs(cdk_out: Path) -> tuple[BootstrapNeed, ...]:
    """Each stack's ``requiresBootstrapStackVersion`` and SSM parameter, from the assembly's ``manifest.json``."""
    manifest = json.loads((cdk_out / "manifest.json").read_text(encoding="utf-8"))
    needs = []
    for name, artifact in sorted(manifest.get("artifacts", {}).items()):
        properties = artifact.get("properties", {})
        if artifact.get("type") != "aws:cloudformation:stack" or "requiresBootstrapStackVersion" not in properties:
            continue
        needs.append(BootstrapNeed(name, properties.get("bootstrapStackVersionSsmParameter",
                                                        "/cdk-bootstrap/hnb659fds/version"),
                                   int(properties["requiresBootstrapStackVersion"])))
    return tuple(needs)


def execution_roles(cdk_out: Path, plan: PreflightPlan) -> tuple[str, ...]:
    """The CloudFormation execution roles the synthesized stacks deploy with (``cloudFormationExecutionRoleArn``),
    with the account, region and partition of ``plan``: the principals that make the stacks' Lake Formation grants."""
    manifest = json.loads((cdk_out / "manifest.json").read_text(encoding="utf-8"))
    partition = "aws-cn" if plan.region.startswith("cn-") else "aws-us-gov" if plan.region.startswith(
        "us-gov-") else "aws"
    roles = {str(artifact.get("properties", {}).get("cloudFormationExecutionRoleArn", ""))
             .replace("${AWS::Partition}", partition).replace("${AWS::AccountId}", plan.account)
             .replace("${AWS::Region}", plan.region) for artifact in manifest.get("artifacts", {}).values()
             if artifact.get("type") == "aws:cloudformation:stack"}
    return tuple(sorted(role for role in roles if role))


def operator_manifests(dist: Path) -> Iterator[dict[str, Any]]:
    """Every custom resource of the operator's API groups in ``dist/`` (``*.yaml``, every document)."""
    for path in sorted(dist.rglob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(document, dict) and str(document.get("apiVersion", "")).split("/")[0].endswith(
                    OPERATOR_GROUP_SUFFIX):
                yield document


def deploy_time_placeholders(value: Any, key: str = "") -> Any:
    """``value`` (resolved by ``Stack.resolve``) with each CloudFormation reference replaced by a placeholder of
    the kind the key suggests (an ARN for ``...Arn`` keys), so a schema can judge the document's keys and types."""
    if isinstance(value, Mapping):
        if len(value) == 1 and (key_of := str(next(iter(value)))) and (key_of == "Ref" or key_of.startswith("Fn::")):
            return _DEPLOY_TIME_ARN if key.lower().endswith("arn") else DEPLOY_TIME
        return {k: deploy_time_placeholders(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [deploy_time_placeholders(item, key) for item in value]
    return value


class SessionLike(Protocol):
    """A ``boto3.Session`` (or a stand-in giving stubbed clients)."""

    def client(self, service_name: str, region_name: str | None = None) -> Any: ...

    def get_credentials(self) -> Any: ...


class CredentialsProblem(Exception):
    """Credentials are missing, expired or not valid: the whole preflight stops with one line."""


def _error_code(error: BaseException) -> str:
    response = getattr(error, "response", None)
    return str(response.get("Error", {}).get("Code", "")) if isinstance(response, Mapping) else ""


def _is_no_credentials(error: BaseException) -> bool:
    return type(error).__name__ in _NO_CREDENTIALS


class _Aws:
    """Clients of one session and region, made once each (``region``: another region for a global API's endpoint,
    the Price List's)."""

    def __init__(self, session: SessionLike, region: str) -> None:
        self.session, self.region = session, region
        self._clients: dict[tuple[str, str], Any] = {}

    def __call__(self, service: str, region: str | None = None) -> Any:
        key = (service, region or self.region)
        if key not in self._clients:
            self._clients[key] = self.session.client(service, region_name=key[1])
        return self._clients[key]


Check = Callable[[PreflightPlan, _Aws], CheckResult]


def _denied(name: str, action: str) -> CheckResult:
    return CheckResult(name, Outcome.FAIL, f"access denied to {action}",
                       "attach the PreflightPolicy construct's policy (read-only) to the role running the preflight")


def _verdict(name: str, problems: Sequence[str], found: Sequence[str], fix: str) -> CheckResult:
    """Fail with every problem and ``fix``, or pass with what was found."""
    if problems:
        return CheckResult(name, Outcome.FAIL, "; ".join(problems), fix)
    return CheckResult(name, Outcome.PASS, "; ".join(found))


def check_bootstrap(plan: PreflightPlan, aws: _Aws) -> CheckResult:
    name = "bootstrap"
    if not plan.bootstrap:
        return CheckResult(name, Outcome.NOT_APPLICABLE, "no synthesized stacks (run `make synth` first)")
    problems, found = [], []
    for parameter in sorted({need.parameter for need in plan.bootstrap}):
        minimum = max(need.minimum for need in plan.bootstrap if need.parameter == parameter)
        try:
            version = int(aws("ssm").get_parameter(Name=parameter)["Parameter"]["Value"])
        except Exception as error:
            if _error_code(error) == "ParameterNotFound":
                problems.append(f"{parameter} does not exist (the account and region are not bootstrapped)")
                continue
            raise
        found.append(f"{parameter} = {version} (needs >= {minimum})")
        if version < minimum:
            problems.append(f"{parameter} is {version}, the stacks need at least {minimum}")
    return _verdict(name, problems, found,
                    f"cdk bootstrap aws://{plan.account}/{plan.region} (with the same --qualifier, if the app sets "
                    "one), by someone allowed to create the bootstrap stack")


def _caller_role_arn(aws: _Aws) -> tuple[str, str]:
    """The caller's ARN and, for an assumed role, its role's ARN (what Lake Formation lists)."""
    arn = str(aws("sts").get_caller_identity()["Arn"])
    match = re.fullmatch(r"arn:([\w-]+):sts::(\d{12}):assumed-role/([\w+=,.@-]+)/.+", arn)
    return arn, (f"arn:{match[1]}:iam::{match[2]}:role/{match[3]}" if match else arn)


def check_lake_formation_admin(plan: PreflightPlan, aws: _Aws) -> CheckResult:
    name = "lake-formation-admin"
    if not plan.lake_formation_admin:
        return CheckResult(name, Outcome.NOT_APPLICABLE, "the platform grants no Lake Formation permissions")
    principals = plan.lake_formation_principals or _caller_role_arn(aws)
    settings = aws("lakeformation").get_data_lake_settings()["DataLakeSettings"]
    admins = {item.get("DataLakePrincipalIdentifier", "") for item in settings.get("DataLakeAdmins", [])}
    missing = [principal for principal in dict.fromkeys(principals) if principal not in admins]
    if not missing or (not plan.lake_formation_principals and len(missing) < len(set(principals))):
        return CheckResult(name, Outcome.PASS, f"{', '.join(p for p in principals if p in admins)} is a data lake "
                                               "administrator")
    role = missing[-1]
    return CheckResult(
        name, Outcome.FAIL, f"{', '.join(missing)} is not a Lake Formation data lake administrator (the capture "
                            "tables' grants, which CloudFormation makes with it, would fail)",
        f"aws lakeformation put-data-lake-settings (keep the existing admins: get-data-lake-settings first) adding "
        f"{role}")


def check_tables_layer(plan: PreflightPlan, aws: _Aws) -> CheckResult:
    name = "tables-layer"
    arn = plan.tables_layer_arn
    if not arn:
        return CheckResult(name, Outcome.NOT_APPLICABLE, "no capture tables layer configured (capture.tablesLayerArn)")
    try:
        aws("lambda").get_layer_version_by_arn(Arn=arn)
    except Exception as error:
        if _error_code(error) in ("ResourceNotFoundException", "InvalidParameterValueException"):
            return CheckResult(name, Outcome.FAIL, f"{arn} does not exist",
                               "build and publish the layer (`make capture-layer`, `aws lambda "
                               "publish-layer-version`; docs/capture-processor.md), then set capture.tablesLayerArn "
                               "to the version it printed")
        raise
    return CheckResult(name, Outcome.PASS, f"{arn} exists")


# The EC2 On-Demand vCPU quota of each instance family class (service-quotas, service code ec2).
_EC2_QUOTAS = (("g", "L-DB2E81BA", "Running On-Demand G and VT instances"),
               ("vt", "L-DB2E81BA", "Running On-Demand G and VT instances"),
               ("p", "L-417A185B", "Running On-Demand P instances"),
               ("inf", "L-1945791B", "Running On-Demand Inf instances"),
               ("trn", "L-2C3B7624", "Running On-Demand Trn instances"),
               ("dl", "L-6E869C2A", "Running On-Demand DL instances"),
               ("f", "L-74FC7D96", "Running On-Demand F instances"),
               ("x", "L-7295265B", "Running On-Demand X instances"))
_STANDARD = ("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances")


def ec2_quota_of(instance_type: str) -> tuple[str, str]:
    """The vCPU quota code and name an EC2 instance type counts against."""
    family = re.match(r"[a-z]+", instance_type.lower())
    letters = family[0] if family else ""
    for prefix, code, quota_name in sorted(_EC2_QUOTAS, key=lambda item: -len(item[0])):
        if letters.startswith(prefix):
            return code, quota_name
    return _STANDARD


def check_ec2_quotas(plan: PreflightPlan, aws: _Aws) -> CheckResult:
    name = "quota-ec2"
    needs = [need for need in plan.instances if need.service == "ec2"]
    if not needs:
        return CheckResult(name, Outcome.NOT_APPLICABLE, "no EC2 node groups planned")
    types = sorted({need.instance_type for need in needs})
    described = aws("ec2").describe_instance_types(InstanceTypes=types)["InstanceTypes"]
    vcpus = {item["InstanceType"]: int(item["VCpuInfo"]["DefaultVCpus"]) for item in described}
    wanted: dict[tuple[str, str], int] = {}
    for need in needs:
        key = ec2_quota_of(need.instance_type)
        wanted[key] = wanted.get(key, 0) + need.count * vcpus.get(need.instance_type, 0)
    problems, found = [], []
    for (code, quota_name), needed in sorted(wanted.items()):
        value = int(aws("service-quotas").get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"])
        found.append(f"{quota_name}: {value} vCPUs (plan needs {needed} at maximum size)")
        if value < needed:
            problems.append(f"{quota_name} ({code}) is {value} vCPUs, the node groups need {needed} at maximum size")
    return _verdict(name, problems, found,
                    "request an increase (aws service-quotas request-service-quota-increase --service-code ec2 "
                    "--quota-code <code> --desired-value <vCPUs>) or lower the node groups' maxSize")


def check_hyperpod_quotas(plan: PreflightPlan, aws: _Aws) -> CheckResult:
    name = "quota-hyperpod"
    needs = [need for need in plan.instances if need.service == "sagemaker"]
    if not needs:
        return CheckResult(name, Outcome.NOT_APPLICABLE, "no HyperPod instance groups planned")
    wanted: dict[str, int] = {}
    for need in needs:
        wanted[need.instance_type] = wanted.get(need.instance_type, 0) + need.count
    quotas: dict[str, tuple[str, float]] = {}
    for page in aws("service-quotas").get_paginator("list_service_quotas").paginate(ServiceCode="sagemaker"):
        for quota in page["Quotas"]:
            quotas[str(quota["QuotaName"])] = (str(quota["QuotaCode"]), float(quota["Value"]))
    problems, found = [], []
    for instance_type, needed in sorted(wanted.items()):
        quota_name = f"{instance_type} for cluster usage"
        if quota_name not in quotas:
            problems.append(f"no quota named '{quota_name}' (the type is not offered for HyperPod in {plan.region})")
            continue
        code, value = quotas[quota_name]
        found.append(f"{quota_name}: {value:g} (plan needs {needed})")
        if value < needed:
            problems.append(f"{quota_name} ({code}) is {value:g}, the instance groups need {needed}")
    return _verdict(name, problems, found,
                    "request an increase (aws service-quotas request-service-quota-increase --service-code sagemaker "
                    "--quota-code <code> --desired-value <count>), or choose an instance type offered for HyperPod "
                    "in the region")


# The Price List Query API's endpoint (also in eu-central-1 and ap-south-1; one is enough), and the share of the list
# price below which no discount goes: EC2 Instance Savings Plans, the deepest, are "up to 72 %" off.
PRICE_LIST_REGION = "us-east-1"
LOWEST_SHARE_OF_LIST = 0.25


def ec2_list_price(aws: _Aws, instance_type: str, region: str) -> float | None:
    """The on-demand hourly USD price of a Linux, shared-tenancy ``instance_type`` in ``region`` by the AWS Price
    List, or ``None`` when the list has none (the filters docs/usage-and-budgets.md gives for the CLI)."""
    filters = [{"Type": "TERM_MATCH", "Field": field, "Value": value} for field, value in (
        ("instanceType", instance_type), ("regionCode", region), ("operatingSystem", "Linux"),
        ("tenancy", "Shared"), ("preInstalledSw", "NA"), ("capacitystatus", "Used"))]
    prices = []
    for item in aws("pricing", PRICE_LIST_REGION).get_products(ServiceCode="AmazonEC2", Filters=filters,
                                                              MaxResults=10)["PriceList"]:
        product = json.loads(item) if isinstance(item, str) else item
        for term in product.get("terms", {}).get("OnDemand", {}).values():
            for dimension in term.get("priceDimensions", {}).values():
                usd = dimension.get("pricePerUnit", {}).get("USD")
                if usd is not None and float(usd) > 0:
                    prices.append(float(usd))
    return max(prices) if prices else None


def check_prices(plan: PreflightPlan, aws: _Aws) -> CheckResult:
    name = "prices"
    if not plan.prices:
        return CheckResult(name, Outcome.NOT_APPLICABLE, "no cost per team configured (costs:)")
    problems, found = [], []
    for need in sorted(plan.prices, key=lambda need: (need.service, need.instance_type, need.group)):
        price = need.usd_per_node_hour
        if need.service != "ec2" or "," in need.instance_type:
            why = "HyperPod" if need.service != "ec2" else "the group's own price for several types"
            found.append(f"{need.group} ({need.instance_type}): {price:g} USD/h, not compared ({why})")
            continue
        listed = ec2_list_price(aws, need.instance_type, plan.region)
        if listed is None:
            problems.append(f"{need.group}: the Price List has no on-demand Linux price for {need.instance_type} in "
                            f"{plan.region} (is the type offered there?)")
            continue
        share = price / listed
        found.append(f"{need.group} ({need.instance_type}): {price:g} USD/h, {share:.0%} of the list's {listed:g}")
        if price > listed * 1.005:
            problems.append(f"{need.group}: {price:g} USD/h for {need.instance_type} is above its on-demand list "
                            f"price in {plan.region}, {listed:g} (no discount makes a price higher)")
        elif share < LOWEST_SHARE_OF_LIST:
            problems.append(f"{need.group}: {price:g} USD/h for {need.instance_type} is {share:.0%} of its on-demand "
                            f"list price in {plan.region}, {listed:g}: below any Savings Plan (a per-GPU price, or "
                            "another type's?)")
    return _verdict(name, problems, found,
                    "correct costs.instancePrices (or the group's usdPerNodeHour): your price per node-hour in the "
                    "platform's region, net of your discounts (docs/usage-and-budgets.md, \"Prices\")")


def check_hosted_zone(plan: PreflightPlan, aws: _Aws) -> CheckResult:
    name = "hosted-zone"
    if not plan.hosted_zone_id:
        return CheckResult(name, Outcome.NOT_APPLICABLE, "the platform creates its hosted zone")
    try:
        zone = aws("route53").get_hosted_zone(Id=plan.hosted_zone_id)["HostedZone"]
    except Exception as error:
        if _error_code(error) in ("NoSuchHostedZone", "InvalidInput"):
            return CheckResult(name, Outcome.FAIL, f"hosted zone {plan.hosted_zone_id} does not exist in the account",
                               "set domain.existingHostedZoneId to a zone of environment.account, or leave it out "
                               "to create one")
        raise
    actual = str(zone["Name"]).rstrip(".")
    if plan.zone_name and actual != plan.zone_name.rstrip("."):
        return CheckResult(name, Outcome.FAIL, f"zone {plan.hosted_zone_id} is {actual}, not {plan.zone_name}",
                           "set domain.zoneName to the zone's name, or domain.existingHostedZoneId to the zone of "
                           f"{plan.zone_name}")
    return CheckResult(name, Outcome.PASS, f"{plan.hosted_zone_id} is {actual}")


def covers(certificate_names: Sequence[str], name: str) -> bool:
    """Whether a certificate's names cover ``name``: exactly, or by a wildcard of exactly one leftmost label."""
    name = name.lower().rstrip(".")
    for pattern in (n.lower().rstrip(".") for n in certificate_names):
        if pattern == name:
            return True
        if pattern.startswith("*.") and "." in name and name.split(".", 1)[1] == pattern[2:]:
            return True
    return False


def check_certificate(plan: PreflightPlan, aws: _Aws) -> CheckResult:
    name = "certificate"
    arn = plan.certificate_arn
    if not arn:
        return CheckResult(name, Outcome.NOT_APPLICABLE, "the platform requests its certificate")
    parts = arn.split(":")
    if len(parts) < 6 or parts[3] != plan.region or parts[4] != plan.account:
        return CheckResult(name, Outcome.FAIL,
                           f"{arn} is not in account {plan.account} and region {plan.region}",
                           "request or import the certificate in the platform's account and region (ACM "
                           "certificates are not shared between accounts or regions)")
    try:
        certificate = aws("acm").describe_certificate(CertificateArn=arn)["Certificate"]
    except Exception as error:
        if _error_code(error) in ("ResourceNotFoundException", "InvalidArnException"):
            return CheckResult(name, Outcome.FAIL, f"{arn} does not exist",
                               "set domain.existingCertificateArn to an existing certificate, or leave it out")
        raise
    status = certificate.get("Status")
    names = [certificate.get("DomainName", ""), *certificate.get("SubjectAlternativeNames", [])]
    problems = []
    if status != "ISSUED":
        problems.append(f"its status is {status}, not ISSUED")
    missing = [n for n in plan.certificate_names if not covers(names, n)]
    if missing:
        problems.append(f"it does not cover {', '.join(missing)} (it has {', '.join(sorted(set(names)))})")
    if problems:
        return CheckResult(name, Outcome.FAIL, f"{arn}: {'; '.join(problems)}",
                           "complete DNS validation (ISSUED), or request a certificate for every endpoint name "
                           "(a wildcard covers one label)")
    return CheckResult(name, Outcome.PASS, f"ISSUED, covers {', '.join(plan.certificate_names) or 'its names'}")


def check_addon_version(plan: PreflightPlan, aws: _Aws) -> CheckResult:
    name = "addon-version"
    if not (plan.addon_name and plan.addon_version and plan.kubernetes_version):
        return CheckResult(name, Outcome.NOT_APPLICABLE, "no add-on planned")
    response = aws("eks").describe_addon_versions(addonName=plan.addon_name,
                                                  kubernetesVersion=plan.kubernetes_version)
    versions = sorted({v["addonVersion"] for addon in response.get("addons", [])
                       for v in addon.get("addonVersions", [])})
    if plan.addon_version in versions:
        return CheckResult(name, Outcome.PASS,
                           f"{plan.addon_name} {plan.addon_version} exists for Kubernetes {plan.kubernetes_version}")
    return CheckResult(name, Outcome.FAIL,
                       f"{plan.addon_name} {plan.addon_version} is not offered for Kubernetes "
                       f"{plan.kubernetes_version} in {plan.region} (offered: {', '.join(versions) or 'none'})",
                       "set operator.addonVersion to an offered version (docs/operator-versions.md)")


def _schema_has(schema: Mapping[str, Any], path: Sequence[str]) -> bool:
    """Whether ``path`` is a declared property path of a JSON schema (through ``properties`` only)."""
    node: Any = schema
    for key in path:
        properties = node.get("properties") if isinstance(node, Mapping) else None
        if not isinstance(properties, Mapping) or key not in properties:
            return False
        node = properties[key]
    return True


def _leaf_paths(value: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    if isinstance(value, Mapping) and value:
        for key, child in value.items():
            yield from _leaf_paths(child, (*prefix, str(key)))
    elif prefix:
        yield prefix


def check_addon_configuration(plan: PreflightPlan, aws: _Aws) -> CheckResult:
    name = "addon-configuration"
    if not (plan.addon_name and plan.addon_version) or plan.addon_configuration is None:
        return CheckResult(name, Outcome.NOT_APPLICABLE, "no add-on configuration planned")
    response = aws("eks").describe_addon_configuration(addonName=plan.addon_name, addonVersion=plan.addon_version)
    schema = json.loads(response.get("configurationSchema") or "{}")
    errors = [error for error in jsonschema.Draft7Validator(schema).iter_errors(plan.addon_configuration)
              if not (error.validator in ("pattern", "format", "minLength", "maxLength")
                      and error.instance in (DEPLOY_TIME, _DEPLOY_TIME_ARN))]
    used = set(_leaf_paths(plan.addon_configuration))
    prose = [row for row in addon_rows() if row.kind == plan.addon_name and row.path in used]
    undeclared = [row for row in prose if not _schema_has(schema, row.path)]
    problems = [f"{'.'.join(str(p) for p in error.absolute_path) or '(root)'}: {error.message}" for error in errors]
    problems += [f"{row.dotted} (from prose: {row.source}) is not a property of the schema" for row in undeclared
                 if not any(row.dotted in problem for problem in problems)]
    if problems:
        return CheckResult(name, Outcome.FAIL,
                           f"{plan.addon_name} {plan.addon_version} refuses the configuration: {'; '.join(problems)}",
                           "compare with `aws eks describe-addon-configuration --addon-name "
                           f"{plan.addon_name} --addon-version {plan.addon_version}`; fix the key in "
                           "InferenceOperator (and its row in prose_fields.PROSE_FIELDS), or choose the add-on "
                           "version the keys were written for")
    return CheckResult(name, Outcome.PASS, f"the schema of {plan.addon_version} accepts the configuration "
                                           f"({len(prose)} prose keys confirmed)")


@dataclasses.dataclass(frozen=True)
class KubeApi:
    """The two requests the preflight makes of a cluster's API: a CRD by name, and a dry-run create. ``endpoint``
    must be ``https://``, or ``http://`` on a loopback address (a stand-in API server in tests)."""

    endpoint: str
    token: str
    ca_data: str | None = None
    timeout: float = 30.0

    def __post_init__(self) -> None:
        url = urllib.parse.urlsplit(self.endpoint)
        loopback = url.hostname is not None and (url.hostname == "localhost" or _is_loopback(url.hostname))
        if url.scheme != "https" and not (url.scheme == "http" and loopback):
            raise ValueError(f"the cluster endpoint must be https:// (got {self.endpoint})")

    def _context(self) -> ssl.SSLContext | None:
        if not self.endpoint.startswith("https://"):
            return None
        context = ssl.create_default_context()
        if self.ca_data:
            context.load_verify_locations(cadata=base64.b64decode(self.ca_data).decode("ascii"))
        return context

    def request(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(
            self.endpoint.rstrip("/") + path, method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"Bearer {self.token}", "Accept": "application/json",
                     "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=self._context()) as response:
                return int(response.status), _json_or_empty(response.read())
        except urllib.error.HTTPError as error:
            return int(error.code), _json_or_empty(error.read())

    def get_crd(self, name: str) -> tuple[int, dict[str, Any]]:
        return self.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")

    def dry_run_create(self, manifest: Mapping[str, Any], plural: str,
                       namespace: str | None) -> tuple[int, dict[str, Any]]:
        api_version = str(manifest["apiVersion"])
        where = f"/namespaces/{namespace}" if namespace else ""
        return self.request("POST", f"/apis/{api_version}{where}/{plural}?dryRun=All&fieldValidation=Strict",
                            manifest)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _json_or_empty(raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw or b"{}")
    except ValueError:
        return {"message": raw.decode("utf-8", "replace")[:500]}
    return data if isinstance(data, dict) else {}


def eks_token(session: SessionLike, region: str, cluster_name: str) -> str:
    """An EKS bearer token: a presigned ``sts:GetCallerIdentity`` naming the cluster (``aws eks get-token``)."""
    from botocore.signers import RequestSigner

    sts = session.client("sts", region_name=region)
    signer = RequestSigner(sts.meta.service_model.service_id, region, "sts", "v4", session.get_credentials(),
                           sts.meta.events)
    url = signer.generate_presigned_url(
        {"method": "GET", "url": f"https://sts.{region}.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15",
         "body": {}, "headers": {"x-k8s-aws-id": cluster_name}, "context": {}},
        region_name=region, expires_in=60, operation_name="")
    return "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


class _Cluster:
    """The cluster's API, asked for once: None (with the reason) when the cluster does not exist yet."""

    def __init__(self, skip_reason: str = "") -> None:
        self.api: KubeApi | None = None
        self.reason = skip_reason
        self._asked = bool(skip_reason)

    def get(self, plan: PreflightPlan, aws: _Aws) -> KubeApi | None:
        if self._asked:
            return self.api
        self._asked = True
        if not plan.cluster_name:
            self.reason = "no cluster planned"
            return None
        try:
            cluster = aws("eks").describe_cluster(name=plan.cluster_name)["cluster"]
        except Exception as error:
            if _error_code(error) == "ResourceNotFoundException":
                self.reason = (f"cluster {plan.cluster_name} does not exist yet: run the preflight again once the "
                               "cluster stack is deployed, before the workloads (workloads.owner: gitops applies them "
                               "after it)")
                return None
            raise
        self.api = KubeApi(cluster["endpoint"], eks_token(aws.session, plan.region, plan.cluster_name),
                           cluster.get("certificateAuthority", {}).get("data"))
        return self.api


def _walk_crd(crd: Mapping[str, Any], version: str, path: Sequence[str]) -> bool:
    versions = [v for v in crd.get("spec", {}).get("versions", []) if v.get("name") == version]
    if not versions:
        return False
    return _schema_has(versions[0].get("schema", {}).get("openAPIV3Schema", {}), path)


def _forbidden(name: str, status: int, body: Mapping[str, Any]) -> CheckResult | None:
    if status in (401, 403):
        return CheckResult(name, Outcome.FAIL, f"the cluster refused the request ({status}: {body.get('message', '')})",
                           "give the preflight role an EKS access entry bound to a ClusterRole that may get "
                           "customresourcedefinitions and create the operator's kinds (dry runs persist nothing; "
                           "docs/deploying.md, 'The preflight')")
    return None


def check_crd_fields(plan: PreflightPlan, aws: _Aws, cluster: _Cluster) -> CheckResult:
    name = "crd-fields"
    api = cluster.get(plan, aws)
    if api is None:
        return CheckResult(name, Outcome.NOT_APPLICABLE, cluster.reason)
    used_kinds = {str(m.get("kind")) for m in plan.manifests}
    rows = [row for row in crd_rows() if row.kind in used_kinds]
    if not rows:
        return CheckResult(name, Outcome.NOT_APPLICABLE, "no manifest of a kind with prose fields")
    crds: dict[str, tuple[int, dict[str, Any]]] = {}
    problems = []
    for row in rows:
        crd_name = row.crd_name or ""
        if crd_name not in crds:
            crds[crd_name] = api.get_crd(crd_name)
        status, crd = crds[crd_name]
        if (refused := _forbidden(name, status, crd)) is not None:
            return refused
        if status == 404:
            problems.append(f"{crd_name} is not installed (the add-on version lacks the kind {row.kind})")
        elif row.path and not _walk_crd(crd, row.version or "", row.path):
            problems.append(f"{row.kind} {row.version} has no {row.dotted} (from prose: {row.source})")
    problems = list(dict.fromkeys(problems))
    if problems:
        return CheckResult(name, Outcome.FAIL, "; ".join(problems),
                           "the installed operator differs from the prose: vendor its CRDs (docs/deploying.md, "
                           "'Replacing the overlays') and fix the charts, or choose the add-on version that has them")
    return CheckResult(name, Outcome.PASS, f"{len(rows)} prose fields confirmed by the installed CRDs")


def _plural_of(manifest: Mapping[str, Any]) -> str:
    from hyperpod_inference_iac.charts.crd_schema import PLURALS

    kind = str(manifest.get("kind", ""))
    return PLURALS.get(kind, kind.lower() + "s")


def check_dry_run(plan: PreflightPlan, aws: _Aws, cluster: _Cluster) -> CheckResult:
    name = "dry-run"
    if not plan.manifests:
        return CheckResult(name, Outcome.NOT_APPLICABLE, "no operator custom resources to apply")
    api = cluster.get(plan, aws)
    if api is None:
        return CheckResult(name, Outcome.NOT_APPLICABLE, cluster.reason)
    problems = []
    for manifest in plan.manifests:
        metadata = manifest.get("metadata", {})
        label = f"{manifest.get('kind')} {metadata.get('namespace', '')}/{metadata.get('name', '')}"
        namespace = metadata.get("namespace")
        status, body = api.dry_run_create(manifest, _plural_of(manifest), namespace)
        if status == 404 and body.get("details", {}).get("kind") == "namespaces":
            # The namespace comes with the deploy; the CRD's schema is the same in any namespace.
            status, body = api.dry_run_create({**manifest, "metadata": {**metadata, "namespace": "default"}},
                                              _plural_of(manifest), "default")
        if (refused := _forbidden(name, status, body)) is not None:
            return refused
        if status == 409:  # AlreadyExists: validated, the object is there (an apply updates it)
            continue
        if status >= 400:
            problems.append(f"{label}: {status} {body.get('message', body.get('reason', ''))}")
    if problems:
        return CheckResult(name, Outcome.FAIL, "; ".join(problems),
                           "the installed CRDs refuse these fields: compare with `kubectl explain` on the cluster, "
                           "fix the workload (or the overlay it rests on), or choose the add-on version that has them")
    return CheckResult(name, Outcome.PASS, f"{len(plan.manifests)} custom resources accepted (dryRun=All, "
                                           "fieldValidation=Strict)")


_ECR_IMAGE = re.compile(r"^(\d{12})\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?/([a-z0-9._/-]+)"
                        r"@(sha256:[0-9a-f]{64})$")


def check_sidecar_image(plan: PreflightPlan, aws: _Aws,
                        docker: Callable[[], bool] | None = None) -> CheckResult:
    name = "sidecar-image"
    image = plan.sidecar_image
    if image:
        match = _ECR_IMAGE.match(image)
        if match is None:
            return CheckResult(name, Outcome.NOT_APPLICABLE,
                               f"{image} is not in Amazon ECR: pulled by its digest, not checked here")
        registry, region, repository, digest = match.groups()
        client = aws("ecr") if region == plan.region else aws.session.client("ecr", region_name=region)
        try:
            client.describe_images(registryId=registry, repositoryName=repository, imageIds=[{"imageDigest": digest}])
        except Exception as error:
            if _error_code(error) in ("ImageNotFoundException", "RepositoryNotFoundException"):
                return CheckResult(name, Outcome.FAIL, f"{image} does not exist",
                                   "push the sidecar image (docs/deploying.md, 'A prebuilt sidecar image') and set "
                                   "capture.sidecarImage to its repository@digest")
            raise
        return CheckResult(name, Outcome.PASS, f"{image} exists")
    if not plan.needs_sidecar_image:
        return CheckResult(name, Outcome.NOT_APPLICABLE, "no workload runs the capture sidecar")
    if (docker or docker_available)():
        return CheckResult(name, Outcome.PASS, "Docker is available to build the sidecar image asset")
    return CheckResult(name, Outcome.FAIL, "the sidecar image is an asset built at deploy time, and Docker is not "
                                           "available",
                       "start Docker, or push the image once and set "
                       "capture.sidecarImage: <repository>@sha256:<digest>")


def docker_available() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=60, check=False).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


SKIPPED_CLUSTER = ("skipped (--skip-cluster): run the preflight from a network that reaches the cluster's API "
                   "endpoint (a private endpoint: inside the VPC) to confirm the CRDs")


def run_preflight(plan: PreflightPlan, session: SessionLike, *, docker: Callable[[], bool] | None = None,
                  cluster: bool = True) -> PreflightReport:
    """Every check of ``plan`` with ``session``'s credentials. Raises :class:`CredentialsProblem` (one line) when
    the credentials are missing, expired or not valid; a check the role may not make fails with the permission.
    ``cluster=False`` leaves out the checks that call the cluster's API (not applicable, saying so)."""
    aws = _Aws(session, plan.region)
    cluster_api = _Cluster("" if cluster else SKIPPED_CLUSTER)
    try:
        aws("sts").get_caller_identity()
    except Exception as error:
        _raise_credentials_problem(error)
        raise
    checks: list[tuple[str, str, Callable[[], CheckResult]]] = [
        ("bootstrap", "ssm:GetParameter", lambda: check_bootstrap(plan, aws)),
        ("lake-formation-admin", "lakeformation:GetDataLakeSettings", lambda: check_lake_formation_admin(plan, aws)),
        ("tables-layer", "lambda:GetLayerVersion", lambda: check_tables_layer(plan, aws)),
        ("quota-ec2", "servicequotas:GetServiceQuota / ec2:DescribeInstanceTypes",
         lambda: check_ec2_quotas(plan, aws)),
        ("quota-hyperpod", "servicequotas:ListServiceQuotas", lambda: check_hyperpod_quotas(plan, aws)),
        ("hosted-zone", "route53:GetHostedZone", lambda: check_hosted_zone(plan, aws)),
        ("certificate", "acm:DescribeCertificate", lambda: check_certificate(plan, aws)),
        ("addon-version", "eks:DescribeAddonVersions", lambda: check_addon_version(plan, aws)),
        ("addon-configuration", "eks:DescribeAddonConfiguration", lambda: check_addon_configuration(plan, aws)),
        ("crd-fields", "eks:DescribeCluster", lambda: check_crd_fields(plan, aws, cluster_api)),
        ("dry-run", "eks:DescribeCluster", lambda: check_dry_run(plan, aws, cluster_api)),
        ("sidecar-image", "ecr:DescribeImages", lambda: check_sidecar_image(plan, aws, docker)),
        ("prices", "pricing:GetProducts", lambda: check_prices(plan, aws)),
    ]
    results = []
    for name, action, check in checks:
        try:
            results.append(check())
        except CredentialsProblem:
            raise
        except Exception as error:
            _raise_credentials_problem(error)
            if _error_code(error) in _ACCESS_DENIED:
                results.append(_denied(name, action))
            else:  # (a network error, an unexpected answer: that check fails, saying what happened; the rest run)
                cluster_check = name in ("crd-fields", "dry-run")
                results.append(CheckResult(
                    name, Outcome.FAIL, f"could not check: {type(error).__name__}: {error}",
                    "run the preflight where it reaches the cluster's API endpoint (a private endpoint: inside the "
                    "VPC), or leave these checks out with --skip-cluster and run them from there"
                    if cluster_check else "check the network path to the AWS API, then run again"))
    return PreflightReport(tuple(results))


def _raise_credentials_problem(error: BaseException) -> None:
    if _is_no_credentials(error):
        raise CredentialsProblem(f"no usable AWS credentials ({error}): configure a profile, AWS_* variables or a "
                                 "role (the CI assumes one with OIDC)") from None
    code = _error_code(error)
    if code in _CREDENTIAL_CODES:
        raise CredentialsProblem(f"{_CREDENTIAL_CODES[code]} ({code})") from None


def main(argv: Sequence[str] | None = None, session: SessionLike | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hyperpod_inference_iac.preflight",
                                     description="Check the account and cluster before a deploy (read-only).")
    parser.add_argument("--cdk-out", type=Path, default=Path("cdk.out"),
                        help="the synthesized cloud assembly (its manifest.json and preflight-plan.json)")
    parser.add_argument("--plan", type=Path, default=None, help=f"the plan (default: <cdk-out>/{PLAN_FILE})")
    parser.add_argument("--dist", type=Path, default=Path("dist"),
                        help="the manifests whose operator custom resources are dry-run")
    parser.add_argument("--profile", default=None, help="an AWS profile (default: the environment's credentials)")
    parser.add_argument("--skip-cluster", action="store_true",
                        help="leave out the checks that call the cluster's API (CRD fields, dry run): for a runner "
                             "that cannot reach a private endpoint")
    args = parser.parse_args(argv)
    plan_path = args.plan or args.cdk_out / PLAN_FILE
    try:
        plan = PreflightPlan.from_json(plan_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError, KeyError) as error:
        print(f"preflight: cannot read the plan {plan_path} ({type(error).__name__}: {error}); run `make synth` "
              "first", file=sys.stderr)
        return 2
    plan = plan.with_assembly(args.cdk_out, args.dist)
    try:
        if session is None:
            import boto3

            session = boto3.Session(profile_name=args.profile, region_name=plan.region)
        report = run_preflight(plan, session, cluster=not args.skip_cluster)
    except CredentialsProblem as problem:
        print(f"preflight: {problem}", file=sys.stderr)
        return 2
    except Exception as error:
        if _is_no_credentials(error):
            print(f"preflight: no usable AWS credentials ({error})", file=sys.stderr)
            return 2
        raise
    print(report.text())
    return report.exit_code


def write_plan(plan: PreflightPlan, outdir: str | Path) -> Path:
    """Write ``plan`` as ``<outdir>/preflight-plan.json`` (atomically) and return the path."""
    target = Path(outdir) / PLAN_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=target.parent, delete=False, encoding="utf-8") as handle:
        handle.write(plan.to_json())
    Path(handle.name).replace(target)
    return target


__all__ = [
    "BootstrapNeed",
    "CheckResult",
    "CredentialsProblem",
    "InstanceNeed",
    "KubeApi",
    "Outcome",
    "PreflightPlan",
    "PreflightReport",
    "PriceNeed",
    "ProseField",
    "bootstrap_needs",
    "covers",
    "deploy_time_placeholders",
    "ec2_list_price",
    "ec2_quota_of",
    "eks_token",
    "main",
    "operator_manifests",
    "run_preflight",
    "write_plan",
]

if __name__ == "__main__":
    sys.exit(main())
