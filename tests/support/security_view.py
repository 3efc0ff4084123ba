"""The security-relevant part of a CloudFormation template, in a form two synths can be compared by.

:func:`security_view` keeps, per resource, what decides who may do what and what is protected how: IAM
statements and trust policies, bucket, key, topic, queue, secret and log resource policies (log delivery
statements included), Lambda permissions, encryption settings, public access blocks, object ownership and
server access logging, security group rules, the EKS cluster's endpoint, encryption and access entries, the OIDC
provider's client IDs, launch templates' metadata options and volumes, flow logs, whether an SDK-call custom resource
installs the latest AWS SDK at run time. Everything else (names of
log groups, tags, dependencies, Lambda code) is left out.

It is normalised so that two renderings of the same permissions compare equal: the partition
(``{"Ref": "AWS::Partition"}`` and ``${AWS::Partition}`` are the literal ``aws``, ``AWS::URLSuffix``
``amazonaws.com``, and ``Fn::Join`` pieces that become literal are joined), and each policy statement is cut
into atoms (one effect, principal, action and resource with the statement's conditions and ``Sid``), so
``@aws-cdk/aws-iam:minimizePolicies`` merging statements or sorting actions changes nothing. References to a
cluster's OIDC provider name it by the cluster's path: aws_eks_v2 makes it a native ``AWS::IAM::OIDCProvider`` or
a custom resource (``@aws-cdk/aws-eks:useNativeOidcProvider``) under different logical ids.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

OIDC_PROVIDER_TYPES = ("AWS::IAM::OIDCProvider", "Custom::AWSCDKOpenIdConnectProvider")
_PSEUDO = {"AWS::Partition": "aws", "AWS::URLSuffix": "amazonaws.com"}


def security_view(template: Mapping[str, Any], *, exclude_paths: Iterable[str] = ()) -> dict[str, Any]:
    """``{"<logical id> <type>": {part: value}}`` for every resource with a security-relevant part; resources
    whose ``aws:cdk:path`` starts with one of ``exclude_paths`` are left out."""
    resources: Mapping[str, Any] = template.get("Resources", {})
    excluded = tuple(exclude_paths)
    aliases = {logical_id: f"<OIDC provider of {_owner(resource)}>" for logical_id, resource in resources.items()
               if resource.get("Type") in OIDC_PROVIDER_TYPES}
    view: dict[str, Any] = {}
    for logical_id, resource in resources.items():
        path = resource.get("Metadata", {}).get("aws:cdk:path", "")
        if excluded and path.startswith(excluded):
            continue
        kind = resource.get("Type", "")
        extract = _EXTRACTORS.get(kind)
        if extract is None:
            continue
        properties = normalise(resource.get("Properties", {}), aliases)
        parts = {name: value for name, value in extract(properties).items() if value not in (None, [], {})}
        if parts:  # (an OIDC provider by its cluster alone: native or custom resource, it is the same provider)
            view[aliases.get(logical_id, f"{logical_id} {kind}")] = parts
    return view


def normalise(value: Any, aliases: Mapping[str, str] | None = None) -> Any:
    """The partition and URL suffix as literals, adjacent literal ``Fn::Join`` pieces joined, references to
    ``aliases``' logical ids replaced by their names."""
    aliases = aliases or {}
    if isinstance(value, list):
        return [normalise(item, aliases) for item in value]
    if isinstance(value, str):
        for pseudo, literal in _PSEUDO.items():
            value = value.replace("${" + pseudo + "}", literal)
        return value
    if not isinstance(value, dict):
        return value
    if set(value) == {"Ref"}:
        ref = value["Ref"]
        if ref in _PSEUDO:
            return _PSEUDO[ref]
        return {"Ref": aliases.get(ref, ref)}
    if set(value) == {"Fn::GetAtt"} and isinstance(value["Fn::GetAtt"], list):
        target, *attribute = value["Fn::GetAtt"]
        return {"Fn::GetAtt": [aliases.get(target, target), *attribute]}
    if set(value) == {"Fn::Join"} and value["Fn::Join"][0] == "":
        pieces: list[Any] = []
        for piece in normalise(value["Fn::Join"][1], aliases):
            if isinstance(piece, str) and pieces and isinstance(pieces[-1], str):
                pieces[-1] += piece
            elif piece != "":
                pieces.append(piece)
        return pieces[0] if len(pieces) == 1 and isinstance(pieces[0], str) else {"Fn::Join": ["", pieces]}
    return {key: normalise(item, aliases) for key, item in value.items()}


