"""Every alarm name the platform's stacks will create, planned from the config with the functions the alarm constructs
name their alarms with (docs/alarms.md#alarm-names), each with the key path its name comes from; and the config check
that refuses two alarms of one name (``Config.AlarmNameCollision``, one problem per name naming both key paths) and a
name over CloudWatch's 255 characters (``Config.AlarmNameTooLong``).

The families and what varies in their names: the capture pipeline's (`<project>-capture-...`, per tier), the
certificate's, each capture sidecar agent's (`<project>-sidecar-...` for the platform namespace's agent,
`<project>-<namespace>-sidecar-...` for another namespace's, per captured model and budget level), the operator
models' (`<project>-model-<name>-...`, whatever their namespace) and the API keys'
(`<project>-api-key-<server>[-<caller>]-...`).
A namespace, a server, a model or a caller can be named so that two families meet: ``tests/unit/test_alarm_names.py``
has the cases, and compares the plan with the names a synthesized platform has.
"""

from __future__ import annotations

from hyperpod_inference_iac import (
    PlannedAlarm,
    api_key_alarm_suffixes,
    capture_alarm_suffixes,
    certificate_alarm_suffixes,
    check_alarm_names,
    model_alarm_suffixes,
    planned_alarms,
    sidecar_alarm_suffixes,
)
from hyperpod_inference_iac.foundation.validation import Problems, join_path
from platform_config.model import PlatformConfig

# The one certificate the cluster stack's CertificateAlarms watches (stacks/cluster_stack.py).
CERTIFICATE_LABELS = ("endpoints",)


def platform_alarms(config: PlatformConfig) -> list[PlannedAlarm]:
    """The alarms the stacks create for ``config`` (stacks/storage_stack.py, stacks/cluster_stack.py), each with the
    key path its name comes from. None when alarms are off (the pipeline's two alarms keep generated names then)."""
    alarms = config.alarms
    if not alarms.enabled:
        return []
    project = config.project
    planned = planned_alarms(project, capture_alarm_suffixes(config.capture_tiers, alarms.capture), "alarms.capture",
                             "the capture pipeline's alarms")
    planned += planned_alarms(project, certificate_alarm_suffixes(CERTIFICATE_LABELS, alarms.certificate),
                              "alarms.certificate", "the endpoint certificate's alarm")
    planned += _sidecar_alarms(config)
    planned += _model_alarms(config)
    planned += _api_key_alarms(config)
    return planned


def check_platform_alarm_names(config: PlatformConfig, problems: Problems) -> None:
    """One ``Config.AlarmNameCollision`` per name two planned alarms share, one ``Config.AlarmNameTooLong`` per name
    over 255 characters."""
    # (an entry with a problem of its own, such as a model name used twice, is reported once: under that problem)
    check_alarm_names(problems, [alarm for alarm in platform_alarms(config)
                                 if not problems.has_at_or_below(_entry(alarm.path))], "Config")


def _entry(path: str) -> str:
    """The config entry a key path is in (``portable[1]`` of ``portable[1].name``, ``alarms.capture`` itself)."""
    head = path.split(".", 1)[0]
    return head if head.endswith("]") else path


def _sidecar_alarms(config: PlatformConfig) -> list[PlannedAlarm]:
    """Each agent's alarms: the namespace's own under the key that puts a capturing sidecar there (the platform's:
    ``alarms.sidecar``), each model's under its server's name."""
    plan = config.workloads
    home = config.operator.namespace
    planned: list[PlannedAlarm] = []
    for agent in config.metrics_agents:
        prefix = agent.alarm_name_prefix or config.project
        servers = {p.name: p.path for p in plan.portable if (p.namespace or home) == agent.namespace}
        if agent.namespace == home:
            where = "alarms.sidecar"
        else:
            where = next(
                (join_path(path, "namespace") for path in servers.values()),
                next((join_path(e.path.removesuffix(".entry"), "namespace") for e in plan.entries
                      if (e.namespace or home) == agent.namespace), agent.namespace))
        owner = f"the capture sidecar agent of namespace {agent.namespace}"
        suffixes = sidecar_alarm_suffixes(models=agent.models, budget_alert_percents=agent.budget_alert_percents,
                                          options=config.alarms.sidecar)
        for key, suffix in suffixes.items():
            model = key.split(":", 1)[1] if key.startswith(("server_error_rate:", "first_chunk_p99:")) else None
            path = join_path(servers[model], "name") if model in servers else where
            planned += planned_alarms(prefix, {key: suffix}, path,
                                      f"{owner}, model {model}" if model is not None else owner)
    return planned


def _model_alarms(config: PlatformConfig) -> list[PlannedAlarm]:
    """The operator models' alarms, each under its model's entry (``models[i]``)."""
    agent = config.model_metrics_agent
    if agent is None:
        return []
    home = config.operator.namespace
    paths = {(deployment.workload.name, deployment.namespace or home): deployment.path
             for deployment in config.models}
    planned = []
    for index, key, suffix in model_alarm_suffixes(agent.models, config.alarms.models):
        model = agent.models[index]
        path = paths.get((model.name, model.namespace)) or join_path("models", model.name)
        planned += planned_alarms(config.project, {key: suffix}, path,
                                  f"the {key.replace('_', '-')} alarm of model {model.name} in {model.namespace}")
    return planned


def _api_key_alarms(config: PlatformConfig) -> list[PlannedAlarm]:
    """Each rotated API key's alarms (stacks/cluster_stack.py ``_api_keys``), under its server's ``apiKey``."""
    portable = {p.name: p for p in config.workloads.portable}
    planned = []
    for name, sync in config.api_key_syncs.items():
        server = portable[name]
        rotation_days = config.secrets.rotation_days_of(reads_keys_file=server.capture is not None)
        acceptance = rotation_days is not None and config.metrics_agent_in(sync.namespace) is not None
        rotated = [caller for caller in sync.callers() if not caller.revoked] if rotation_days is not None else []
        suffixes = api_key_alarm_suffixes(sync, rotated_callers=rotated, acceptance=acceptance)
        planned += planned_alarms(config.project, suffixes, join_path(server.path, "apiKey"),
                                  f"the API key alarms of {name}")
    return planned
