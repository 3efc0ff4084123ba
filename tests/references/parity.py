"""Compare what this library creates with AWS's own references (vendored under ``aws/``, provenance in SOURCES.md).

Each ``missing_*`` function returns the items of a reference that ours lacks, less those named in the one
exclusion list (``exclusions.yaml``): a parity test asserts it is empty, a control test that it is not once an item
is removed from our side or added to the reference. Items are plain strings (``<action>``, ``<key path>``,
``<kind>/<name> <field path>``), so the exclusion list and the failures read the same.

IAM: an action counts as present when our statements *allow* it for the request the reference's statement stands
for (its resource, made concrete for our account, region, VPC, bucket and cluster), evaluated with the conditions
by ``tests/support/policy_eval.py``; so ours may be narrower than the reference's, as long as the request the
reference grants for still passes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from tests.support.policy_eval import Request, decision

HERE = Path(__file__).parent
AWS = HERE / "aws"
SETUP = AWS / "sagemaker-hyperpod-cluster-setup"
CLI = AWS / "sagemaker-hyperpod-cli"
CHART = CLI / "HyperPodHelmChart"
EXECUTION_ROLE_TEMPLATE = SETUP / "sagemaker-iam-role-template.yaml"
CNI_POLICY = AWS / "managed-policies" / "AmazonEKS_CNI_Policy.json"
ADDON_CONFIG = CLI / "helm_to_addon.addon-config.json"


def exclusions() -> dict[str, dict[str, str]]:
    """``{reference: {item: reason}}`` from exclusions.yaml (each entry also says what breaks without it); a copy
    the caller may change."""
    return {reference: dict(items) for reference, items in _exclusions().items()}


@cache
def _exclusions() -> dict[str, dict[str, str]]:
    entries = yaml.safe_load((HERE / "exclusions.yaml").read_text())["exclusions"]
    table: dict[str, dict[str, str]] = {}
    for entry in entries:
        assert set(entry) == {"reference", "item", "reason", "breaks"}, entry
        assert entry["reason"].strip() and entry["breaks"].strip(), entry
        table.setdefault(entry["reference"], {})[entry["item"]] = entry["reason"]
    return table


def excluded(reference: str) -> set[str]:
    return set(_exclusions().get(reference, {}))


# -- CloudFormation values ------------------------------------------------------------------------------------------

def flatten(value: Any) -> Any:
    """A synthesized CloudFormation value as one string: ``Fn::Join`` joined, ``Ref`` and ``Fn::GetAtt`` as
    ``<Ref:Id>`` / ``<GetAtt:Id.Attr>`` (so our policies and the requests built from our resources compare)."""
    if isinstance(value, list):
        return [flatten(v) for v in value]
    if isinstance(value, dict):
        if set(value) == {"Fn::Join"}:
            separator, parts = value["Fn::Join"]
            return separator.join(str(flatten(p)) for p in parts)
        if set(value) == {"Ref"}:
            return f"<Ref:{value['Ref']}>"
        if set(value) == {"Fn::GetAtt"}:
            attribute = value["Fn::GetAtt"]
            return f"<GetAtt:{attribute[0]}.{attribute[1]}>"
        return {k: flatten(v) for k, v in value.items()}
    return value


def identity_statements(template: Mapping[str, Any], role_id: str, account: str) -> list[dict[str, Any]]:
    """Every statement of the inline policies attached to ``role_id`` (flattened, policy variables of the principal
    resolved), each with ``Principal: *`` for the evaluator."""
    statements = []
    for resource in template["Resources"].values():
        if resource["Type"] != "AWS::IAM::Policy":
            continue
        if {"Ref": role_id} not in resource["Properties"].get("Roles", []):
            continue
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
            text = json.dumps(flatten(statement)).replace("${aws:PrincipalAccount}", account)
            statements.append({**json.loads(text), "Principal": "*"})
    return statements


# -- IAM references ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Ours:
    """What a reference's ``${...}`` and ``*`` stand for in our deployment."""

    account: str
    region: str
    vpc_arn: str
    cluster_arn: str
    bucket_arn: str
    subnet: str = "subnet-0123456789abcdef0"
    security_group: str = "sg-0123456789abcdef0"

    def arn(self, resource: str) -> str:
        return f"arn:aws:ec2:{self.region}:{self.account}:{resource}"


