"""Model deployments: the manifests in dist/ and the ones the CDK app applies are the same objects,
valid against the operator's CRDs and the Kubernetes schemas, wired to this platform."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from syrupy.extensions.json import JSONSnapshotExtension

from hyperpod_inference_iac.foundation.validation import ConfigError
from platform_config import parse_config, read_stack_outputs
from stacks.gitops import stage_dist
from tests.support.k8s_schemas import crd_errors, is_operator_object, validate_core
from tests.support.synth import REPO, Assembly, mask_volatile

DEFAULT = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
ACCOUNT, REGION = "111122223333", "us-west-2"


def _objects(assembly: Assembly) -> list[dict[str, Any]]:
    return [obj for objects in assembly.manifests.values() for obj in objects]


def test_dist_holds_one_file_per_chart_and_what_the_workloads_need(assembly: Assembly) -> None:
    assert sorted(assembly.manifests) == [
        "api-key-qwen3-8b-portable.k8s.yaml", "capture-sidecar-metrics.k8s.yaml", "gateway-entry-models.k8s.yaml",
        "gateway-models.k8s.yaml", "hugging-face-token.k8s.yaml", "model-llama3-8b.k8s.yaml",
        "model-mistral-7b.k8s.yaml", "model-qwen3-8b.k8s.yaml", "model-serving-metrics.k8s.yaml", "namespace.k8s.yaml",
        "portable-qwen3-8b-portable.k8s.yaml"]
    helm = sorted(p.name for p in (assembly.directory / "dist" / "helm").iterdir())
    # ExternalDNS: one release per namespace of portable servers with a hostname, watching that namespace only.
    assert helm == ["external-dns-inference.yaml", "external-secrets.yaml", "nvidia-device-plugin.yaml"]
    external_dns = yaml.safe_load((assembly.directory / "dist" / "helm" / "external-dns-inference.yaml").read_text())
    assert "--namespace=inference" in external_dns["values"]["extraArgs"]
    readme = (assembly.directory / "dist" / "README.md").read_text()
    assert ("kubectl get crd inferenceendpointconfigs.inference.sagemaker.aws.amazon.com "
            "jumpstartmodels.inference.sagemaker.aws.amazon.com") in readme


def test_the_default_platforms_gateway_has_its_capture_entry(assembly: Assembly) -> None:
    """The default platform's gateway traffic records its caller: dist holds the entry in front of the gateway, in JWT
    mode with the gateway's own issuer and audience, forwarding to the gateway's name, behind its own TLS name."""
    objects = {obj["kind"]: obj for obj in assembly.manifests["gateway-entry-models.k8s.yaml"]
               if not obj["metadata"]["name"].endswith("-metrics")}
    (gateway,) = DEFAULT["gateways"]
    (container,) = objects["Deployment"]["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item["value"] for item in container["env"]}
    assert env["UPSTREAM_URL"] == f"https://{gateway['endpointDomain']}"
    assert (env["JWT_ISSUER"], env["JWT_JWKS_URI"], env["JWT_AUDIENCES"], env["JWT_CALLER_CLAIM"]) == (
        gateway["jwt"]["issuer"], gateway["jwt"]["jwksUri"], ",".join(gateway["jwt"]["audiences"]), "sub")
    assert env["AWS_ROLE_ARN"] == f"arn:aws:iam::{ACCOUNT}:role/llm-platform-models-entry"
    annotations = objects["Service"]["metadata"]["annotations"]
    assert annotations["external-dns.alpha.kubernetes.io/hostname"] == gateway["entry"]["endpointDomain"]
    assert gateway["entry"]["endpointDomain"] in DEFAULT["domain"]["endpointDomains"]


def test_dist_snapshot(assembly: Assembly, snapshot: Any) -> None:
    assert mask_volatile(assembly.manifests) == snapshot(extension_class=JSONSnapshotExtension)


def test_dist_never_holds_an_unresolved_token(assembly: Assembly) -> None:
    for path in (assembly.directory / "dist").glob("*.yaml"):
        assert "${Token[" not in path.read_text(), path.name


def test_every_object_is_valid_for_the_cluster(assembly: Assembly) -> None:
    objects = _objects(assembly)
    assert {o["kind"] for o in objects if is_operator_object(o)} == {"InferenceEndpointConfig", "JumpStartModel",
                                                                      "InferenceGatewayConfig"}
    for obj in objects:
        if is_operator_object(obj):
            assert crd_errors(obj) == [], obj["metadata"]["name"]
        elif obj["apiVersion"].startswith("external-secrets.io/"):
            _check_external_secrets_object(obj)
        else:
            validate_core(obj)


@pytest.mark.parametrize("version", ["1.33.0", "1.35.0"])
def test_core_objects_are_valid_on_every_supported_kubernetes_minor(assembly: Assembly, version: str) -> None:
    """cdk8s-plus-34 writes apps/v1 and v1 objects, valid on each minor the config allows (1.34 above)."""
    for obj in _objects(assembly):
        if not is_operator_object(obj) and not obj["apiVersion"].startswith("external-secrets.io/"):
            validate_core(obj, version)


def _check_external_secrets_object(obj: dict[str, Any]) -> None:
    """External Secrets Operator's CRDs are not vendored here (see docs/testing.md): the fields ESO v1
    requires of these two kinds, checked by hand."""
    assert obj["apiVersion"] == "external-secrets.io/v1"
    spec = obj["spec"]
    if obj["kind"] == "SecretStore":
        aws = spec["provider"]["aws"]
        assert aws["service"] == "SecretsManager" and aws["region"]
        assert aws["auth"]["jwt"]["serviceAccountRef"]["name"]
    else:
        assert obj["kind"] == "ExternalSecret"
        assert spec["secretStoreRef"]["kind"] == "SecretStore" and spec["secretStoreRef"]["name"]
        assert spec["target"]["name"] == obj["metadata"]["name"]
        assert all({"secretKey", "remoteRef"} <= set(item) for item in spec["data"])


def test_each_secret_sync_reads_through_its_own_store_and_reader(assembly: Assembly) -> None:
    for name in ("hugging-face-token.k8s.yaml", "api-key-qwen3-8b-portable.k8s.yaml"):
        objects = {o["kind"]: o for o in assembly.manifests[name]}
        store, external = objects["SecretStore"], objects["ExternalSecret"]
        assert external["spec"]["secretStoreRef"]["name"] == store["metadata"]["name"]
        reader = store["spec"]["provider"]["aws"]["auth"]["jwt"]["serviceAccountRef"]["name"]
        assert reader == objects["ServiceAccount"]["metadata"]["name"]
    stores = [o["metadata"]["name"] for f in assembly.manifests.values() for o in f if o["kind"] == "SecretStore"]
    assert len(stores) == len(set(stores))  # one reader each: no store shadows another


def test_the_portable_server_reads_the_synced_api_key_and_dist_never_holds_it(assembly: Assembly) -> None:
    """External Secrets syncs the current, pending and previous version of each caller's rotated key (issues 17,
    29.0): the default server has two callers, the single key's (``<server>-api-key``, its secret unchanged) and
    ``team-b`` (a secret of its own); the Secret's ``api-keys`` lists each caller's distinct versions under its id,
    ``api-key`` the first caller's current one; a stage that does not exist yet is skipped (deletionPolicy Delete).
    The capturing server's sidecar reads ``api-keys`` from a volume; nothing else of the pod gets a key."""
    objects = {o["kind"]: o for o in assembly.manifests["api-key-qwen3-8b-portable.k8s.yaml"]}
    spec = objects["ExternalSecret"]["spec"]
    target = spec["target"]["name"]
    name = "llm-platform/portable/qwen3-8b-portable/api-key"
    assert spec["data"] == [{"secretKey": f"{caller}.{entry}", "remoteRef": {"key": secret, "version": stage}}
                            for caller, secret in ((target, name), ("team-b", f"{name}/team-b"))
                            for entry, stage in (("current", "AWSCURRENT"), ("pending", "AWSPENDING"),
                                                 ("previous", "AWSPREVIOUS"))]
    assert spec["refreshInterval"] == "120s"
    assert (spec["target"]["creationPolicy"], spec["target"]["deletionPolicy"]) == ("Owner", "Delete")
    template = spec["target"]["template"]
    assert (template["engineVersion"], template["mergePolicy"]) == ("v2", "Replace")
    current = '{{{{- with index . "{0}.current" }}}}{0}:{{{{ . }}}}\n{{{{ end }}}}'
    other = ('{{{{- with index . "{0}.{1}" }}}}{{{{ if ne . (index $ "{0}.current") }}}}{0}:{{{{ . }}}}\n'
             '{{{{ end }}}}{{{{ end }}}}')
    assert template["data"] == {  # rendered with Go's text/template as External Secrets does: docs/secrets.md
        "api-key": f'{{{{ index . "{target}.current" }}}}',
        "api-keys": "".join(current.format(caller) + other.format(caller, "pending") + other.format(caller, "previous")
                            for caller in (target, "team-b"))}
    (deployment,) = [o for o in assembly.manifests["portable-qwen3-8b-portable.k8s.yaml"] if o["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert not [env for c in [*pod["containers"], *pod["initContainers"]] for env in c.get("env", [])
                if "valueFrom" in env]
    (volume,) = [v for v in pod["volumes"] if "secret" in v]
    assert volume["secret"]["secretName"] == target
    assert volume["secret"]["items"] == [{"key": "api-keys", "path": "api-keys"}]
    assert "kind: Secret\n" not in "".join(p.read_text() for p in (assembly.directory / "dist").glob("*.yaml"))


def test_cdk_applies_the_same_objects(assembly: Assembly) -> None:
    cluster = assembly.template("-cluster")
    applied = []
    for resource in cluster["Resources"].values():
        if resource["Type"] == "Custom::AWSCDK-EKS-KubernetesResource":
            manifest = resource["Properties"]["Manifest"]
            if isinstance(manifest, str):  # charts with deploy-time values are Fn::Join; none here
                applied += [_without_prune_label(obj) for obj in json.loads(manifest)]
    dist = _objects(assembly)
    for obj in dist:
        if obj["kind"] == "Deployment":  # the sidecar image is an asset URI with tokens in the template
            continue
        assert obj in applied, f"{obj['kind']} {obj['metadata']['name']}"


def _without_prune_label(obj: dict[str, Any]) -> dict[str, Any]:
    """The kubectl provider labels what it applies (aws.cdk.eks/prune-*) so it can prune later."""
    labels = {k: v for k, v in obj["metadata"].get("labels", {}).items() if not k.startswith("aws.cdk.eks/prune-")}
    metadata = {k: v for k, v in obj["metadata"].items() if k != "labels"} | ({"labels": labels} if labels else {})
    return obj | {"metadata": metadata}


def test_workload_manifests_wait_for_the_operator_and_the_namespace(assembly: Assembly) -> None:
    cluster = assembly.template("-cluster")
    resources = cluster["Resources"]
    by_path = {v["Metadata"]["aws:cdk:path"]: k for k, v in resources.items()}
    operator = next(k for p, k in by_path.items() if p.endswith("/InferenceOperator/Addon/Resource"))
    namespace = next(k for p, k in by_path.items() if p.endswith("/Eks/Cluster/Namespace/Resource/Default"))
    assert operator in resources[namespace]["DependsOn"]
    model = next(k for p, k in by_path.items() if p.endswith("/Eks/Cluster/model-qwen3-8b/Resource/Default"))
    assert namespace in resources[model]["DependsOn"]
    identity_role = next(k for p, k in by_path.items() if p.endswith("/Workloads/Identity-qwen3-8b/Role/Resource"))
    assert identity_role in resources[model]["DependsOn"]


def test_models_are_wired_to_the_platform(assembly: Assembly) -> None:
    (mistral,) = [o for o in assembly.manifests["model-mistral-7b.k8s.yaml"] if is_operator_object(o)]
    spec = mistral["spec"]
    capture = spec["dataCapture"]
    assert capture["s3Uri"] == f"s3://llm-platform-capture-{ACCOUNT}-{REGION}/data-capture"
    key_alias = f"arn:aws:kms:{REGION}:{ACCOUNT}:alias/llm-platform/capture"
    assert capture["sagemakerEndpoint"]["kmsKeyId"] == key_alias
    assert capture["modelPod"]["kmsKeyId"] == key_alias
    assert capture["loadBalancer"] == {"enabled": True}
    assert spec["tlsConfig"]["customCertificateConfig"] == {
        "acmArn": DEFAULT["domain"]["existingCertificateArn"], "domainName": "mistral.inference.example.com"}
    assert spec["tlsConfig"]["tlsCertificateOutputS3Uri"].startswith(f"s3://hyperpod-tls-llm-platform-{ACCOUNT}")
    assert spec["dnsConfig"] == {"hostedZoneId": DEFAULT["domain"]["existingHostedZoneId"]}
    assert spec["modelSourceConfig"]["huggingFaceModel"]["tokenSecretRef"] == {"name": "hf-token", "key": "token"}


def test_the_loader_s_role_is_the_identity_the_stack_creates(assembly: Assembly) -> None:
    """The model's service account carries no role (its worker needs none); the NVMe loader names its own."""
    (model,) = [o for o in assembly.manifests["model-qwen3-8b.k8s.yaml"] if o["kind"] == "InferenceEndpointConfig"]
    (account,) = [o for o in assembly.manifests["model-qwen3-8b.k8s.yaml"] if o["kind"] == "ServiceAccount"]
    assert "annotations" not in account["metadata"]
    (loader,) = model["spec"]["kubernetes"]["initContainers"]
    env = {item["name"]: item["value"] for item in loader["env"]}
    assert env["AWS_ROLE_ARN"] == f"arn:aws:iam::{ACCOUNT}:role/llm-platform-qwen3-8b"
    roles = [v for v in assembly.template("-cluster")["Resources"].values() if v["Type"] == "AWS::IAM::Role"]
    assert any(r["Properties"].get("RoleName") == "llm-platform-qwen3-8b" for r in roles)


def _created_domain_config() -> dict[str, Any]:
    data = json.loads(json.dumps(DEFAULT))
    del data["domain"]["existingCertificateArn"]
    return data


def test_new_certificate_makes_dist_wait_for_stack_outputs(tmp_path: Path) -> None:
    config = parse_config(_created_domain_config())
    staged = stage_dist(config, outdir=tmp_path / "dist", sidecar_image="registry.example/sidecar:1",
                        complete_with="make synth OUTPUTS=cdk-outputs.json")
    staged.commit()
    # The portable server's TLS listener needs the certificate too.
    assert sorted(staged.waiting) == ["gateway-entry-models", "gateway-models", "model-llama3-8b", "model-mistral-7b",
                                      "model-qwen3-8b", "portable-qwen3-8b-portable"]
    assert sorted(p.name for p in (tmp_path / "dist").glob("*.k8s.yaml")) == [
        "api-key-qwen3-8b-portable.k8s.yaml", "capture-sidecar-metrics.k8s.yaml", "hugging-face-token.k8s.yaml",
        "model-serving-metrics.k8s.yaml", "namespace.k8s.yaml"]
    readme = (tmp_path / "dist" / "README.md").read_text()
    assert "`model-mistral-7b` needs the stack outputs `CertificateArn`" in readme
    assert "make synth OUTPUTS=cdk-outputs.json" in readme


def test_stack_outputs_complete_dist_after_deploy(tmp_path: Path) -> None:
    config = parse_config(_created_domain_config())
    certificate = f"arn:aws:acm:{REGION}:{ACCOUNT}:certificate/11111111-2222-3333-4444-555555555555"
    outputs = tmp_path / "cdk-outputs.json"
    outputs.write_text(json.dumps({"llm-platform-cluster": {"CertificateArn": certificate}}))
    staged = stage_dist(config, outdir=tmp_path / "dist", sidecar_image="registry.example/sidecar:1",
                        outputs=read_stack_outputs(config, outputs))
    staged.commit()
    assert staged.waiting == {}
    assert certificate in (tmp_path / "dist" / "model-mistral-7b.k8s.yaml").read_text()


def test_a_staged_dist_replaces_the_old_one_only_on_commit(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    dist.mkdir()
    (dist / "model-old.k8s.yaml").write_text("old: true\n")
    staged = stage_dist(parse_config(DEFAULT), outdir=dist, sidecar_image="registry.example/sidecar:1")
    assert sorted(p.name for p in dist.iterdir()) == ["model-old.k8s.yaml"]
    staged.discard()
    assert sorted(p.name for p in dist.iterdir()) == ["model-old.k8s.yaml"]
    assert [p.name for p in tmp_path.iterdir()] == ["dist"]
    stage_dist(parse_config(DEFAULT), outdir=dist, sidecar_image="registry.example/sidecar:1").commit()
    assert "model-old.k8s.yaml" not in {p.name for p in dist.iterdir()}


def test_endpoint_domain_must_be_covered_by_the_certificate() -> None:
    data = json.loads(json.dumps(DEFAULT))
    data["models"][0]["endpointDomain"] = "other.inference.example.com"
    with pytest.raises(ConfigError) as caught:
        parse_config(data)
    assert caught.value.codes == ["Model.EndpointDomainNotCertified"]
    assert caught.value.problems[0].path == "models[0].endpointDomain"


def test_model_errors_in_the_config_file_carry_their_key_path() -> None:
    data = json.loads(json.dumps(DEFAULT))
    data["models"][0]["spec"]["dataCapture"]["modelPod"]["initialSamplingPercentage"] = 150
    data["models"][0]["spec"]["modelSourceConfig"]["huggingFaceModel"]["commitSHA"] = "main"
    with pytest.raises(ConfigError) as caught:
        parse_config(data)
    assert {(p.code, p.path) for p in caught.value.problems} == {
        ("DataCapture.SamplingOutOfRange", "models[0].spec.dataCapture.modelPod.initialSamplingPercentage"),
        ("HuggingFace.CommitNotPinned", "models[0].spec.modelSourceConfig.huggingFaceModel.commitSHA"),
    }


def _with_routing(strategy: str | None) -> Any:
    data = json.loads(json.dumps(DEFAULT))
    if strategy is not None:
        data["models"][2]["spec"]["intelligentRoutingSpec"] = {"enabled": True, "routingStrategy": strategy}
    return parse_config(data)


def test_a_change_the_operator_applies_only_to_a_new_resource_is_named(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    stage_dist(_with_routing("prefixaware"), outdir=dist, sidecar_image="registry.example/sidecar:1").commit()
    unchanged = stage_dist(_with_routing("prefixaware"), outdir=dist, sidecar_image="registry.example/sidecar:1")
    assert unchanged.replacements == {}
    unchanged.discard()
    changed = stage_dist(_with_routing("kvaware"), outdir=dist, sidecar_image="registry.example/sidecar:1")
    assert changed.replacements == {"model-llama3-8b": (
        "intelligentRoutingSpec.routingStrategy changes from 'prefixaware' to 'kvaware'",)}
    changed.discard()
    removed = stage_dist(_with_routing(None), outdir=dist, sidecar_image="registry.example/sidecar:1")
    assert "removed" in removed.replacements["model-llama3-8b"][0]
    removed.discard()


def _image_warnings(data: dict[str, Any]) -> list[str]:
    """Construct the platform (no synth) and collect the image warnings left on the workloads' manifests."""
    from aws_cdk import App

    from stacks.platform import build_platform

    platform = build_platform(App(), parse_config(data))
    return [str(entry.data) for manifest in platform.cluster.workloads.manifests.values()
            for entry in manifest.node.metadata if entry.type == "aws:cdk:warning" and "by tag only" in str(entry.data)]


def test_images_named_by_tag_are_warned_unless_the_config_acknowledges_them() -> None:
    assert _image_warnings(json.loads(json.dumps(DEFAULT))) == []  # acknowledged, with its reason, in the config
    data = json.loads(json.dumps(DEFAULT))
    del data["acknowledgedWarnings"]
    warnings = _image_warnings(data)
    assert len(warnings) == 3  # mistral-7b (vLLM), qwen3-8b (vLLM, aws-cli), the portable server (vLLM, aws-cli)
    assert all("imageNotPinnedByDigest" in w for w in warnings)
    assert not any("container-assets" in w for w in warnings)  # the sidecar built here has an immutable tag
