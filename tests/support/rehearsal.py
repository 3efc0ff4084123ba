"""The rehearsal's loader: what the synthesized templates create, created in a moto server that enforces IAM.

Every `AWS::IAM::Role` of every stack is created with its trust policy and every identity policy attached to it
(`AWS::IAM::Policy`, `AWS::IAM::ManagedPolicy`, the role's own `Policies`), with intrinsics resolved (`Ref`,
`Fn::GetAtt`, `Fn::Join`, `Fn::Sub`, `Fn::Select`, `Fn::Split`, `Fn::If`, `Fn::ImportValue` through the exporting
stack's `Outputs`, pseudo parameters); the KMS keys and aliases, S3 buckets (versioning, default encryption, the
bucket policies' unconditioned statements, the notifications of `Custom::S3BucketNotifications`) and SQS queues
of the templates are created too. A runtime then gets temporary credentials of its own role (sts:AssumeRole) and
talks real HTTP to the server. Nothing here names a logical id: the loader reads whatever the templates contain,
and runtimes find their role the way the cluster does (a service account's ``eks.amazonaws.com/role-arn``, a
function's ``Role``).

What moto 5.2 enforces, and what it does not (docs/rehearsal.md has the places in moto's source, and
tests/rehearsal/test_what_moto_enforces.py pins each point on the rehearsal's own server):

* identity policies of IAM users and assumed roles, with IAM's action names for S3 (ListObjectsV2 is
  ``s3:ListBucket``, HeadObject ``s3:GetObject``, a GET by version ``s3:GetObjectVersion``) and object/bucket ARNs;
  with the resource's ARN for SQS (not GetQueueUrl), IAM and STS; **against resource ``*`` only for every other
  service**, KMS included, so a key-scoped grant is refused by the server;
* **no condition** of any policy (every condition passes, whatever it says; an impossible Deny still denies);
* **no resource policy** grants anything to an authenticated caller (bucket, key, queue policies); a bucket policy's
  statements are applied, without principal and without conditions, as a gate on object requests, hence only its
  statements without a condition are installed;
* **no KMS call when S3 encrypts with SSE-KMS** (any key id is accepted, even one that does not exist);
* trust policies only on sts:AssumeRole with enforcement on, and a ``Service`` or ``Federated`` principal makes
  moto fail with HTTP 500: roles are assumed with enforcement paused for that call, and trust is not rehearsed.

What the rehearsal checks in moto's place, with moto's own evaluator (`moto.iam.access_control.IAMPolicy`) or its
request log: the KMS calls S3 makes for a runtime, against the key's ARN (`Rehearsal.identity_allows`); the
``s3:prefix`` a runtime really listed (`MotoServer.requests_since`); a grant of a bucket or key policy to a
principal that is not a role of the templates, emulated as its identity policy (`Rehearsal.resource_policy_grants`:
in one account an allow on either side suffices). Conditions stay unproven, and so do trust and key policies.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

PARTITION = "aws"
ADMIN_USER = "rehearsal-admin"
_CLIENT_CONFIG = Config(retries={"max_attempts": 1}, connect_timeout=5, read_timeout=30)


# Resource types whose Ref is their ARN (CloudFormation's return values).
_REF_IS_ARN = frozenset({"AWS::IAM::ManagedPolicy", "AWS::IAM::OIDCProvider", "AWS::SecretsManager::Secret",
                         "AWS::SNS::Topic", "AWS::CertificateManager::Certificate",
                         "AWS::ElasticLoadBalancingV2::LoadBalancer", "AWS::ElasticLoadBalancingV2::TargetGroup",
                         "AWS::StepFunctions::StateMachine"})
_NO_VALUE = object()  # AWS::NoValue: the property or list item is left out


class Unresolvable(Exception):
    """A value that exists only after deployment (a custom resource's attribute, for instance)."""


def _bounded(name: str, limit: int, allowed: str = r"[^A-Za-z0-9+=,.@_-]") -> str:
    """A deterministic physical name for a resource the template leaves unnamed (CloudFormation would generate one)."""
    name = re.sub(allowed, "-", name)
    if len(name) <= limit:
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:10]
    return f"{name[: limit - 11]}-{digest}"


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


# --------------------------------------------------------------------------------------------------- templates


