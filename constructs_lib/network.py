"""The VPC the cluster runs in: a new one, or an existing one described by its attributes.

Private subnets carry the tags the AWS Load Balancer Controller uses to place internal load
balancers (``kubernetes.io/role/internal-elb``) and public ones for internet-facing ones
(``kubernetes.io/role/elb``). An S3 gateway endpoint keeps model weights and captured data off
the NAT gateway (cheaper, and the traffic never leaves the AWS network).
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import RemovalPolicy, Tags
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

INTERNAL_ELB_TAG = "kubernetes.io/role/internal-elb"
PUBLIC_ELB_TAG = "kubernetes.io/role/elb"


class PlatformVpc(Construct):
    """A new VPC (``cidr``, ``max_azs``, ``nat_gateways``) with flow logs and an S3 gateway endpoint.

    :param cidr: IPv4 block of the VPC; private subnets get /19s so large GPU node groups with
        prefix delegation do not run out of addresses.
    :param availability_zones: the zones to use (never looked up in the account at synth): names,
        or ``Fn::Select``/``Fn::GetAZs`` tokens resolved by CloudFormation at deploy time.
    """

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        cidr: str,
        max_azs: int = 2,
        nat_gateways: int = 1,
        availability_zones: Sequence[str] | None = None,
        flow_log_retention: logs.RetentionDays = logs.RetentionDays.ONE_YEAR,
    ) -> None:
        super().__init__(scope, id_)
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(cidr),
            availability_zones=list(availability_zones) if availability_zones else None,
            max_azs=None if availability_zones else max_azs,
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
        self.flow_log_group = logs.LogGroup(self, "FlowLogs", retention=flow_log_retention,
                                            removal_policy=RemovalPolicy.RETAIN)
        self.flow_log = self.vpc.add_flow_log(
            "FlowLog", destination=ec2.FlowLogDestination.to_cloud_watch_logs(self.flow_log_group),
            traffic_type=ec2.FlowLogTrafficType.REJECT,
        )


def existing_vpc(scope: Construct, id_: str, *, vpc_id: str, vpc_cidr: str, availability_zones: Sequence[str],
                 private_subnet_ids: Sequence[str]) -> ec2.IVpc:
    """An existing VPC from its attributes: no ``Vpc.from_lookup``, so synth needs no AWS account.

    The caller is responsible for the subnet tags (``kubernetes.io/role/internal-elb``) and an S3
    endpoint in an existing VPC; docs/configuration.md says so.
    """
    return ec2.Vpc.from_vpc_attributes(
        scope, id_, vpc_id=vpc_id, vpc_cidr_block=vpc_cidr, availability_zones=list(availability_zones),
        private_subnet_ids=list(private_subnet_ids),
    )
