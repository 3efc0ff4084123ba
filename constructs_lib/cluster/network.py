"""The VPC the cluster runs in: a new one, or an existing one described by its attributes.

Private subnets carry the tags the AWS Load Balancer Controller uses to place internal load
balancers (``kubernetes.io/role/internal-elb``) and public ones for internet-facing ones
(``kubernetes.io/role/elb``). An S3 gateway endpoint keeps model weights and captured data off
the NAT gateway (cheaper, and the traffic never leaves the AWS network).

Availability zones without an account lookup: ``ec2.Vpc`` asks the stack for its zones, and a stack
with an explicit account and region answers by looking them up in the account at synth (credentials,
``cdk.context.json``). :func:`deploy_time_availability_zones` gives ``Fn::Select``/``Fn::GetAZs``
tokens that CloudFormation resolves at deploy time instead; a stack returns them from its
``availability_zones`` property (see :class:`PlatformVpc`).
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from aws_cdk import Annotations, Fn, RemovalPolicy, Stack, Tags
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct

from hyperpod_inference_iac.foundation.log_retention import (
    DEFAULT_AUDIT_RETENTION,
)
from hyperpod_inference_iac.foundation.patterns import (
    SUBNET_ID,
    VPC_ID,
)
from hyperpod_inference_iac.foundation.props import (
    Props,
    listed,
    prop,
    real_signature,
)
from hyperpod_inference_iac.foundation.validation import (
    PROPS,
    KeyPaths,
    Problems,
    is_unresolved,
)

INTERNAL_ELB_TAG = "kubernetes.io/role/internal-elb"
PUBLIC_ELB_TAG = "kubernetes.io/role/elb"
ZONE_COUNT = (2, 6)
CIDR_PREFIX = (16, 24)


class FlowLogTraffic(enum.StrEnum):
    """Which flows a VPC flow log records (``AWS::EC2::FlowLog`` ``TrafficType``)."""

    ALL = "ALL"  # accepted and rejected: what an investigation of a leak needs (who talked to whom)
    ACCEPT = "ACCEPT"
    REJECT = "REJECT"  # only what security groups and NACLs refused


@dataclass(frozen=True)
class VpcFlowLogs:
    """A VPC's flow log, the log group it writes to and the role that delivers there."""

    log_group: logs.LogGroup
    flow_log: ec2.FlowLog
    role: iam.Role


def check_flow_logs(problems: Problems, at: KeyPaths = PROPS, *, flow_log_traffic: str | None) -> None:
    """The flow-log rule :func:`check_platform_vpc` and :func:`check_existing_vpc` share."""
    if flow_log_traffic is not None and flow_log_traffic not in FlowLogTraffic._value2member_map_:
        problems.add("Network.FlowLogTraffic", at.at("flow_log_traffic"),
                     f"must be one of {', '.join(FlowLogTraffic)}, or none for no flow log", flow_log_traffic)


def add_flow_logs(vpc: ec2.IVpc, log_scope: Construct, *, traffic: FlowLogTraffic,
                  retention: logs.RetentionDays) -> VpcFlowLogs:
    """A flow log of ``vpc`` into a new retained CloudWatch log group (``log_scope``/``FlowLogs``).

    Retained: flow logs are evidence after an incident, and the retention expires them anyway. Not
    KMS-encrypted: CloudWatch Logs encrypts them at rest with its own keys, and this library owns no key
    whose policy admits the CloudWatch Logs service. The delivery role trusts the flow-logs service only
    for flow logs of this account and region, AWS's confused-deputy guard for service roles (CDK's
    default role has no condition, so the service would use it for any flow log that names it)."""
    stack = Stack.of(log_scope)
    log_group = logs.LogGroup(log_scope, "FlowLogs", retention=retention, removal_policy=RemovalPolicy.RETAIN)
    role = iam.Role(log_scope, "FlowLogsRole", description="VPC flow logs: delivers to its one log group",
                    assumed_by=iam.ServicePrincipal("vpc-flow-logs.amazonaws.com", conditions={
                        "StringEquals": {"aws:SourceAccount": stack.account},
                        "ArnLike": {"aws:SourceArn":
                                    f"arn:{stack.partition}:ec2:{stack.region}:{stack.account}:vpc-flow-log/*"}}))
    flow_log = vpc.add_flow_log(
        "FlowLog", destination=ec2.FlowLogDestination.to_cloud_watch_logs(log_group, role),
        traffic_type=ec2.FlowLogTrafficType[FlowLogTraffic(traffic).name])
    return VpcFlowLogs(log_group=log_group, flow_log=flow_log, role=role)


