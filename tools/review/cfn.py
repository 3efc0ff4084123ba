"""The resources the CDK's diff engine reports changed, read for what a reviewer asks about.

Which resources and which of their top-level properties changed comes from ``cdk diff`` (the CDK's
engine is the authority on that); the two templates are then read, for those properties only, to say
what changed in words and whether it broadens: policy documents statement by statement
(``policies.py``), everything else field by field against the rules below. A property the CDK reports
changed that no rule explains is listed, with its type and construct path, under "everything else"."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tools.review import budgets, k8s
from tools.review.cdkdiff import ResourceChange, StackDiff
from tools.review.flat import changed, flatten, render, whole_item
from tools.review.model import MISSING, Line, change, increases, listing, short
from tools.review.policies import diff_documents
from tools.review.rules import Rules
from tools.review.template import Template

LIST_KEYS = ("Id", "Key", "PolicyName", "InstanceGroupName", "Name")
POLICY_DOCUMENTS = ("PolicyDocument", "AssumeRolePolicyDocument", "KeyPolicy")


@dataclass
class Resource:
    """One changed resource on both sides (a side is None where the resource does not exist)."""

    change: ResourceChange
    old: Template
    new: Template

    @property
    def id(self) -> str:
        return self.change.logical_id

    @property
    def type(self) -> str:
        return self.change.type

    @property
    def old_props(self) -> dict[str, Any] | None:
        return self.old.properties(self.id) if self.old.resource(self.id) else None

    @property
    def new_props(self) -> dict[str, Any] | None:
        return self.new.properties(self.id) if self.new.resource(self.id) else None

    @property
    def template(self) -> Template:
        return self.new if self.new.resource(self.id) else self.old

    @property
    def name(self) -> str:
        return self.template.name(self.id)

    @property
    def where(self) -> tuple[str, ...]:
        return (f"{self.template.stack}/{self.template.path(self.id)}",)

    def line(self, group: str, subject: str, text: str, broadens: bool = False) -> Line:
        return Line(group, subject, text, bool(broadens), self.where)

    def value(self, side: str, *path: str) -> Any:
        value: Any = self.old_props if side == "old" else self.new_props
        for part in path:
            if not isinstance(value, dict) or part not in value:
                return MISSING
            value = value[part]
        return value


# ---- capture storage: which bucket holds captured prompts -------------------------------------------------


def is_capture_bucket(template: Template, logical_id: str) -> bool:
    """The capture bucket: the library's ``CaptureStorage/CaptureBucket``, or any bucket whose policy
    carries the data perimeter's ``Captures…`` statements."""
    if template.type_of(logical_id) != "AWS::S3::Bucket":
        return False
    if template.path(logical_id).endswith("CaptureBucket"):
        return True
    for resource in template.resources.values():
        if resource.get("Type") == "AWS::S3::BucketPolicy" and (resource.get("Properties") or {}).get(
                "Bucket") == {"Ref": logical_id}:
            statements = ((resource["Properties"].get("PolicyDocument") or {}).get("Statement")) or []
            if any(str(s.get("Sid", "")).startswith("Captures") for s in statements if isinstance(s, dict)):
                return True
    return False


def _bucket_of_policy(resource: Resource) -> str | None:
    for side in ("new", "old"):
        ref = resource.value(side, "Bucket")
        if isinstance(ref, dict) and "Ref" in ref:
            return ref["Ref"]
    return None


# ---- rules on leaves ---------------------------------------------------------------------------------------

Handler = Callable[[re.Match[str], Any, Any, Resource], "list[Line] | Line | None"]
_RULES: Rules[Handler] = Rules()


def rule(types: str, path: str) -> Callable[[Handler], Handler]:
    """A rule for resources whose type matches the regular expression ``types``."""
    pattern = re.compile(types)
    return _RULES.add(lambda type_: pattern.search(type_) is not None, path)


def _statements(resource: Resource, old: Any, new: Any, group: str, subject: str, prefix: str = "") -> list[Line]:
    return [resource.line(group, subject, prefix + found.text, found.broadens)
            for found in diff_documents(None if old is MISSING else old, None if new is MISSING else new,
                                        resource.old, resource.new)]


def _role_names(resource: Resource) -> str:
    names: list[str] = []
    for side, template in (("new", resource.new), ("old", resource.old)):
        for ref in resource.value(side, "Roles") or []:
            target = ref.get("Ref") if isinstance(ref, dict) else None
            name = template.name(target) if target and template.resource(target) else template.text(ref)
            if name not in names:
                names.append(name)
    return ", ".join(names)


# identity ---------------------------------------------------------------------------------------------------

@rule(r"^AWS::IAM::Role$", r"^AssumeRolePolicyDocument$")
def _trust(m, old, new, r):
    return _statements(r, old, new, "identity", f"role {r.name}", "trust: ")


@rule(r"^AWS::IAM::Role$", r"^Policies\[(?P<p>[^\]]+)\]\.PolicyDocument$")
def _inline_policy(m, old, new, r):
    return _statements(r, old, new, "identity", f"role {r.name}", f"inline policy {m['p']}: ")


@rule(r"^AWS::IAM::(Role|User|Group)$", r"^ManagedPolicyArns$")
def _managed(m, old, new, r):
    before = {r.old.text(v) for v in (old if isinstance(old, list) else [])}
    after = {r.new.text(v) for v in (new if isinstance(new, list) else [])}
    lines = []
    if after - before:
        lines.append(r.line("identity", f"role {r.name}", f"managed policies + {listing(sorted(after - before))}",
                            True))
    if before - after:
        lines.append(r.line("identity", f"role {r.name}", f"managed policies - {listing(sorted(before - after))}"))
    return lines


@rule(r"^AWS::IAM::Role$", r"^PermissionsBoundary$")
def _boundary(m, old, new, r):
    return r.line("identity", f"role {r.name}", change("permissions boundary", _t(r.old, old), _t(r.new, new)),
                  new is MISSING)


