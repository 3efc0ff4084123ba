"""A SageMaker HyperPod cluster orchestrated by an existing EKS cluster, as one typed construct.

aws-cdk-lib only has the L1 ``aws_sagemaker.CfnCluster``; this construct adds what a working
cluster needs around it and checks the input against the CloudFormation schema at synth time:

* a hardened lifecycle bucket with ``hyperpod_lifecycle/on_create.sh`` deployed under
  ``lifecycle/`` (the script moves containerd onto instance-store NVMe, see the script);
* the instance groups' execution role: trusted by ``sagemaker.amazonaws.com`` for HyperPod clusters
  of this account and region only, with the AWS managed ``AmazonSageMakerClusterInstanceRolePolicy``
  (required by HyperPod; it is an instance-role policy, not a ``*FullAccess`` one), read access to
  the lifecycle scripts, and the network-interface (in the cluster's VPC only), ECR pull, Pod Identity
  and log permissions HyperPod nodes use;
* the EKS access entry of type ``HYPERPOD_LINUX`` that lets the nodes join the cluster (no access
  policies: that type cannot have any, and nodes never get cluster-admin);
* the ``AWS::SageMaker::Cluster`` itself, created after the scripts are uploaded, the role has its
  permissions and the access entry exists;
* a retention on the cluster's log group ``/aws/sagemaker/Clusters/<name>/<cluster id>``. The id is
  assigned at creation (the last part of the cluster ARN), so the group cannot be created beforehand
  with CloudFormation: two SDK calls after the cluster create it if it does not exist yet and put the
  retention policy, each allowed on that one group only.

The EKS cluster must use the ``API`` or ``API_AND_CONFIG_MAP`` authentication mode (``aws_eks_v2``
always does) and already run HyperPod's dependency Helm chart before nodes join.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from aws_cdk import Duration, Fn, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import custom_resources as cr
from constructs import Construct

from hyperpod_inference_iac._package_data import package_dir
from hyperpod_inference_iac.cdk_types import ClusterLike, as_icluster
from hyperpod_inference_iac.hardened_bucket import hardened_bucket
from hyperpod_inference_iac.log_retention import DEFAULT_RETENTION, days_of
from hyperpod_inference_iac.nag import acknowledge, managed_policy, resource_evidence, stack_singletons
from hyperpod_inference_iac.patterns import S3_BUCKET_NAME, SAGEMAKER_INSTANCE_TYPE, SAGEMAKER_NAME
from hyperpod_inference_iac.s3_access import KMS_WRITE_ACTIONS, grant_key_through_s3, kms_through_s3
from hyperpod_inference_iac.validation import PROPS, KeyPaths, Problems, is_unresolved

LIFECYCLE_SCRIPTS_DIR = package_dir("hyperpod_inference_iac", "hyperpod_lifecycle")
LIFECYCLE_PREFIX = "lifecycle/"
ON_CREATE_SCRIPT = "on_create.sh"
INSTANCE_ROLE_MANAGED_POLICY = "AmazonSageMakerClusterInstanceRolePolicy"
CLUSTER_LOG_GROUP_PREFIX = "/aws/sagemaker/Clusters/"
MAX_SUBNETS = 16  # VpcConfig.Subnets
SECURITY_GROUPS = (1, 5)  # VpcConfig.SecurityGroupIds
INSTANCE_COUNT_MAX = 1000
EBS_VOLUME_GIB = (1, 16384)


class NodeRecovery(enum.StrEnum):
    AUTOMATIC = "Automatic"  # HyperPod replaces or reboots faulty nodes
    NONE = "None"


class DeepHealthCheck(enum.StrEnum):
    INSTANCE_STRESS = "InstanceStress"  # GPU/accelerator stress test
    INSTANCE_CONNECTIVITY = "InstanceConnectivity"  # EFA/NCCL

# What HyperPod does with the execution role in the customer VPC (VpcConfig), as AWS documents it for the
# role: create the nodes' network interfaces, let the service attach them, detach and delete them.
# The Describe calls support no resource-level permissions.
_NETWORK_DESCRIBE_ACTIONS = [
    "ec2:DescribeDhcpOptions",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSubnets",
    "ec2:DescribeVpcs",
]
# These change network interfaces. EC2 authorizes each resource of a request on its own, and ec2:Vpc is a
# condition key of the network interface (Delete, Detach, the permissions), the subnet and the security group
# (Create), but not of the interface being created nor of the instance resource type (Detach authorizes the
# node too): with ...IfExists, every interface, subnet and security group they touch must be in the cluster's
# VPC, and the role can no longer detach or delete the other network interfaces of the Region.
_NETWORK_INTERFACE_ACTIONS = [
    "ec2:CreateNetworkInterface",
    "ec2:CreateNetworkInterfacePermission",
    "ec2:DeleteNetworkInterface",
    "ec2:DeleteNetworkInterfacePermission",
    "ec2:DetachNetworkInterface",
]
_ECR_PULL_ACTIONS = ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]
_LOG_ACTIONS = ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:DescribeLogStreams", "logs:PutLogEvents"]


@dataclass(frozen=True, kw_only=True)
class InstanceGroup:
    """One HyperPod instance group.

    :param name: instance group name, ``^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$``, unique in the cluster.
    :param instance_type: a SageMaker ML instance type, e.g. ``ml.g6e.12xlarge``.
    :param instance_count: number of nodes (0 keeps the group defined but empty).
    :param threads_per_core: 1 disables simultaneous multithreading (HyperPod's default for GPU
        training and inference), 2 enables it.
    :param ebs_volume_gib: secondary EBS volume per node, mounted at ``/opt/sagemaker``; 1..16384.
    :param deep_health_checks: checks run when nodes start: ``InstanceStress`` (GPU/accelerator stress
        test) and/or ``InstanceConnectivity`` (EFA/NCCL); they add start-up time.
    """

    name: str
    instance_type: str
    instance_count: int
    threads_per_core: int = 1
    ebs_volume_gib: int = 500
    deep_health_checks: Sequence[DeepHealthCheck | str] = ()


class HyperPodCluster(Construct):
    """HyperPod cluster on an existing ``aws_eks_v2`` cluster, with its lifecycle scripts, execution
    role and EKS access entry.

    :param cluster_name: HyperPod cluster name, ``^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$`` (replacement on
        change).
    :param eks_cluster: the orchestrating EKS cluster.
    :param subnets: subnets of the nodes' network interfaces (1..16, private, in the EKS cluster's VPC).
    :param security_groups: security groups of those interfaces (1..5); they must allow traffic to and
        from the EKS cluster security group.
    :param instance_groups: at least one :class:`InstanceGroup`, names unique.
    :param node_recovery: :class:`NodeRecovery`. @default AUTOMATIC
    :param lifecycle_bucket_name: name of the lifecycle-script bucket this construct creates. The role
        reads it through an explicit grant, so it need not start with ``sagemaker-`` (the managed policy's
        own S3 scope). @default a name CloudFormation generates
    :param lifecycle_scripts: folder whose files are deployed under ``lifecycle/``; it must hold
        ``on_create.sh``. @default the script shipped in this package (``hyperpod_lifecycle/``)
    :param access_logs_bucket: where the lifecycle bucket's server access logs go (its policy must admit
        ``logging.s3.amazonaws.com``, as :class:`~hyperpod_inference_iac.CaptureStorage`'s does). @default none
    :param encryption_key: KMS key of the lifecycle bucket. @default SSE-S3
    :param log_retention: how long the cluster's log group (lifecycle scripts, node agents) keeps its events.
        @default three months
    :param vpc: the VPC of ``subnets``: the execution role may create, detach and delete network interfaces in it
        only. @default the EKS cluster's VPC (required when ``eks_cluster`` was imported without one)

    Attributes: ``cfn_cluster``, ``cluster_arn``, ``execution_role``, ``lifecycle_bucket``,
    ``lifecycle_scripts`` (the uploads), ``access_entry``, ``log_group_name`` and ``log_retention_calls``
    (the two SDK calls). Its cdk-nag findings (the instance-role managed policy, node permissions without
    resource scoping, CDK's SDK-call provider, the log group's ARN form) are acknowledged here.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster_name: str,
        eks_cluster: ClusterLike,
        subnets: Sequence[ec2.ISubnet],
        security_groups: Sequence[ec2.ISecurityGroup],
        instance_groups: Sequence[InstanceGroup],
        lifecycle_bucket_name: str | None = None,
        lifecycle_scripts: str | Path | None = None,
        node_recovery: NodeRecovery = NodeRecovery.AUTOMATIC,
        access_logs_bucket: s3.IBucket | None = None,
        encryption_key: kms.IKey | None = None,
        log_retention: logs.RetentionDays = DEFAULT_RETENTION,
        vpc: ec2.IVpc | None = None,
    ) -> None:
        super().__init__(scope, id)
        problems = Problems()
        vpc = vpc or _vpc_of(eks_cluster)
        check_hyperpod_cluster(problems, cluster_name=cluster_name, instance_groups=instance_groups,
                               node_recovery=node_recovery, lifecycle_bucket_name=lifecycle_bucket_name,
                               subnet_count=len(subnets), security_group_count=len(security_groups),
                               vpc_known=vpc is not None)
        scripts = Path(lifecycle_scripts) if lifecycle_scripts is not None else LIFECYCLE_SCRIPTS_DIR
        if not (scripts / ON_CREATE_SCRIPT).is_file():
            problems.add("HyperPodCluster.NoOnCreateScript", "lifecycle_scripts",
                         f"must be a folder holding {ON_CREATE_SCRIPT}", str(scripts))
        problems.raise_if_any(f"HyperPodCluster {self.node.path}")
        assert vpc is not None  # (or check_hyperpod_cluster would have reported it: vpc_known)
        stack = Stack.of(self)

        self.lifecycle_bucket = hardened_bucket(
            self,
            "LifecycleBucket",
            bucket_name=lifecycle_bucket_name,
            encryption_key=encryption_key,
            access_logs_bucket=access_logs_bucket,
            # Without a log bucket, a prefix alone would make S3 log the bucket into itself.
            lifecycle_rules=[
                s3.LifecycleRule(id="purge-replaced-scripts", noncurrent_version_expiration=Duration.days(30)),
            ],
        )
        self.lifecycle_scripts = self._upload_scripts(scripts, encryption_key)

        self.execution_role = iam.Role(
            self,
            "ExecutionRole",
            description=f"HyperPod instance groups of {cluster_name}",
            # Confused-deputy guard: only HyperPod clusters of this account and region may assume it.
            assumed_by=iam.ServicePrincipal(
                "sagemaker.amazonaws.com",
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {
                        "aws:SourceArn": f"arn:{stack.partition}:sagemaker:{stack.region}:{stack.account}:cluster/*",
                    },
                },
            ),
            # Required by HyperPod for every instance group role (node agent, health monitoring).
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(INSTANCE_ROLE_MANAGED_POLICY)],
        )
        self._grant_read_lifecycle_scripts(stack, encryption_key)
        self._grant_node_permissions(stack, eks_cluster, vpc)

        self.access_entry = eks.AccessEntry(
            self,
            "AccessEntry",
            cluster=as_icluster(eks_cluster),
            principal=self.execution_role.role_arn,
            access_entry_type=eks.AccessEntryType.HYPERPOD_LINUX,
            access_policies=[],
        )

        source_s3_uri = f"s3://{self.lifecycle_bucket.bucket_name}/{LIFECYCLE_PREFIX}"
        self.cfn_cluster = sagemaker.CfnCluster(
            self,
            "Resource",
            cluster_name=cluster_name,
            orchestrator=sagemaker.CfnCluster.OrchestratorProperty(
                eks=sagemaker.CfnCluster.ClusterOrchestratorEksConfigProperty(cluster_arn=eks_cluster.cluster_arn),
            ),
            instance_groups=[self._instance_group(group, source_s3_uri) for group in instance_groups],
            node_recovery=str(node_recovery),
            vpc_config=sagemaker.CfnCluster.VpcConfigProperty(
                security_group_ids=[sg.security_group_id for sg in security_groups],
                subnets=[subnet.subnet_id for subnet in subnets],
            ),
        )
        # Nodes run on_create.sh and join EKS as soon as they boot: the scripts, the role's policies
        # and the access entry must exist first.
        # (The role itself is already a dependency through ExecutionRole's GetAtt; its policy is not.)
        role_policy = self.execution_role.node.find_child("DefaultPolicy")
        self.cfn_cluster.node.add_dependency(*self.lifecycle_scripts, role_policy, self.access_entry)
        self.cluster_arn: str = self.cfn_cluster.attr_cluster_arn
        # arn:<partition>:sagemaker:<region>:<account>:cluster/<id>: the id is the part after the only "/".
        cluster_id = Fn.select(1, Fn.split("/", self.cluster_arn))
        self.log_group_name: str = f"{CLUSTER_LOG_GROUP_PREFIX}{cluster_name}/{cluster_id}"
        self.log_retention_calls = self._retain_cluster_logs(stack, log_retention)
        self._acknowledge_reviewed_findings(stack)

    def _acknowledge_reviewed_findings(self, stack: Stack) -> None:
        role = self.execution_role
        acknowledge(role, "hyperpod-managed-policy", managed_policy(INSTANCE_ROLE_MANAGED_POLICY))
        bucket = self.lifecycle_bucket
        acknowledge(role, "s3-object-wildcard-under-fixed-prefix",
                    *resource_evidence(self, bucket.arn_for_objects(f"{LIFECYCLE_PREFIX}*")))
        partition, region, account = stack.partition, stack.region, stack.account
        log_group = f"arn:{partition}:logs:{region}:{account}:log-group:{CLUSTER_LOG_GROUP_PREFIX}*"
        acknowledge(role, "hyperpod-node-permissions", *resource_evidence(self,
            "*", f"arn:{partition}:ec2:{region}:{account}:network-interface/*",
            f"arn:{partition}:ecr:{region}:*:repository/*", log_group, f"{log_group}:log-stream:*"))
        for call in self.log_retention_calls:
            acknowledge(call, "cloudwatch-log-group-arn", *resource_evidence(self, self._log_group_arn(stack)))
        for provider in stack_singletons(stack, "AWS679f53fac002430cb0da5b7982bd2287"):
            acknowledge(provider, "cdk-aws-custom-resource-managed-policy",
                        managed_policy("service-role/AWSLambdaBasicExecutionRole"))
            acknowledge(provider, "cdk-aws-custom-resource-runtime")

    def _log_group_arn(self, stack: Stack) -> str:
        """The form CloudWatch Logs authorizes log-group actions against (with the trailing ``:*``)."""
        return f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:log-group:{self.log_group_name}:*"

    def _retain_cluster_logs(self, stack: Stack, retention: logs.RetentionDays) -> list[cr.AwsCustomResource]:
        """Create the cluster's log group unless HyperPod already did (a cluster without instances may have
        none yet, and nodes added later would create it without a retention), then put the retention on it.
        A new cluster id is a new group name, so both calls run again; removing them leaves the group (its
        retention still expires the events)."""
        group = self.log_group_name
        policy = cr.AwsCustomResourcePolicy.from_statements([iam.PolicyStatement(
            actions=["logs:CreateLogGroup", "logs:PutRetentionPolicy"], resources=[self._log_group_arn(stack)])])
        create = cr.AwsSdkCall(service="CloudWatchLogs", action="createLogGroup", parameters={"logGroupName": group},
                               physical_resource_id=cr.PhysicalResourceId.of(group),
                               ignore_error_codes_matching="ResourceAlreadyExistsException")
        retain = cr.AwsSdkCall(service="CloudWatchLogs", action="putRetentionPolicy",
                               parameters={"logGroupName": group, "retentionInDays": days_of(retention)},
                               physical_resource_id=cr.PhysicalResourceId.of(group))
        created = cr.AwsCustomResource(self, "CreateLogGroup", on_create=create, on_update=create, policy=policy,
                                       install_latest_aws_sdk=False)
        retained = cr.AwsCustomResource(self, "LogRetention", on_create=retain, on_update=retain, policy=policy,
                                        install_latest_aws_sdk=False)
        retained.node.add_dependency(created)
        return [created, retained]

    def _upload_scripts(self, folder: Path, key: kms.IKey | None) -> list[cr.AwsCustomResource]:
        """Each script as one object under ``lifecycle/``, put by an SDK call whose content is the script
        itself (a few KB): no asset bucket copy, no AWS CLI layer. A changed script is a new physical id, so
        CloudFormation puts it again; the bucket's versioning keeps the previous one for 30 days."""
        uploads = []
        scripts = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith((".", "_"))
                         and p.suffix in (".sh", ".py", ".json", ".yaml", ".txt"))
        for script in scripts:
            body = script.read_text(encoding="utf-8")
            object_key = f"{LIFECYCLE_PREFIX}{script.name}"
            digest = hashlib.sha256(body.encode()).hexdigest()[:16]
            call = cr.AwsSdkCall(
                service="S3", action="putObject",
                parameters={"Bucket": self.lifecycle_bucket.bucket_name, "Key": object_key, "Body": body},
                physical_resource_id=cr.PhysicalResourceId.of(f"{object_key}@{digest}"))
            upload = cr.AwsCustomResource(
                self, f"Upload-{script.name}", on_create=call, on_update=call,
                policy=cr.AwsCustomResourcePolicy.from_statements([iam.PolicyStatement(
                    actions=["s3:PutObject"], resources=[self.lifecycle_bucket.arn_for_objects(object_key)])]),
                # Explicit, whatever the app's @aws-cdk/customresources:installLatestAwsSdkDefault says.
                install_latest_aws_sdk=False)
            if key is not None:
                grant_key_through_s3(upload, key, KMS_WRITE_ACTIONS, self.lifecycle_bucket.bucket_arn)
            uploads.append(upload)
        return uploads

    def _instance_group(
        self, group: InstanceGroup, source_s3_uri: str
    ) -> sagemaker.CfnCluster.ClusterInstanceGroupProperty:
        return sagemaker.CfnCluster.ClusterInstanceGroupProperty(
            instance_group_name=group.name,
            instance_type=group.instance_type,
            instance_count=group.instance_count,
            execution_role=self.execution_role.role_arn,
            threads_per_core=group.threads_per_core,
            instance_storage_configs=[
                sagemaker.CfnCluster.ClusterInstanceStorageConfigProperty(
                    ebs_volume_config=sagemaker.CfnCluster.ClusterEbsVolumeConfigProperty(
                        volume_size_in_gb=group.ebs_volume_gib,
                    ),
                ),
            ],
            life_cycle_config=sagemaker.CfnCluster.ClusterLifeCycleConfigProperty(
                source_s3_uri=source_s3_uri, on_create=ON_CREATE_SCRIPT,
            ),
            on_start_deep_health_checks=[str(check) for check in group.deep_health_checks] or None,
        )

    def _grant_read_lifecycle_scripts(self, stack: Stack, encryption_key: kms.IKey | None) -> None:
        """Exact actions on the ``lifecycle/`` prefix only (``bucket.grant_read`` would add wildcard
        actions such as ``s3:GetBucket*`` and ``s3:List*``)."""
        bucket = self.lifecycle_bucket
        role = self.execution_role
        role.add_to_principal_policy(iam.PolicyStatement(
            sid="ReadLifecycleScripts", actions=["s3:GetObject"],
            resources=[bucket.arn_for_objects(f"{LIFECYCLE_PREFIX}*")],
        ))
        role.add_to_principal_policy(iam.PolicyStatement(
            sid="ListLifecycleScripts", actions=["s3:ListBucket"], resources=[bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": [LIFECYCLE_PREFIX.rstrip("/"), f"{LIFECYCLE_PREFIX}*"]}},
        ))
        if encryption_key is not None:
            role.add_to_principal_policy(iam.PolicyStatement(
                sid="DecryptLifecycleScripts", actions=["kms:Decrypt"], resources=[encryption_key.key_arn],
                conditions=kms_through_s3(stack.region, bucket.bucket_arn),
            ))

    def _grant_node_permissions(self, stack: Stack, eks_cluster: ClusterLike, vpc: ec2.IVpc) -> None:
        role = self.execution_role
        in_this_region = {"StringEquals": {"aws:RequestedRegion": stack.region}}
        role.add_to_principal_policy(iam.PolicyStatement(
            sid="DescribeTheNetwork", actions=_NETWORK_DESCRIBE_ACTIONS, resources=["*"], conditions=in_this_region,
        ))
        vpc_arn = stack.format_arn(service="ec2", resource="vpc", resource_name=vpc.vpc_id)
        role.add_to_principal_policy(iam.PolicyStatement(
            sid="NodeNetworkInterfacesInClusterVpc", actions=_NETWORK_INTERFACE_ACTIONS, resources=["*"],
            conditions={**in_this_region, "StringEqualsIfExists": {"ec2:Vpc": vpc_arn}},
        ))
        role.add_to_principal_policy(iam.PolicyStatement(
            sid="TagNodeNetworkInterfaces", actions=["ec2:CreateTags"],
            resources=[f"arn:{stack.partition}:ec2:{stack.region}:{stack.account}:network-interface/*"],
            conditions={"StringEquals": {"aws:ResourceAccount": "${aws:PrincipalAccount}"}},
        ))
        # Authorization tokens have no resource; images come from AWS-owned accounts (EKS and HyperPod
        # system images) as well as the customer's, so the repository account stays open.
        role.add_to_principal_policy(iam.PolicyStatement(
            sid="EcrAuthorizationToken", actions=["ecr:GetAuthorizationToken"], resources=["*"],
        ))
        role.add_to_principal_policy(iam.PolicyStatement(
            sid="EcrPullImages", actions=_ECR_PULL_ACTIONS,
            resources=[f"arn:{stack.partition}:ecr:{stack.region}:*:repository/*"],
        ))
        role.add_to_principal_policy(iam.PolicyStatement(
            sid="PodIdentityOnThisCluster", actions=["eks-auth:AssumeRoleForPodIdentity"],
            resources=[eks_cluster.cluster_arn],
        ))
        log_group = f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:log-group:{CLUSTER_LOG_GROUP_PREFIX}*"
        role.add_to_principal_policy(iam.PolicyStatement(
            sid="ClusterLogs", actions=_LOG_ACTIONS, resources=[log_group, f"{log_group}:log-stream:*"],
        ))


def _vpc_of(eks_cluster: ClusterLike) -> ec2.IVpc | None:
    """The cluster's VPC, or None for a cluster imported without one (whose ``vpc`` raises)."""
    try:
        return eks_cluster.vpc
    except RuntimeError:
        return None


def check_hyperpod_cluster(
    problems: Problems,
    at: KeyPaths = PROPS,
    *,
    cluster_name: str,
    instance_groups: Sequence[InstanceGroup],
    node_recovery: str = NodeRecovery.AUTOMATIC,
    lifecycle_bucket_name: str | None = None,
    subnet_count: int | None = None,
    security_group_count: int | None = None,
    instance_group_names: dict[str, str] | None = None,
    vpc_known: bool | None = None,
) -> None:
    """Every rule of :class:`HyperPodCluster`'s properties (a config loader calls it with its key paths;
    ``instance_group_names`` maps :class:`InstanceGroup` fields to its keys; ``vpc_known``: whether the VPC of
    the nodes' network interfaces is known, given or the EKS cluster's)."""
    if vpc_known is False:
        problems.add("HyperPodCluster.NoVpc", at.at("vpc"),
                     "must be given: the EKS cluster was imported without its VPC, and the execution role may change "
                     "the network interfaces of that VPC only")
    if not is_unresolved(cluster_name) and not SAGEMAKER_NAME.match(cluster_name):
        problems.add("HyperPodCluster.BadName", at.at("cluster_name"),
                     "must be 1-63 letters, digits and hyphens, starting and ending with a letter or digit",
                     cluster_name)
    if subnet_count is not None:
        if subnet_count < 1:
            problems.add("HyperPodCluster.NoSubnets", at.at("subnets"),
                         "must name at least one subnet for the nodes' network interfaces (VpcConfig.Subnets)")
        elif subnet_count > MAX_SUBNETS:
            problems.add("HyperPodCluster.TooManySubnets", at.at("subnets"),
                         f"VpcConfig allows at most {MAX_SUBNETS} subnets", subnet_count)
    if security_group_count is not None and not SECURITY_GROUPS[0] <= security_group_count <= SECURITY_GROUPS[1]:
        problems.add("HyperPodCluster.SecurityGroups", at.at("security_groups"),
                     "must name 1 to 5 security groups (VpcConfig.SecurityGroupIds)", security_group_count)
    if node_recovery not in NodeRecovery._value2member_map_:
        problems.add("HyperPodCluster.NodeRecovery", at.at("node_recovery"),
                     f"must be one of {', '.join(NodeRecovery)}", node_recovery)
    if lifecycle_bucket_name is not None and not is_unresolved(lifecycle_bucket_name) and (
            not S3_BUCKET_NAME.match(lifecycle_bucket_name) or ".." in lifecycle_bucket_name):
        problems.add("HyperPodCluster.BadBucketName", at.at("lifecycle_bucket_name"),
                     "must be an S3 bucket name: 3-63 lowercase letters, digits, '.' and '-'", lifecycle_bucket_name)
    if not instance_groups:
        problems.add("HyperPodCluster.NoInstanceGroups", at.at("instance_groups"),
                     "must define at least one instance group")
    seen: set[str] = set()
    for index, group in enumerate(instance_groups):
        group_at = at.child("instance_groups", index, names=instance_group_names)
        if group.name in seen:
            problems.add("HyperPodCluster.DuplicateInstanceGroup", group_at.at("name"),
                         "instance group names must be unique in a cluster", group.name)
        seen.add(group.name)
        _check_instance_group(group, group_at, problems)


def _check_instance_group(group: InstanceGroup, at: KeyPaths, problems: Problems) -> None:
    if not is_unresolved(group.name) and not SAGEMAKER_NAME.match(group.name):
        problems.add("HyperPodCluster.BadName", at.at("name"),
                     "must be 1-63 letters, digits and hyphens, starting and ending with a letter or digit",
                     group.name)
    if not is_unresolved(group.instance_type) and not SAGEMAKER_INSTANCE_TYPE.match(group.instance_type):
        hint = f" (did you mean 'ml.{group.instance_type}'?)" if not group.instance_type.startswith("ml.") else ""
        problems.add("HyperPodCluster.BadInstanceType", at.at("instance_type"),
                     f"must be a SageMaker instance type 'ml.<family>.<size>', e.g. 'ml.g6e.12xlarge'{hint}",
                     group.instance_type)
    if not is_unresolved(group.instance_count) and not 0 <= group.instance_count <= INSTANCE_COUNT_MAX:
        problems.add("HyperPodCluster.InstanceCount", at.at("instance_count"),
                     f"must be an integer from 0 to {INSTANCE_COUNT_MAX}", group.instance_count)
    if not is_unresolved(group.threads_per_core) and group.threads_per_core not in (1, 2):
        problems.add("HyperPodCluster.ThreadsPerCore", at.at("threads_per_core"),
                     "must be 1 (multithreading off) or 2 (on)", group.threads_per_core)
    low, high = EBS_VOLUME_GIB
    if not is_unresolved(group.ebs_volume_gib) and not low <= group.ebs_volume_gib <= high:
        problems.add("HyperPodCluster.VolumeSize", at.at("ebs_volume_gib"),
                     f"must be an integer from {low} to {high} (GiB; EbsVolumeConfig.VolumeSizeInGB)",
                     group.ebs_volume_gib)
    checks = list(group.deep_health_checks)
    for check_index, check in enumerate(checks):
        if check not in DeepHealthCheck._value2member_map_:
            problems.add("HyperPodCluster.DeepHealthCheck", at.at("deep_health_checks", check_index),
                         f"must be one of {', '.join(DeepHealthCheck)}", check)
    if len(set(checks)) != len(checks):
        problems.add("HyperPodCluster.DeepHealthCheck", at.at("deep_health_checks"), "must not repeat a check", checks)