def deploy_time_availability_zones(count: int) -> list[str]:
    """The first ``count`` zones of the stack's region, resolved by CloudFormation (no lookup)."""
    return [Fn.select(index, Fn.get_azs()) for index in range(count)]


def check_cidr(problems: Problems, path: str, cidr: str, code: str = "Network.BadCidr") -> None:
    try:
        network = ipaddress.ip_network(cidr)
        if network.version != 4 or not CIDR_PREFIX[0] <= network.prefixlen <= CIDR_PREFIX[1]:
            raise ValueError
    except ValueError:
        problems.add(code, path, f"must be an IPv4 CIDR block from /{CIDR_PREFIX[0]} to /{CIDR_PREFIX[1]}", cidr)


_FLOW_LOG_DOC = ("Which flows the VPC flow log records: `ALL` (accepted and rejected: who talked to whom, what an "
                 "investigation needs), `ACCEPT` or `REJECT`; `None` creates no flow log. Into a retained CloudWatch "
                 "log group.")


@dataclass(frozen=True, kw_only=True)
class PlatformVpcOptions(Props):
    """A new VPC's properties a config file can set (``network.newVpc`` in the app's, and ``network.flowLogs``)."""

    CONSTRUCT: ClassVar[str] = "PlatformVpc"

    cidr: str = prop("10.42.0.0/16", doc=f"IPv4 block of the VPC (/{CIDR_PREFIX[0]} to /{CIDR_PREFIX[1]}). Private "
                                         "subnets get /19s, so large GPU node groups with prefix delegation do not "
                                         "run out of addresses.")
    max_azs: int = prop(2, doc=f"Number of zones ({ZONE_COUNT[0]}..{ZONE_COUNT[1]}). It picks the zones when "
                               "`availability_zones` is not given, and bounds `nat_gateways`.")
    nat_gateways: int = prop(1, doc="NAT gateways, 1 to the number of zones. One per zone survives a zone outage.")
    flow_log_traffic: FlowLogTraffic | None = prop(FlowLogTraffic.ALL, key="flowLogs", doc=_FLOW_LOG_DOC)

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        check_flow_logs(problems, at, flow_log_traffic=self.flow_log_traffic)
        if not is_unresolved(self.cidr):
            check_cidr(problems, at.at("cidr"), self.cidr)
        low, high = ZONE_COUNT
        max_azs = self.max_azs
        if not low <= max_azs <= high:
            problems.add("Network.ZoneCount", at.at("max_azs"), f"must be an integer from {low} to {high} (EKS needs "
                         "two zones at least)", max_azs)
        if not 1 <= self.nat_gateways <= max(max_azs, 1):
            problems.add("Network.NatGateways", at.at("nat_gateways"),
                         f"must be an integer from 1 to the number of zones ({max_azs})", self.nat_gateways)


@dataclass(frozen=True, kw_only=True)
class PlatformVpcProps(PlatformVpcOptions):
    """:class:`PlatformVpc`'s properties: its options, and what only Python code passes."""

    availability_zones: Sequence[str] | None = prop(None, doc="Zone names or tokens.", config=False,
                                                    default_doc="`deploy_time_availability_zones(max_azs)`")
    flow_log_retention: logs.RetentionDays = prop(DEFAULT_AUDIT_RETENTION, doc="How long flow logs are kept.",
                                                  config=False)