class Resolver:
    """The templates of one synth, with intrinsics resolved to the values the rehearsal creates in moto."""

    def __init__(self, templates: Mapping[str, dict[str, Any]], *, account: str, region: str) -> None:
        self.templates = templates
        self.account, self.region = account, region
        self.pseudo = {
            "AWS::AccountId": account, "AWS::Region": region, "AWS::Partition": PARTITION,
            "AWS::URLSuffix": "amazonaws.com",
        }
        self.exports: dict[str, tuple[str, Any]] = {}
        for stack, template in templates.items():
            for output in template.get("Outputs", {}).values():
                export = output.get("Export", {}).get("Name")
                if export is not None:
                    self.exports[self.resolve(stack, export)] = (stack, output["Value"])
        # (stack, logical id) -> (key id, key ARN) of the KMS keys created in moto; filled by the Rehearsal.
        self.keys: dict[tuple[str, str], tuple[str, str]] = {}

    def resources(self, *types: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
        for stack, template in self.templates.items():
            for logical_id, resource in template.get("Resources", {}).items():
                if resource["Type"] in types:
                    yield stack, logical_id, resource

    def resource(self, stack: str, logical_id: str) -> dict[str, Any]:
        return self.templates[stack]["Resources"][logical_id]

    # Intrinsics ------------------------------------------------------------------------------------------------

    def resolve(self, stack: str, value: Any) -> Any:
        if isinstance(value, list):
            return [item for item in (self.resolve(stack, item) for item in value) if item is not _NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((function, argument),) = value.items()
            if function == "Ref":
                return self.ref(stack, argument)
            if function == "Fn::GetAtt":
                logical_id, attribute = argument if isinstance(argument, list) else argument.split(".", 1)
                return self.get_att(stack, logical_id, attribute)
            if function == "Fn::Join":
                delimiter, parts = argument
                return delimiter.join(str(part) for part in self.resolve(stack, parts))
            if function == "Fn::ImportValue":
                name = self.resolve(stack, argument)
                if name not in self.exports:
                    raise Unresolvable(f"no stack exports {name!r}")
                owner, exported = self.exports[name]
                return self.resolve(owner, exported)
            if function == "Fn::Select":
                index, items = argument
                return self.resolve(stack, items)[int(self.resolve(stack, index))]
            if function == "Fn::Split":
                delimiter, text = argument
                return str(self.resolve(stack, text)).split(delimiter)
            if function == "Fn::Sub":
                return self._sub(stack, argument)
            if function == "Fn::GetAZs":
                return [f"{self.region}{zone}" for zone in "abc"]
            if function == "Fn::If":
                condition, when_true, when_false = argument
                return self.resolve(stack, when_true if self.condition(stack, condition) else when_false)
            if function in ("Fn::Equals", "Fn::Not", "Fn::And", "Fn::Or", "Condition"):
                return self._truth(stack, value)
            if function.startswith("Fn::"):
                raise Unresolvable(f"{function} is not supported by the rehearsal")
        resolved = {key: self.resolve(stack, item) for key, item in value.items()}
        return {key: item for key, item in resolved.items() if item is not _NO_VALUE}

    def condition(self, stack: str, name: str) -> bool:
        return self._truth(stack, self.templates[stack]["Conditions"][name])

    def _truth(self, stack: str, value: Any) -> bool:
        ((function, argument),) = value.items()
        if function == "Condition":
            return self.condition(stack, argument)
        if function == "Fn::Equals":
            left, right = (self.resolve(stack, side) for side in argument)
            return left == right
        if function == "Fn::Not":
            return not self._truth(stack, argument[0])
        if function == "Fn::And":
            return all(self._truth(stack, item) for item in argument)
        if function == "Fn::Or":
            return any(self._truth(stack, item) for item in argument)
        raise Unresolvable(f"condition function {function}")

    def _sub(self, stack: str, argument: Any) -> str:
        text, variables = (argument, {}) if isinstance(argument, str) else argument

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"
            if name in variables:
                return str(self.resolve(stack, variables[name]))
            if "." in name and not name.startswith("AWS::"):
                logical_id, attribute = name.split(".", 1)
                return str(self.get_att(stack, logical_id, attribute))
            return str(self.ref(stack, name))

        return re.sub(r"\$\{([^}]+)\}", replace, text)

    def ref(self, stack: str, name: str) -> Any:
        if name in self.pseudo:
            return self.pseudo[name]
        if name == "AWS::StackName":
            return stack
        if name == "AWS::NoValue":
            return _NO_VALUE
        if name.startswith("AWS::"):
            raise Unresolvable(f"pseudo parameter {name} is not supported by the rehearsal")
        template = self.templates[stack]
        if name in template.get("Parameters", {}):
            parameter = template["Parameters"][name]
            if "Default" not in parameter:
                raise Unresolvable(f"parameter {name} has no default")
            return parameter["Default"]
        resource = template["Resources"][name]
        kind = resource["Type"]
        if kind == "AWS::KMS::Key":
            return self._key(stack, name)[0]
        if kind == "AWS::SQS::Queue":
            return f"https://sqs.{self.region}.amazonaws.com/{self.account}/{self.name(stack, name)}"
        if kind in _REF_IS_ARN:
            return self.get_att(stack, name, "Arn")
        if kind.startswith("Custom::") or kind == "AWS::CloudFormation::CustomResource":
            raise Unresolvable(f"Ref of custom resource {stack}/{name}")
        return self.name(stack, name)

    def name(self, stack: str, logical_id: str) -> str:
        """The physical name: the template's own, or a deterministic one when the template leaves it unnamed."""
        resource = self.resource(stack, logical_id)
        kind, properties = resource["Type"], resource.get("Properties", {})
        named_by = {
            "AWS::S3::Bucket": "BucketName", "AWS::IAM::Role": "RoleName", "AWS::SQS::Queue": "QueueName",
            "AWS::IAM::ManagedPolicy": "ManagedPolicyName", "AWS::Lambda::Function": "FunctionName",
            "AWS::Logs::LogGroup": "LogGroupName", "AWS::EKS::Cluster": "Name", "AWS::KMS::Alias": "AliasName",
            "AWS::IAM::Policy": "PolicyName", "AWS::ElastiCache::ServerlessCache": "ServerlessCacheName",
            "AWS::SageMaker::Cluster": "ClusterName",
        }.get(kind)
        if named_by and named_by in properties:
            return str(self.resolve(stack, properties[named_by]))
        generated = f"{stack}-{logical_id}"
        if kind == "AWS::S3::Bucket":
            return _bounded(generated.lower(), 63, r"[^a-z0-9-]")
        if kind == "AWS::SQS::Queue":
            return _bounded(generated, 80, r"[^A-Za-z0-9_-]") + (".fifo" if properties.get("FifoQueue") else "")
        return _bounded(generated, 64)

    def get_att(self, stack: str, logical_id: str, attribute: str) -> Any:
        resource = self.resource(stack, logical_id)
        kind = resource["Type"]
        account, region = self.account, self.region
        if kind.startswith("Custom::") or kind == "AWS::CloudFormation::CustomResource":
            raise Unresolvable(f"{stack}/{logical_id}.{attribute} exists only after deployment")
        if kind == "AWS::KMS::Key":
            key_id, arn = self._key(stack, logical_id)
            return {"Arn": arn, "KeyId": key_id}[attribute]
        name = self.name(stack, logical_id)
        if kind == "AWS::S3::Bucket":
            return {"Arn": f"arn:{PARTITION}:s3:::{name}", "DomainName": f"{name}.s3.amazonaws.com",
                    "RegionalDomainName": f"{name}.s3.{region}.amazonaws.com"}[attribute]
        if kind == "AWS::IAM::Role":
            path = resource.get("Properties", {}).get("Path", "/")
            return {"Arn": f"arn:{PARTITION}:iam::{account}:role{path}{name}", "RoleId": f"AROA{name.upper()[:17]}"}[
                attribute]
        if kind == "AWS::IAM::ManagedPolicy":
            return f"arn:{PARTITION}:iam::{account}:policy/{name}"
        if kind == "AWS::IAM::OIDCProvider":
            issuer = f"oidc.eks.{region}.amazonaws.com/id/{logical_id.upper()}"
            return f"arn:{PARTITION}:iam::{account}:oidc-provider/{issuer}"
        if kind == "AWS::SQS::Queue":
            return {"Arn": f"arn:{PARTITION}:sqs:{region}:{account}:{name}", "QueueName": name,
                    "QueueUrl": self.ref(stack, logical_id)}[attribute]
        if kind == "AWS::Logs::LogGroup" and attribute == "Arn":
            return f"arn:{PARTITION}:logs:{region}:{account}:log-group:{name}:*"
        if kind == "AWS::SecretsManager::Secret" and attribute in ("Arn", "Id"):
            return f"arn:{PARTITION}:secretsmanager:{region}:{account}:secret:{name}-AbCdEf"
        if kind == "AWS::SNS::Topic" and attribute in ("Arn", "TopicArn"):
            return f"arn:{PARTITION}:sns:{region}:{account}:{name}"
        if kind == "AWS::Lambda::Function" and attribute == "Arn":
            return f"arn:{PARTITION}:lambda:{region}:{account}:function:{name}"
        if kind == "AWS::ElastiCache::ServerlessCache" and attribute == "ARN":  # (the budget store)
            return f"arn:{PARTITION}:elasticache:{region}:{account}:serverlesscache:{name}"
        if kind == "AWS::SageMaker::Cluster" and attribute == "ClusterArn":  # (its id: SageMaker's, made up here)
            cluster_id = hashlib.sha1(name.encode()).hexdigest()[:12]
            return f"arn:{PARTITION}:sagemaker:{region}:{account}:cluster/{cluster_id}"
        if attribute == "Arn":  # any other resource: an ARN of its service that no rehearsed runtime touches
            service, kind_name = kind.split("::")[1].lower(), kind.split("::")[2].lower()
            return f"arn:{PARTITION}:{service}:{region}:{account}:{kind_name}/{name}"
        raise Unresolvable(f"{stack}/{logical_id}.{attribute} ({kind}) is not known to the rehearsal")

    def _key(self, stack: str, logical_id: str) -> tuple[str, str]:
        if (stack, logical_id) not in self.keys:
            raise Unresolvable(f"KMS key {stack}/{logical_id} is not created yet")
        return self.keys[(stack, logical_id)]

    # Policy documents ------------------------------------------------------------------------------------------

    def policy(self, stack: str, document: dict[str, Any], *, where: str) -> tuple[dict[str, Any], list[str]]:
        """A policy document resolved; a condition block that cannot be resolved before deployment (a trust
        policy's ``Custom::AWSCDKCfnJson`` OIDC claims) is dropped and reported, and so is an ``Allow`` statement
        whose resources cannot be (an attribute of a VPC, say: no rehearsed runtime touches those; dropping an
        allow can only refuse more). An unresolvable ``Deny`` is an error: dropping it would allow more."""
        dropped: list[str] = []
        statements = []
        for statement in _as_list(document.get("Statement", [])):
            try:
                resolved = self.resolve(stack, {k: v for k, v in statement.items() if k != "Condition"})
            except Unresolvable as reason:
                if statement.get("Effect") != "Allow":
                    raise
                dropped.append(f"{where}: statement {statement.get('Sid', statement.get('Action'))} dropped ({reason})")
                continue
            if "Condition" in statement:
                condition = {}
                for operator, block in statement["Condition"].items():
                    try:
                        condition[operator] = self.resolve(stack, block)
                    except Unresolvable as reason:
                        dropped.append(f"{where}: condition {operator} dropped ({reason})")
                if condition:
                    resolved["Condition"] = condition
            statements.append(resolved)
        return {**{k: v for k, v in document.items() if k != "Statement"}, "Statement": statements}, dropped


# ------------------------------------------------------------------------------------------- what gets created


@dataclass
class RoleSpec:
    stack: str
    logical_id: str
    name: str
    path: str
    arn: str
    trust: dict[str, Any]
    inline: dict[str, dict[str, Any]] = field(default_factory=dict)  # policy name -> document
    managed: list[str] = field(default_factory=list)  # customer managed policy ARNs created in moto
    aws_managed: list[str] = field(default_factory=list)  # AWS managed policies: not in moto (not attached)
    dropped: list[str] = field(default_factory=list)


@dataclass
class ManagedPolicySpec:
    name: str
    arn: str
    document: dict[str, Any]
    roles: list[str]


def role_specs(resolver: Resolver) -> tuple[list[RoleSpec], list[ManagedPolicySpec]]:
    """Every role of the templates with every identity policy attached to it, resolved."""
    roles: dict[str, RoleSpec] = {}
    for stack, logical_id, resource in resolver.resources("AWS::IAM::Role"):
        properties = resource.get("Properties", {})
        name = resolver.name(stack, logical_id)
        trust, dropped = resolver.policy(stack, properties["AssumeRolePolicyDocument"], where=f"{name} trust")
        spec = RoleSpec(stack, logical_id, name, properties.get("Path", "/"),
                        resolver.get_att(stack, logical_id, "Arn"), trust, dropped=dropped)
        for inline in properties.get("Policies", []):
            spec.inline[resolver.resolve(stack, inline["PolicyName"])], more = resolver.policy(
                stack, inline["PolicyDocument"], where=f"{name} inline policy")
            spec.dropped += more
        for arn in resolver.resolve(stack, properties.get("ManagedPolicyArns", [])):
            (spec.aws_managed if ":iam::aws:policy/" in arn else spec.managed).append(arn)
        roles[name] = spec
    managed: list[ManagedPolicySpec] = []
    for stack, logical_id, resource in resolver.resources("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
        properties = resource["Properties"]
        attached = [role.rsplit("/", 1)[-1] for role in resolver.resolve(stack, properties.get("Roles", []))]
        missing = [role for role in attached if role not in roles]
        if missing:  # a policy on a role no template creates: the rehearsal cannot hold it
            raise AssertionError(f"{stack}/{logical_id} is attached to roles no template creates: {missing}")
        document, dropped = resolver.policy(stack, properties["PolicyDocument"], where=f"{stack}/{logical_id}")
        if resource["Type"] == "AWS::IAM::Policy":
            for role in attached:
                roles[role].inline[resolver.name(stack, logical_id)] = document
                roles[role].dropped += dropped
        else:
            managed.append(ManagedPolicySpec(resolver.name(stack, logical_id),
                                             resolver.get_att(stack, logical_id, "Arn"), document, attached))
    return list(roles.values()), managed


# ---------------------------------------------------------------------------------------------- the moto server


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class MotoServer:
    """moto's server as a process of its own on loopback: its account id and its IAM enforcement are settings of
    that process only (moto keeps both in module globals, which an in-process server would share with every other
    test of the session)."""

    def __init__(self, *, account: str, log_path: Path) -> None:
        self.port = free_loopback_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MOTO_"))}
        # Every request is in this account, assumed-role credentials included (moto/core/responses.py,
        # get_current_account: MOTO_ACCOUNT_ID comes first); enforcement starts off, for the set-up.
        env.update(MOTO_ACCOUNT_ID=account, INITIAL_NO_AUTH_ACTION_COUNT="inf")
        with log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120  # a safety timeout: a loaded machine starts moto slowly
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/moto-api/data.json", timeout=10):
                    break
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto server did not start:\n{log_path.read_text()}") from None
                time.sleep(0.1)
        self.enforcing = False

    def enforce(self, on: bool) -> None:
        """moto's own switch for server mode (what `set_initial_no_auth_action_count` posts): 0 = every request
        is authenticated and authorized from now on; inf = none is."""
        request = urllib.request.Request(f"{self.url}/moto-api/reset-auth", data=b"0" if on else b"inf", method="POST",
                                         headers={"Content-Type": "text/plain"})  # not a form: moto reads the body
        with urllib.request.urlopen(request, timeout=10) as response:
            json.load(response)
        self.enforcing = on

    @contextlib.contextmanager
    def enforcement_paused(self) -> Iterator[None]:
        was = self.enforcing
        self.enforce(False)
        try:
            yield
        finally:
            self.enforce(was)

    def log_offset(self) -> int:
        return self.log_path.stat().st_size

    def requests_since(self, offset: int) -> list[tuple[str, str, int]]:
        """(method, path with query, status) of every request the server logged since `offset`: what a runtime
        really asked, for the checks moto cannot make itself (a condition on s3:prefix, say)."""
        with self.log_path.open("rb") as log:
            log.seek(offset)
            text = re.sub(r"\x1b\[[0-9;]*m", "", log.read().decode(errors="replace"))
        return [(method, path, int(status)) for method, path, status in
                re.findall(r'"([A-Z]+) (\S+) HTTP/[\d.]+" (\d{3})', text)]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# ------------------------------------------------------------------------------------------------ the rehearsal


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str
    token: str | None
    arn: str  # the caller: an IAM user or an assumed-role session

    def boto(self) -> dict[str, str]:
        values = {"aws_access_key_id": self.access_key, "aws_secret_access_key": self.secret_key}
        if self.token:
            values["aws_session_token"] = self.token
        return values


@dataclass
class Created:
    """What the loader created in moto, and what it could not carry over."""

    roles: dict[str, RoleSpec] = field(default_factory=dict)  # by role ARN
    buckets: dict[str, str] = field(default_factory=dict)  # name -> "stack/logical id"
    keys: dict[str, str] = field(default_factory=dict)  # key ARN -> "stack/logical id"
    aliases: dict[str, str] = field(default_factory=dict)  # alias name -> key ARN
    queues: dict[str, str] = field(default_factory=dict)  # queue ARN -> URL in moto
    bucket_policies: dict[str, dict[str, Any]] = field(default_factory=dict)  # bucket -> resolved, whole
    key_policies: dict[str, dict[str, Any]] = field(default_factory=dict)  # key ARN -> resolved (moto stores only)
    not_carried: list[str] = field(default_factory=list)


class Rehearsal:
    def __init__(self, server: MotoServer, templates: Mapping[str, dict[str, Any]], *, account: str,
                 region: str) -> None:
        self.server, self.account, self.region = server, account, region
        self.resolver = Resolver(templates, account=account, region=region)
        self.created = Created()
        self._credentials: dict[str, Credentials] = {}
        self.admin = self._create_admin()
        self._load()
        server.enforce(True)

    # Clients ---------------------------------------------------------------------------------------------------

    def client(self, service: str, credentials: Credentials | None = None) -> Any:
        return boto3.client(service, endpoint_url=self.server.url, region_name=self.region, config=_CLIENT_CONFIG,
                            **(credentials or self.admin).boto())

    def environment(self, credentials: Credentials) -> dict[str, str]:
        """The AWS part of a runtime's environment: its role's temporary credentials (in the cluster, IRSA's web
        identity token becomes the same), the region, and moto as the endpoint of every service; no profile."""
        env = {
            "AWS_ACCESS_KEY_ID": credentials.access_key, "AWS_SECRET_ACCESS_KEY": credentials.secret_key,
            "AWS_REGION": self.region, "AWS_DEFAULT_REGION": self.region, "AWS_ENDPOINT_URL": self.server.url,
            "AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
            "AWS_EC2_METADATA_DISABLED": "true",
        }
        if credentials.token:
            env["AWS_SESSION_TOKEN"] = credentials.token
        return env

    def _create_admin(self) -> Credentials:
        iam = boto3.client("iam", endpoint_url=self.server.url, region_name=self.region, config=_CLIENT_CONFIG,
                           aws_access_key_id="setup", aws_secret_access_key="setup")
        iam.create_user(UserName=ADMIN_USER)
        iam.put_user_policy(UserName=ADMIN_USER, PolicyName="everything", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName=ADMIN_USER)["AccessKey"]
        return Credentials(key["AccessKeyId"], key["SecretAccessKey"], None,
                           f"arn:{PARTITION}:iam::{self.account}:user/{ADMIN_USER}")

    # Loading ---------------------------------------------------------------------------------------------------

    def _load(self) -> None:
        resolver, created = self.resolver, self.created
        kms, iam, s3, sqs = (self.client(name) for name in ("kms", "iam", "s3", "sqs"))
        for stack, logical_id, _ in resolver.resources("AWS::KMS::Key"):
            key = kms.create_key(Description=f"{stack}/{logical_id}")["KeyMetadata"]
            resolver.keys[(stack, logical_id)] = (key["KeyId"], key["Arn"])
            created.keys[key["Arn"]] = f"{stack}/{logical_id}"
        for stack, logical_id, resource in resolver.resources("AWS::KMS::Key"):
            policy = resource.get("Properties", {}).get("KeyPolicy")
            if policy:  # stored, never evaluated by moto
                document, _ = resolver.policy(stack, policy, where=f"{stack}/{logical_id} key policy")
                created.key_policies[resolver.keys[(stack, logical_id)][1]] = document
                kms.put_key_policy(KeyId=resolver.keys[(stack, logical_id)][0], PolicyName="default",
                                   Policy=json.dumps(document))
        for stack, _, resource in resolver.resources("AWS::KMS::Alias"):
            properties = resource["Properties"]
            alias, target = resolver.resolve(stack, properties["AliasName"]), resolver.resolve(
                stack, properties["TargetKeyId"])
            key_id = target.rsplit("/", 1)[-1]
            kms.create_alias(AliasName=alias, TargetKeyId=key_id)
            created.aliases[alias] = next(arn for arn in created.keys if arn.endswith(key_id))

        roles, managed = role_specs(resolver)
        for spec in roles:
            iam.create_role(RoleName=spec.name, Path=spec.path, AssumeRolePolicyDocument=json.dumps(spec.trust))
            for name, document in spec.inline.items():
                if not document["Statement"]:  # every statement was dropped (listed in not_carried)
                    continue
                iam.put_role_policy(RoleName=spec.name, PolicyName=name, PolicyDocument=json.dumps(document))
            created.roles[spec.arn] = spec
            created.not_carried += spec.dropped
            created.not_carried += [f"{spec.name}: AWS managed policy {arn} not attached (not in moto)"
                                    for arn in spec.aws_managed]
        for policy in managed:
            iam.create_policy(PolicyName=policy.name, PolicyDocument=json.dumps(policy.document))
            for role in policy.roles:
                iam.attach_role_policy(RoleName=role, PolicyArn=policy.arn)
        for spec in roles:
            for arn in spec.managed:
                iam.attach_role_policy(RoleName=spec.name, PolicyArn=arn)

        for stack, logical_id, resource in resolver.resources("AWS::S3::Bucket"):
            properties = resource.get("Properties", {})
            name = resolver.name(stack, logical_id)
            self.create_bucket(name)
            created.buckets[name] = f"{stack}/{logical_id}"
            if properties.get("VersioningConfiguration", {}).get("Status") == "Enabled":
                s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
            encryption = resolver.resolve(stack, properties.get("BucketEncryption"))
            if encryption:
                s3.put_bucket_encryption(Bucket=name, ServerSideEncryptionConfiguration={"Rules": [
                    {"ApplyServerSideEncryptionByDefault": rule["ServerSideEncryptionByDefault"],
                     **({"BucketKeyEnabled": rule["BucketKeyEnabled"]} if "BucketKeyEnabled" in rule else {})}
                    for rule in encryption["ServerSideEncryptionConfiguration"]]})
        for stack, logical_id, resource in resolver.resources("AWS::S3::BucketPolicy"):
            properties = resource["Properties"]
            bucket = resolver.resolve(stack, properties["Bucket"])
            document, _ = resolver.policy(stack, properties["PolicyDocument"], where=f"{stack}/{logical_id}")
            created.bucket_policies[bucket] = document
            # moto applies a bucket policy to object requests without principal and without conditions:
            # a statement with a condition (deny insecure transport) would refuse every request.
            kept = [s for s in document["Statement"] if "Condition" not in s]
            created.not_carried += [f"bucket policy of {bucket}: {s.get('Sid') or s['Effect']} statement with a "
                                    f"condition not installed" for s in document["Statement"] if "Condition" in s]
            if kept:
                s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps({**document, "Statement": kept}))

        for stack, logical_id, resource in resolver.resources("AWS::SQS::Queue"):
            properties = resource.get("Properties", {})
            attributes = {name: str(properties[name]) for name in
                          ("VisibilityTimeout", "MessageRetentionPeriod", "DelaySeconds") if name in properties}
            if properties.get("FifoQueue"):
                attributes["FifoQueue"] = "true"
            url = sqs.create_queue(QueueName=resolver.name(stack, logical_id), Attributes=attributes)["QueueUrl"]
            created.queues[resolver.get_att(stack, logical_id, "Arn")] = url
        created.not_carried += [f"{stack}/{logical_id}: queue policy not installed (moto evaluates none)"
                                for stack, logical_id, _ in resolver.resources("AWS::SQS::QueuePolicy")]
        for stack, logical_id, resource in resolver.resources("Custom::S3BucketNotifications"):
            properties = resolver.resolve(stack, {k: v for k, v in resource["Properties"].items()
                                                  if k != "ServiceToken"})
            configuration = properties["NotificationConfiguration"]
            unsupported = sorted(set(configuration) - {"QueueConfigurations"})
            created.not_carried += [f"{stack}/{logical_id}: {name} not installed" for name in unsupported]
            if configuration.get("QueueConfigurations"):
                s3.put_bucket_notification_configuration(
                    Bucket=properties["BucketName"],
                    NotificationConfiguration={"QueueConfigurations": configuration["QueueConfigurations"]})

    def create_bucket(self, name: str) -> None:
        self.client("s3").create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": self.region})

    # Identities ------------------------------------------------------------------------------------------------

    def role(self, arn: str) -> RoleSpec:
        if arn not in self.created.roles:
            raise AssertionError(f"{arn} is not a role of the templates; they create: {sorted(self.created.roles)}")
        return self.created.roles[arn]

    def credentials(self, role_arn: str, session: str = "rehearsal") -> Credentials:
        """Temporary credentials of a role, from sts:AssumeRole called by the admin user. Enforcement is paused
        for that one call: with it on, moto evaluates the trust policy and fails with HTTP 500 on a statement
        whose principal is a Service or a Federated provider (moto/iam/access_control.py, _check_principal)."""
        cache_key = f"{role_arn}#{session}"
        if cache_key not in self._credentials:
            with self.server.enforcement_paused():
                answer = self.client("sts").assume_role(RoleArn=role_arn, RoleSessionName=session)
            values = answer["Credentials"]
            self._credentials[cache_key] = Credentials(values["AccessKeyId"], values["SecretAccessKey"],
                                                       values["SessionToken"], answer["AssumedRoleUser"]["Arn"])
        return self._credentials[cache_key]

    def create_role(self, name: str, policies: Mapping[str, dict[str, Any]], *, trusted: str | None = None) -> str:
        """A role that is not in the templates (a reader named in the config, a broken variant for a negative test)."""
        trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole", "Principal": {
            "AWS": trusted or f"arn:{PARTITION}:iam::{self.account}:root"}}]}
        iam = self.client("iam")
        arn = iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
        for policy_name, document in policies.items():
            iam.put_role_policy(RoleName=name, PolicyName=policy_name, PolicyDocument=json.dumps(document))
        return arn

    def role_variant(self, role_arn: str, suffix: str, keep: Any) -> str:
        """A copy of a synthesized role whose statements are only those for which ``keep(statement)`` is true."""
        spec = self.role(role_arn)
        policies = {}
        for name, document in spec.inline.items():
            policies[name] = {**document, "Statement": [s for s in document["Statement"] if keep(s)]}
        return self.create_role(_bounded(f"{spec.name}-{suffix}", 64), policies)

    def role_policies(self, role_name: str) -> list[dict[str, Any]]:
        """The identity policies moto holds for a role (inline and attached), as moto stores them."""
        iam = self.client("iam")
        documents = [iam.get_role_policy(RoleName=role_name, PolicyName=name)["PolicyDocument"]
                     for name in iam.list_role_policies(RoleName=role_name)["PolicyNames"]]
        for attached in iam.list_attached_role_policies(RoleName=role_name)["AttachedPolicies"]:
            policy = iam.get_policy(PolicyArn=attached["PolicyArn"])["Policy"]
            documents.append(iam.get_policy_version(PolicyArn=attached["PolicyArn"], VersionId=policy[
                "DefaultVersionId"])["PolicyVersion"]["Document"])
        return documents

    def identity_allows(self, role_arn: str, action: str, resource: str) -> bool:
        """moto's own evaluator (moto.iam.access_control.IAMPolicy, what the server runs on every request) applied
        to a call moto never checks itself: the KMS call S3 makes for an SSE-KMS object, against the key's ARN."""
        return self.identity_decider(role_arn)(action, resource)

    def identity_decider(self, role_arn: str) -> Callable[[str, str], bool]:
        """`identity_allows` for one role, its policies read from moto once (for many requests)."""
        from moto.iam.access_control import IAMPolicy, PermissionResult

        policies = [IAMPolicy(json.dumps(document)) for document in self.role_policies(role_arn.rsplit("/", 1)[-1])]

        def allows(action: str, resource: str) -> bool:
            results = [policy.is_action_permitted(action, resource) for policy in policies]
            return PermissionResult.DENIED not in results and PermissionResult.PERMITTED in results

        return allows

    def key_arn(self, key_id: str) -> str:
        """A key id, key ARN, alias name or alias ARN as the key ARN policies name (resolved by moto's KMS)."""
        return self.client("kms").describe_key(KeyId=key_id)["KeyMetadata"]["Arn"]

    def resource_policy_grants(self, principal_arn: str, requests: list[tuple[str, str]]
                               ) -> dict[str, list[dict[str, Any]]]:
        """What the templates' bucket and key policies say to this principal about these requests (action,
        resource ARN), as identity-policy statements (no Principal, NotPrincipal, NotResource or Condition), by
        bucket name or key ARN. In one account an allow in either the resource policy or the caller's identity
        policy suffices and an explicit deny in either refuses, so a test may attach these to the principal to
        emulate what moto cannot express.

        A statement counts when it names the principal (``Principal``, or ``*``, or a ``NotPrincipal`` that leaves
        it out; an account root only delegates to IAM: it grants nothing, a deny with it reaches everyone) and
        reaches one of the requests (action and resource); its conditions are decided for the principal's own
        request over TLS (`request_context`); its ``NotResource`` (which moto cannot evaluate: a statement without
        ``Resource`` applies everywhere there, even a deny turns into an allow) becomes the requests it reaches. An
        ``Allow`` conditioned on the request itself (``kms:ViaService``, ``s3:prefix``, ...) is kept as if the
        condition held; such a ``Deny`` raises `NotEmulable`, and so does ``NotAction``."""
        context = request_context(principal_arn, self.account)
        grants: dict[str, list[dict[str, Any]]] = {}
        for resource, document in [*self.created.bucket_policies.items(), *self.created.key_policies.items()]:
            for statement in document["Statement"]:
                if not _names_principal(statement, principal_arn):
                    continue
                if "NotAction" in statement:
                    raise NotEmulable(f"policy of {resource}: {statement}")
                reached = [(a, r) for a, r in requests
                           if any(_iam_like(a, pattern) for pattern in _as_list(statement["Action"]))
                           and (any(_iam_like(r, pattern) for pattern in _as_list(statement["Resource"]))
                                if "Resource" in statement else
                                not any(_iam_like(r, pattern) for pattern in _as_list(statement["NotResource"])))]
                if not reached:
                    continue
                holds = _conditions_hold(statement.get("Condition", {}), context)
                if holds is None and statement["Effect"] == "Deny":
                    raise NotEmulable(f"policy of {resource}: cannot decide whether {statement} applies")
                if holds is False:
                    continue
                emulated = {k: v for k, v in statement.items()
                            if k not in ("Principal", "NotPrincipal", "NotResource", "Condition")}
                if "NotResource" in statement:
                    emulated["Resource"] = sorted({r for _, r in reached})
                grants.setdefault(resource, []).append(emulated)
        return grants

    @staticmethod
    def statements_allow(statements: list[dict[str, Any]], action: str, resource: str) -> bool:
        """moto's evaluator on a list of statements (an emulated grant), as for `identity_allows`."""
        from moto.iam.access_control import IAMPolicy, PermissionResult

        document = json.dumps({"Version": "2012-10-17", "Statement": statements})
        return IAMPolicy(document).is_action_permitted(action, resource) == PermissionResult.PERMITTED


