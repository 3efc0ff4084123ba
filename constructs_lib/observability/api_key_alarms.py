"""The API key alarms: a rotation that failed or is overdue, keys the sidecars do not accept, and a rising 401 rate
(docs/alarms.md, sections ``api-key-*``). They watch an :class:`~hyperpod_inference_iac.ApiKeySync` from here, the
observability part, like :class:`~hyperpod_inference_iac.CaptureAlarms` watches the capture pipeline: the serving
part that owns the key imports no alarm code (docs/architecture.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_sns as sns

from hyperpod_inference_iac.observability.alarm_topic import AlarmTopic
from hyperpod_inference_iac.observability.alarms import AlarmSettings, AlarmWiring, topic_actions
from hyperpod_inference_iac.serving.api_keys import (
    KEY_CHECK_MINUTES,
    KEY_CHECK_NAMESPACE,
    SIDECAR_METRICS_NAMESPACE,
    ApiKeySync,
)
from hyperpod_inference_iac.serving.hugging_face_token import SecretSync, SyncedCaller

#: The API key alarms' settings (docs/alarms.md, sections ``api-key-*``).
ROTATION_FAILED = AlarmSettings(threshold=1, period=Duration.minutes(5))
KEYS_NOT_ACCEPTED = AlarmSettings(threshold=1, period=Duration.minutes(KEY_CHECK_MINUTES), evaluation_periods=2)
UNAUTHORIZED = AlarmSettings(threshold=50, period=Duration.minutes(5), evaluation_periods=2)


def api_key_alarm_suffixes(sync: SecretSync, *, rotated_callers: Sequence[SyncedCaller],
                           acceptance: bool) -> dict[str, str]:
    """The alarms :func:`add_api_key_alarms` creates for a key synced by ``sync`` (key, as in the sync's ``alarms``,
    -> name suffix; the name is ``<alarm_name_prefix>-<suffix>``): none without rotated callers (no rotation),
    ``api-key-<server>-rotation-failed``, per rotated caller ``api-key-<server>[-<caller>]-rotation-overdue`` and, with
    ``acceptance``, ``...-keys-not-synced`` (the single key's caller without ``-<caller>``), and with ``acceptance``
    ``api-key-<server>-unauthorized``. The function names its alarms with it; a loader plans them with it."""
    if not rotated_callers:
        return {}
    server = sync.kubernetes_secret_name.removesuffix("-api-key")
    suffixes = {"rotation_failed": f"api-key-{server}-rotation-failed"}
    for caller in rotated_callers:
        own = caller.secrets_manager_name != sync.secrets_manager_name
        key, label = (f":{caller.caller_id}", f"{server}-{caller.caller_id}") if own else ("", server)
        suffixes[f"rotation_overdue{key}"] = f"api-key-{label}-rotation-overdue"
        if acceptance:
            suffixes[f"keys_not_synced{key}"] = f"api-key-{label}-keys-not-synced"
    if acceptance:
        suffixes["unauthorized"] = f"api-key-{server}-unauthorized"
    return suffixes


def add_api_key_alarms(sync: ApiKeySync, *, alarm_name_prefix: str, topic: AlarmTopic | sns.ITopic | None = None,
                       runbook_url: str | None = None, notify_on_ok: bool = True,
                       unauthorized: AlarmSettings = UNAUTHORIZED) -> dict[str, cloudwatch.Alarm]:
    """The alarms of an API key, in the scope of its ``sync``, notifying ``topic`` (docs/alarms.md has a runbook
    for each), named ``<prefix>-api-key-<server>-<what>``: ``rotation-failed`` (a step of the rotation function
    failed: the
    current key stays current, nobody is locked out, but the key is not rotated), ``rotation-overdue`` (the key
    is older than its period plus a day; also when the check stops reporting) and, with ``acceptance``,
    ``keys-not-synced`` (a version in Secrets Manager that not every sidecar accepts for two checks: the sync is
    not Ready or the sidecars refuse the file) and ``unauthorized`` (``401`` answers, ``unauthorized`` per
    period: a client holding a revoked or wrong key, or someone guessing). The check is the rotation function
    invoked every ``KEY_CHECK_MINUTES`` minutes by an EventBridge rule. A key without rotation has none."""
    function, props = sync.rotation_function, sync.props
    if function is None or props.rotation_days is None:
        return {}
    server = sync.sync.kubernetes_secret_name.removesuffix("-api-key")
    wiring = AlarmWiring(alarm_name_prefix, topic_actions(topic), notify_on_ok, runbook_url)
    suffixes = api_key_alarm_suffixes(sync.sync, rotated_callers=sync.rotated_callers,
                                      acceptance=props.acceptance is not None)
    base = sync.sync.secrets_manager_name
    alarms = {
        "rotation_failed": wiring.alarm(
            sync, "RotationFailedAlarm", suffix=suffixes["rotation_failed"],
            anchor="api-key-rotation-failed",
            text=f"The rotation function of the API key {base} failed (a rotation step or its check raised): "
                 "the current key stays current and nobody is locked out, but the key is not rotated.",
            metric=function.metric_errors(statistic="Sum"), settings=ROTATION_FAILED,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            missing=cloudwatch.TreatMissingData.NOT_BREACHING),
    }
    for caller in sync.rotated_callers:  # each caller's key: its own check, age and acceptance
        alarms.update(_caller_alarms(sync, caller, wiring, server, suffixes))
    if props.acceptance is not None:
        acceptance = props.acceptance
        alarms["unauthorized"] = wiring.alarm(
            sync, "UnauthorizedAlarm", suffix=suffixes["unauthorized"], anchor="api-key-unauthorized",
            text=f"The capture sidecars of {server} answered many requests 401 (no or a wrong API key).",
            metric=cloudwatch.Metric(
                namespace=SIDECAR_METRICS_NAMESPACE, metric_name="capture_sidecar_requests_unauthorized_total",
                statistic="Sum", dimensions_map={"ClusterName": acceptance.cluster_name,
                                                 "Namespace": acceptance.namespace,
                                                 "Workload": acceptance.workload}),
            settings=unauthorized, comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            missing=cloudwatch.TreatMissingData.NOT_BREACHING)
    sync.alarms = alarms
    return alarms


def _caller_alarms(sync: ApiKeySync, caller: SyncedCaller, wiring: AlarmWiring,
                   server: str, suffixes: Mapping[str, str]) -> dict[str, cloudwatch.Alarm]:
    """One caller's key: the check that looks at it, ``rotation-overdue`` and, with acceptance, ``keys-not-synced``.
    The single key's keep their names and ids; another caller's carry its id (``rotation_overdue:<caller>``,
    ``<prefix>-api-key-<server>-<caller>-rotation-overdue``)."""
    props = sync.props
    assert props.rotation_days is not None
    name = caller.secrets_manager_name
    own = caller.secrets_manager_name != sync.sync.secrets_manager_name
    key, cid = (f":{caller.caller_id}", f"-{caller.caller_id}") if own else ("", "")
    rule = events.Rule(sync, f"KeyCheck{cid}", schedule=events.Schedule.rate(Duration.minutes(KEY_CHECK_MINUTES)),
                       description=f"Looks at the API key {name} for its alarms (docs/alarms.md)")
    assert sync.rotation_function is not None
    check = {"Check": "keys", "SecretId": sync.secrets[caller.caller_id].secret_arn}
    rule.add_target(targets.LambdaFunction(sync.rotation_function, retry_attempts=0,
                                           event=events.RuleTargetInput.from_object(check)))

    def check_metric(metric: str) -> cloudwatch.Metric:
        return cloudwatch.Metric(namespace=KEY_CHECK_NAMESPACE, metric_name=metric, dimensions_map={"Secret": name},
                                 statistic="Maximum")

    hours = (props.rotation_days + 1) * 24
    alarms = {f"rotation_overdue{key}": wiring.alarm(
        sync, f"RotationOverdueAlarm{cid}", suffix=suffixes[f"rotation_overdue{key}"],
        anchor="api-key-rotation-overdue",
        text=f"The API key {name} was last rotated more than {props.rotation_days} days plus a day ago, or its "
             "check stopped reporting.",
        metric=check_metric("KeyAgeHours"), settings=AlarmSettings(threshold=hours, period=Duration.hours(1)),
        comparison=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        missing=cloudwatch.TreatMissingData.BREACHING)}
    if props.acceptance is not None:
        alarms[f"keys_not_synced{key}"] = wiring.alarm(
            sync, f"KeysNotSyncedAlarm{cid}", suffix=suffixes[f"keys_not_synced{key}"],
            anchor="api-key-keys-not-synced",
            text=f"A version of the API key {name} is not accepted by every capture sidecar of {server} for two "
                 "checks: the sync is not Ready, the kubelet does not update the Secret, or the sidecars refuse "
                 "the file.",
            metric=check_metric("KeysNotAccepted"), settings=KEYS_NOT_ACCEPTED,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            missing=cloudwatch.TreatMissingData.NOT_BREACHING)
    return alarms


__all__ = ["KEYS_NOT_ACCEPTED", "ROTATION_FAILED", "UNAUTHORIZED", "add_api_key_alarms", "api_key_alarm_suffixes"]