@dataclass(frozen=True, kw_only=True)
class ExistingVpcOptions(Props):
    """An existing VPC's attributes a config file can set (``network.existingVpc`` in the app's, and
    ``network.flowLogs``): :func:`existing_vpc` takes them."""

    CONSTRUCT: ClassVar[str] = "existing_vpc"

    vpc_id: str = prop(doc="The VPC id, e.g. `vpc-0123456789abcdef0`. No lookup: the VPC is described by its "
                           "attributes.")
    vpc_cidr: str = prop(doc=f"The VPC's IPv4 block (/{CIDR_PREFIX[0]} to /{CIDR_PREFIX[1]}).")
    availability_zones: Sequence[str] = prop(doc=f"At least {ZONE_COUNT[0]} zones.")
    private_subnet_ids: Sequence[str] = prop(doc="One private subnet per zone, in the same order.")
    flow_log_traffic: FlowLogTraffic | None = prop(
        None, key="flowLogs", default_doc="no flow log",
        doc="A flow log of the existing VPC, as `PlatformVpc`'s (its log group and role under the construct "
            "`<id>FlowLogs`). Off by default: an existing VPC usually has the flow logs its network team set up, "
            "and a second flow log doubles their cost. Turn it on when nobody logs the VPC's traffic.")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        check_flow_logs(problems, at, flow_log_traffic=self.flow_log_traffic)
        if not is_unresolved(self.vpc_id) and not VPC_ID.match(self.vpc_id):
            problems.add("Network.BadVpcId", at.at("vpc_id"), "must be a VPC id such as vpc-0123456789abcdef0",
                         self.vpc_id)
        if not is_unresolved(self.vpc_cidr):
            check_cidr(problems, at.at("vpc_cidr"), self.vpc_cidr)
        zones, subnets = list(self.availability_zones), list(self.private_subnet_ids)
        if len(zones) < ZONE_COUNT[0]:
            problems.add("Network.ZoneCount", at.at("availability_zones"), "needs at least 2 zones (EKS needs two)",
                         zones)
        for index, subnet in enumerate(subnets):
            if not is_unresolved(subnet) and not SUBNET_ID.match(subnet):
                problems.add("Network.BadSubnetId", at.at("private_subnet_ids", index),
                             "must be a subnet id such as subnet-0123456789abcdef0", subnet)
        if len(zones) != len(subnets):
            problems.add("Network.SubnetsPerZone", at.at("private_subnet_ids"),
                         f"needs one private subnet per availability zone ({len(zones)} zones)", subnets)


@dataclass(frozen=True, kw_only=True)
class ExistingVpcProps(ExistingVpcOptions):
    """:func:`existing_vpc`'s arguments: its options, and the flow logs' retention only Python code passes."""

    flow_log_retention: logs.RetentionDays = prop(DEFAULT_AUDIT_RETENTION, doc="How long those flow logs are kept.",
                                                  config=False)


def check_platform_vpc(problems: Problems, at: KeyPaths = PROPS, **options: Any) -> None:
    """:meth:`PlatformVpcOptions.check` of these options (kept for callers of 0.2.0)."""
    PlatformVpcOptions(**options).check(problems, at)


def check_existing_vpc(problems: Problems, at: KeyPaths = PROPS, **options: Any) -> None:
    """:meth:`ExistingVpcOptions.check` of these arguments (kept for callers of 0.2.0)."""
    ExistingVpcOptions(**options).check(problems, at)