class NotEmulable(Exception):
    """A resource policy statement the emulation cannot turn into identity-policy terms (not an AssertionError: a
    strict xfail expecting one must not swallow this)."""


def _iam_like(value: str, pattern: str) -> bool:
    """IAM's wildcards: * any run of characters, ? one; actions are case-insensitive, ARNs are not."""
    if ":" in value and not value.startswith("arn:"):
        return fnmatch.fnmatchcase(value.lower(), pattern.lower())
    return fnmatch.fnmatchcase(value, pattern)


def request_context(principal_arn: str, account: str) -> dict[str, str]:
    """The condition keys known for a request of a role's session over TLS 1.2+, in the principal's account."""
    return {"aws:PrincipalArn": principal_arn, "aws:PrincipalAccount": account, "aws:ResourceAccount": account,
            "aws:SecureTransport": "true", "s3:TlsVersion": "1.3", "aws:PrincipalType": "AssumedRole",
            "aws:PrincipalIsAWSService": "false"}


def _names_principal(statement: dict[str, Any], principal_arn: str) -> bool:
    account_root = f"{principal_arn.split(':role/')[0]}:root"
    if "NotPrincipal" in statement:
        excluded = statement["NotPrincipal"]
        listed = _as_list(excluded.get("AWS", [])) if isinstance(excluded, dict) else [excluded]
        return principal_arn not in listed and account_root not in listed
    principal = statement.get("Principal", {})
    listed = _as_list(principal.get("AWS", [])) if isinstance(principal, dict) else [principal]
    # An account's root in a resource policy delegates to that account's IAM: a deny reaches everyone in it,
    # an allow grants nobody by itself.
    return "*" in listed or principal_arn in listed or (statement["Effect"] == "Deny" and account_root in listed)


