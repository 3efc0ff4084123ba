"""The composition check: every runtime the manifests configure to touch S3 or KMS, against the role it runs
under in the synthesized templates.

Runtimes and what they touch, read from the manifests (``dist/``) as the cluster will see them:

* a portable server's capture sidecar: ``s3:PutObject`` under ``CAPTURE_S3_URI``, ``kms:GenerateDataKey`` on
  ``KMS_KEY_ID``;
* an NVMe weights loader (portable or operator workload): ``s3:GetObject`` under ``MODEL_SOURCE_S3_URI`` and
  ``s3:ListBucket`` on its bucket;
* the inference operator for each custom resource: ``s3:PutObject`` under ``dataCapture.s3Uri`` (its tiers'
  prefixes), ``kms:GenerateDataKey`` on each tier's ``kmsKeyId``, ``s3:PutObject`` under
  ``tlsCertificateOutputS3Uri``.

Each runtime's role is found the way the cluster finds it (the service account's IRSA annotation, or the
operator's execution role name) and its identity policies are evaluated with IAM's matching rules for
actions and resources. Conditions are not evaluated (the moto rehearsal cannot either); KMS aliases are
resolved to their keys through the templates' ``AWS::KMS::Alias`` resources.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

PSEUDO = {"AWS::Partition": "aws", "AWS::URLSuffix": "amazonaws.com", "AWS::NoValue": ""}


@dataclass(frozen=True)
class Access:
    runtime: str
    role_name: str
    action: str
    resource: str


class Templates:
    """All stacks of one synth, with references resolved to comparable strings."""

    def __init__(self, templates: Mapping[str, dict[str, Any]], account: str, region: str) -> None:
        self.templates = templates
        self.pseudo = {**PSEUDO, "AWS::AccountId": account, "AWS::Region": region}
        self.exports: dict[str, tuple[str, Any]] = {}
        for stack, template in templates.items():
            for output in template.get("Outputs", {}).values():
                name = output.get("Export", {}).get("Name")
                if name:
                    self.exports[name] = (stack, output["Value"])
        self.key_of_alias: dict[str, str] = {}
        for stack, template in templates.items():
            for resource in template["Resources"].values():
                if resource["Type"] == "AWS::KMS::Alias":
                    key = self.text(stack, resource["Properties"]["TargetKeyId"])
                    self.key_of_alias[resource["Properties"]["AliasName"]] = key

    def text(self, stack: str, value: Any) -> str:
        """A template value as a string; a resource's ARN is ``<stack/LogicalId.Arn>`` wherever it is used."""
        if isinstance(value, str):
            return value
        if isinstance(value, dict):
            if "Ref" in value:
                ref = value["Ref"]
                return self.pseudo.get(ref, f"<{stack}/{ref}>")
            if "Fn::GetAtt" in value:
                logical_id, attribute = value["Fn::GetAtt"]
                return f"<{stack}/{logical_id}.{attribute}>"
            if "Fn::Join" in value:
                delimiter, parts = value["Fn::Join"]
                return delimiter.join(self.text(stack, part) for part in parts)
            if "Fn::Select" in value:
                index, source = value["Fn::Select"]
                if "Fn::Split" in source:
                    delimiter, text = source["Fn::Split"]
                    return self.text(stack, text).split(delimiter)[index] if delimiter in self.text(stack, text) \
                        else f"<{stack}/select {index}>"
            if "Fn::ImportValue" in value:
                owner, exported = self.exports[value["Fn::ImportValue"]]
                return self.text(owner, exported)
        raise AssertionError(f"cannot resolve {value!r}")

    def role_statements(self, role_name: str) -> list[dict[str, Any]]:
        for stack, template in self.templates.items():
            for logical_id, resource in template["Resources"].items():
                if resource["Type"] == "AWS::IAM::Role" and resource["Properties"].get("RoleName") == role_name:
                    return list(self._statements_of(stack, template, logical_id))
        raise AssertionError(f"no role named {role_name} in the templates")

    def _statements_of(self, stack: str, template: dict[str, Any], role_id: str) -> Iterator[dict[str, Any]]:
        for resource in template["Resources"].values():
            if resource["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in resource["Properties"]["Roles"]:
                for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
                    resources = statement["Resource"] if isinstance(statement["Resource"], list) \
                        else [statement["Resource"]]
                    actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
                    yield {"Effect": statement["Effect"], "Action": actions,
                           "Resource": [self.text(stack, r) for r in resources]}

    def trusted_audience(self, role_name: str) -> str:
        """The ``<issuer>:aud`` a role's IRSA trust requires (its condition block is a ``CfnJson`` value)."""
        for stack, template in self.templates.items():
            for resource in template["Resources"].values():
                if resource["Type"] != "AWS::IAM::Role" or resource["Properties"].get("RoleName") != role_name:
                    continue
                (statement,) = resource["Properties"]["AssumeRolePolicyDocument"]["Statement"]
                logical_id, _ = statement["Condition"]["StringEquals"]["Fn::GetAtt"]
                value = self.text(stack, template["Resources"][logical_id]["Properties"]["Value"])
                (audience,) = [v for k, v in json.loads(value).items() if k.endswith(":aud")]
                return str(audience)
        raise AssertionError(f"no role named {role_name} in the templates")

    def key_arn(self, key_id: str) -> str:
        """A manifest's ``kmsKeyId`` (key ARN or alias ARN) as the key ARN policies name."""
        alias = re.match(r"^arn:aws[a-z-]*:kms:[^:]+:\d{12}:(alias/.+)$", key_id)
        return self.key_of_alias[alias[1]] if alias else key_id


def _matches(pattern: str, value: str) -> bool:
    # IAM wildcards: * is any run of characters (including "/"), ? one character; case-sensitive.
    return fnmatch.fnmatchcase(value, pattern)


def allowed(statements: list[dict[str, Any]], action: str, resource: str) -> bool:
    allows = any(s["Effect"] == "Allow" and any(_matches(a, action) for a in s["Action"])
                 and any(_matches(r, resource) for r in s["Resource"]) for s in statements)
    denies = any(s["Effect"] == "Deny" and any(_matches(a, action) for a in s["Action"])
                 and any(_matches(r, resource) for r in s["Resource"]) for s in statements)
    return allows and not denies


def _s3(uri: str, partition: str = "aws") -> tuple[str, str]:
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    return f"arn:{partition}:s3:::{bucket}", prefix


def accesses(manifests: Mapping[str, list[dict[str, Any]]], templates: Templates, *,
             operator_role: str) -> list[Access]:
    """What each runtime of the manifests is configured to touch, with the role it runs under."""
    found: list[Access] = []
    objects = [obj for file in manifests.values() for obj in file]
    role_of = {(obj["metadata"].get("namespace"), obj["metadata"]["name"]):
               obj["metadata"].get("annotations", {}).get("eks.amazonaws.com/role-arn", "").rsplit("/", 1)[-1]
               for obj in objects if obj["kind"] == "ServiceAccount"}
    for obj in objects:
        namespace, name = obj["metadata"].get("namespace"), obj["metadata"]["name"]
        if obj["kind"] == "Deployment":
            pod = obj["spec"]["template"]["spec"]
            role = role_of[(namespace, pod["serviceAccountName"])]
            for container in [*pod.get("initContainers", []), *pod.get("containers", [])]:
                found += _container_accesses(f"{name}/{container['name']}", container_role(container, role),
                                             container, templates)
        if obj["kind"] in ("InferenceEndpointConfig", "JumpStartModel"):
            spec = obj["spec"]
            kubernetes = spec.get("kubernetes", {})
            account = kubernetes.get("serviceAccountName")
            for container in kubernetes.get("initContainers", []):
                found += _container_accesses(f"{name}/{container['name']}",
                                             container_role(container, role_of[(namespace, account)]),
                                             container, templates)
            capture = spec.get("dataCapture")
            if capture and capture.get("s3Uri"):
                bucket, prefix = _s3(capture["s3Uri"])
                for tier, segment in (("sagemakerEndpoint", "sme"), ("modelPod", "pod")):
                    block = capture.get(tier)
                    if not block or not block.get("enabled", True):
                        continue
                    where = f"{bucket}/{prefix.rstrip('/')}/<hash>/{segment}/<object>"
                    found.append(Access(f"{name} operator ({tier})", operator_role, "s3:PutObject", where))
                    if block.get("kmsKeyId"):
                        found.append(Access(f"{name} operator ({tier})", operator_role, "kms:GenerateDataKey",
                                            templates.key_arn(block["kmsKeyId"])))
            output = spec.get("tlsConfig", {}).get("tlsCertificateOutputS3Uri")
            if output:
                bucket, prefix = _s3(output)
                found.append(Access(f"{name} operator (TLS)", operator_role, "s3:PutObject",
                                    f"{bucket}/{prefix.rstrip('/')}/<object>".replace("//", "/")))
    return found


def container_role(container: dict[str, Any], pod_role: str) -> str:
    """The role a container runs under: its own (``AWS_ROLE_ARN`` with a web identity token of its own), else the
    service account's (the EKS webhook's injection), else none ("")."""
    env = {item["name"]: item.get("value", "") for item in container.get("env", [])}
    return env["AWS_ROLE_ARN"].rsplit("/", 1)[-1] if "AWS_ROLE_ARN" in env else pod_role


@dataclass(frozen=True)
class Holder:
    """A container that holds AWS credentials: its role and the audience of the token it gets (its own projected
    token's, or ``sts.amazonaws.com`` through the service account's annotation)."""

    runtime: str
    role_name: str
    audience: str


def credential_holders(manifests: Mapping[str, list[dict[str, Any]]]) -> list[Holder]:
    """Every container of every pod the manifests define that can get AWS credentials, and from where."""
    objects = [obj for file in manifests.values() for obj in file]
    role_of = {(obj["metadata"].get("namespace"), obj["metadata"]["name"]):
               obj["metadata"].get("annotations", {}).get("eks.amazonaws.com/role-arn", "").rsplit("/", 1)[-1]
               for obj in objects if obj["kind"] == "ServiceAccount"}
    holders = []
    for obj in objects:
        namespace, name = obj["metadata"].get("namespace"), obj["metadata"]["name"]
        if obj["kind"] == "Deployment":
            pod = obj["spec"]["template"]["spec"]
            account, containers = pod["serviceAccountName"], [*pod.get("initContainers", []), *pod["containers"]]
            volumes = pod.get("volumes", [])
        elif obj["kind"] == "InferenceEndpointConfig":
            kubernetes = obj["spec"].get("kubernetes", {})
            account, containers = kubernetes.get("serviceAccountName"), kubernetes.get("initContainers", [])
            volumes = kubernetes.get("volumes", [])
        else:
            continue
        tokens = {v["name"]: v["projected"]["sources"][0]["serviceAccountToken"]["audience"]
                  for v in volumes if "projected" in v}
        pod_role = role_of.get((namespace, account), "")
        for container in containers:
            env = {item["name"]: item.get("value", "") for item in container.get("env", [])}
            runtime = f"{name}/{container['name']}"
            if "AWS_ROLE_ARN" in env:
                mounted = [tokens[m["name"]] for m in container.get("volumeMounts", []) if m["name"] in tokens]
                holders.append(Holder(runtime, env["AWS_ROLE_ARN"].rsplit("/", 1)[-1], ",".join(mounted)))
            elif pod_role:
                holders.append(Holder(runtime, pod_role, "sts.amazonaws.com"))  # the EKS webhook's injection
    return holders


def _container_accesses(runtime: str, role: str, container: dict[str, Any], templates: Templates) -> list[Access]:
    env = {item["name"]: item.get("value", "") for item in container.get("env", [])}
    found = []
    if "CAPTURE_S3_URI" in env:
        bucket, prefix = _s3(env["CAPTURE_S3_URI"])
        found.append(Access(runtime, role, "s3:PutObject", f"{bucket}/{prefix}<object>"))
        if env.get("KMS_KEY_ID"):
            found.append(Access(runtime, role, "kms:GenerateDataKey", templates.key_arn(env["KMS_KEY_ID"])))
    if "MODEL_SOURCE_S3_URI" in env:
        bucket, prefix = _s3(env["MODEL_SOURCE_S3_URI"])
        found.append(Access(runtime, role, "s3:GetObject", f"{bucket}/{prefix}<object>"))
        found.append(Access(runtime, role, "s3:ListBucket", bucket))
    return found


def denied(found: list[Access], templates: Templates) -> list[Access]:
    """The accesses whose role does not allow them."""
    return [access for access in found
            if not allowed(templates.role_statements(access.role_name), access.action, access.resource)]
