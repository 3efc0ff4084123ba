"""Every format rule of this library, written once.

The constructs, the charts and the repository's config loader all import from here, so a rule
cannot drift between the place that checks a config file and the place that builds the resource.
Patterns are the services' own where a service publishes one (CloudFormation registry schemas,
the operator's CRDs), anchored on both ends.
"""

from __future__ import annotations

import hashlib
import re

# SageMaker resource names (HyperPod clusters and instance groups, endpoints, JumpStart ids and hubs):
# the AWS::SageMaker::Cluster registry schema and the operator's CRDs use the same expression.
SAGEMAKER_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
# The operator's spec.endpointName also accepts "" ("no SageMaker endpoint").
SAGEMAKER_ENDPOINT_NAME = re.compile(rf"^$|{SAGEMAKER_NAME.pattern}")
# The IEC CRD's modelName pattern has no trailing "$" (names such as "Qwen2.5-VL-7B-Instruct" pass);
# kept as the CRD has it, with the length bound checked separately.
SAGEMAKER_MODEL_NAME = re.compile(SAGEMAKER_NAME.pattern.removesuffix("$"))
SAGEMAKER_INSTANCE_TYPE = re.compile(r"^ml\.[a-z][a-z0-9]*(-[a-z0-9]+)?\.[a-z0-9]+$")

# Kubernetes names.
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")

# DNS names served by endpoints (lowercase, no wildcard, at least two labels, at most 253 characters).
DOMAIN_NAME = re.compile(r"^(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+$")

# AWS identifiers.
ACCOUNT_ID = re.compile(r"^\d{12}$")
REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d$")
IAM_ROLE_ARN = re.compile(r"^arn:aws[a-z\-]*:iam::\d{12}:role/?[a-zA-Z_0-9+=,.@\-_/]+$")
# IAM's rule for role names: 1-64 ASCII letters, digits and '+=,.@_-' (IAM User Guide, IAM quotas).
IAM_ROLE_NAME_MAX = 64
IAM_ROLE_NAME = re.compile(rf"^[A-Za-z0-9+=,.@_-]{{1,{IAM_ROLE_NAME_MAX}}}$")


def iam_role_name(name: str) -> str:
    """`name` when IAM takes it, else its first 55 characters, '-' and 8 hex characters of its SHA-256: two
    long names that share a prefix (two portable servers whose names share their first 51 characters) get two
    roles, not one, and a name maps to the same role on every synth."""
    if len(name) <= IAM_ROLE_NAME_MAX:
        return name
    return f"{name[: IAM_ROLE_NAME_MAX - 9]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def iam_role_arn(partition: str, account: str, role_name: str) -> str:
    """The ARN of a role with a fixed name (no path): known before deploy, so manifests outside CDK can name it.
    Every role ARN the library and the app write comes from here."""
    return f"arn:{partition}:iam::{account}:role/{role_name}"


def account_root_arn(partition: str, account: str) -> str:
    """``arn:<partition>:iam::<account>:root``: the account as a principal (key and bucket policies)."""
    return f"arn:{partition}:iam::{account}:root"

# The operator CRD's customCertificateConfig.acmArn (which admits only the aws partition).
ACM_CERTIFICATE_ARN = re.compile(r"^arn:aws:acm:[a-z0-9-]+:[0-9]{12}:certificate/[a-fA-F0-9-]+$")
HOSTED_ZONE_ID = re.compile(r"^Z[A-Z0-9]+$")
KMS_KEY_ID = re.compile(r"^[a-zA-Z0-9:/_-]*$")  # the CRDs' kmsKeyId: key id, key ARN or alias ARN
LAMBDA_LAYER_VERSION_ARN = re.compile(r"^arn:aws[a-z-]*:lambda:[a-z0-9-]+:\d{12}:layer:[A-Za-z0-9_-]+:\d+$")
S3_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
# An S3 URI with a bucket and an optional key prefix; the CRDs forbid ',' and '=' in capture URIs.
S3_URI = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(/(?P<prefix>[^\s,=]*))?$")
EC2_INSTANCE_TYPE = re.compile(r"^(?P<family>[a-z][a-z0-9]*(-[a-z0-9]+)?)\.(?P<size>[a-z0-9]+)$")
EKS_CLUSTER_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$")  # AWS::EKS::Cluster Name
EKS_ADDON_VERSION = re.compile(r"^v\d+\.\d+\.\d+-eksbuild\.\d+$")
SUBNET_ID = re.compile(r"^subnet-[0-9a-f]{8,17}$")
VPC_ID = re.compile(r"^vpc-[0-9a-f]{8,17}$")

# Container images: a tag or a digest, so what runs cannot change under a running deployment.
PINNED_IMAGE = re.compile(r"^[^\s@]+(:[\w][\w.-]{0,127}|@sha256:[0-9a-f]{64})$")