def _conditions_hold(condition: dict[str, Any], context: Mapping[str, str]) -> bool | None:
    """IAM's answer for a condition block given the known keys; None when it needs a key not known."""
    results = []
    for operator, block in condition.items():
        base = operator.removesuffix("IfExists")
        for key, expected in block.items():
            values = [str(value).lower() if isinstance(value, bool) else str(value) for value in _as_list(expected)]
            if key not in context:
                if operator.endswith("IfExists"):
                    continue
                return None
            actual = context[key]
            if base in ("StringEquals", "ArnEquals", "Bool"):
                results.append(actual in values)
            elif base in ("StringNotEquals", "ArnNotEquals"):
                results.append(actual not in values)
            elif base in ("StringLike", "ArnLike"):
                results.append(any(fnmatch.fnmatchcase(actual, value) for value in values))
            elif base in ("StringNotLike", "ArnNotLike"):
                results.append(not any(fnmatch.fnmatchcase(actual, value) for value in values))
            elif base.startswith("Numeric"):
                compare = {"NumericEquals": float.__eq__, "NumericNotEquals": float.__ne__,
                           "NumericLessThan": float.__lt__, "NumericLessThanEquals": float.__le__,
                           "NumericGreaterThan": float.__gt__, "NumericGreaterThanEquals": float.__ge__}[base]
                results.append(any(compare(float(actual), float(value)) for value in values))
            else:
                return None
    return all(results)