def statement_atoms(document: Any) -> list[str]:
    """Each statement of a policy document cut into single (principal, action, resource) atoms, each with
    the statement's effect, conditions and ``Sid``; sorted, without duplicates."""
    if isinstance(document, str):
        document = json.loads(document)
    if not isinstance(document, dict):
        return [_canonical(document)]
    statements = document.get("Statement", [])
    atoms: set[str] = set()
    for statement in statements if isinstance(statements, list) else [statements]:
        base = {key: _sorted(value) for key, value in statement.items()
                if key not in ("Action", "NotAction", "Resource", "NotResource", "Principal", "NotPrincipal")}
        for principal in _principals(statement):
            for action in _each(statement, ("Action", "NotAction")):
                for resource in _each(statement, ("Resource", "NotResource")):
                    atoms.add(_canonical({**base, **principal, **action, **resource}))
    return sorted(atoms)


def _principals(statement: Mapping[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for key in ("Principal", "NotPrincipal"):
        if key not in statement:
            continue
        principal = statement[key]
        if not isinstance(principal, dict) or set(principal) & {"Ref", "Fn::GetAtt", "Fn::Join", "Fn::If"}:
            out.append({key: principal})
            continue
        for kind, values in principal.items():
            out.extend({key: {kind: item}} for item in (values if isinstance(values, list) else [values]))
    return out or [{}]


def _each(statement: Mapping[str, Any], keys: tuple[str, str]) -> list[dict[str, Any]]:
    for key in keys:
        if key in statement:
            values = statement[key]
            return [{key: item} for item in (values if isinstance(values, list) else [values])]
    return [{}]


def _sorted(value: Any) -> Any:
    """Lists in policies and properties are sets here (condition values, principals, security group rules): order
    them; the arguments of an intrinsic function (``Fn::Join``, ``Fn::GetAtt``) keep theirs."""
    if isinstance(value, dict):
        return {key: item if key.startswith("Fn::") else _sorted(item) for key, item in value.items()}
    if isinstance(value, list):
        return sorted((_sorted(item) for item in value), key=_canonical)
    return value


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _owner(resource: Mapping[str, Any]) -> str:
    """The construct path of the cluster an OIDC provider belongs to."""
    path = resource.get("Metadata", {}).get("aws:cdk:path", "")
    for marker in ("/OidcProviderNative", "/OpenIdConnectProvider"):
        if marker in path:
            return path.split(marker)[0]
    return path


def _pick(*keys: str) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    return lambda properties: {key: _sorted(properties.get(key)) for key in keys}


def _policy(document_key: str, *keys: str) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    def extract(properties: Mapping[str, Any]) -> dict[str, Any]:
        parts = {key: _sorted(properties.get(key)) for key in keys}
        if properties.get(document_key) is not None:
            parts[document_key] = statement_atoms(properties[document_key])
        return parts
    return extract


def _role(properties: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "AssumeRolePolicyDocument": statement_atoms(properties.get("AssumeRolePolicyDocument")),
        "Policies": {policy["PolicyName"] if isinstance(policy.get("PolicyName"), str) else _canonical(
            policy.get("PolicyName")): statement_atoms(policy.get("PolicyDocument"))
            for policy in properties.get("Policies", [])},
        "ManagedPolicyArns": _sorted(properties.get("ManagedPolicyArns")),
        "PermissionsBoundary": properties.get("PermissionsBoundary"),
        "RoleName": properties.get("RoleName"),
        "MaxSessionDuration": properties.get("MaxSessionDuration"),
    }


def _oidc_provider(properties: Mapping[str, Any]) -> dict[str, Any]:
    return {"ClientIds": sorted(properties.get("ClientIdList") or properties.get("ClientIDList") or []),
            "Url": properties.get("Url")}


def _launch_template(properties: Mapping[str, Any]) -> dict[str, Any]:
    data = properties.get("LaunchTemplateData", {})
    return {"MetadataOptions": data.get("MetadataOptions"), "BlockDeviceMappings": data.get("BlockDeviceMappings")}


def _eks_cluster(properties: Mapping[str, Any]) -> dict[str, Any]:
    vpc = properties.get("ResourcesVpcConfig", {})
    return {"EncryptionConfig": properties.get("EncryptionConfig"), "AccessConfig": properties.get("AccessConfig"),
            "Logging": properties.get("Logging"),
            "Endpoint": {key: vpc.get(key) for key in ("EndpointPublicAccess", "EndpointPrivateAccess",
                                                         "PublicAccessCidrs")},
            "SecurityGroupIds": _sorted(vpc.get("SecurityGroupIds"))}


_EXTRACTORS: Mapping[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
    "AWS::IAM::Role": _role,
    "AWS::IAM::Policy": _policy("PolicyDocument", "Roles", "Users", "Groups"),
    "AWS::IAM::ManagedPolicy": _policy("PolicyDocument", "Roles", "Users", "Groups", "ManagedPolicyName"),
    "AWS::IAM::OIDCProvider": _oidc_provider,
    "Custom::AWSCDKOpenIdConnectProvider": _oidc_provider,
    "AWS::S3::Bucket": _pick("BucketEncryption", "PublicAccessBlockConfiguration", "OwnershipControls",
                             "LoggingConfiguration", "VersioningConfiguration", "AccessControl",
                             "ObjectLockConfiguration"),
    "AWS::S3::BucketPolicy": _policy("PolicyDocument", "Bucket"),
    "AWS::KMS::Key": _policy("KeyPolicy", "EnableKeyRotation", "KeySpec", "KeyUsage"),
    "AWS::SNS::Topic": _pick("KmsMasterKeyId"),
    "AWS::SNS::TopicPolicy": _policy("PolicyDocument", "Topics"),
    "AWS::SQS::Queue": _pick("KmsMasterKeyId", "SqsManagedSseEnabled"),
    "AWS::SQS::QueuePolicy": _policy("PolicyDocument", "Queues"),
    "AWS::SecretsManager::Secret": _pick("KmsKeyId"),
    "AWS::SecretsManager::ResourcePolicy": _policy("ResourcePolicy", "SecretId", "BlockPublicPolicy"),
    "AWS::Logs::LogGroup": _pick("KmsKeyId", "DataProtectionPolicy"),
    "AWS::Logs::ResourcePolicy": _policy("PolicyDocument"),
    "AWS::Lambda::Permission": _pick("Action", "FunctionName", "Principal", "SourceArn", "SourceAccount",
                                     "FunctionUrlAuthType"),
    "AWS::Lambda::Function": _pick("KmsKeyArn", "Role"),
    "AWS::EC2::SecurityGroup": _pick("SecurityGroupIngress", "SecurityGroupEgress", "VpcId"),
    "AWS::EC2::SecurityGroupIngress": _pick("GroupId", "IpProtocol", "FromPort", "ToPort", "CidrIp", "CidrIpv6",
                                            "SourceSecurityGroupId", "SourcePrefixListId"),
    "AWS::EC2::SecurityGroupEgress": _pick("GroupId", "IpProtocol", "FromPort", "ToPort", "CidrIp", "CidrIpv6",
                                           "DestinationSecurityGroupId", "DestinationPrefixListId"),
    "Custom::VpcRestrictDefaultSG": _pick("DefaultSecurityGroupId"),
    "AWS::EC2::FlowLog": _pick("TrafficType", "LogDestination", "LogDestinationType", "DeliverLogsPermissionArn"),
    "AWS::EC2::LaunchTemplate": _launch_template,
    "AWS::EKS::Cluster": _eks_cluster,
    "AWS::EKS::AccessEntry": _pick("PrincipalArn", "AccessPolicies", "KubernetesGroups", "Type"),
    "AWS::EKS::PodIdentityAssociation": _pick("Namespace", "ServiceAccount", "RoleArn"),
    "AWS::EKS::Addon": _pick("ServiceAccountRoleArn", "PodIdentityAssociations"),
    # AwsCustomResource: whether its function installs the latest AWS SDK from npm when it runs
    # (@aws-cdk/customresources:installLatestAwsSdkDefault decides when the construct does not).
    "Custom::AWS": _pick("InstallLatestAwsSdk"),
}