@rule(r"^AWS::IAM::(Policy|ManagedPolicy)$", r"^PolicyDocument$")
def _policy(m, old, new, r):
    roles = _role_names(r)
    subject = f"role {roles}" if roles else f"policy {r.name}"
    return _statements(r, old, new, "identity", subject)


@rule(r"^AWS::IAM::(Policy|ManagedPolicy)$", r"^(?P<f>Roles|Users|Groups)$")
def _attachments(m, old, new, r):
    if r.change.op != "~":
        return []  # a new policy's statements are listed under its roles; a removed one is one line
    before = {r.old.name(v["Ref"]) if isinstance(v, dict) and "Ref" in v else r.old.text(v) for v in old or []}
    after = {r.new.name(v["Ref"]) if isinstance(v, dict) and "Ref" in v else r.new.text(v) for v in new or []}
    lines = []
    if after - before:
        lines.append(r.line("identity", f"policy {r.name}", f"now attached to {listing(sorted(after - before))}", True))
    if before - after:
        lines.append(r.line("identity", f"policy {r.name}", f"no longer attached to {listing(sorted(before - after))}"))
    return lines


@rule(r"^AWS::S3::BucketPolicy$", r"^PolicyDocument$")
def _bucket_policy(m, old, new, r):
    bucket = _bucket_of_policy(r)
    template = r.template
    name = template.name(bucket) if bucket and template.resource(bucket) else r.name
    if bucket and is_capture_bucket(template, bucket):
        return _statements(r, old, new, "data_governance", f"who reads captures (bucket {name})")
    return _statements(r, old, new, "identity", f"bucket policy of {name}")


@rule(r"^AWS::(SQS::QueuePolicy|SNS::TopicPolicy|EC2::VPCEndpoint|SecretsManager::ResourcePolicy|"
      r"Logs::ResourcePolicy|ECR::Repository)$", r"^(PolicyDocument|ResourcePolicy|PolicyText|RepositoryPolicyText)$")
def _resource_policy(m, old, new, r):
    if isinstance(old, str) or isinstance(new, str):
        old = json.loads(old) if isinstance(old, str) else old
        new = json.loads(new) if isinstance(new, str) else new
    targets = []
    for side, template in (("new", r.new), ("old", r.old)):
        for key in ("Topics", "Queues"):
            for ref in r.value(side, key) or []:
                name = template.name(ref["Ref"]) if isinstance(ref, dict) and "Ref" in ref and template.resource(
                    ref["Ref"]) else template.text(ref)
                if name not in targets:
                    targets.append(name)
    subject = f"resource policy of {listing(targets) if targets else r.name}"
    return _statements(r, old, new, "identity", subject)


@rule(r"^AWS::KMS::Key$", r"^KeyPolicy$")
def _key_policy(m, old, new, r):
    return _statements(r, old, new, "encryption", f"key policy of {r.name}")


@rule(r"^AWS::Lambda::Permission$", r".*")
def _lambda_permission(m, old, new, r):
    return r.line("identity", f"Lambda permission {r.name}", change(m.group(0), _t(r.old, old), _t(r.new, new)),
                  new is not MISSING)


@rule(r"^AWS::EKS::AccessEntry$", r"^(?P<f>.+)$")
def _access_entry(m, old, new, r):
    principal = r.template.text(r.value("new", "PrincipalArn") if r.new_props else r.value("old", "PrincipalArn"))
    field = m["f"]
    if r.change.op != "~" or field == "ClusterName" or field.startswith("Tags"):
        return []  # a whole entry added or removed is one line (_whole_resource_line)
    broadens = field.startswith(("AccessPolicies", "KubernetesGroups")) and new is not MISSING
    return r.line("identity", f"cluster access of {principal}", change(field, _t(r.old, old), _t(r.new, new)),
                  broadens)


@rule(r"^AWS::EKS::PodIdentityAssociation$", r"^(?P<f>RoleArn|ServiceAccount|Namespace|TargetRoleArn)$")
def _pod_identity(m, old, new, r):
    return r.line("identity", f"pod identity {r.name}", change(m["f"], _t(r.old, old), _t(r.new, new)),
                  new is not MISSING and old is MISSING)


@rule(r"^AWS::IAM::OIDCProvider$|^Custom::AWSCDKOpenIdConnectProvider$", r"^(?P<f>ClientIdList|Url|ThumbprintList)$")
def _oidc(m, old, new, r):
    gained = set(new or []) - set(old or []) if m["f"] == "ClientIdList" else set()
    return r.line("identity", f"OIDC provider {r.name}", change(m["f"], _t(r.old, old), _t(r.new, new)), bool(gained))


@rule(r"^AWS::EKS::Cluster$", r"^AccessConfig\.(?P<f>.+)$")
def _cluster_access(m, old, new, r):
    broadens = m["f"] == "BootstrapClusterCreatorAdminPermissions" and new is not False
    return r.line("identity", f"cluster {r.name}", change(f"access {m['f']}", old, new), broadens)


# encryption -------------------------------------------------------------------------------------------------

@rule(r"^AWS::S3::Bucket$", r"^BucketEncryption\.ServerSideEncryptionConfiguration(?P<rest>.*)$")
def _bucket_encryption(m, old, new, r):
    def algorithm(side: str) -> str:
        rules = r.value(side, "BucketEncryption", "ServerSideEncryptionConfiguration")
        if not isinstance(rules, list) or not rules:
            return "(none)"
        default = (rules[0] or {}).get("ServerSideEncryptionByDefault") or {}
        template = r.old if side == "old" else r.new
        if default.get("SSEAlgorithm") in ("aws:kms", "aws:kms:dsse"):
            key = default.get("KMSMasterKeyID")
            return f"SSE-KMS ({template.text(key)})" if key else "SSE-KMS (aws/s3 managed key)"
        return "SSE-S3" if default.get("SSEAlgorithm") == "AES256" else str(default.get("SSEAlgorithm", "(none)"))

    before, after = algorithm("old") if r.old_props else MISSING, algorithm("new") if r.new_props else MISSING
    if before == after:
        return r.line("encryption", f"bucket {r.name}", change("encryption settings", _t(r.old, old), _t(r.new, new)))
    weaker = isinstance(before, str) and before.startswith("SSE-KMS (") and "managed" not in before and not (
        isinstance(after, str) and after.startswith("SSE-KMS ("))
    return r.line("encryption", f"bucket {r.name}", change("default encryption", before, after), weaker)