def _sub(value: Any) -> str:
    """A reference resource as text: ``Fn::Sub`` (one-argument or two-argument form) unwrapped."""
    if isinstance(value, dict) and "Fn::Sub" in value:
        sub = value["Fn::Sub"]
        return sub if isinstance(sub, str) else sub[0]
    assert isinstance(value, str), value
    return value


def _no_rig(resource: Any) -> Any:
    """``Fn::If [HasRigS3Bucket, with, without]``: the platform has no RIG bucket, so the ``without`` branch."""
    if isinstance(resource, dict) and "Fn::If" in resource:
        return resource["Fn::If"][2]
    return resource


def requests_for(action: str, resource: str, ours: Ours) -> Request:
    """The request a reference statement's ``(action, resource)`` stands for, in our deployment."""
    text = resource.replace("${AWS::Region}", ours.region).replace("${AWS::AccountId}", ours.account)
    context: dict[str, str] = {"aws:RequestedRegion": ours.region, "aws:ResourceAccount": ours.account}
    in_vpc = {"ec2:Vpc": ours.vpc_arn}
    service = action.split(":")[0]
    if service == "ec2":
        kind = text.split(":")[-1].split("/")[0] if text != "*" else ""
        if kind == "instance":
            target = ours.arn("instance/i-0123456789abcdef0")
        elif kind == "vpc":
            target, context = ours.vpc_arn, {**context, **in_vpc}
        elif kind == "subnet":
            target, context = ours.arn(f"subnet/{ours.subnet}"), {**context, **in_vpc}
        elif kind == "security-group":
            target, context = ours.arn(f"security-group/{ours.security_group}"), {**context, **in_vpc}
        elif kind == "network-interface" or (text == "*" and not action.startswith("ec2:Describe")):
            # (an interface HyperPod or the CNI made for a node: in this account, region and VPC)
            target, context = ours.arn("network-interface/eni-0123456789abcdef0"), {**context, **in_vpc}
        else:
            target = "*"
    elif service == "ecr" and action != "ecr:GetAuthorizationToken":
        target = f"arn:aws:ecr:{ours.region}:602401143452:repository/amazon-k8s-cni"  # (EKS's own images)
    elif service == "eks-auth":
        target = ours.cluster_arn
    elif service == "s3":
        if action == "s3:ListBucket":
            target, context = ours.bucket_arn, {**context, "s3:prefix": "lifecycle/"}
        else:
            target = f"{ours.bucket_arn}/lifecycle/on_create.sh"
    else:
        target = "*"
    return Request(action, target, "arn:aws:iam::123456789012:role/ours", None, context)


def reference_grants(statements: Sequence[Mapping[str, Any]]) -> Iterator[tuple[str, str]]:
    """``(action, resource)`` of each Allow statement of a reference policy."""
    for statement in statements:
        assert statement["Effect"] == "Allow", statement
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        resources = _no_rig(statement["Resource"])
        for resource in resources if isinstance(resources, list) else [resources]:
            for action in actions:
                yield action, _sub(resource)


def execution_role_reference() -> tuple[list[dict[str, Any]], list[str]]:
    """The statements and managed policy names AWS's setup template gives the HyperPod execution role: its inline
    policies (``<prefix>_AmazonEKS_CNI_Policy``, ``<prefix>-Policy``) and the conditional per-subnet and per-security-
    group policies."""
    template = yaml.safe_load(EXECUTION_ROLE_TEMPLATE.read_text())
    resources = template["Resources"]
    role = resources["ExecutionRole"]["Properties"]
    statements = [s for policy in role["Policies"] for s in policy["PolicyDocument"]["Statement"]]
    for resource in resources.values():
        if resource["Type"] == "AWS::IAM::Policy":
            assert resource["Properties"]["Roles"] == [{"Ref": "ExecutionRole"}]
            statements.extend(resource["Properties"]["PolicyDocument"]["Statement"])
    managed = [arn.rsplit("/", 1)[1] for arn in role["ManagedPolicyArns"]]
    return statements, managed


