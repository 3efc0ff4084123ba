"""IAM permissions of the AWS Load Balancer Controller that the inference operator add-on runs.

Follows the structure of the controller's published policy (v2.x), with every action of the ALB controller role
AWS's own add-on set-up grants (``inference-addon-iam-roles-template.yaml``; tests/references compares them):
read-only discovery on ``*``
(these EC2/ELB ``Describe*`` calls support no resource-level permissions), and every mutating
call limited to resources the controller tagged ``elbv2.k8s.aws/cluster`` itself.
"""

from __future__ import annotations

from aws_cdk import aws_iam as iam

_CLUSTER_TAG = "elbv2.k8s.aws/cluster"
_REQUEST_TAGGED = {"Null": {f"aws:RequestTag/{_CLUSTER_TAG}": "false"}}
_RESOURCE_TAGGED = {"Null": {f"aws:ResourceTag/{_CLUSTER_TAG}": "false"}}
_ELB_TAGGABLE = [
    "arn:{p}:elasticloadbalancing:{r}:{a}:targetgroup/*/*",
    "arn:{p}:elasticloadbalancing:{r}:{a}:loadbalancer/net/*/*",
    "arn:{p}:elasticloadbalancing:{r}:{a}:loadbalancer/app/*/*",
]
_LISTENERS = [
    "arn:{p}:elasticloadbalancing:{r}:{a}:listener/net/*/*/*",
    "arn:{p}:elasticloadbalancing:{r}:{a}:listener/app/*/*/*",
    "arn:{p}:elasticloadbalancing:{r}:{a}:listener-rule/net/*/*/*",
    "arn:{p}:elasticloadbalancing:{r}:{a}:listener-rule/app/*/*/*",
]