_ENCRYPTION_FIELD = re.compile(r"(?:^|\.)(?P<f>KmsKeyId|KmsMasterKeyId|KMSMasterKeyID|KmsKeyArn|KeyArn|"
                               r"SqsManagedSseEnabled|Encrypted|EncryptionConfig.*|SSESpecification.*|"
                               r"KmsDataKeyReusePeriodSeconds|EnableKeyRotation)$")


@rule(r".*", _ENCRYPTION_FIELD.pattern)
def _encryption(m, old, new, r):
    field = m.group(0).lstrip(".")
    weaker = (new is MISSING and old is not MISSING and field != "KmsDataKeyReusePeriodSeconds") or (
        field.endswith(("Encrypted", "SqsManagedSseEnabled")) and old is True and new is not True)
    return r.line("encryption", _subject(r), change(field, _t(r.old, old), _t(r.new, new)), weaker)


@rule(r"^AWS::KMS::(Key|Alias)$", r"^(?P<f>.+)$")
def _key_other(m, old, new, r):
    if m["f"].startswith("Tags"):
        return None
    return r.line("encryption", f"key {r.name}", change(m["f"], _t(r.old, old), _t(r.new, new)))


# exposure ---------------------------------------------------------------------------------------------------

@rule(r"^AWS::S3::Bucket$", r"^PublicAccessBlockConfiguration(?:\.(?P<f>\w+))?$")
def _public_access(m, old, new, r):
    field = m["f"] or "PublicAccessBlockConfiguration"
    return r.line("exposure", f"bucket {r.name}", change(f"public access block {field}", old, new),
                  (old is True and new is not True) or (m["f"] is None and new is MISSING))


@rule(r"^AWS::S3::Bucket$", r"^(?P<f>AccessControl|OwnershipControls.*|WebsiteConfiguration.*|CorsConfiguration.*)$")
def _bucket_acl(m, old, new, r):
    broadens = (m["f"] == "AccessControl" and isinstance(new, str) and new.startswith("Public")) or (
        m["f"].startswith(("WebsiteConfiguration", "CorsConfiguration")) and new is not MISSING)
    return r.line("exposure", f"bucket {r.name}", change(m["f"], old, new), broadens)


def _rule_words(rule_: Any, template: Template, preposition: str) -> str:
    rendered = template.render(rule_)
    if not isinstance(rendered, dict):
        return short(rendered)
    peer = next((rendered[k] for k in ("CidrIp", "CidrIpv6", "SourceSecurityGroupId", "DestinationSecurityGroupId",
                                       "SourcePrefixListId", "DestinationPrefixListId") if k in rendered), "?")
    protocol, low, high = rendered.get("IpProtocol", "?"), rendered.get("FromPort"), rendered.get("ToPort")
    traffic = "all traffic" if str(protocol) == "-1" else f"{protocol} {low if low == high else f'{low}-{high}'}"
    return f"{traffic} {preposition} {short(peer)}"


@rule(r"^AWS::EC2::SecurityGroup$", r"^(?P<f>SecurityGroupIngress|SecurityGroupEgress)$")
def _sg_rules(m, old, new, r):
    direction, preposition = ("ingress", "from") if m["f"].endswith("Ingress") else ("egress", "to")
    before = {_rule_words(x, r.old, preposition) for x in (old if isinstance(old, list) else [])}
    after = {_rule_words(x, r.new, preposition) for x in (new if isinstance(new, list) else [])}
    lines = [r.line("exposure", f"security group {r.name}", f"{direction} + {words}", True)
             for words in sorted(after - before)]
    lines += [r.line("exposure", f"security group {r.name}", f"{direction} - {words}")
              for words in sorted(before - after)]
    return lines


@rule(r"^AWS::EC2::SecurityGroup(Ingress|Egress)$", r".*")
def _sg_rule_resource(m, old, new, r):
    return r.line("exposure", f"security group rule {r.name}", change(m.group(0), _t(r.old, old), _t(r.new, new)),
                  new is not MISSING)


@rule(r"^AWS::EKS::Cluster$", r"^ResourcesVpcConfig\.(?P<f>EndpointPublicAccess|EndpointPrivateAccess|"
      r"PublicAccessCidrs)$")
def _endpoint(m, old, new, r):
    field = m["f"]
    if field == "EndpointPublicAccess":
        broadens = new is True and old is not True
    elif field == "PublicAccessCidrs":
        broadens = bool(set(new or []) - set(old or [])) or (bool(old) and new is MISSING)
    else:
        broadens = False
    return r.line("exposure", f"EKS cluster {r.name}", change(f"endpoint {field}", old, new), broadens)


@rule(r"^AWS::ElasticLoadBalancingV2::LoadBalancer$", r"^(?P<f>Scheme|Type|SecurityGroups|Subnets)$")
def _lb(m, old, new, r):
    broadens = m["f"] == "Scheme" and new == "internet-facing"
    return r.line("exposure", f"load balancer {r.name}", change(m["f"], _t(r.old, old), _t(r.new, new)), broadens)


@rule(r"^AWS::EC2::Subnet$", r"^MapPublicIpOnLaunch$")
def _public_ip(m, old, new, r):
    return r.line("exposure", f"subnet {r.name}", change("MapPublicIpOnLaunch", old, new), new is True)


