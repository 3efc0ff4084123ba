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

from aws_cdk import Annotations, Fn, RemovalPolicy, Stack, Tags
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct

from hyperpod_inference_iac.log_retention import DEFAULT_AUDIT_RETENTION
from hyperpod_inference_iac.patterns import SUBNET_ID, VPC_ID
from hyperpod_inference_iac.validation import PROPS, KeyPaths, Problems, is_unresolved

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


def check_platform_vpc(problems: Problems, at: KeyPaths = PROPS, *, cidr: str = "10.42.0.0/16", max_azs: int = 2,
                       nat_gateways: int = 1, flow_log_traffic: str | None = FlowLogTraffic.ALL) -> None:
    """Every rule of :class:`PlatformVpc`'s properties."""
    check_flow_logs(problems, at, flow_log_traffic=flow_log_traffic)
    if not is_unresolved(cidr):
        check_cidr(problems, at.at("cidr"), cidr)
    low, high = ZONE_COUNT
    if not low <= max_azs <= high:
        problems.add("Network.ZoneCount", at.at("max_azs"), f"must be an integer from {low} to {high} (EKS needs two "
                     "zones at least)", max_azs)
    if not 1 <= nat_gateways <= max(max_azs, 1):
        problems.add("Network.NatGateways", at.at("nat_gateways"),
                     f"must be an integer from 1 to the number of zones ({max_azs})", nat_gateways)


def check_existing_vpc(problems: Problems, at: KeyPaths = PROPS, *, vpc_id: str, vpc_cidr: str,
                       availability_zones: Sequence[str], private_subnet_ids: Sequence[str],
                       flow_log_traffic: str | None = None) -> None:
    """Every rule of :func:`existing_vpc`'s arguments."""
    check_flow_logs(problems, at, flow_log_traffic=flow_log_traffic)
    if not is_unresolved(vpc_id) and not VPC_ID.match(vpc_id):
        problems.add("Network.BadVpcId", at.at("vpc_id"), "must be a VPC id such as vpc-0123456789abcdef0", vpc_id)
    if not is_unresolved(vpc_cidr):
        check_cidr(problems, at.at("vpc_cidr"), vpc_cidr)
    if len(availability_zones) < ZONE_COUNT[0]:
        problems.add("Network.ZoneCount", at.at("availability_zones"), "needs at least 2 zones (EKS needs two)",
                     list(availability_zones))
    for index, subnet in enumerate(private_subnet_ids):
        if not is_unresolved(subnet) and not SUBNET_ID.match(subnet):
            problems.add("Network.BadSubnetId", at.at("private_subnet_ids", index),
                         "must be a subnet id such as subnet-0123456789abcdef0", subnet)
    if len(availability_zones) != len(private_subnet_ids):
        problems.add("Network.SubnetsPerZone", at.at("private_subnet_ids"),
                     f"needs one private subnet per availability zone ({len(availability_zones)} zones)",
                     list(private_subnet_ids))


class PlatformVpc(Construct):
    """A new VPC with a flow log of all traffic and an S3 gateway endpoint.

    :param cidr: IPv4 block of the VPC (/16 to /24); private subnets get /19s so large GPU node groups
        with prefix delegation do not run out of addresses. @default ``10.42.0.0/16``
    :param max_azs: number of zones (2..6). @default 2
    :param nat_gateways: NAT gateways (1 to the number of zones; one per zone survives a zone outage).
        @default 1
    :param availability_zones: zone names or tokens. @default the first ``max_azs`` zones as
        CloudFormation resolves them at deploy time (:func:`deploy_time_availability_zones`)
    :param flow_log_traffic: which flows the VPC flow log records (:class:`FlowLogTraffic`); None: no flow
        log. @default ALL (accepted and rejected)
    :param flow_log_retention: how long flow logs are kept. @default one year

    ``ec2.Vpc`` still asks the stack for its zones. In a stack with an explicit account and region that
    is an account lookup at synth, unless the stack answers itself (``availability_zones`` property
    returning :func:`deploy_time_availability_zones`) or ``cdk.context.json`` holds the answer; the
    construct then adds the warning ``@hyperpod-inference-iac/PlatformVpc:availabilityZoneLookup``.

    Attributes: ``vpc``, ``flow_log_group`` and ``flow_log`` (None without a flow log).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cidr: str = "10.42.0.0/16",
        max_azs: int = 2,
        nat_gateways: int = 1,
        availability_zones: Sequence[str] | None = None,
        flow_log_traffic: FlowLogTraffic | None = FlowLogTraffic.ALL,
        flow_log_retention: logs.RetentionDays = DEFAULT_AUDIT_RETENTION,
    ) -> None:
        super().__init__(scope, id)
        problems = Problems()
        check_platform_vpc(problems, cidr=cidr, max_azs=max_azs, nat_gateways=nat_gateways,
                           flow_log_traffic=flow_log_traffic)
        problems.raise_if_any(f"PlatformVpc {self.node.path}")
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
            ip_addresses=ec2.IpAddresses.cidr(cidr),
            availability_zones=list(availability_zones or deploy_time_availability_zones(max_azs)),
            nat_gateways=nat_gateways,
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
        flow_logs = add_flow_logs(self.vpc, self, traffic=flow_log_traffic, retention=flow_log_retention) \
            if flow_log_traffic is not None else None
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
                 private_subnet_ids: Sequence[str], flow_log_traffic: FlowLogTraffic | None = None,
                 flow_log_retention: logs.RetentionDays = DEFAULT_AUDIT_RETENTION) -> ec2.IVpc:
    """An existing VPC from its attributes: no ``Vpc.from_lookup``, so synth needs no AWS account.

    The caller is responsible for the subnet tags (``kubernetes.io/role/internal-elb``) and an S3
    endpoint in an existing VPC; the docs say so. Flow logs are off by default: an existing VPC usually
    has the flow logs its network team set up, and a second one doubles their cost. With
    ``flow_log_traffic`` this adds one (:func:`add_flow_logs`; its log group and role under ``<id>FlowLogs``).
    """
    problems = Problems()
    check_existing_vpc(problems, vpc_id=vpc_id, vpc_cidr=vpc_cidr, availability_zones=availability_zones,
                       private_subnet_ids=private_subnet_ids, flow_log_traffic=flow_log_traffic)
    problems.raise_if_any("existing_vpc")
    vpc = ec2.Vpc.from_vpc_attributes(
        scope, id, vpc_id=vpc_id, vpc_cidr_block=vpc_cidr, availability_zones=list(availability_zones),
        private_subnet_ids=list(private_subnet_ids),
    )
    if flow_log_traffic is not None:
        add_flow_logs(vpc, Construct(scope, f"{id}FlowLogs"), traffic=flow_log_traffic, retention=flow_log_retention)
    return vpc