def cni_policy_reference() -> list[dict[str, Any]]:
    statements: list[dict[str, Any]] = json.loads(CNI_POLICY.read_text())["Statement"]
    return statements


def missing_grants(reference: Sequence[Mapping[str, Any]], ours: Sequence[Mapping[str, Any]], context: Ours,
                   name: str) -> list[str]:
    """Each action of ``reference`` that ``ours`` does not allow for the request it stands for."""
    missing = {action for action, resource in reference_grants(reference)
               if decision(ours, requests_for(action, resource, context)) != "allow"}
    return sorted(missing - excluded(name))


# -- Add-on configuration ------------------------------------------------------------------------------------------

def key_paths(value: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a.b.c": leaf}`` of a nested mapping."""
    if isinstance(value, Mapping):
        paths: dict[str, Any] = {}
        for key, item in value.items():
            paths.update(key_paths(item, f"{prefix}.{key}" if prefix else str(key)))
        return paths
    return {prefix: value}


def missing_addon_keys(ours: Mapping[str, Any], name: str = ADDON_CONFIG.name) -> list[str]:
    """Each key of the configuration AWS's migration writes that ours lacks, or sets to another literal (the
    reference's ``$VARIABLE`` values are ARNs and names each deployment fills in)."""
    reference = key_paths(json.loads(ADDON_CONFIG.read_text()))
    our_paths = key_paths(ours)
    missing = {path for path, value in reference.items() if path not in our_paths or (
        not (isinstance(value, str) and value.startswith("$")) and our_paths[path] != value)}
    return sorted(missing - excluded(name))


# -- The dependency chart ------------------------------------------------------------------------------------------

_EXPRESSION = re.compile(r"\{\{-?\s*(.*?)\s*-?\}\}")


def render(template: Path, values: Mapping[str, str]) -> list[dict[str, Any]]:
    """A subchart template with its few expressions replaced (``.Values.namespace``, the image helper); any other
    expression fails, so a template that grows logic is noticed rather than compared wrongly."""
    def replace(match: re.Match[str]) -> str:
        expression = match.group(1)
        if expression not in values:
            raise AssertionError(f"{template.name}: expression {{{{ {expression} }}}} is not known to this comparison")
        return values[expression]
    text = _EXPRESSION.sub(replace, template.read_text())
    return [doc for doc in yaml.safe_load_all(text) if doc]


def agent_image(region: str) -> str:
    image = yaml.safe_load((CHART / "charts/health-monitoring-agent/image.excerpt.yaml").read_text())
    account = image["regionAccountMap"][region]
    return f"{account}.dkr.ecr.{region}.amazonaws.com/{image['repository']}:{image['imageTag']}"


def subchart_objects(component: str, region: str) -> list[dict[str, Any]]:
    folder = CHART / "charts" / component
    values_file = folder / "values.yaml"
    values = yaml.safe_load(values_file.read_text()) or {} if values_file.exists() else {}
    expressions = {".Values.namespace": str(values.get("namespace", "")),
                   'include "health-monitoring-agent.imageUri" .': agent_image(region)}
    return [o for template in sorted((folder / "templates").glob("*.yaml")) for o in render(template, expressions)]


def _object_key(manifest: Mapping[str, Any]) -> str:
    return f"{manifest['kind']}/{manifest['metadata']['name']}"


def missing_fields(reference: Any, ours: Any, path: str = "") -> list[str]:
    """The paths where ``ours`` lacks what ``reference`` has: every key of a mapping, every item of a list (in any
    order), every scalar equal."""
    if isinstance(reference, Mapping):
        if not isinstance(ours, Mapping):
            return [path or "."]
        return [m for key, value in reference.items()
                for m in (missing_fields(value, ours[key], f"{path}.{key}") if key in ours else [f"{path}.{key}"])]
    if isinstance(reference, list):
        if not isinstance(ours, list):
            return [path]
        return [f"{path}[{index}]" for index, item in enumerate(reference)
                if not any(not missing_fields(item, candidate) for candidate in ours)]
    return [] if reference == ours else [path]


def missing_objects(component: str, ours: Sequence[Mapping[str, Any]], region: str) -> list[str]:
    """Each object of a subchart (and each of its fields) that our manifests lack: ``Kind/name`` or
    ``Kind/name .field.path``."""
    by_key = {_object_key(o): o for o in ours}
    missing = []
    for reference in subchart_objects(component, region):
        key = _object_key(reference)
        if key not in by_key:
            missing.append(key)
            continue
        missing.extend(f"{key} {field}" for field in missing_fields(reference, by_key[key]))
    return sorted(set(missing) - excluded(f"{component}"))


def default_components() -> list[str]:
    """The dependency chart's subcharts its default values turn on (``Chart.yaml`` conditions, ``values.yaml``)."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    on = []
    for dependency in chart["dependencies"]:
        node: Any = values
        for part in dependency["condition"].split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if node is True:
            on.append(dependency["name"])
    return on


def missing_components(ours: Sequence[str]) -> list[str]:
    return sorted(set(default_components()) - set(ours) - excluded("HyperPodHelmChart/Chart.yaml"))


def resiliency_components() -> list[str]:
    """The README's rows "Required For: HyperPod Resiliency" (the chart's own words), by chart name."""
    rows = [line.split("|") for line in (CLI / "readme.md").read_text().splitlines() if line.startswith("|")]
    return [cells[1].strip() for cells in rows if len(cells) > 3 and "HyperPod Resiliency" in cells[3]]


# -- The inference add-on's roles -----------------------------------------------------------------------------------

ADDON_ROLES = SETUP / "inference-addon-iam-roles.excerpt.yaml"


def addon_roles_reference() -> dict[str, dict[str, Any]]:
    roles: dict[str, dict[str, Any]] = yaml.safe_load(ADDON_ROLES.read_text())["roles"]
    return roles


@dataclass(frozen=True)
class RoleView:
    """One of our roles as the add-on reference describes one: service-account subjects, managed policy names,
    actions of its inline policies (patterns allowed, e.g. ``s3:Get*``)."""

    subjects: tuple[str, ...]
    managed: tuple[str, ...]
    actions: tuple[str, ...]


def role_view(template: Mapping[str, Any], role_id: str, account: str) -> RoleView:
    resources = template["Resources"]
    role = resources[role_id]["Properties"]
    trust = json.dumps(flatten(role["AssumeRolePolicyDocument"]))
    referenced = set(re.findall(r"<GetAtt:([A-Za-z0-9]+)\.Value>", trust))
    text = trust + "".join(json.dumps(flatten(resources[r]["Properties"])) for r in referenced)
    subjects = tuple(sorted(set(re.findall(r"system:serviceaccount:([^\"\\\\]+)", text))))
    managed = tuple(str(flatten(arn)).rsplit("/", 1)[1] for arn in role.get("ManagedPolicyArns", []))
    actions = tuple(sorted({a for s in identity_statements(template, role_id, account)
                            for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])}))
    return RoleView(subjects, managed, actions)


def missing_role_items(name: str, reference: Mapping[str, Any], ours: RoleView | None) -> list[str]:
    """``<role> trust <sa>``, ``<role> managed <policy>`` and ``<role> <action>`` of the reference that ours lacks;
    our subjects may be narrower than a reference pattern (every one of ours must match it)."""
    import fnmatch

    items = [f"{name} trust {reference['serviceAccount']}",
             *(f"{name} managed {policy}" for policy in reference["managedPolicies"]),
             *(f"{name} {action}" for action in reference["actions"])]
    if ours is None:
        return sorted(set(items) - excluded(ADDON_ROLES.name))
    missing = []
    pattern = reference["serviceAccount"]
    if not ours.subjects or not all(fnmatch.fnmatchcase(s, pattern) for s in ours.subjects):
        missing.append(items[0])
    missing += [f"{name} managed {p}" for p in reference["managedPolicies"] if p not in ours.managed]
    missing += [f"{name} {a}" for a in reference["actions"]
                if not any(fnmatch.fnmatchcase(a, ours_action) for ours_action in ours.actions)]
    return sorted(set(missing) - excluded(ADDON_ROLES.name))