@rule(r"^AWS::Lambda::Url$", r"^AuthType$")
def _lambda_url(m, old, new, r):
    return r.line("exposure", f"function URL {r.name}", change("auth type", old, new), new == "NONE")


# DNS and TLS ------------------------------------------------------------------------------------------------

@rule(r"^AWS::(Route53::\w+|CertificateManager::Certificate)$", r"^(?P<f>.+)$")
def _dns(m, old, new, r):
    if m["f"].startswith(("HostedZoneTags", "Tags")):
        return None
    broadens = r.type == "AWS::Route53::HostedZone" and m["f"].startswith("VPCs") and new is MISSING
    return r.line("dns_tls", _subject(r), change(m["f"], _t(r.old, old), _t(r.new, new)), broadens)


@rule(r"^AWS::ElasticLoadBalancingV2::Listener$", r"^(?P<f>Certificates|SslPolicy|Protocol|Port)$")
def _listener(m, old, new, r):
    return r.line("dns_tls", f"listener {r.name}", change(m["f"], _t(r.old, old), _t(r.new, new)),
                  m["f"] == "Protocol" and new == "HTTP")


# data governance --------------------------------------------------------------------------------------------

@rule(r"^AWS::S3::Bucket$", r"^LifecycleConfiguration\.Rules(?:\[(?P<id>[^\]]+)\])?(?:\.(?P<f>.+))?$")
def _lifecycle(m, old, new, r):
    capture = is_capture_bucket(r.template, r.id)
    audit = "AccessLog" in r.template.path(r.id)
    group = "data_governance" if capture or audit else "other"
    subject = f"bucket {r.name}" if not capture else f"captures (bucket {r.name})"
    field, rule_id = m["f"] or "", m["id"] or ""
    where = f" ({rule_id})" if rule_id else ""
    if field == "ExpirationInDays":
        return r.line(group, subject, change(f"retention{where}", old, new, " days"),
                      capture and increases(old, new, absent=float("inf")))
    if field == "NoncurrentVersionExpiration.NoncurrentDays":
        return r.line(group, subject, change(f"overwritten versions kept{where}", old, new, " days"),
                      capture and increases(old, new, absent=float("inf")))
    if field == "Status":
        return r.line(group, subject, change(f"lifecycle rule{where}", old, new), capture and new != "Enabled")
    return r.line(group, subject, change(f"lifecycle {field or 'rules'}{where}".replace(" )", ")"), old, new),
                  capture and new is MISSING and field in ("", "ExpirationInDays"))


@rule(r"^AWS::S3::Bucket$", r"^(?P<f>VersioningConfiguration\.Status|LoggingConfiguration.*|"
      r"ObjectLockConfiguration.*|ReplicationConfiguration.*)$")
def _capture_bucket_settings(m, old, new, r):
    capture = is_capture_bucket(r.template, r.id)
    broadens = capture and m["f"].startswith("ReplicationConfiguration") and new is not MISSING
    return r.line("data_governance" if capture else "other", f"bucket {r.name}",
                  change(m["f"], _t(r.old, old), _t(r.new, new)), broadens)


def _rules(value: Any) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()] if isinstance(value, str) else []


@rule(r"^AWS::Lambda::Function$", r"^Environment\.Variables\.REDACT$")
def _redaction(m, old, new, r):
    before, after = _rules(old), _rules(new)
    gone = [item for item in before if item not in after]
    words = change("redaction rules", listing(before) if old is not MISSING else MISSING,
                   listing(after) if new is not MISSING else MISSING)
    if gone:
        words += f" (removed: {listing(gone)})"
    return r.line("data_governance", f"capture processor {r.name}", words, bool(gone) or (
        old is not MISSING and new is MISSING))


@rule(r"^AWS::Lambda::Function$", r"^Environment\.Variables\.(?P<v>OUTPUT_PREFIX|QUARANTINE_PREFIX)$")
def _processor_prefixes(m, old, new, r):
    return r.line("data_governance", f"capture processor {r.name}", change(m["v"], _t(r.old, old), _t(r.new, new)))


# budgets and costs ------------------------------------------------------------------------------------------

@rule(r"^AWS::Lambda::Function$", r"^Environment\.Variables\.(?P<v>INSTANCE_PRICES|COST_GROUPS)$")
def _cost_settings(m, old, new, r):
    """The GpuCost sampler's prices and groups: every team's reported cost changes (not what anyone may use)."""
    if m["v"] == "INSTANCE_PRICES":
        found = budgets.prices_change(_t(r.old, old), _t(r.new, new))
    else:
        found = budgets.cost_groups_change(_t(r.old, old), _t(r.new, new))
    return [r.line(budgets.GROUP, subject, text) for subject, text in found]


@rule(r"^AWS::Lambda::Function$", r"^Environment\.Variables\.DEPLOYMENT_HASH$")
def _cost_settings_hash(m, old, new, r):
    """The sampler's hash of its settings (a new one redeploys it): said by the settings' own lines."""
    if "COST_GROUPS" in (r.value("new", "Environment", "Variables") or r.value("old", "Environment", "Variables")
                         or {}):
        return None
    return r.line("other", f"{_kind(r.type)} {r.template.path(r.id)}",
                  change("Environment.Variables.DEPLOYMENT_HASH", old, new))


@rule(r"^AWS::ElastiCache::ServerlessCache$", r"^(?P<f>CacheUsageLimits\.\w+\.\w+|SnapshotRetentionLimit)$")
def _store_limits(m, old, new, r):
    """The usage store's caps: what a runaway client could cost (docs/usage-and-budgets.md)."""
    name = r.value("new", "ServerlessCacheName") if r.new_props else r.value("old", "ServerlessCacheName")
    return r.line(budgets.GROUP, f"cache {r.template.text(name) if name is not MISSING else r.name}",
                  budgets.store_change(m["f"], old, new))


