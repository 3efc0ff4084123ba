"""The store the capture sidecars share per-caller budgets through (docs/usage-and-budgets.md): an ElastiCache
Serverless cache for Valkey in the cluster VPC's private subnets.

* **Network**: its own security group admits TCP 6379 from the ``clients`` security groups only (the cluster
  security group, which EKS puts on the nodes whose pods run the sidecars), never a CIDR: a CIDR rule would let
  every other thing in the VPC (load balancers, Lambda functions, HyperPod's own instances) reach the port. The
  portable server's NetworkPolicy adds the pod-level rule (only a sidecar of a server with limits egresses to
  6379).
* **TLS in transit**: ElastiCache Serverless takes TLS only; the sidecar connects with ``rediss://`` and verifies
  the certificate and the host name (redis-py's defaults, against the image's CA bundle).
* **Authentication: IAM**. One ElastiCache user with IAM authentication (its user id is its user name, as IAM
  authentication requires), in a user group with a disabled ``default`` user, so a connection without a token
  can do nothing. The sidecar signs a SigV4 token as its password (botocore, already in its image: no secret to
  store, rotate or leak; a token lives 15 minutes, a connection 12 hours). :meth:`UsageStore.grant_connect` gives
  ``elasticache:Connect`` on this cache and this user only, to the sidecars' own roles.
* **Data**: counters only (caller ids, limit names, token counts, windows): no prompts. Encrypted at rest with an
  AWS owned key unless ``encryption_key`` is given. No snapshots (``SnapshotRetentionLimit: 0``): a counter is
  worth something only in its window, and a restored day-old counter would be wrong, not safer.
* **Size**: ``cacheUsageLimits`` caps the data (``max_data_gb``, the billing minimum is 100 MB) and the ECPUs per
  second, so a runaway client costs a bounded amount.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_elasticache as elasticache
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from hyperpod_inference_iac.charts.usage_limits import DEFAULT_STORE_PORT, UsageStoreRef
from hyperpod_inference_iac.foundation.props import Props, listed, prop, real_signature
from hyperpod_inference_iac.foundation.validation import PROPS, KeyPaths, Problems, is_unresolved

#: ElastiCache's rules for a serverless cache name: lowercase letters, digits and single hyphens, a letter first,
#: at most 40 characters.
CACHE_NAME = re.compile(r"^[a-z](?!.*--)[a-z0-9-]{0,39}(?<!-)$")
#: An ElastiCache user id (lowercase here, as ElastiCache stores it; IAM authentication needs user name == user id).
USER_ID = re.compile(r"^[a-z](?!.*--)[a-z0-9-]{0,39}(?<!-)$")
ENGINE = "valkey"
#: IAM authentication needs Valkey 7.2 or later; 8 is the current major version of the serverless engine.
MAJOR_ENGINE_VERSION = "8"
#: What the sidecar's user may do: the commands of its lease script (GET, INCRBY, EXPIRE inside EVALSHA), the
#: give-back (DECRBY), loading the script after a restart of the cache (SCRIPT, EVAL) and the connection's own
#: (HELLO, PING; AUTH is always allowed), on its keys (``budget:`` prefix) only.
ACCESS_STRING = "on ~budget:* -@all +get +incrby +decrby +expire +evalsha +eval +script +ping +hello"


@dataclass(frozen=True, kw_only=True)
class UsageStoreOptions(Props):
    """The budget store's properties a config file can set (``usageStore`` in the app's)."""

    CONSTRUCT: ClassVar[str] = "UsageStore"

    max_data_gb: int = prop(1, doc="The most data the cache may hold (`cacheUsageLimits.dataStorage`, GB): "
                                   "counters need kilobytes; the bill's minimum is 100 MB whatever this is.")
    max_ecpu_per_second: int = prop(5000, doc="The most ECPUs per second (`cacheUsageLimits.ecpuPerSecond`, 1,000 "
                                              "to 15,000,000): a lease call is a few ECPUs; this bounds a runaway "
                                              "client's bill.")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        if not 1 <= self.max_data_gb <= 5000:
            problems.add("UsageStore.MaxDataOutOfRange", at.at("max_data_gb"), "must be from 1 to 5000 (GB)",
                         str(self.max_data_gb))
        if not 1000 <= self.max_ecpu_per_second <= 15_000_000:
            problems.add("UsageStore.MaxEcpuOutOfRange", at.at("max_ecpu_per_second"),
                         "must be from 1000 to 15000000", str(self.max_ecpu_per_second))


@dataclass(frozen=True, kw_only=True)
class UsageStoreProps(UsageStoreOptions):
    """:class:`UsageStore`'s properties: its options, and what only Python code passes."""

    vpc: ec2.IVpc = prop(config=False, doc="The cluster VPC.")
    clients: Sequence[ec2.ISecurityGroup] = prop(
        config=False,
        doc="The security groups whose members may connect on 6379: the nodes' (on EKS, the cluster security group, "
            "which the VPC CNI puts on the pods too). No CIDR is admitted.")
    cache_name: str = prop(config=False,
                           doc="The serverless cache's name (lowercase, at most 40 characters); also names its user "
                               "and user group, and is what the sidecars sign their tokens for. The app's: "
                               "`<project>-usage`.")
    subnets: Sequence[ec2.ISubnet] | None = prop(None, config=False, default_doc="the VPC's private subnets",
                                                 doc="Where the cache's endpoints are.")
    encryption_key: kms.IKey | None = prop(None, config=False, default_doc="an AWS owned key",
                                           doc="A customer managed key for the data at rest (counters, no prompts).")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        if not is_unresolved(self.cache_name) and not CACHE_NAME.match(self.cache_name):
            problems.add("UsageStore.CacheNameInvalid", at.at("cache_name"),
                         "must be 1 to 40 lowercase letters, digits or single hyphens, a letter first, no hyphen "
                         "last", self.cache_name)
        super().check(problems, at)
        if not list(self.clients):
            problems.add("UsageStore.NoClients", at.at("clients"),
                         "needs the security group of the nodes the sidecars run on (nothing could connect)")


