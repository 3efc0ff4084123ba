"""This app's GitOps hand-off (``dist/``): the workload plan the cluster stack applies, plus what those
workloads need on the cluster, rendered from the same definitions the stacks install."""

from __future__ import annotations

from pathlib import Path

from hyperpod_inference_iac import (
    PlatformValue,
    PlatformValues,
    Prerequisite,
    SecretSync,
    StagedManifests,
    model_metrics_log_group_name,
    model_metrics_manifests,
    sidecar_image_reference,
    sidecar_metrics_manifests,
    stage_manifests,
)
from hyperpod_inference_iac.cluster.hyperpod_dependencies import (
    HEALTH_MONITORING_AGENT,
    HYPERPOD_NAMESPACE,
)
from hyperpod_inference_iac.cluster.inference_operator import (
    OPERATOR_ADDON,
)
from platform_config import PlatformConfig


def stage_dist(config: PlatformConfig, *, outdir: Path, sidecar_image: str | None = None,
               outputs: dict[PlatformValue, str] | None = None, complete_with: str = "") -> StagedManifests:
    """``dist/`` staged beside ``outdir`` (commit it once the synth succeeded), from the config alone. The capture
    sidecar's image is the one the cluster stack builds, by its deterministic URI (``sidecar_image_reference``: the
    same asset hash, computed by CDK); ``sidecar_image`` overrides it (a test's own registry)."""
    plan = config.workloads
    env = config.environment
    values = PlatformValues(config.known_values).merged(dict(outputs or {}))
    sidecar_image = sidecar_image or config.capture.sidecar_image  # (capture.sidecarImage: prebuilt, by digest)
    if sidecar_image is None and plan.needs_sidecar_image:
        sidecar_image = sidecar_image_reference(env.account, env.region)
    if sidecar_image is not None:
        values = values.merged({PlatformValue.SIDECAR_IMAGE: sidecar_image})
    sync = config.hugging_face_sync
    prerequisites = [
        Prerequisite(f"the EKS add-on {OPERATOR_ADDON} {config.operator.addon_version} (its CRDs and controller), "
                     "installed by the cluster stack",
                     "kubectl get crd " + " ".join(plan.crd_names)),
        Prerequisite(f"the IAM roles these manifests name (workload roles {config.project}-*, the token reader), "
                     "created by the cluster stack",
                     f"aws iam get-role --role-name {sync.reader_role_name}"),
        Prerequisite(f"the token's value in Secrets Manager secret {sync.secrets_manager_name} (docs/secrets.md)",
                     f"aws secretsmanager describe-secret --secret-id {sync.secrets_manager_name}"),
        Prerequisite("HyperPod's dependency components (the health-monitoring agent, the deep health checks' and "
                     "HyperPod patching's RBAC, from AWS's dependency chart), applied by the cluster stack before the "
                     "HyperPod cluster (docs/reference-parity.md)",
                     f"kubectl -n {HYPERPOD_NAMESPACE} get daemonset {HEALTH_MONITORING_AGENT}"),
    ]
    supporting = {name: each.manifests(region=env.region, reader_role_arn=_reader_role_arn(config, each))
                  for name, each in config.secret_syncs.items()}
    for agent in config.metrics_agents:
        # The same agents the cluster stack applies (CaptureSidecarMetrics), one per namespace with capturing
        # sidecars, each with its fixed role name and log group.
        supporting[agent.dist_name] = sidecar_metrics_manifests(
            namespace=agent.namespace, cluster_name=agent.cluster_name, region=env.region,
            role_arn=config.role_arn(agent.role_name), log_group_name=agent.log_group_name)
    models = config.model_metrics_agent
    if models is not None:
        # The same agent and kube-state-metrics the cluster stack applies (ModelServingMetrics).
        # Its metrics relay runs the capture sidecar's image (the same asset, by its deterministic URI).
        relay_image = values.known.get(PlatformValue.SIDECAR_IMAGE) or sidecar_image_reference(env.account, env.region)
        supporting["model-serving-metrics"] = model_metrics_manifests(
            namespace=models.namespace, cluster_name=models.cluster_name, region=env.region,
            role_arn=config.role_arn(models.role_name),
            log_group_name=model_metrics_log_group_name(models.cluster_name), models=models.models,
            relay_image=relay_image, pod_cidrs=models.pod_cidrs, latency_bound=models.latency_bound,
            first_token_bound=models.first_token_bound)
    for name, key_sync in config.api_key_syncs.items():
        for caller in key_sync.synced_callers:
            prerequisites.append(Prerequisite(
                f"the generated API key of {name}"
                + (f" (caller {caller.caller_id})" if key_sync.keys_file_callers else "")
                + f" in Secrets Manager secret {caller.secrets_manager_name}, created by the cluster stack",
                f"aws secretsmanager describe-secret --secret-id {caller.secrets_manager_name}"))
    return stage_manifests(
        plan, outdir=outdir, values=values, supporting=supporting,
        helm_releases=list(config.helm_releases), prerequisites=prerequisites,
        namespace_labels={"app.kubernetes.io/managed-by": config.project}, complete_with=complete_with,
        owner=config.workload_owner)


def _reader_role_arn(config: PlatformConfig, sync: SecretSync) -> str:
    """A sync's reader role as its manifests name it: by its ARN, which only a fixed role name gives before deploy
    (the app names every reader role: ``PlatformConfig.secret_syncs``)."""
    if sync.reader_role_name is None:
        raise ValueError(f"{sync.secrets_manager_name}: the app gives every reader role a name of its own")
    return config.role_arn(sync.reader_role_name)