# workloads --------------------------------------------------------------------------------------------------

@rule(r"^AWS::EKS::Nodegroup$", r"^(?P<f>ScalingConfig\.\w+|InstanceTypes|AmiType|ReleaseVersion|Version|"
      r"CapacityType|Labels\..+|Taints|DiskSize)$")
def _nodegroup(m, old, new, r):
    return r.line("workloads", f"node group {r.name}", change(m["f"], old, new))


@rule(r"^AWS::EKS::Addon$", r"^(?P<f>AddonVersion|ServiceAccountRoleArn|PodIdentityAssociations|"
      r"ConfigurationValues)$")
def _addon(m, old, new, r):
    return r.line("workloads", f"add-on {r.name}", change(m["f"], _t(r.old, old), _t(r.new, new)))


@rule(r"^AWS::EKS::Cluster$", r"^Version$")
def _k8s_version(m, old, new, r):
    return r.line("workloads", f"EKS cluster {r.name}", change("Kubernetes version", old, new))


@rule(r"^AWS::SageMaker::Cluster$", r"^InstanceGroups\[(?P<g>[^\]]+)\]\.(?P<f>InstanceCount|InstanceType|"
      r"ExecutionRole|ThreadsPerCore|InstanceStorageConfigs|OnStartDeepHealthChecks)$")
def _hyperpod(m, old, new, r):
    return r.line("workloads", f"HyperPod {r.name}/{m['g']}", change(m["f"], _t(r.old, old), _t(r.new, new)))


# alarms -----------------------------------------------------------------------------------------------------

_ALARM_WORDS = {"Threshold": ("threshold", ""), "Period": ("period", " s"),
                "EvaluationPeriods": ("evaluation periods", ""),
                "DatapointsToAlarm": ("datapoints to alarm", ""), "ComparisonOperator": ("comparison", ""),
                "MetricName": ("metric", ""), "Namespace": ("namespace", ""), "Statistic": ("statistic", ""),
                "ExtendedStatistic": ("statistic", ""), "TreatMissingData": ("missing data", ""),
                "AlarmActions": ("alarm actions", ""), "OKActions": ("OK actions", ""),
                "InsufficientDataActions": ("insufficient-data actions", ""), "ActionsEnabled": ("actions enabled", ""),
                "AlarmRule": ("rule", ""), "Unit": ("unit", ""), "AlarmDescription": ("description", "")}


def _alarm_summary(r: Resource, side: str) -> str:
    props = (r.new_props if side == "new" else r.old_props) or {}
    template = r.new if side == "new" else r.old
    if r.type == "AWS::CloudWatch::CompositeAlarm":
        return f"rule {short(template.text(props.get('AlarmRule')))}"
    metric = f"{props.get('Namespace', '?')}/{props.get('MetricName', 'metric math')}"
    statistic = props.get("Statistic") or props.get("ExtendedStatistic") or ""
    periods = props.get("EvaluationPeriods", "?")
    period = props.get("Period")
    over = f" over {periods} x {period} s" if period else f" over {periods} period(s)"
    actions = [template.text(action) for action in props.get("AlarmActions") or []]
    return (f"{metric} {statistic} {props.get('ComparisonOperator', '?')} {props.get('Threshold', '?')}{over}"
            f", actions: {listing(actions) if actions else 'none'}")


@rule(r"^AWS::CloudWatch::(Alarm|CompositeAlarm)$", r"^(?P<f>[^.\[]+)(?P<rest>.*)$")
def _alarm(m, old, new, r):
    field = m["f"]
    if field == "Tags":
        return None
    if field == "AlarmName":
        return r.line("alarms", f"alarm {r.name}", change("name", old, new))
    words, unit = _ALARM_WORDS.get(field, (field + m["rest"], ""))
    if field == "Dimensions":
        words = f"dimension {m['rest'].strip('.[]').replace('].Value', '')}"
    text = change(words, _t(r.old, old), _t(r.new, new), unit)
    level = budgets.budget_alarm_level(r.old_props)
    lost = budgets.budget_alarm_weakened(level, field, _t(r.old, old), _t(r.new, new)) if level else None
    if lost:
        # A budget alert reaches nobody it reached (docs/usage-and-budgets.md, section 3): a weakening.
        return r.line("alarms", f"alarm {r.name}", f"{text}: {lost}", True)
    return r.line("alarms", f"alarm {r.name}", text)


@rule(r"^AWS::SNS::Subscription$", r"^(?P<f>Protocol|Endpoint|TopicArn|FilterPolicy.*|RawMessageDelivery)$")
def _subscription(m, old, new, r):
    topic = r.template.text(r.value("new", "TopicArn") if r.new_props else r.value("old", "TopicArn"))
    return r.line("alarms", f"subscription to {topic}", change(m["f"].lower(), _t(r.old, old), _t(r.new, new)))


@rule(r"^AWS::SNS::Topic$", r"^(?P<f>Subscription|TopicName|DisplayName)$")
def _topic(m, old, new, r):
    return r.line("alarms", f"topic {r.name}", change(m["f"], _t(r.old, old), _t(r.new, new)))


@rule(r"^AWS::CloudWatch::Dashboard$", r"^(?P<f>DashboardBody|DashboardName)$")
def _dashboard(m, old, new, r):
    def widgets(body: Any, template: Template) -> Any:
        try:
            return len(json.loads(template.text(body)).get("widgets", []))
        except (ValueError, AttributeError):
            return "?"
    if m["f"] == "DashboardName":
        return r.line("alarms", f"dashboard {r.name}", change("name", old, new))
    before = MISSING if old is MISSING else f"{widgets(old, r.old)} widgets"
    after = MISSING if new is MISSING else f"{widgets(new, r.new)} widgets"
    return r.line("alarms", f"dashboard {r.name}", change("body", before, after) if before != after
                  else "body changed (same number of widgets)")


# ---- helpers -----------------------------------------------------------------------------------------------