@real_signature
class UsageStore(Construct):
    """An ElastiCache Serverless cache for Valkey that the capture sidecars share budgets through.

    Properties: :class:`UsageStoreProps` (each with its type, default and meaning); ``props`` keeps them.

    Attributes: ``cache`` (``CfnServerlessCache``), ``security_group``, ``user`` / ``user_group``, ``endpoint``
    (the address, a deploy-time token), ``port``, ``cache_arn``, ``user_arn``, ``ref`` (what a workload plan
    names the store by: :class:`~hyperpod_inference_iac.charts.usage_limits.UsageStoreRef`).
    """

    PROPS: ClassVar[type[Props]] = UsageStoreProps

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        vpc: ec2.IVpc,
        clients: Sequence[ec2.ISecurityGroup],
        cache_name: str,
        subnets: Sequence[ec2.ISubnet] | None = UsageStoreProps.subnets,
        max_data_gb: int = UsageStoreProps.max_data_gb,
        max_ecpu_per_second: int = UsageStoreProps.max_ecpu_per_second,
        encryption_key: kms.IKey | None = UsageStoreProps.encryption_key,
    ) -> None:
        """Create the construct. Its properties (:class:`UsageStoreProps`, kept as ``self.props``):

        :param max_data_gb: The most data the cache may hold (`cacheUsageLimits.dataStorage`, GB): counters need
            kilobytes; the bill's minimum is 100 MB whatever this is. Default: ``1``.
        :param max_ecpu_per_second: The most ECPUs per second (`cacheUsageLimits.ecpuPerSecond`, 1,000 to
            15,000,000): a lease call is a few ECPUs; this bounds a runaway client's bill. Default: ``5000``.
        :param vpc: The cluster VPC. Default: required.
        :param clients: The security groups whose members may connect on 6379: the nodes' (on EKS, the cluster
            security group, which the VPC CNI puts on the pods too). No CIDR is admitted. Default: required.
        :param cache_name: The serverless cache's name (lowercase, at most 40 characters); also names its user
            and user group, and is what the sidecars sign their tokens for. The app's: `<project>-usage`.
            Default: required.
        :param subnets: Where the cache's endpoints are. Default: ``None`` (the VPC's private subnets).
        :param encryption_key: A customer managed key for the data at rest (counters, no prompts). Default:
            ``None`` (an AWS owned key).
        """
        super().__init__(scope, id)
        self.props = props = UsageStoreProps(
            vpc=vpc, clients=listed(clients), cache_name=cache_name, subnets=listed(subnets),
            max_data_gb=max_data_gb, max_ecpu_per_second=max_ecpu_per_second, encryption_key=encryption_key)
        props.raise_if_invalid(f"UsageStore {self.node.path}")
        stack = Stack.of(self)
        self.port = DEFAULT_STORE_PORT
        self.security_group = ec2.SecurityGroup(
            self, "SecurityGroup", vpc=vpc, allow_all_outbound=False,
            description=f"{cache_name}: the budget store, reachable on {self.port} from the cluster nodes only")
        for index, client in enumerate(props.clients):
            self.security_group.add_ingress_rule(
                client, ec2.Port.tcp(self.port),
                "capture sidecars (budgets)" if index == 0 else f"capture sidecars (budgets), group {index + 1}")
        # IAM authentication: the user id is the user name. The group's "default" user is disabled ("off"), so an
        # unauthenticated connection can run nothing (a user group needs a user named default).
        self.ref = UsageStoreRef.of_cache(cache_name)
        self.user_id = self.ref.user_id
        self.user = elasticache.CfnUser(
            self, "User", engine=ENGINE, user_id=self.user_id, user_name=self.user_id,
            authentication_mode={"Type": "iam"}, access_string=ACCESS_STRING)
        self.default_user = elasticache.CfnUser(
            self, "DefaultUser", engine=ENGINE, user_id=f"{cache_name}-default"[:40], user_name="default",
            authentication_mode={"Type": "no-password-required"}, access_string="off -@all")
        self.user_group = elasticache.CfnUserGroup(
            self, "UserGroup", engine=ENGINE, user_group_id=cache_name,
            user_ids=[self.default_user.user_id, self.user.user_id])
        self.user_group.node.add_dependency(self.user, self.default_user)
        subnet_ids = [subnet.subnet_id for subnet in subnets] if subnets is not None else \
            vpc.select_subnets(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS).subnet_ids
        self.cache = elasticache.CfnServerlessCache(
            self, "Cache", engine=ENGINE, serverless_cache_name=cache_name,
            major_engine_version=MAJOR_ENGINE_VERSION,
            description="Per-caller token budgets of the capture sidecars (counters only)",
            subnet_ids=subnet_ids, security_group_ids=[self.security_group.security_group_id],
            user_group_id=self.user_group.user_group_id,
            kms_key_id=encryption_key.key_arn if encryption_key is not None else None,
            snapshot_retention_limit=0,
            cache_usage_limits=elasticache.CfnServerlessCache.CacheUsageLimitsProperty(
                data_storage=elasticache.CfnServerlessCache.DataStorageProperty(unit="GB", maximum=max_data_gb),
                ecpu_per_second=elasticache.CfnServerlessCache.ECPUPerSecondProperty(maximum=max_ecpu_per_second)),
        )
        self.cache.node.add_dependency(self.user_group)
        self.endpoint: str = self.cache.attr_endpoint_address
        self.cache_arn: str = self.cache.attr_arn
        # The user's ARN from its deterministic id (what elasticache:Connect names; equal to the user's attr_arn).
        self.user_arn = stack.format_arn(service="elasticache", resource="user", resource_name=self.user_id,
                                         arn_format=ArnFormat.COLON_RESOURCE_NAME)

    def grant_connect(self, grantee: iam.IGrantable) -> iam.Grant:
        """``elasticache:Connect`` on this cache and its sidecar user, nothing else: what a sidecar's role needs
        to authenticate with an IAM token (it still needs the network path and the user's access string)."""
        return iam.Grant.add_to_principal(grantee=grantee, actions=["elasticache:Connect"],
                                          resource_arns=[self.cache_arn, self.user_arn])