# ------------------------------------------------------------------------------------------------ the runtimes


# The web identity a container is given (charts/pod_credentials.py): the rehearsal hands it its role's credentials
# directly, so these stay out of the environment it runs with.
WEB_IDENTITY = ("AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE")


@dataclass(frozen=True)
class ContainerRuntime:
    """A container of a workload in the manifests, with the role it runs under: its own (``AWS_ROLE_ARN`` with a token
    of its own), else its service account's annotation (the EKS webhook gives it to every container)."""

    workload: str  # kind/namespace/name
    container: dict[str, Any]
    role_arn: str | None
    mounts: dict[str, str]  # mountPath -> volume name

    @property
    def name(self) -> str:
        return f"{self.workload}/{self.container['name']}"

    @property
    def env(self) -> dict[str, str]:
        return {item["name"]: item.get("value", "") for item in self.container.get("env", [])
                if item["name"] not in WEB_IDENTITY}


def container_runtimes(manifests: Mapping[str, list[dict[str, Any]]]) -> list[ContainerRuntime]:
    objects = [obj for documents in manifests.values() for obj in documents]
    role_of = {(obj["metadata"].get("namespace"), obj["metadata"]["name"]):
               obj["metadata"].get("annotations", {}).get("eks.amazonaws.com/role-arn")
               for obj in objects if obj["kind"] == "ServiceAccount"}
    found = []
    for obj in objects:
        namespace, name = obj["metadata"].get("namespace"), obj["metadata"]["name"]
        workload = f"{obj['kind']}/{namespace}/{name}"
        if obj["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            pod = obj["spec"]["template"]["spec"]
            account, containers = pod.get("serviceAccountName", "default"), [
                *pod.get("initContainers", []), *pod.get("containers", [])]
        elif obj["kind"] in ("InferenceEndpointConfig", "JumpStartModel"):
            kubernetes = obj["spec"].get("kubernetes", {})
            account, containers = kubernetes.get("serviceAccountName"), kubernetes.get("initContainers", [])
        else:
            continue
        for container in containers:
            mounts = {mount["mountPath"]: mount["name"] for mount in container.get("volumeMounts", [])}
            own = next((item.get("value") for item in container.get("env", []) if item["name"] == "AWS_ROLE_ARN"), None)
            found.append(ContainerRuntime(workload, container, own or role_of.get((namespace, account)), mounts))
    return found


@dataclass(frozen=True)
class FunctionRuntime:
    """A Lambda function of the templates: its role, handler and environment, and the queues it is fed from."""

    stack: str
    logical_id: str
    role_arn: str
    handler: str
    environment: dict[str, str]
    queue_arns: list[str]
    code_key: str | None  # the S3 key of its code asset (None: inline code)

    def code_folder(self, cdk_out: Path) -> Path:
        """The staged asset in the cloud assembly: exactly the code the template deploys."""
        assets = json.loads((cdk_out / f"{self.stack}.assets.json").read_text())["files"].values()
        [asset] = [a for a in assets if any(d["objectKey"] == self.code_key for d in a["destinations"].values())]
        assert asset["source"].get("packaging") == "zip", asset
        return cdk_out / asset["source"]["path"]


def function_runtimes(resolver: Resolver) -> list[FunctionRuntime]:
    sources: dict[tuple[str, str], list[str]] = {}
    for stack, _, resource in resolver.resources("AWS::Lambda::EventSourceMapping"):
        properties = resource["Properties"]
        function = properties["FunctionName"]
        if isinstance(function, dict) and "Ref" in function:
            arn = resolver.resolve(stack, properties["EventSourceArn"])
            sources.setdefault((stack, function["Ref"]), []).append(arn)
    found = []
    for stack, logical_id, resource in resolver.resources("AWS::Lambda::Function"):
        properties = resource["Properties"]
        try:
            variables = resolver.resolve(stack, properties.get("Environment", {}).get("Variables", {}))
            role = resolver.resolve(stack, properties["Role"])
        except Unresolvable:
            continue  # a provider framework's function; not a runtime of this project
        code_key = properties.get("Code", {}).get("S3Key")
        found.append(FunctionRuntime(stack, logical_id, role, properties.get("Handler", ""),
                                     {k: str(v) for k, v in variables.items()},
                                     [arn for arn in sources.get((stack, logical_id), []) if ":sqs:" in arn],
                                     resolver.resolve(stack, code_key) if code_key else None))
    return found


def checkout_import_path(repo: Path, folder: Path) -> Path:
    """A folder for PYTHONPATH that makes ``import hyperpod_inference_iac`` (and its subpackages) this checkout's
    code, as pyproject's package-dir maps it. The venv's editable install may point at another checkout (git
    worktrees sharing one venv); its finder comes after PYTHONPATH, so the synth then rehearses this checkout."""
    import tomllib

    mapping = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    for package, source in sorted(mapping.items(), key=lambda item: item[0].count(".")):
        target = folder.joinpath(*package.split("."))
        if target.is_symlink():
            target.unlink()
        target.mkdir(parents=True, exist_ok=True)
        for entry in (repo / source).iterdir():
            link = target / entry.name
            if not link.exists() and entry.name != "__pycache__":
                link.symlink_to(entry)
    return folder


def split_s3_uri(uri: str) -> tuple[str, str]:
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    return bucket, prefix


# ---------------------------------------------------------------------------- calls moto checks against "*" only


# boto3's S3 operations as IAM names them (moto/s3/responses.py ACTION_MAP says the same)
_S3_IAM_ACTIONS = {"PutObject": "PutObject", "CreateMultipartUpload": "PutObject", "UploadPart": "PutObject",
                   "CompleteMultipartUpload": "PutObject", "AbortMultipartUpload": "AbortMultipartUpload",
                   "GetObject": "GetObject", "HeadObject": "GetObject", "DeleteObject": "DeleteObject"}


def without_action(documents: list[dict[str, Any]], action: str) -> list[dict[str, Any]]:
    """Identity policies with one action taken out of every statement (a statement left without any goes): the role
    of a negative rehearsal, for a `CallGate`."""
    result = []
    for document in documents:
        statements = []
        for statement in document["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            kept = [a for a in actions if a != action]
            if kept:
                statements.append({**statement, "Action": kept})
        result.append({**document, "Statement": statements})
    return result


@dataclass
class CallGate:
    """IAM's decision for the calls of a function to services moto authorizes against resource ``*`` only (Secrets
    Manager, EKS, SageMaker, Glue, CloudWatch: a grant scoped to a secret or a table would be refused by the server,
    and one on another resource not told apart), made in the function's own process before each call (a
    ``before-parameter-build`` hook on every botocore client, `install`) with moto's own evaluator
    (`moto.iam.access_control.IAMPolicy`) on the resources IAM authorizes the call on (`requests_of`), as the
    templates' policies name them:

    * the role's identity policies as moto holds them (`Rehearsal.role_policies`): an allow is needed, an explicit
      deny refuses;
    * the resource's own policy (a secret's ``AWS::SecretsManager::ResourcePolicy``), whose statements apply to the
      role as `Rehearsal.resource_policy_grants` decides it (principal; conditions for the role's own request:
      ``aws:PrincipalArn`` is the role's ARN): its deny refuses, its allow suffices (one account).

    A refused call raises ``AccessDeniedException`` in the function, naming the action and the resource, as AWS
    does; a call the gate cannot place raises `NotEmulable` (never allowed). Every decision is appended to ``record``
    (JSON lines), refusals too. What an allowed call does is then moto's (enforcement paused while the function
    runs: the gate decides instead). Conditions are not decided (as in moto); KMS and trust are not either."""

    principal_arn: str  # the role's ARN (aws:PrincipalArn of its sessions)
    account: str
    region: str
    identity: list[dict[str, Any]]
    resource_policies: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # resource ARN -> statements
    # what the runtime names (a secret's name or moto's ARN, "cluster/nodegroup", a HyperPod cluster's name) -> the
    # resource's ARN as the templates' policies name it
    resources: dict[str, str] = field(default_factory=dict)
    record: str | None = None  # a file the runtime's process appends each call to (JSON lines)

    def requests_of(self, service: str, operation: str, params: Mapping[str, Any]) -> list[tuple[str, str]]:
        """(action, resource) that IAM authorizes for the call (all of them must allow it), the resources as the
        templates name them."""
        def known(identifier: str) -> str:
            if identifier not in self.resources:
                raise NotEmulable(f"{service}:{operation} named {identifier!r}, which the gate does not know")
            return self.resources[identifier]

        action = f"{service}:{operation}"
        if (service, operation) == ("sts", "GetCallerIdentity"):
            return []  # (no permission is needed: AWS answers it for any caller)
        if service == "s3" and operation in _S3_IAM_ACTIONS:
            name = _S3_IAM_ACTIONS[operation]
            if params.get("VersionId") and name in ("GetObject", "DeleteObject"):
                name += "Version"  # (a version's read or delete is its own IAM action)
            return [(f"s3:{name}", f"arn:{PARTITION}:s3:::{params['Bucket']}/{params['Key']}")]
        if service == "s3" and operation in ("ListObjectsV2", "ListObjects", "ListObjectVersions"):
            listing = "s3:ListBucketVersions" if operation == "ListObjectVersions" else "s3:ListBucket"
            return [(listing, f"arn:{PARTITION}:s3:::{params['Bucket']}")]
        if service == "secretsmanager" and "SecretId" in params:
            return [(action, known(str(params["SecretId"])))]
        if service == "eks" and operation == "DescribeNodegroup":
            return [(action, known(f"{params['clusterName']}/{params['nodegroupName']}"))]
        if service == "sagemaker" and operation == "ListClusterNodes":
            return [(action, known(str(params["ClusterName"])))]
        if service == "glue" and operation in ("GetDatabase", "GetTable", "UpdateTable"):
            catalog = f"arn:{PARTITION}:glue:{self.region}:{params.get('CatalogId') or self.account}"
            database = params.get("DatabaseName") or params["Name"]
            found = [f"{catalog}:catalog", f"{catalog}:database/{database}"]
            if operation != "GetDatabase":
                found.append(f"{catalog}:table/{database}/{params.get('Name') or params['TableInput']['Name']}")
            return [(action, resource) for resource in found]
        if (service, operation) in (("secretsmanager", "GetRandomPassword"), ("cloudwatch", "GetMetricData")):
            return [(action, "*")]  # (no resource type)
        raise NotEmulable(f"the gate does not know the resources of {action}")

    def refusal(self, action: str, resource: str) -> str | None:
        """Why IAM would refuse the call, or None."""
        from moto.iam.access_control import IAMPolicy, PermissionResult

        results = [IAMPolicy(json.dumps(document)).is_action_permitted(action, resource) for document in self.identity]
        if PermissionResult.DENIED in results:
            return "an explicit deny in an identity-based policy"
        allowed = PermissionResult.PERMITTED in results
        context = request_context(self.principal_arn, self.account)
        for statement in self.resource_policies.get(resource, []):
            if not _names_principal(statement, self.principal_arn) or not any(
                    _iam_like(action, pattern) for pattern in _as_list(statement.get("Action", []))):
                continue
            holds = _conditions_hold(statement.get("Condition", {}), context)
            if holds is None:
                raise NotEmulable(f"cannot decide whether {statement} applies to {action} on {resource}")
            if holds and statement["Effect"] == "Deny":
                return f"an explicit deny in a resource-based policy ({statement.get('Sid')})"
            allowed = allowed or holds
        return None if allowed else "no identity-based policy allows the action"

    def hook(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        from botocore.exceptions import ClientError

        for action, resource in self.requests_of(model.service_model.service_name, model.name, params):
            reason = self.refusal(action, resource)
            if self.record:
                with open(self.record, "a") as out:
                    out.write(json.dumps({"action": action, "resource": resource, "refused": reason}) + "\n")
            if reason:
                raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": (
                    f"User: {self.principal_arn} is not authorized to perform: {action} on resource: {resource} "
                    f"because {reason}")}}, model.name)

    def install(self) -> None:
        """On every botocore client the runtime's process makes (boto3's default session, a library's own session),
        before the runtime makes them."""
        import botocore.session

        original = botocore.session.Session.create_client
        gate = self

        def create_client(session: Any, *args: Any, **kwargs: Any) -> Any:
            client = original(session, *args, **kwargs)
            client.meta.events.register("before-parameter-build", gate.hook)
            return client

        botocore.session.Session.create_client = create_client  # type: ignore[method-assign]

    def dump(self, path: Path) -> None:
        path.write_text(json.dumps({k: getattr(self, k) for k in (
            "principal_arn", "account", "region", "identity", "resource_policies", "resources", "record")}))

    @classmethod
    def load(cls, path: str | Path) -> CallGate:
        return cls(**json.loads(Path(path).read_text()))