def _t(template: Template, value: Any) -> Any:
    return value if value is MISSING else template.render(value)


def _kind(type_: str) -> str:
    return type_.split("::")[-1]


_WHOLE_RESOURCE_GROUP = [
    (r"^AWS::IAM::", "identity"), (r"^AWS::EKS::(AccessEntry|PodIdentityAssociation)$", "identity"),
    (r"^AWS::Lambda::Permission$", "identity"), (r"^AWS::KMS::", "encryption"),
    (r"^AWS::(SNS::TopicPolicy|SQS::QueuePolicy|SecretsManager::ResourcePolicy)$", "identity"),
    (r"^AWS::EC2::SecurityGroup", "exposure"), (r"^AWS::ElasticLoadBalancingV2::", "exposure"),
    (r"^AWS::(Route53|CertificateManager)::", "dns_tls"), (r"^AWS::CloudWatch::", "alarms"), (r"^AWS::SNS::", "alarms"),
    (r"^AWS::EKS::(Nodegroup|Addon)$|^AWS::SageMaker::Cluster$", "workloads"),
]


def _whole_resource_line(r: Resource) -> Line:
    group = _group(r)
    verb = {"+": "new", "-": "removed"}.get(r.change.op, "changed")
    side = "new" if verb == "new" else "old"
    if r.type in ("AWS::CloudWatch::Alarm", "AWS::CloudWatch::CompositeAlarm"):
        level = budgets.budget_alarm_level(r.old_props if side == "old" else r.new_props)
        if level is not None and verb == "removed":
            # A level gone: no alarm when a caller crosses it (a weakening: broadening for the gate).
            return r.line("alarms", f"alarm {r.name}", f"removed: no alarm when a caller crosses {level} % of a day "
                          f"or month token budget ({_alarm_summary(r, side)})", True)
        what = f"budget alert level {level} %: " if level is not None else ""
        return r.line("alarms", f"alarm {r.name}", f"{verb}: {what}{_alarm_summary(r, side)}")
    if r.type == "AWS::SNS::Subscription":
        template = r.new if side == "new" else r.old
        topic = template.text(r.value(side, "TopicArn"))
        return r.line("alarms", f"subscription to {topic}",
                      f"{verb}: {r.value(side, 'Protocol')} {template.text(r.value(side, 'Endpoint'))}")
    if r.type == "AWS::EKS::AccessEntry":
        template = r.new if side == "new" else r.old
        principal = template.text(r.value(side, "PrincipalArn"))
        policies = [_access_policy(template, p) for p in r.value(side, "AccessPolicies") or [] if isinstance(p, dict)]
        kind = r.value(side, "Type")
        words = listing(policies) if policies else f"type {kind}" if kind is not MISSING else "no access policy"
        return r.line("identity", f"cluster access of {principal}", f"{verb}: {words}", verb == "new")
    if r.type in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
        roles = _role_names(r)
        return r.line("identity", f"role {roles}" if roles else f"policy {r.name}",
                      f"policy {r.template.path(r.id)} {verb}")
    broadens = verb == "new" and r.type in ("AWS::EC2::SecurityGroupIngress", "AWS::Lambda::Permission",
                                            "AWS::IAM::AccessKey")
    return r.line(group, _subject(r), verb if r.type in _NOUNS else f"{verb} ({r.type})", broadens)


def _subject(r: Resource) -> str:
    """``role llm-platform-qwen3-8b``, ``bucket ...``, ``alarm ...``: a noun and the resource's name."""
    if r.type in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy") and _role_names(r):
        return f"role {_role_names(r)}"
    return f"{_NOUNS.get(r.type, _kind(r.type))} {r.name}"


def _governs_what_stays(r: Resource) -> bool:
    """A removed policy resource whose bucket, topic, queue or role is still in the head template."""
    targets = [r.value("old", "Bucket")]
    for key in ("Topics", "Queues", "Roles"):
        targets += list(r.value("old", key) or [])
    return any(isinstance(t, dict) and r.new.resource(str(t.get("Ref"))) for t in targets)


def _group(r: Resource) -> str:
    if r.type == "AWS::S3::BucketPolicy":
        bucket = _bucket_of_policy(r)
        return "data_governance" if bucket and is_capture_bucket(r.template, bucket) else "identity"
    return next((g for pattern, g in _WHOLE_RESOURCE_GROUP if re.search(pattern, r.type)), "other")


RESOURCE_ATTRIBUTES = {"Metadata", "DeletionPolicy", "UpdateReplacePolicy", "DependsOn", "Condition",
                       "UpdatePolicy", "CreationPolicy"}


def _suppressions(resource: dict[str, Any] | None) -> dict[str, str]:
    rules = (((resource or {}).get("Metadata") or {}).get("cdk_nag") or {}).get("rules_to_suppress") or []
    found = {}
    for entry in rules:
        if isinstance(entry, dict):
            applies = entry.get("applies_to") or entry.get("appliesTo")
            name = f"{entry.get('id')}" + (f" on {listing(applies, 3)}" if applies else "")
            found[name] = str(entry.get("reason", ""))
    return found


def _attributes(r: Resource, reported: set[str]) -> list[Line]:
    """The resource attributes the CDK reports changed: cdk-nag acknowledgements (in Metadata), the
    deletion and replacement policies, dependencies."""
    lines = []
    before, after = r.old.resource(r.id), r.new.resource(r.id)
    if "Metadata" in reported:
        was, now = _suppressions(before), _suppressions(after)
        for finding in sorted(set(now) - set(was)):
            lines.append(r.line(_group(r), _subject(r),
                                f"cdk-nag finding acknowledged: {finding} ({short(now[finding], 120)})"))
        for finding in sorted(set(was) - set(now)):
            lines.append(r.line(_group(r), _subject(r), f"cdk-nag acknowledgement withdrawn: {finding}"))
        rest_old = {k: v for k, v in ((before or {}).get("Metadata") or {}).items() if k != "cdk_nag"}
        rest_new = {k: v for k, v in ((after or {}).get("Metadata") or {}).items() if k != "cdk_nag"}
        if rest_old != rest_new:
            lines.append(r.line("other", f"{_kind(r.type)} {r.template.path(r.id)}", "metadata changed"))
    for attribute in sorted(reported & (RESOURCE_ATTRIBUTES - {"Metadata"})):
        was, now = (before or {}).get(attribute, MISSING), (after or {}).get(attribute, MISSING)
        lines.append(r.line("other", f"{_kind(r.type)} {r.template.path(r.id)}", change(attribute, was, now)))
    return lines


