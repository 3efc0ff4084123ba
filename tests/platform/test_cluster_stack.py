"""The cluster platform: every trust policy and every scoped statement reviewers ask about."""

from __future__ import annotations

import json
from typing import Any

import pytest
from syrupy.extensions.json import JSONSnapshotExtension

from hyperpod_inference_iac.foundation.operator_versions import DEFAULT_ADDON_VERSION
from tests.support.synth import Assembly, snapshot_view

ACCOUNT, REGION = "111122223333", "us-west-2"
CAPTURE_BUCKET = f"llm-platform-capture-{ACCOUNT}-{REGION}"
TLS_BUCKET = f"hyperpod-tls-llm-platform-{ACCOUNT}-{REGION}"
CERTIFICATE_ARN = f"arn:aws:acm:{REGION}:{ACCOUNT}:certificate/6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"


@pytest.fixture(scope="module")
def cluster(assembly: Assembly) -> dict[str, Any]:
    return assembly.template("-cluster")


def _resources(template: dict[str, Any], type_: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == type_}


def _role(template: dict[str, Any], path_fragment: str) -> tuple[str, dict[str, Any]]:
    matches = [(k, v) for k, v in _resources(template, "AWS::IAM::Role").items()
               if path_fragment in v["Metadata"]["aws:cdk:path"]]
    assert len(matches) == 1, [k for k, _ in matches]
    return matches[0]


def _statements_of(template: dict[str, Any], role_id: str) -> list[dict[str, Any]]:
    statements = []
    for policy in _resources(template, "AWS::IAM::Policy").values():
        if {"Ref": role_id} in policy["Properties"]["Roles"]:
            statements += policy["Properties"]["PolicyDocument"]["Statement"]
    return statements


def _oidc_conditions(template: dict[str, Any], trust_statement: dict[str, Any]) -> dict[str, str]:
    """IRSA conditions go through CfnJson (the issuer is a deploy-time value): read them back."""
    ref = trust_statement["Condition"]["StringEquals"]["Fn::GetAtt"][0]
    value = template["Resources"][ref]["Properties"]["Value"]
    text = "".join(part if isinstance(part, str) else "<issuer>" for part in value["Fn::Join"][1])
    return json.loads(text)


def test_snapshot(cluster: dict[str, Any], acknowledgment_refs: dict[tuple[str, str], str], snapshot: Any) -> None:
    """Each acknowledgment's reason is a reference here, its text in test_acknowledgments.py's snapshot."""
    assert snapshot_view(cluster, acknowledgment_refs) == snapshot(extension_class=JSONSnapshotExtension)


def test_no_account_lookups_were_needed(assembly: Assembly) -> None:
    manifest = json.loads((assembly.directory / "manifest.json").read_text())
    assert "missing" not in manifest