def alb_controller_statements(*, partition: str, region: str, account: str) -> list[iam.PolicyStatement]:
    def arns(patterns: list[str]) -> list[str]:
        return [p.format(p=partition, r=region, a=account) for p in patterns]

    security_groups = [f"arn:{partition}:ec2:{region}:{account}:security-group/*"]
    return [
        iam.PolicyStatement(
            sid="CreateElbServiceLinkedRole", actions=["iam:CreateServiceLinkedRole"], resources=["*"],
            conditions={"StringEquals": {"iam:AWSServiceName": "elasticloadbalancing.amazonaws.com"}}),
        iam.PolicyStatement(sid="Discover", resources=["*"], actions=[
            "ec2:DescribeAccountAttributes", "ec2:DescribeAddresses", "ec2:DescribeAvailabilityZones",
            "ec2:DescribeInternetGateways", "ec2:DescribeVpcs", "ec2:DescribeVpcPeeringConnections",
            "ec2:DescribeSubnets", "ec2:DescribeSecurityGroups", "ec2:DescribeInstances",
            "ec2:DescribeNetworkInterfaces", "ec2:DescribeTags", "ec2:DescribeRouteTables",
            "ec2:GetCoipPoolUsage", "ec2:DescribeCoipPools", "ec2:GetSecurityGroupsForVpc", "ec2:DescribeIpamPools",
            "elasticloadbalancing:DescribeLoadBalancers", "elasticloadbalancing:DescribeLoadBalancerAttributes",
            "elasticloadbalancing:DescribeListeners", "elasticloadbalancing:DescribeListenerCertificates",
            "elasticloadbalancing:DescribeListenerAttributes", "elasticloadbalancing:DescribeSSLPolicies",
            "elasticloadbalancing:DescribeRules", "elasticloadbalancing:DescribeTargetGroups",
            "elasticloadbalancing:DescribeTargetGroupAttributes", "elasticloadbalancing:DescribeTargetHealth",
            "elasticloadbalancing:DescribeTags", "elasticloadbalancing:DescribeTrustStores",
            "elasticloadbalancing:DescribeCapacityReservation", "cognito-idp:DescribeUserPoolClient",
            "acm:ListCertificates", "acm:DescribeCertificate", "iam:ListServerCertificates",
            "iam:GetServerCertificate", "wafv2:GetWebACL", "wafv2:GetWebACLForResource",
            "wafv2:AssociateWebACL", "wafv2:DisassociateWebACL", "waf-regional:GetWebACL",
            "waf-regional:GetWebACLForResource", "waf-regional:AssociateWebACL", "waf-regional:DisassociateWebACL",
            "shield:GetSubscriptionState",
            "shield:DescribeProtection", "shield:CreateProtection", "shield:DeleteProtection"]),
        iam.PolicyStatement(sid="CreateSecurityGroups", actions=["ec2:CreateSecurityGroup"], resources=["*"]),
        iam.PolicyStatement(
            sid="TagNewSecurityGroups", actions=["ec2:CreateTags"], resources=security_groups,
            conditions={"StringEquals": {"ec2:CreateAction": "CreateSecurityGroup"}, **_REQUEST_TAGGED}),
        iam.PolicyStatement(
            sid="ManageOwnSecurityGroups", resources=security_groups,
            actions=["ec2:CreateTags", "ec2:DeleteTags", "ec2:AuthorizeSecurityGroupIngress",
                     "ec2:RevokeSecurityGroupIngress", "ec2:DeleteSecurityGroup"],
            conditions=_RESOURCE_TAGGED),
        iam.PolicyStatement(
            sid="CreateTaggedLoadBalancers", resources=["*"], conditions=_REQUEST_TAGGED,
            actions=["elasticloadbalancing:CreateLoadBalancer", "elasticloadbalancing:CreateTargetGroup"]),
        iam.PolicyStatement(
            sid="TagOnCreate", actions=["elasticloadbalancing:AddTags"], resources=arns(_ELB_TAGGABLE),
            conditions={"StringEquals": {"elasticloadbalancing:CreateAction": ["CreateTargetGroup",
                                                                               "CreateLoadBalancer"]},
                        **_REQUEST_TAGGED}),
        iam.PolicyStatement(
            sid="ManageOwnLoadBalancers", resources=["*"], conditions=_RESOURCE_TAGGED,
            actions=["elasticloadbalancing:ModifyLoadBalancerAttributes", "elasticloadbalancing:SetIpAddressType",
                     "elasticloadbalancing:SetSecurityGroups", "elasticloadbalancing:SetSubnets",
                     "elasticloadbalancing:DeleteLoadBalancer", "elasticloadbalancing:ModifyTargetGroup",
                     "elasticloadbalancing:ModifyTargetGroupAttributes", "elasticloadbalancing:DeleteTargetGroup",
                     "elasticloadbalancing:ModifyListenerAttributes", "elasticloadbalancing:AddTags",
                     "elasticloadbalancing:RemoveTags", "elasticloadbalancing:ModifyCapacityReservation",
                     "elasticloadbalancing:ModifyIpPools"]),
        iam.PolicyStatement(
            sid="ManageListenersAndRules", resources=["*"],
            actions=["elasticloadbalancing:CreateListener", "elasticloadbalancing:DeleteListener",
                     "elasticloadbalancing:CreateRule", "elasticloadbalancing:DeleteRule",
                     "elasticloadbalancing:ModifyListener", "elasticloadbalancing:AddListenerCertificates",
                     "elasticloadbalancing:RemoveListenerCertificates", "elasticloadbalancing:ModifyRule",
                     "elasticloadbalancing:SetRulePriorities", "elasticloadbalancing:SetWebAcl"]),
        iam.PolicyStatement(
            sid="TagListeners", actions=["elasticloadbalancing:AddTags", "elasticloadbalancing:RemoveTags"],
            resources=arns(_LISTENERS)),
        iam.PolicyStatement(
            sid="RegisterTargets", resources=arns(["arn:{p}:elasticloadbalancing:{r}:{a}:targetgroup/*/*"]),
            actions=["elasticloadbalancing:RegisterTargets", "elasticloadbalancing:DeregisterTargets"]),
    ]