def _access_policy(template: Template, policy: dict[str, Any]) -> str:
    scope = policy.get("AccessScope") or {}
    namespaces = scope.get("Namespaces") or []
    name = template.text(policy.get("PolicyArn")).rsplit("/", 1)[-1]
    return f"{name} ({scope.get('Type')}{' ' + listing(namespaces) if namespaces else ''})"


_NOUNS = {"AWS::IAM::Role": "role", "AWS::S3::Bucket": "bucket", "AWS::KMS::Key": "key", "AWS::SNS::Topic": "topic",
          "AWS::CloudWatch::Alarm": "alarm", "AWS::CloudWatch::CompositeAlarm": "alarm",
          "AWS::SNS::TopicPolicy": "topic policy", "AWS::SQS::QueuePolicy": "queue policy",
          "AWS::S3::BucketPolicy": "bucket policy", "AWS::Logs::LogGroup": "log group",
          "AWS::EKS::Nodegroup": "node group", "AWS::EKS::Addon": "add-on", "AWS::EC2::SecurityGroup": "security group",
          "AWS::CloudWatch::Dashboard": "dashboard", "AWS::Route53::HostedZone": "hosted zone",
          "AWS::CertificateManager::Certificate": "certificate", "AWS::Lambda::Function": "function",
          "AWS::SQS::Queue": "queue"}


def _apply(path: str, old: Any, new: Any, r: Resource) -> list[Line] | None:
    """The first rule's lines (a rule that returns None claims the field and says nothing); None: no rule."""
    for match, handler in _RULES.matching(r.type, path):
        found = handler(match, old, new, r)
        if found is None:
            return []
        return found if isinstance(found, list) else [found]
    return None


def review_resource(r: Resource) -> list[Line]:
    if r.type == "Custom::AWSCDK-EKS-KubernetesResource":
        return _manifest(r)
    if r.type == "Custom::AWSCDK-EKS-HelmChart":
        return _helm(r)
    if r.type == "Custom::AWSCDKCfnJson":
        return _cfn_json(r)
    if r.type == "AWS::LakeFormation::PrincipalPermissions":
        return _lake_formation_grant(r)
    old_props, new_props = r.old_props, r.new_props
    flat_old = flatten(old_props, LIST_KEYS, POLICY_DOCUMENTS) if old_props else {}
    flat_new = flatten(new_props, LIST_KEYS, POLICY_DOCUMENTS) if new_props else {}
    reported = set(r.change.properties) if r.change.op == "~" else set()
    lines: list[Line] = []
    unexplained: list[str] = []
    seen_whole: set[tuple[str, ...]] = set()
    for path, was, now in changed(flat_old, flat_new):
        if reported and path[0] not in reported:
            continue  # the CDK's engine says this property did not change (e.g. order only)
        found = _apply(render(path), was, now, r)
        if found is not None:
            lines += found
            continue
        if r.change.op != "~":
            continue
        whole = whole_item(path, flat_old, flat_new)
        if whole is not None:
            if whole not in seen_whole:
                seen_whole.add(whole)
                state = "added" if any(p[: len(whole)] == whole for p in flat_new) else "removed"
                unexplained.append(f"{render(whole)} {state}")
            continue
        unexplained.append(change(render(path), _t(r.old, was), _t(r.new, now)))
    differing = {path[0] for path, _, _ in changed(flat_old, flat_new)}
    lines += _attributes(r, reported - differing)
    for prop in sorted(reported - differing - RESOURCE_ATTRIBUTES):
        unexplained.append(f"{prop} changed (see the CDK diff)")
    if r.change.op == "+":
        # A resource added whole: one line for it, and of its settings those a reviewer of access and data
        # asks about (the rest would repeat the template).
        lines = [_whole_resource_line(r)] + [line for line in lines if line.broadens or "statement" in line.text
                                             or line.group == "data_governance"]
    elif r.change.op == "-":
        # Removed whole: one line, and a removed policy's statements while what it governed stays.
        lines = [_whole_resource_line(r)] + (lines if _governs_what_stays(r) else [])
    for words in unexplained:
        lines.append(r.line("other", f"{_kind(r.type)} {r.template.path(r.id)}", words))
    if r.change.op == "~" and r.change.impact:
        # "replace", "may be replaced": the CDK's own word on what the update does to the resource.
        lines.append(r.line(_group(r), _subject(r), f"{r.change.impact} on deploy (the CDK's diff)"))
    return lines


# ---- Lake Formation grants: who reads which columns of a table ---------------------------------------------


@dataclass(frozen=True)
class _Grant:
    """One side of an ``AWS::LakeFormation::PrincipalPermissions``: whom, on what, which permissions, and the columns
    (``only``: exactly ``columns``; otherwise every column but ``columns``)."""

    principal: str
    target: str
    permissions: frozenset[str]
    only: bool
    columns: frozenset[str]

    def words(self) -> str:
        if self.only:
            columns = f"columns {listing(sorted(self.columns))}"
        else:
            columns = f"every column but {listing(sorted(self.columns))}" if self.columns else "every column"
        return f"{listing(sorted(self.permissions))} on {self.target}, {columns}"

    def sees(self, column: str) -> bool:
        return (column in self.columns) == self.only