def test_operator_execution_role_trusts_sagemaker_and_exactly_one_service_account(cluster: dict[str, Any]) -> None:
    _, role = _role(cluster, "/InferenceOperator/ExecutionRole/Resource")
    assert role["Properties"]["RoleName"] == "SageMakerHyperPodInference-llm-platform"
    statements = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert len(statements) == 2
    service = next(s for s in statements if "Service" in s["Principal"])
    # Confused-deputy guard: SageMaker acting for SageMaker resources of this account and region only.
    assert service == {"Action": "sts:AssumeRole", "Effect": "Allow",
                       "Principal": {"Service": "sagemaker.amazonaws.com"},
                       "Condition": {"StringEquals": {"aws:SourceAccount": ACCOUNT}, "ArnLike": {"aws:SourceArn": [
                           {"Fn::GetAtt": [service["Condition"]["ArnLike"]["aws:SourceArn"][0]["Fn::GetAtt"][0],
                                           "ClusterArn"]},
                           *(f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:{kind}/*"
                             for kind in ("model", "endpoint-config", "endpoint", "inference-component"))]}}}
    web = next(s for s in statements if "Federated" in s["Principal"])
    assert web["Action"] == "sts:AssumeRoleWithWebIdentity"
    assert _oidc_conditions(cluster, web) == {
        "<issuer>:aud": "sts.amazonaws.com",
        "<issuer>:sub": "system:serviceaccount:hyperpod-inference-system:hyperpod-inference-controller-manager",
    }


@pytest.mark.parametrize(("fragment", "subject"), [
    ("/InferenceOperator/AlbControllerRole/Resource",
     "system:serviceaccount:hyperpod-inference-system:aws-load-balancer-controller"),
    ("/InferenceOperator/KedaRole/Resource", "system:serviceaccount:hyperpod-inference-system:keda-operator"),
    ("/InferenceOperator/S3CsiDriverRole/Resource", "system:serviceaccount:kube-system:s3-csi-driver-sa"),
    ("/HuggingFaceToken/ReaderRole/Resource", "system:serviceaccount:inference:hf-token-reader"),
])
def test_irsa_roles_are_bound_to_one_service_account(cluster: dict[str, Any], fragment: str, subject: str) -> None:
    _, role = _role(cluster, fragment)
    (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert _oidc_conditions(cluster, statement) == {"<issuer>:aud": "sts.amazonaws.com", "<issuer>:sub": subject}


def test_operator_capture_statements_are_scoped_as_the_brief_lists(cluster: dict[str, Any]) -> None:
    role_id, _ = _role(cluster, "/InferenceOperator/ExecutionRole/Resource")
    statements = _statements_of(cluster, role_id)
    put = next(s for s in statements if s["Action"] == ["s3:AbortMultipartUpload", "s3:PutObject"])
    assert put["Resource"] == f"arn:aws:s3:::{CAPTURE_BUCKET}/data-capture/*"
    assert put["Condition"] == {"StringEquals": {"aws:ResourceAccount": "${aws:PrincipalAccount}"}}
    kms = [s for s in statements if s["Action"] == ["kms:Decrypt", "kms:GenerateDataKey"]]
    assert len(kms) == 2  # capture bucket and TLS bucket, each with its own encryption context
    for statement in kms:
        assert statement["Resource"] == {"Fn::ImportValue": statement["Resource"]["Fn::ImportValue"]}
        assert "CaptureStorageKey" in statement["Resource"]["Fn::ImportValue"]
        # The brief's s3.*.amazonaws.com, narrowed to this region; the key in the caller's account.
        assert statement["Condition"]["StringEquals"] == {"kms:ViaService": f"s3.{REGION}.amazonaws.com",
                                                          "aws:ResourceAccount": "${aws:PrincipalAccount}"}
    contexts = sorted(s["Condition"]["StringLike"]["kms:EncryptionContext:aws:s3:arn"][0] for s in kms)
    assert contexts == [f"arn:aws:s3:::{TLS_BUCKET}", f"arn:aws:s3:::{CAPTURE_BUCKET}"]


def test_operator_tls_acm_and_route53_statements(cluster: dict[str, Any]) -> None:
    role_id, _ = _role(cluster, "/InferenceOperator/ExecutionRole/Resource")
    statements = _statements_of(cluster, role_id)
    tls = next(s for s in statements if s["Action"] == ["s3:PutObject", "s3:PutObjectTagging"])
    assert tls["Condition"]["StringEquals"]["aws:ResourceAccount"] == "${aws:PrincipalAccount}"
    assert tls["Resource"] == f"arn:aws:s3:::{TLS_BUCKET}/*"
    assert tls["Condition"]["StringEquals"]["s3:RequestObjectTag/CreatedBy"] == "HyperPodInference"
    acm = next(s for s in statements if s.get("Sid") == "UseEndpointCertificate")
    assert acm["Resource"] == CERTIFICATE_ARN
    dns = next(s for s in statements if s.get("Sid") == "ManageEndpointRecords")
    assert dns["Action"] == ["route53:ChangeResourceRecordSets", "route53:GetHostedZone",
                             "route53:ListResourceRecordSets"]
    assert dns["Resource"] == "arn:aws:route53:::hostedzone/Z0123456789ABCDEFGHIJ"


def test_operator_addon_configuration(cluster: dict[str, Any]) -> None:
    addons = {v["Properties"]["AddonName"]: (k, v) for k, v in _resources(cluster, "AWS::EKS::Addon").items()}
    assert {"eks-pod-identity-agent", "cert-manager", "metrics-server", "aws-mountpoint-s3-csi-driver",
            "amazon-sagemaker-hyperpod-inference"} <= set(addons)
    _, operator = addons["amazon-sagemaker-hyperpod-inference"]
    # The default platform's add-on is the first with the Inference Gateway (config/default.yaml), newer than the
    # library's default, which the vendored CRDs describe.
    assert DEFAULT_ADDON_VERSION == "v1.4.0-eksbuild.1"
    assert operator["Properties"]["AddonVersion"] == "v2.0.0-eksbuild.2"
    text = json.dumps(operator["Properties"]["ConfigurationValues"]).replace('\\"', '"')
    for fragment in ('"executionRoleArn":', '"tlsCertificateS3Bucket":', '"hyperpodClusterArn":',
                     '"enableCustomServiceAccounts":true', '"alb":{"enabled":true', '"keda":{"enabled":true',
                     '"jumpstartGatedModelDownloadRoleArn":', '"inferenceGateway":{"enabled":true,"serviceAccount":'
                     '{"roleArn":'):
        assert fragment in text, fragment
    depends = set(operator.get("DependsOn", []))
    for name in ("cert-manager", "aws-mountpoint-s3-csi-driver", "metrics-server", "eks-pod-identity-agent"):
        assert addons[name][0] in depends, name


def test_operator_crds_never_go_through_the_kubectl_lambda(cluster: dict[str, Any]) -> None:
    for resource in cluster["Resources"].values():
        if resource["Type"] == "Custom::AWSCDK-EKS-KubernetesResource":
            assert "CustomResourceDefinition" not in json.dumps(resource["Properties"]["Manifest"])


def test_gpu_nodes_use_al2023_nvidia_with_nvme_raid0(cluster: dict[str, Any]) -> None:
    groups = [v for v in _resources(cluster, "AWS::EKS::Nodegroup").values()
              if v["Properties"].get("AmiType") == "AL2023_x86_64_NVIDIA"]
    assert len(groups) == 1
    assert groups[0]["Properties"]["Taints"] == [{"Effect": "NO_SCHEDULE", "Key": "nvidia.com/gpu", "Value": "true"}]
    template = cluster["Resources"][groups[0]["Properties"]["LaunchTemplate"]["Id"]["Ref"]]
    user_data = json.dumps(template["Properties"]["LaunchTemplateData"]["UserData"])
    assert "application/node.eks.aws" in user_data and "RAID0" in user_data


def test_hyperpod_attached_to_eks_with_hyperpod_access_entry(cluster: dict[str, Any]) -> None:
    (hyperpod,) = _resources(cluster, "AWS::SageMaker::Cluster").values()
    eks_id = next(iter(_resources(cluster, "AWS::EKS::Cluster")))
    assert hyperpod["Properties"]["Orchestrator"] == {"Eks": {"ClusterArn": {"Fn::GetAtt": [eks_id, "Arn"]}}}
    assert hyperpod["Properties"]["NodeRecovery"] == "Automatic"
    entries = [v for v in _resources(cluster, "AWS::EKS::AccessEntry").values()
               if v["Properties"].get("Type") == "HYPERPOD_LINUX"]
    assert len(entries) == 1 and not entries[0]["Properties"].get("AccessPolicies")


def test_admins_come_only_from_config_and_no_creator_admin(cluster: dict[str, Any]) -> None:
    (eks,) = _resources(cluster, "AWS::EKS::Cluster").values()
    assert eks["Properties"]["AccessConfig"]["BootstrapClusterCreatorAdminPermissions"] is False
    assert eks["Properties"]["ResourcesVpcConfig"]["EndpointPublicAccess"] is False
    admins = [v for v in _resources(cluster, "AWS::EKS::AccessEntry").values()
              if "AmazonEKSClusterAdminPolicy" in json.dumps(v["Properties"].get("AccessPolicies", []))]
    principals = sorted(json.dumps(v["Properties"]["PrincipalArn"]) for v in admins)
    assert '"arn:aws:iam::111122223333:role/platform-admins"' in principals


def test_private_subnets_tagged_for_internal_load_balancers_and_s3_endpoint(cluster: dict[str, Any]) -> None:
    private = [v for v in _resources(cluster, "AWS::EC2::Subnet").values()
               if {"Key": "aws-cdk:subnet-type", "Value": "Private"} in v["Properties"]["Tags"]]
    assert len(private) == 2
    for subnet in private:
        assert {"Key": "kubernetes.io/role/internal-elb", "Value": "1"} in subnet["Properties"]["Tags"]
    endpoints = _resources(cluster, "AWS::EC2::VPCEndpoint").values()
    assert any(e["Properties"]["VpcEndpointType"] == "Gateway" for e in endpoints)


def _secret(cluster: dict[str, Any], name: str) -> dict[str, Any]:
    secrets = _resources(cluster, "AWS::SecretsManager::Secret").values()
    (secret,) = [s for s in secrets if s["Properties"]["Name"] == name]
    return secret


def test_hugging_face_token_is_never_in_a_template(assembly: Assembly, cluster: dict[str, Any]) -> None:
    secret = _secret(cluster, "llm-platform/huggingface-token")
    assert "SecretString" not in secret["Properties"]
    for name, template in assembly.templates.items():
        assert "hf_" not in json.dumps(template).replace("hf-token", ""), name


def test_a_portable_api_key_is_generated_and_readable_by_its_reader_and_clients_only(cluster: dict[str, Any]) -> None:
    secret = _secret(cluster, "llm-platform/portable/qwen3-8b-portable/api-key")
    properties = secret["Properties"]
    assert "SecretString" not in properties  # generated by Secrets Manager, never in the template
    assert properties["GenerateSecretString"] == {"ExcludePunctuation": True, "IncludeSpace": False,
                                                  "PasswordLength": 48}
    # The default server has two callers (issue 29.0): each secret lets its own caller's client roles read it.
    secret_ids = {v["Properties"]["Name"]: k for k, v in _resources(cluster, "AWS::SecretsManager::Secret").items()}
    policies = {p["Properties"]["SecretId"]["Ref"]: p for p in
                _resources(cluster, "AWS::SecretsManager::ResourcePolicy").values()}
    assert set(policies) == {secret_ids["llm-platform/portable/qwen3-8b-portable/api-key"],
                             secret_ids["llm-platform/portable/qwen3-8b-portable/api-key/team-b"]}
    policy = policies[secret_ids["llm-platform/portable/qwen3-8b-portable/api-key"]]
    statements = {s["Sid"]: s for s in policy["Properties"]["ResourcePolicy"]["Statement"]}
    clients = "arn:aws:iam::111122223333:role/inference-clients"
    reader = "arn:aws:iam::111122223333:role/llm-platform-qwen3-8b-portable-api-key"
    assert statements["ClientsReadTheKey"]["Principal"] == {"AWS": clients}
    deny = statements["OnlyReaderAndClients"]
    assert (deny["Effect"], deny["Principal"]) == ("Deny", {"AWS": "*"})
    assert deny["Action"] == "secretsmanager:GetSecretValue"
    rotation = "arn:aws:iam::111122223333:role/llm-platform-qwen3-8b-portable-api-key-rotation"
    assert _flat(deny["Condition"]) == {"StringNotEquals": {"aws:PrincipalArn": [reader, rotation, clients]}}
    team_b = {s["Sid"]: s for s in policies[secret_ids["llm-platform/portable/qwen3-8b-portable/api-key/team-b"]][
        "Properties"]["ResourcePolicy"]["Statement"]}
    team_b_clients = "arn:aws:iam::111122223333:role/team-b-clients"
    assert team_b["ClientsReadTheKey"]["Principal"] == {"AWS": team_b_clients}
    assert _flat(team_b["OnlyReaderAndClients"]["Condition"]) == {
        "StringNotEquals": {"aws:PrincipalArn": [reader, rotation, team_b_clients]}}  # not the other caller's
    # Issue 28: writes and stage changes only by the rotation function and the deployer; the admins rotate and revoke.
    deployer = "arn:aws:iam::111122223333:role/cdk-hnb659fds-cfn-exec-role-111122223333-us-west-2"
    admins = "arn:aws:iam::111122223333:role/platform-admins"
    writes = statements["OnlyRotationAndDeployerWrite"]
    assert "secretsmanager:PutSecretValue" in writes["Action"] and writes["Principal"] == {"AWS": "*"}
    assert _flat(writes["Condition"]) == {"StringNotEquals": {"aws:PrincipalArn": [rotation, deployer]}}
    relabel = statements["OnlyRotationDeployerAndOperatorsRelabel"]
    assert _flat(relabel["Condition"]) == {"StringNotEquals": {"aws:PrincipalArn": [rotation, deployer, admins]}}
    roles = [r for r in _resources(cluster, "AWS::IAM::Role").values() if r["Properties"].get("RoleName") ==
             "llm-platform-qwen3-8b-portable-api-key"]
    (trust,) = roles[0]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Action"] == "sts:AssumeRoleWithWebIdentity"  # IRSA, for the reader service account only


def _flat(value: Any) -> Any:
    """``{"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ...]]}`` as the text it becomes (partition aws)."""
    if isinstance(value, dict) and set(value) == {"Fn::Join"}:
        separator, parts = value["Fn::Join"]
        return separator.join("aws" if part == {"Ref": "AWS::Partition"} else _flat(part) for part in parts)
    if isinstance(value, dict):
        return {key: _flat(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_flat(item) for item in value]
    return value


def test_the_portable_api_key_is_rotated_by_a_function_that_touches_that_secret_only(cluster: dict[str, Any]) -> None:
    """Issue 17: every 30 days (secrets.apiKeyRotationDays), set up without an immediate rotation; the function's
    role may read, write and relabel this one secret and use the secrets key through Secrets Manager for it alone;
    only Secrets Manager, for this secret, may invoke it."""
    (secret_id,) = [k for k, v in _resources(cluster, "AWS::SecretsManager::Secret").items()
                    if v["Properties"]["Name"] == "llm-platform/portable/qwen3-8b-portable/api-key"]
    (team_b_id,) = [k for k, v in _resources(cluster, "AWS::SecretsManager::Secret").items()
                    if v["Properties"]["Name"] == "llm-platform/portable/qwen3-8b-portable/api-key/team-b"]
    schedules = {s["Properties"]["SecretId"]["Ref"]: s["Properties"]
                 for s in _resources(cluster, "AWS::SecretsManager::RotationSchedule").values()}
    assert set(schedules) == {secret_id, team_b_id}  # a schedule per caller, on the one function
    assert len({json.dumps(s["RotationLambdaARN"]) for s in schedules.values()}) == 1
    properties = schedules[secret_id]
    assert properties["RotationRules"] == {"ScheduleExpression": "rate(30 days)"}
    assert properties["RotateImmediatelyOnUpdate"] is False
    function_id = properties["RotationLambdaARN"]["Fn::GetAtt"][0]
    function = cluster["Resources"][function_id]["Properties"]
    assert (function["Handler"], function["Runtime"]) == ("rotation.handler", "python3.14")
    propagation = int(function["Environment"]["Variables"]["PROPAGATION_SECONDS"])
    assert propagation >= 120 + 120 + 5  # External Secrets' refresh, the kubelet, the sidecar's re-read
    assert function["Timeout"] >= propagation + 60
    permissions = [p["Properties"] for p in _resources(cluster, "AWS::Lambda::Permission").values()
                   if p["Properties"]["FunctionName"] == {"Fn::GetAtt": [function_id, "Arn"]}]
    # rotations, each key's check
    assert {p["Principal"] for p in permissions} == {"secretsmanager.amazonaws.com", "events.amazonaws.com"}
    assert sorted(p["SourceArn"]["Ref"] for p in permissions if p["Principal"] == "secretsmanager.amazonaws.com") \
        == sorted([secret_id, team_b_id])
    # It waits for every sidecar of the server to report the pending key (the metrics agent's series).
    acceptance = json.loads(function["Environment"]["Variables"]["ACCEPTANCE"])
    assert acceptance["dimensions"] == {"ClusterName": "llm-platform", "Namespace": "inference",
                                        "Workload": "qwen3-8b-portable"}

    role_id, role = _role(cluster, "ApiKey-qwen3-8b-portable/RotationRole")
    assert role["Properties"]["RoleName"] == "llm-platform-qwen3-8b-portable-api-key-rotation"
    assert function["Role"] == {"Fn::GetAtt": [role_id, "Arn"]}
    secret_actions: dict[str, set[str]] = {secret_id: set(), team_b_id: set()}
    other = []
    for statement in _statements_of(cluster, role_id):
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        if all(isinstance(r, dict) and set(r) == {"Ref"} for r in resources):
            for resource in resources:
                secret_actions[resource["Ref"]] |= set(actions)  # (a KeyError: a secret not of this server)
        else:
            other.append((actions, statement["Resource"], _flat(statement.get("Condition"))))
    assert all(actions == {"secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret",
                           "secretsmanager:PutSecretValue", "secretsmanager:UpdateSecretVersionStage",
                           "secretsmanager:ListSecretVersionIds"} for actions in secret_actions.values())
    these_secrets = {f"arn:aws:secretsmanager:us-west-2:111122223333:secret:{name}-??????" for name in (
        "llm-platform/portable/qwen3-8b-portable/api-key", "llm-platform/portable/qwen3-8b-portable/api-key/team-b")}
    key_uses = [(action, condition) for actions, _, condition in other for action in actions
                if action.startswith("kms:")]
    assert {action for action, _ in key_uses} == {"kms:Decrypt", "kms:GenerateDataKey"}  # read, write a version
    assert {arn for _, condition in key_uses
            for arn in condition["StringLike"]["kms:EncryptionContext:SecretARN"]} == these_secrets
    # Actions without a resource type: random characters, and metrics (the sidecars' accepted keys).
    assert (["cloudwatch:GetMetricData", "secretsmanager:GetRandomPassword"], "*", None) in other
    logs = [resource for actions, resource, _ in other if actions == ["logs:CreateLogStream", "logs:PutLogEvents"]]
    assert len(logs) == 1 and len(other) == 2 + len({str(c) for _, c in key_uses})

    key = next(r for r in _resources(cluster, "AWS::KMS::Key").values()
               if r["Metadata"]["aws:cdk:path"] == "llm-platform-cluster/SecretsKey/Key/Resource")
    readers = {s["Sid"]: s for s in key["Properties"]["KeyPolicy"]["Statement"]}
    admitted = readers["ReadLlmPlatformPortableQwen38bPortableApiKeyThroughSecretsManager"]["Condition"]["ArnLike"]
    assert {"Fn::GetAtt": [role_id, "Arn"]} in admitted["aws:PrincipalArn"]  # decrypts this secret, no other
    assert all({"Fn::GetAtt": [role_id, "Arn"]} not in json.loads(json.dumps(s.get("Condition", {}))).get(
        "ArnLike", {}).get("aws:PrincipalArn", []) for sid, s in readers.items() if "HuggingfaceToken" in sid)


def test_the_token_and_api_keys_are_encrypted_with_the_secrets_key_their_readers_alone_decrypt(
        cluster: dict[str, Any]) -> None:
    (key_id,) = [k for k, r in _resources(cluster, "AWS::KMS::Key").items()
                 if r["Metadata"]["aws:cdk:path"] == "llm-platform-cluster/SecretsKey/Key/Resource"]
    for name in ("llm-platform/huggingface-token", "llm-platform/portable/qwen3-8b-portable/api-key"):
        assert _secret(cluster, name)["Properties"]["KmsKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}
    key = _resources(cluster, "AWS::KMS::Key")[key_id]["Properties"]
    assert key["EnableKeyRotation"] is True
    decrypts = {s["Sid"]: s for s in key["KeyPolicy"]["Statement"] if "kms:Decrypt" in s["Action"]}
    assert set(decrypts) == {"DeployerCreatesAndReencryptsSecrets",
                             "ReadLlmPlatformHuggingfaceTokenThroughSecretsManager",
                             "ReadLlmPlatformPortableQwen38bPortableApiKeyThroughSecretsManager",
                             "ReadLlmPlatformPortableQwen38bPortableApiKeyThroughSecretsManagerForNamedRoles",
                             "ReadLlmPlatformPortableQwen38bPortableApiKeyTeamBThroughSecretsManager",
                             "ReadLlmPlatformPortableQwen38bPortableApiKeyTeamBThroughSecretsManagerForNamedRoles"}
    assert all(s["Condition"]["StringEquals"] == {"kms:ViaService": f"secretsmanager.{REGION}.amazonaws.com"}
               for s in decrypts.values())
    clients = decrypts["ReadLlmPlatformPortableQwen38bPortableApiKeyThroughSecretsManagerForNamedRoles"]
    assert clients["Principal"] == {"AWS": f"arn:aws:iam::{ACCOUNT}:role/inference-clients"}
    team_b = decrypts["ReadLlmPlatformPortableQwen38bPortableApiKeyTeamBThroughSecretsManagerForNamedRoles"]
    assert team_b["Principal"] == {"AWS": f"arn:aws:iam::{ACCOUNT}:role/team-b-clients"}  # its own key only
    aliases = [a["Properties"]["AliasName"] for a in _resources(cluster, "AWS::KMS::Alias").values()]
    assert "alias/llm-platform/secrets" in aliases


def test_the_eks_secrets_key_names_its_principals_and_gives_nobody_kms_star(cluster: dict[str, Any]) -> None:
    (key_id,) = [k for k, r in _resources(cluster, "AWS::KMS::Key").items()
                 if r["Metadata"]["aws:cdk:path"] == "llm-platform-cluster/Eks/SecretsKey/Resource"]
    eks_cluster = next(iter(_resources(cluster, "AWS::EKS::Cluster").values()))
    assert eks_cluster["Properties"]["EncryptionConfig"][0]["Provider"]["KeyArn"] == {"Fn::GetAtt": [key_id, "Arn"]}
    statements = {s["Sid"]: s for s in _resources(cluster, "AWS::KMS::Key")[key_id]["Properties"]["KeyPolicy"][
        "Statement"]}
    assert set(statements) == {"KeyAdministrationWithoutUse", "ClusterRoleEncryptsSecrets",
                               "DeployerCreatesTheClusterThroughEks", "DeployerGrantsOnlyToEks"}
    assert not {"kms:*", "kms:Decrypt", "kms:Encrypt", "kms:CreateGrant"} & set(
        statements["KeyAdministrationWithoutUse"]["Action"])
    role_id, _ = _role(cluster, "/Eks/Cluster/Role/")
    assert statements["ClusterRoleEncryptsSecrets"]["Condition"] == {
        "ArnLike": {"aws:PrincipalArn": {"Fn::GetAtt": [role_id, "Arn"]}}}
    via_eks = {"kms:ViaService": f"eks.{REGION}.amazonaws.com"}
    deployer = f"arn:aws:iam::{ACCOUNT}:role/cdk-hnb659fds-cfn-exec-role-{ACCOUNT}-{REGION}"
    for sid in ("DeployerCreatesTheClusterThroughEks", "DeployerGrantsOnlyToEks"):
        assert statements[sid]["Condition"]["StringEquals"] == via_eks
        assert json.dumps(statements[sid]["Condition"]["ArnLike"]).count("cfn-exec-role") == 1, deployer
    assert statements["DeployerGrantsOnlyToEks"]["Condition"]["Bool"] == {"kms:GrantIsForAWSResource": "true"}
    (encrypt,) = [s for s in _statements_of(cluster, role_id) if s.get("Sid") == "EncryptKubernetesSecrets"]
    assert encrypt["Resource"] == {"Fn::GetAtt": [key_id, "Arn"]}


def test_external_dns_watches_the_inference_namespace_and_changes_the_published_hostnames_only(
        cluster: dict[str, Any]) -> None:
    """The portable server's hostname and the gateway entry's name: nothing else of the zone."""
    charts = [r for r in _resources(cluster, "Custom::AWSCDK-EKS-HelmChart").values()
              if r["Properties"]["Chart"] == "external-dns"]
    assert [(c["Properties"]["Release"], c["Properties"]["Namespace"]) for c in charts] == [
        ("external-dns-inference", "kube-system")]
    assert "--namespace=inference" in json.dumps(charts[0]["Properties"]["Values"])
    role_id, _ = _role(cluster, "/ExternalDns/Role/")
    (change,) = [s for s in _statements_of(cluster, role_id) if s.get("Sid") == "ChangeRecordsInNamedZones"]
    hosts = ("qwen-portable.inference.example.com", "llm.inference.example.com")
    assert change["Condition"] == {"ForAllValues:StringEquals": {
        "route53:ChangeResourceRecordSetsActions": ["CREATE", "UPSERT"],
        "route53:ChangeResourceRecordSetsRecordTypes": ["A", "AAAA", "CNAME", "TXT"],
        "route53:ChangeResourceRecordSetsNormalizedRecordNames": sorted(
            name for host in hosts for name in (host, f"a-{host}", f"aaaa-{host}", f"cname-{host}"))}}


def test_without_the_customer_managed_key_the_secrets_use_aws_secretsmanager() -> None:
    from aws_cdk import App

    from platform_config import parse_config
    from stacks.platform import build_platform
    from tests.unit.test_config import DEFAULT

    data = json.loads(json.dumps(DEFAULT))
    data["secrets"] = {"customerManagedKey": False}
    platform = build_platform(App(), parse_config(data))
    assert platform.cluster.secrets_key is None
    assert platform.cluster.hugging_face_token.encryption_key is None
    assert all(sync.encryption_key is None for sync in platform.cluster.api_keys.values())


@pytest.mark.parametrize("change", ["rotation off", "no capture"])
def test_an_api_key_the_sidecar_does_not_check_or_rotation_off_is_not_rotated(change: str) -> None:
    """``secrets.apiKeyRotationDays: 0``; a server without capture reads its key from an environment variable at
    start, so a rotated key would lock its clients out until a restart: neither gets a schedule, both a warning."""
    from aws_cdk import App

    from platform_config import parse_config
    from stacks.platform import build_platform
    from tests.unit.test_config import DEFAULT

    data = json.loads(json.dumps(DEFAULT))
    if change == "rotation off":
        data["secrets"] = {"apiKeyRotationDays": 0}
    else:
        del data["portable"][0]["dataCapture"]
        # (callers need the capture sidecar: without it, the single key the model server reads at start)
        data["portable"][0]["apiKey"] = {"enabled": True,
                                         "clientRoleArns": [f"arn:aws:iam::{ACCOUNT}:role/inference-clients"]}
    platform = build_platform(App(), parse_config(data))
    (key,) = platform.cluster.api_keys.values()
    assert key.rotation_schedule is None and key.rotation_function is None


def test_outputs_a_user_needs(assembly: Assembly, cluster: dict[str, Any]) -> None:
    assert {"ClusterName", "HyperPodClusterArn", "OperatorExecutionRoleArn", "HyperPodExecutionRoleArn",
            "HuggingFaceTokenSecretArn", "HostedZoneId", "CertificateArn"} <= set(cluster["Outputs"])
    assert {"CaptureBucketName", "TlsCertificateBucketName", "AlarmTopicArn"} <= set(
        assembly.template("-storage")["Outputs"])


def test_keda_reads_only_what_the_default_workloads_scale_on(cluster: dict[str, Any]) -> None:
    """qwen3-8b scales on a CloudWatch metric; no workload queries Prometheus."""
    role_id, _ = _role(cluster, "/InferenceOperator/KedaRole/Resource")
    assert _statements_of(cluster, role_id) == [
        {"Action": "cloudwatch:GetMetricData", "Effect": "Allow", "Resource": "*", "Sid": "ReadScalingMetrics"}]


def test_the_gated_jumpstart_model_gets_a_download_role_for_its_namespace_only(cluster: dict[str, Any]) -> None:
    role_id, role = _role(cluster, "/InferenceOperator/GatedModelRole/Resource")
    web = next(s for s in role["Properties"]["AssumeRolePolicyDocument"]["Statement"] if "Federated" in s["Principal"])
    subjects = cluster["Resources"][web["Condition"]["StringEquals"]["Fn::GetAtt"][0]]["Properties"]["Value"]
    assert "system:serviceaccount:inference:hyperpod-inference-service-account\\\"]" in json.dumps(subjects)
    assert "StringLike" not in web["Condition"] and "service-account*" not in json.dumps(subjects)
    (statement,) = _statements_of(cluster, role_id)
    assert statement["Action"] == "sagemaker:CreateHubContentPresignedUrls"
    assert sorted(statement["Resource"]) == [f"arn:aws:sagemaker:{REGION}:*:hub-content/SageMakerPublicHub/*/*",
                                             f"arn:aws:sagemaker:{REGION}:*:hub/SageMakerPublicHub"]


def test_every_node_group_requires_imdsv2_with_one_hop_and_an_encrypted_root(cluster: dict[str, Any]) -> None:
    """Pods cannot borrow a node role from the metadata service, on GPU and system nodes alike."""
    groups = _resources(cluster, "AWS::EKS::Nodegroup")
    assert len(groups) == 2
    for name, group in groups.items():
        assert "DiskSize" not in group["Properties"], name  # the launch template defines the root volume
        template = cluster["Resources"][group["Properties"]["LaunchTemplate"]["Id"]["Ref"]]
        data = template["Properties"]["LaunchTemplateData"]
        assert data["MetadataOptions"] == {"HttpPutResponseHopLimit": 1, "HttpTokens": "required"}, name
        (root,) = data["BlockDeviceMappings"]
        assert root["DeviceName"] == "/dev/xvda" and root["Ebs"]["Encrypted"] is True, name
        assert root["Ebs"]["VolumeType"] == "gp3", name
    system = next(g for g in groups.values() if g["Properties"]["AmiType"] == "AL2023_x86_64_STANDARD")
    # A generated name: CloudFormation can replace the group (EKS adds a launch template to new groups only).
    assert "NodegroupName" not in system["Properties"]
    assert system["Properties"]["Labels"] == {"node-role": "system"}


def test_vpc_cni_add_on_enforces_network_policies(cluster: dict[str, Any]) -> None:
    ((cni_id, cni),) = [(k, v) for k, v in _resources(cluster, "AWS::EKS::Addon").items()
                        if v["Properties"]["AddonName"] == "vpc-cni"]
    props = cni["Properties"]
    assert json.loads(props["ConfigurationValues"]) == {"enableNetworkPolicy": "true"}
    assert props["ResolveConflicts"] == "OVERWRITE"  # takes over the self-managed CNI EKS bootstrapped
    assert props["PreserveOnDelete"] is True  # removing it from the stack leaves the CNI on the nodes
    assert "AddonVersion" not in props  # EKS's default for the cluster's minor
    # aws-node has its own IRSA role with AmazonEKS_CNI_Policy (tests/references compares it with AWS's), before the
    # first HyperPod node joins
    (role_id, _) = props["ServiceAccountRoleArn"]["Fn::GetAtt"]
    policies = cluster["Resources"][role_id]["Properties"]["ManagedPolicyArns"]
    assert json.dumps(policies).endswith(':iam::aws:policy/AmazonEKS_CNI_Policy"]]}]')
    (hyperpod,) = _resources(cluster, "AWS::SageMaker::Cluster").values()
    assert cni_id in hyperpod["DependsOn"]


def _log_groups(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return _resources(template, "AWS::Logs::LogGroup")


def test_control_plane_logs_go_to_a_group_with_retention_created_before_the_cluster(cluster: dict[str, Any]) -> None:
    ((group_id, group),) = [(k, v) for k, v in _log_groups(cluster).items()
                            if v["Properties"].get("LogGroupName") == "/aws/eks/llm-platform/cluster"]
    assert group["Properties"]["RetentionInDays"] == 365
    assert group["DeletionPolicy"] == "Retain"
    (eks,) = _resources(cluster, "AWS::EKS::Cluster").values()
    assert group_id in eks["DependsOn"]
    assert len(eks["Properties"]["Logging"]["ClusterLogging"]["EnabledTypes"]) == 5


def _sdk_call(template: dict[str, Any], path_suffix: str) -> tuple[str, dict[str, Any], list[Any]]:
    """An AwsCustomResource's logical id, its create call (deploy-time values read as ``<token>``) and those values."""
    ((logical_id, resource),) = [(k, v) for k, v in _resources(template, "Custom::AWS").items()
                                 if v["Metadata"]["aws:cdk:path"].endswith(f"{path_suffix}/Resource/Default")]
    parts = resource["Properties"]["Create"]["Fn::Join"][1]
    call = json.loads("".join(part if isinstance(part, str) else "<token>" for part in parts))
    return logical_id, call, [part for part in parts if not isinstance(part, str)]


def test_hyperpod_log_group_gets_its_retention_after_the_cluster_exists(cluster: dict[str, Any]) -> None:
    (hyperpod_id,) = _resources(cluster, "AWS::SageMaker::Cluster")
    # /aws/sagemaker/Clusters/<name>/<id>: the id is the cluster ARN's last part, known only after creation.
    cluster_id = {"Fn::Select": [1, {"Fn::Split": ["/", {"Fn::GetAtt": [hyperpod_id, "ClusterArn"]}]}]}
    group = "/aws/sagemaker/Clusters/llm-platform-hp/<token>"
    create_id, create, create_tokens = _sdk_call(cluster, "/HyperPod/CreateLogGroup")
    retain_id, retain, retain_tokens = _sdk_call(cluster, "/HyperPod/LogRetention")
    assert create == {"service": "CloudWatchLogs", "action": "createLogGroup", "parameters": {"logGroupName": group},
                      "physicalResourceId": {"id": group},
                      "ignoreErrorCodesMatching": "ResourceAlreadyExistsException"}  # HyperPod may have made it
    assert retain == {"service": "CloudWatchLogs", "action": "putRetentionPolicy",
                      "parameters": {"logGroupName": group, "retentionInDays": 90}, "physicalResourceId": {"id": group}}
    assert set(map(json.dumps, create_tokens + retain_tokens)) == {json.dumps(cluster_id)}
    assert create_id in cluster["Resources"][retain_id]["DependsOn"]
    # Least privilege: the two actions, on that one group.
    policies = [v for k, v in _resources(cluster, "AWS::IAM::Policy").items()
                if k.startswith(("HyperPodCreateLogGroup", "HyperPodLogRetention"))]
    assert len(policies) == 2
    for policy in policies:
        (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
        assert statement["Action"] == ["logs:CreateLogGroup", "logs:PutRetentionPolicy"]
        assert statement["Resource"] == {"Fn::Join": ["", [
            f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/sagemaker/Clusters/llm-platform-hp/", cluster_id, ":*"]]}


def test_vpc_flow_log_records_all_traffic_into_a_retained_group(cluster: dict[str, Any]) -> None:
    (flow_log,) = _resources(cluster, "AWS::EC2::FlowLog").values()
    props = flow_log["Properties"]
    assert props["TrafficType"] == "ALL" and props["LogDestinationType"] == "cloud-watch-logs"
    group = cluster["Resources"][props["LogGroupName"]["Ref"]]
    assert group["Properties"]["RetentionInDays"] == 365 and group["DeletionPolicy"] == "Retain"
    role = cluster["Resources"][props["DeliverLogsPermissionArn"]["Fn::GetAtt"][0]]
    (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "vpc-flow-logs.amazonaws.com"}
    assert trust["Condition"] == {"StringEquals": {"aws:SourceAccount": ACCOUNT},
                                  "ArnLike": {"aws:SourceArn": f"arn:aws:ec2:{REGION}:{ACCOUNT}:vpc-flow-log/*"}}