@real_signature
class PlatformVpc(Construct):
    """A new VPC with a flow log of all traffic and an S3 gateway endpoint.

    Properties: :class:`PlatformVpcProps` (each with its type, default and meaning); ``props`` keeps them.

    ``ec2.Vpc`` still asks the stack for its zones. In a stack with an explicit account and region that
    is an account lookup at synth, unless the stack answers itself (``availability_zones`` property
    returning :func:`deploy_time_availability_zones`) or ``cdk.context.json`` holds the answer; the
    construct then adds the warning ``@hyperpod-inference-iac/PlatformVpc:availabilityZoneLookup``.

    Attributes: ``vpc``, ``flow_log_group`` and ``flow_log`` (None without a flow log).
    """

    PROPS: ClassVar[type[Props]] = PlatformVpcProps

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cidr: str = PlatformVpcProps.cidr,
        max_azs: int = PlatformVpcProps.max_azs,
        nat_gateways: int = PlatformVpcProps.nat_gateways,
        availability_zones: Sequence[str] | None = PlatformVpcProps.availability_zones,
        flow_log_traffic: FlowLogTraffic | None = PlatformVpcProps.flow_log_traffic,
        flow_log_retention: logs.RetentionDays = PlatformVpcProps.flow_log_retention,
    ) -> None:
        """Create the construct. Its properties (:class:`PlatformVpcProps`, kept as ``self.props``):

        :param cidr: IPv4 block of the VPC (/16 to /24). Private subnets get /19s, so large GPU node groups with
            prefix delegation do not run out of addresses. Default: ``'10.42.0.0/16'``.
        :param max_azs: Number of zones (2..6). It picks the zones when `availability_zones` is not given, and
            bounds `nat_gateways`. Default: ``2``.
        :param nat_gateways: NAT gateways, 1 to the number of zones. One per zone survives a zone outage.
            Default: ``1``.
        :param flow_log_traffic: Which flows the VPC flow log records: `ALL` (accepted and rejected: who talked
            to whom, what an investigation needs), `ACCEPT` or `REJECT`; `None` creates no flow log. Into a
            retained CloudWatch log group. Default: ``FlowLogTraffic.ALL``.
        :param availability_zones: Zone names or tokens. Default: ``None``
            (``deploy_time_availability_zones(max_azs)``).
        :param flow_log_retention: How long flow logs are kept. Default: ``RetentionDays.ONE_YEAR``.
        """
        super().__init__(scope, id)
        self.props = props = PlatformVpcProps(
            cidr=cidr, max_azs=max_azs, nat_gateways=nat_gateways,
            availability_zones=listed(availability_zones),
            flow_log_traffic=flow_log_traffic, flow_log_retention=flow_log_retention)
        props.raise_if_invalid(f"PlatformVpc {self.node.path}")
        if _zones_need_lookup(Stack.of(self)):
            Annotations.of(self).add_warning_v2(
                "@hyperpod-inference-iac/PlatformVpc:availabilityZoneLookup",
                "this stack has an explicit account and region, so ec2.Vpc looks its availability zones up in the "
                "account at synth (credentials needed, result cached in cdk.context.json). To synthesize offline, "
                "let the stack answer: override its availability_zones property to return "
                "deploy_time_availability_zones(n)")
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(props.cidr),
            availability_zones=list(props.availability_zones or deploy_time_availability_zones(props.max_azs)),
            nat_gateways=props.nat_gateways,
            restrict_default_security_group=True,
            subnet_configuration=[
                ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24),
                ec2.SubnetConfiguration(name="private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS,
                                        cidr_mask=19),
            ],
            gateway_endpoints={"S3": ec2.GatewayVpcEndpointOptions(service=ec2.GatewayVpcEndpointAwsService.S3)},
        )
        for subnet in self.vpc.private_subnets:
            Tags.of(subnet).add(INTERNAL_ELB_TAG, "1")
        for subnet in self.vpc.public_subnets:
            Tags.of(subnet).add(PUBLIC_ELB_TAG, "1")
        flow_logs = add_flow_logs(self.vpc, self, traffic=props.flow_log_traffic,
                                  retention=props.flow_log_retention) if props.flow_log_traffic is not None else None
        self.flow_log_group = flow_logs.log_group if flow_logs else None
        self.flow_log = flow_logs.flow_log if flow_logs else None


def _zones_need_lookup(stack: Stack) -> bool:
    """Whether reading ``stack.availability_zones`` would look zones up in the account at synth."""
    if is_unresolved(stack.account) or is_unresolved(stack.region):
        return False  # environment-agnostic: the stack answers with Fn::GetAZs itself
    if type(stack).availability_zones is not Stack.availability_zones:
        return False  # the stack answers itself
    key = f"availability-zones:account={stack.account}:region={stack.region}"
    return stack.node.try_get_context(key) is None


def existing_vpc(scope: Construct, id: str, *, vpc_id: str, vpc_cidr: str, availability_zones: Sequence[str],
                 private_subnet_ids: Sequence[str],
                 flow_log_traffic: FlowLogTraffic | None = ExistingVpcProps.flow_log_traffic,
                 flow_log_retention: logs.RetentionDays = ExistingVpcProps.flow_log_retention) -> ec2.IVpc:
    """An existing VPC from its attributes (:class:`ExistingVpcProps`): no ``Vpc.from_lookup``, so synth needs no
    AWS account.

    The caller is responsible for the subnet tags (``kubernetes.io/role/internal-elb``) and an S3
    endpoint in an existing VPC; the docs say so. Flow logs are off by default: an existing VPC usually
    has the flow logs its network team set up, and a second one doubles their cost. With
    ``flow_log_traffic`` this adds one (:func:`add_flow_logs`; its log group and role under ``<id>FlowLogs``).
    """
    props = ExistingVpcProps(vpc_id=vpc_id, vpc_cidr=vpc_cidr, availability_zones=listed(availability_zones),
                             private_subnet_ids=listed(private_subnet_ids), flow_log_traffic=flow_log_traffic,
                             flow_log_retention=flow_log_retention)
    props.raise_if_invalid("existing_vpc")
    vpc = ec2.Vpc.from_vpc_attributes(
        scope, id, vpc_id=props.vpc_id, vpc_cidr_block=props.vpc_cidr,
        availability_zones=list(props.availability_zones), private_subnet_ids=list(props.private_subnet_ids),
    )
    if props.flow_log_traffic is not None:
        add_flow_logs(vpc, Construct(scope, f"{id}FlowLogs"), traffic=props.flow_log_traffic,
                      retention=props.flow_log_retention)
    return vpc