def _grant_of(template: Template, props: dict[str, Any] | None) -> _Grant | None:
    if not props:
        return None
    principal = template.text((props.get("Principal") or {}).get("DataLakePrincipalIdentifier"))
    resource = props.get("Resource") or {}
    kind = next(iter(resource), "?")
    body = resource.get(kind) or {}
    name = ".".join(template.text(body[k]) for k in ("DatabaseName", "Name") if k in body) or template.text(
        body.get("ResourceArn", body))
    if kind == "TableWithColumns" and "ColumnNames" in body:
        only, columns = True, frozenset(body["ColumnNames"])
    else:  # a column wildcard, a whole table, a database or a location: everything but the excluded columns
        only = False
        columns = frozenset((body.get("ColumnWildcard") or {}).get("ExcludedColumnNames") or [])
    target = {"TableWithColumns": "table", "Table": "table", "Database": "database",
              "DataLocation": "location"}.get(kind, kind)
    return _Grant(principal, f"{target} {name}", frozenset(props.get("Permissions") or []), only, columns)


def _lake_formation_grant(r: Resource) -> list[Line]:
    """A column grant in words, and whether it broadens: a new grant, a permission gained, or a column gained (fewer
    columns excluded, more named, or a list of columns turned into a wildcard)."""
    old, new = _grant_of(r.old, r.old_props), _grant_of(r.new, r.new_props)
    subject = f"Lake Formation grant to {(new or old).principal}"  # type: ignore[union-attr]
    if old is None or new is None:
        verb, grant = ("new", new) if old is None else ("removed", old)
        return [r.line("data_governance", subject, f"{verb}: {grant.words()}", verb == "new")]  # type: ignore[union-attr]
    if old == new:
        return []
    if (old.principal, old.target) != (new.principal, new.target):
        return [r.line("data_governance", subject, f"{old.words()} → {new.words()}", True)]
    everything = old.columns | new.columns | {"(any other column)"}
    gained = sorted(c for c in everything if new.sees(c) and not old.sees(c))
    lost = sorted(c for c in everything if old.sees(c) and not new.sees(c))
    text = f"{old.words()} → {new.words()}"
    if gained:
        text += f" (columns gained: {listing(gained)})"
    if lost:
        text += f" (columns lost: {listing(lost)})"
    return [r.line("data_governance", subject, text, bool(gained) or bool(new.permissions - old.permissions))]


# ---- what the cluster stack applies to Kubernetes ----------------------------------------------------------


def manifest_objects(template: Template, logical_id: str) -> dict[k8s.Key, dict[str, Any]] | None:
    if not template.resource(logical_id):
        return {}
    text = template.text(template.properties(logical_id).get("Manifest", "[]"))
    try:
        docs = json.loads(text)
    except ValueError:
        return None
    return {k8s.key_of(doc): k8s.strip_cdk_labels(doc) for doc in docs if isinstance(doc, dict)}


def helm_objects(template: Template, logical_id: str) -> dict[k8s.Key, dict[str, Any]]:
    if not template.resource(logical_id):
        return {}
    props = template.render(template.properties(logical_id))
    values = props.get("Values")
    if isinstance(values, str):
        with contextlib.suppress(ValueError):
            values = json.loads(values)
    obj = k8s.helm_release(str(props.get("Release")), str(props.get("Namespace", "")), props.get("Chart"),
                           props.get("Repository"), props.get("Version"), values)
    return {k8s.key_of(obj): obj}


def _manifest(r: Resource) -> list[Line]:
    old, new = manifest_objects(r.old, r.id), manifest_objects(r.new, r.id)
    if old is None or new is None:
        return [r.line("other", f"manifest {r.template.path(r.id)}",
                       "changed (not readable as JSON; see the CDK diff)")]
    return k8s.diff_objects(old, new, lambda key: r.where)


def _helm(r: Resource) -> list[Line]:
    return k8s.diff_objects(helm_objects(r.old, r.id), helm_objects(r.new, r.id), lambda key: r.where)


def _cfn_json(r: Resource) -> list[Line]:
    """A ``CfnJson`` holds an IRSA trust condition: the change is one of the trust of each role using it."""
    lines: list[Line] = []
    users = r.new.references(r.id) | r.old.references(r.id)
    for role in sorted(users):
        template = r.new if r.new.resource(role) else r.old
        if template.type_of(role) != "AWS::IAM::Role":
            continue
        trust = Resource(ResourceChange("~", "AWS::IAM::Role", role, template.path(role), ["AssumeRolePolicyDocument"]),
                         r.old, r.new)
        lines += _trust(None, trust.value("old", "AssumeRolePolicyDocument"),
                        trust.value("new", "AssumeRolePolicyDocument"), trust)
    if not lines:
        old = r.old.text(r.value("old", "Value")) if r.old_props else MISSING
        new = r.new.text(r.value("new", "Value")) if r.new_props else MISSING
        lines.append(r.line("other", f"CfnJson {r.template.path(r.id)}", change("value", old, new)))
    return lines


def review_stack(diff: StackDiff, old: Template, new: Template) -> list[Line]:
    lines: list[Line] = []
    for resource_change in diff.resources:
        lines += review_resource(Resource(resource_change, old, new))
    for section, op, rest in diff.others:
        verb = {"+": "added", "-": "removed", "~": "changed"}[op]
        # "Output <construct path> <logical id>: <value>": the logical id says which (exports are the CDK's).
        name = rest.split(": ", 1)[0].rsplit(" ", 1)[-1]
        lines.append(Line("other", f"{diff.stack} {section.lower()}", f"{name} {verb}", False, (diff.stack,)))
    if diff.broadening and not any(line.broadens for line in lines):
        lines.append(Line("identity", f"stack {diff.stack}",
                          "the CDK's diff engine reports broadened permissions that no line above marks: "
                          "read its IAM and security group tables in the CDK diff", True, (diff.stack,)))
    return lines
