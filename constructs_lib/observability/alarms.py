"""What every alarm construct of this library shares: the settings of one alarm, their rules, how an alarm is
named, described and wired to its topic, and a review table of the alarms in a synthesized template.

An alarm construct (:class:`~hyperpod_inference_iac.CaptureAlarms`,
:class:`~hyperpod_inference_iac.CertificateAlarms`, :class:`~hyperpod_inference_iac.CaptureSidecarMetrics`)
takes what it watches, a topic (an :class:`~hyperpod_inference_iac.AlarmTopic` or any ``sns.ITopic``) and one
:class:`AlarmSettings` per alarm (``None`` leaves that alarm out). Every alarm gets a fixed name
(``<prefix>-<what>``), a description that says what broke and where its runbook is, and the topic as its ALARM
action (and OK action, unless ``notify_on_ok=False``), so a name, a threshold or a period that changes shows up
in the template's snapshot and in :func:`alarm_table`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, cast

from aws_cdk import Duration, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_sns as sns
from constructs import Construct

from hyperpod_inference_iac.foundation.cdk_types import cfn_child
from hyperpod_inference_iac.foundation.props import Props, prop
from hyperpod_inference_iac.foundation.validation import PROPS, KeyPaths, Problems, is_unresolved, seconds_of
from hyperpod_inference_iac.observability.alarm_names import alarm_name
from hyperpod_inference_iac.observability.alarm_topic import AlarmTopic

# CloudWatch's own limits (PutMetricAlarm): the evaluation range, Period x EvaluationPeriods, may be at most
# 7 days, and at most 1 day when the period is shorter than an hour.
MAX_EVALUATION_RANGE = 7 * 86400
MAX_SHORT_PERIOD_RANGE = 86400
NAME_PREFIX = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
RUNBOOK_URL = re.compile(r"^https://[^\s#]+$")
# Where the runbooks live when no runbook_url is given (the repository's docs/alarms.md).
DEFAULT_RUNBOOK = "docs/alarms.md of hyperpod-inference-iac"


@dataclass(frozen=True, kw_only=True)
class AlarmSettings(Props):
    """When one alarm fires: the statistic over ``period`` crosses ``threshold`` in ``datapoints_to_alarm`` of
    the last ``evaluation_periods`` periods (all of them by default). The threshold's unit is the alarm's own
    (messages, minutes, days, ...; each construct's page lists them).

    A block other props hold (:func:`alarm_prop`): its rules are the holder's (:func:`check_alarm_blocks`), under the
    holder's code and with the threshold's bounds the holder declares; in a config file, a key of the block left out
    keeps that alarm's default."""

    BLOCK: ClassVar[str] = "alarm"

    threshold: float = prop(doc="The threshold, in the alarm's unit and within its bounds (each alarm states them).")
    period: Duration = prop(key="periodMinutes",
                            doc="The period of the statistic: whole minutes, at least 1 (a config file gives the "
                                "minutes, `periodMinutes`).")
    evaluation_periods: int = prop(1, doc="How many of the latest periods are evaluated, at least 1. The period times "
                                          "this is at most 7 days, at most 1 day for periods under an hour "
                                          "(CloudWatch's limit).")
    datapoints_to_alarm: int | None = prop(None, default_doc="all of them",
                                           doc="How many of the evaluated periods must breach, from 1 to their "
                                               "number.")

    def with_(self, *, threshold: float | None = None, period: Duration | None = None,
              evaluation_periods: int | None = None, datapoints_to_alarm: int | None = None) -> AlarmSettings:
        """A copy with some fields replaced (a config file overrides only the keys it names)."""
        return AlarmSettings(
            threshold=self.threshold if threshold is None else threshold,
            period=self.period if period is None else period,
            evaluation_periods=self.evaluation_periods if evaluation_periods is None else evaluation_periods,
            datapoints_to_alarm=self.datapoints_to_alarm if datapoints_to_alarm is None else datapoints_to_alarm,
        )

    @property
    def window(self) -> str:
        """``"2 of 3 x 5 min"``: how the alarm reads in a review."""
        minutes = int(seconds_of(self.period)) // 60
        unit = f"{minutes // 1440} d" if minutes % 1440 == 0 else f"{minutes // 60} h" if minutes % 60 == 0 \
            else f"{minutes} min"
        datapoints = self.datapoints_to_alarm or self.evaluation_periods
        return f"{datapoints} of {self.evaluation_periods} x {unit}"

    def summary(self) -> str:
        return f"threshold {self.threshold:g}, {self.window}"


@dataclass(frozen=True)
class AlarmLimits:
    """What an alarm construct allows as one alarm's threshold: its bounds, and its unit (named in problems)."""

    threshold: tuple[float, float]
    unit: str


def alarm_prop(default: AlarmSettings | None, *, doc: str, threshold: tuple[float, float], unit: str) -> Any:
    """One alarm of an alarm construct, a property of type ``AlarmSettings | None`` (None leaves the alarm out):
    its default settings, what it watches (``doc``) and its threshold's bounds and unit, which
    :func:`check_alarm_blocks` applies and the docs show."""
    low, high = threshold
    field = prop(default, doc=f"{doc} Threshold: {unit} ({_number(low)} to {_number(high)}).")
    return dataclasses.field(default=default, metadata={**field.metadata, "alarm": AlarmLimits(threshold, unit)})


def check_alarm_blocks(props: Props, problems: Problems, at: KeyPaths, code: str) -> None:
    """The rules of every alarm :func:`alarm_prop` declares on ``props``, with its bounds, under ``code``."""
    for field in props.fields():
        limits = field.metadata.get("alarm")
        if isinstance(limits, AlarmLimits):
            check_alarm_settings(problems, at, code, field.name, getattr(props, field.name),
                                 threshold=limits.threshold, unit=limits.unit)


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 10000 and value == int(value) else f"{value:g}"


def check_alarm_settings(problems: Problems, at: KeyPaths, code: str, prop: str, settings: AlarmSettings | None,
                         *, threshold: tuple[float, float], unit: str) -> None:
    """The rules of one :class:`AlarmSettings` (``prop`` is the construct's property; ``code`` its prefix)."""
    if settings is None:
        return
    low, high = threshold
    value = settings.threshold
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        problems.add(f"{code}.ThresholdOutOfRange", at.at(prop, "threshold"),
                     f"must be a number from {low:g} to {high:g} ({unit})", value)
    seconds = seconds_of(settings.period)
    period_ok = not is_unresolved(seconds) and seconds >= 60 and seconds % 60 == 0
    if not period_ok:
        problems.add(f"{code}.AlarmPeriod", at.at(prop, "period"), "must be a whole number of minutes, at least 1",
                     f"{seconds:g} s")
    evaluations = settings.evaluation_periods
    evaluations_ok = isinstance(evaluations, int) and not isinstance(evaluations, bool) and evaluations >= 1
    if not evaluations_ok:
        problems.add(f"{code}.EvaluationPeriods", at.at(prop, "evaluation_periods"), "must be an integer of at least 1",
                     evaluations)
    # The other settings as the reader calls them (evaluationPeriods in a config file, evaluation_periods in Python).
    evaluations_name = at.at(prop, "evaluation_periods").rsplit(".", 1)[-1]
    period_name = at.at(prop, "period").rsplit(".", 1)[-1]
    datapoints = settings.datapoints_to_alarm
    if datapoints is not None and (isinstance(datapoints, bool) or not isinstance(datapoints, int) or datapoints < 1
                                   or (evaluations_ok and datapoints > evaluations)):
        problems.add(f"{code}.DatapointsToAlarm", at.at(prop, "datapoints_to_alarm"),
                     f"must be an integer from 1 to {evaluations_name}", datapoints)
    if period_ok and evaluations_ok:
        limit = MAX_SHORT_PERIOD_RANGE if seconds < 3600 else MAX_EVALUATION_RANGE
        if seconds * evaluations > limit:
            problems.add(f"{code}.EvaluationRange", at.at(prop, "evaluation_periods"),
                         f"{period_name} x {evaluations_name} must be at most 7 days (at most 1 day for periods "
                         "under an hour; CloudWatch's limit)", f"{seconds * evaluations / 3600:g} h")


def check_alarm_naming(problems: Problems, at: KeyPaths, code: str, *, alarm_name_prefix: str,
                       runbook_url: str | None) -> None:
    """The rules every alarm construct applies to its name prefix and runbook link."""
    if not is_unresolved(alarm_name_prefix) and not (isinstance(alarm_name_prefix, str)
                                                     and NAME_PREFIX.match(alarm_name_prefix)):
        problems.add(f"{code}.BadNamePrefix", at.at("alarm_name_prefix"),
                     "must be 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit",
                     alarm_name_prefix)
    check_runbook_url(problems, at, code, runbook_url)


def check_runbook_url(problems: Problems, at: KeyPaths, code: str, runbook_url: str | None) -> None:
    """The runbook link's rule (shared by every alarm construct: a config file that gives one link for all of them
    checks it once, under one code)."""
    if runbook_url is not None and not (isinstance(runbook_url, str) and RUNBOOK_URL.match(runbook_url)):
        problems.add(f"{code}.BadRunbookUrl", at.at("runbook_url"),
                     "must be an https:// URL of the runbook page, without a fragment (each alarm adds its own)",
                     runbook_url)


@dataclass(frozen=True, kw_only=True)
class AlarmNotifyOptions(Props):
    """What every alarm construct shares that a config file sets: the runbook link and whether a recovery notifies
    (the app's ``alarms.runbookUrl`` and ``alarms.notifyOnOk``, for all its alarm constructs)."""

    runbook_url: str | None = prop(None, default_doc="descriptions name the library's docs/alarms.md",
                                   doc="The runbook page (`https://`, no fragment): each alarm's description links "
                                       "`<url>#<section>`.")
    notify_on_ok: bool = prop(True, doc="Also notify when an alarm recovers.")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        """The runbook link's rule, under the construct's code."""
        check_runbook_url(problems, at, self.CONSTRUCT, self.runbook_url)


@dataclass(frozen=True, kw_only=True)
class AlarmWiringProps(AlarmNotifyOptions):
    """How an alarm construct's alarms are named, described and notified: the shared options and what only Python
    code passes (the topic, the name prefix)."""

    topic: AlarmTopic | sns.ITopic | None = prop(None, config=False, default_doc="the alarms change state without "
                                                                                "actions",
                                                 doc="Where the alarms notify; an [AlarmTopic](alarm-topic.md) also "
                                                     "forwards to its other topics.")
    alarm_name_prefix: str = prop(config=False, doc="Every alarm's name starts with `<prefix>-` (1-128 letters, "
                                                    "digits, '.', '_', '-').")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        """The name prefix's and the runbook link's rules (:func:`check_alarm_naming`), under the construct's code."""
        check_alarm_naming(problems, at, self.CONSTRUCT, alarm_name_prefix=self.alarm_name_prefix,
                           runbook_url=self.runbook_url)


def topic_actions(topic: AlarmTopic | sns.ITopic | None) -> list[cloudwatch.IAlarmAction]:
    """The alarm actions that notify ``topic`` (and the topics an AlarmTopic forwards to)."""
    if topic is None:
        return []
    actions = getattr(topic, "alarm_actions", None)
    if actions is not None:
        return list(actions)
    return [cloudwatch_actions.SnsAction(cast("sns.ITopic", topic))]  # (an AlarmTopic has alarm_actions)


@dataclass(frozen=True)
class AlarmWiring:
    """How the alarms of one construct are named, described and notified."""

    prefix: str
    actions: Sequence[cloudwatch.IAlarmAction]
    notify_on_ok: bool = True
    runbook_url: str | None = None

    def name(self, suffix: str) -> str:
        return alarm_name(self.prefix, suffix)

    def description(self, text: str, anchor: str) -> str:
        where = f"{self.runbook_url}#{anchor}" if self.runbook_url else f"{DEFAULT_RUNBOOK}, section {anchor}"
        return f"{text} Runbook: {where}"

    def adopt(self, alarm: cloudwatch.Alarm, suffix: str, *, anchor: str | None = None,
              insufficient_data: bool = False) -> cloudwatch.Alarm:
        """Name an alarm and add the actions (also used on alarms another construct created: with ``anchor``, its
        description gets the runbook link)."""
        cfn = cfn_child(alarm, cloudwatch.CfnAlarm)
        cfn.alarm_name = self.name(suffix)
        if anchor is not None:
            cfn.alarm_description = self.description(str(cfn.alarm_description or "").rstrip(".") + ".", anchor)
        for action in self.actions:
            alarm.add_alarm_action(action)
            if self.notify_on_ok:
                alarm.add_ok_action(action)
            if insufficient_data:
                alarm.add_insufficient_data_action(action)
        return alarm

    def alarm(self, scope: Construct, id: str, *, suffix: str, anchor: str, text: str, metric: cloudwatch.IMetric,
              settings: AlarmSettings, comparison: cloudwatch.ComparisonOperator,
              missing: cloudwatch.TreatMissingData, threshold: float | None = None,
              insufficient_data: bool = False) -> cloudwatch.Alarm:
        """One alarm on ``metric`` (its period set from ``settings``); ``threshold`` overrides the settings' own
        when the construct converts units (a percentage of a timeout into milliseconds)."""
        if isinstance(metric, cloudwatch.Metric):
            metric = metric.with_(period=settings.period)
        alarm = cloudwatch.Alarm(
            scope, id,
            metric=metric,
            threshold=settings.threshold if threshold is None else threshold,
            evaluation_periods=settings.evaluation_periods,
            datapoints_to_alarm=settings.datapoints_to_alarm,
            comparison_operator=comparison,
            treat_missing_data=missing,
            alarm_description=self.description(text, anchor),
        )
        return self.adopt(alarm, suffix, insufficient_data=insufficient_data)


def alarm_names(alarms: Mapping[str, cloudwatch.Alarm]) -> dict[str, str]:
    """The literal names of alarms named through :class:`AlarmWiring` (key -> name)."""
    names = {}
    for key, alarm in alarms.items():
        cfn = cfn_child(alarm, cloudwatch.CfnAlarm)
        names[key] = str(cfn.alarm_name)
    return names


def imported_alarms(scope: Construct, alarms: Sequence[cloudwatch.IAlarm]) -> list[cloudwatch.IAlarm]:
    """Alarms as ``scope``'s stack may reference them: an alarm of another stack is imported by its fixed name
    (the same account and region), so a dashboard needs no cross-stack export per alarm."""
    stack = Stack.of(scope)
    result: list[cloudwatch.IAlarm] = []
    for index, alarm in enumerate(alarms):
        cfn = alarm.node.default_child
        name = getattr(cfn, "alarm_name", None)
        if Stack.of(alarm) is stack or not isinstance(name, str) or is_unresolved(name):
            result.append(alarm)
        else:
            result.append(cloudwatch.Alarm.from_alarm_name(scope, f"Imported{index}", name))
    return result


# ---- review ----------------------------------------------------------------------------------------------

_OPERATORS = {
    "GreaterThanThreshold": ">", "GreaterThanOrEqualToThreshold": ">=", "LessThanThreshold": "<",
    "LessThanOrEqualToThreshold": "<=",
}


@dataclass(frozen=True)
class AlarmRow:
    """One alarm of a template, as a reviewer reads it."""

    name: str
    metric: str
    condition: str
    window: str
    missing_data: str
    actions: str


def describe_alarms(template: Mapping[str, Any]) -> list[AlarmRow]:
    """Every ``AWS::CloudWatch::Alarm`` of a synthesized template: name, metric (namespace, name, statistic and
    dimensions, or the math expression), condition, evaluation window, missing-data treatment and which states
    notify. Sorted by name; unresolved values are shown as ``<Ref>``/``<GetAtt>`` placeholders."""
    rows = []
    for logical_id, resource in template.get("Resources", {}).items():
        if resource.get("Type") != "AWS::CloudWatch::Alarm":
            continue
        props = resource["Properties"]
        name = props.get("AlarmName")
        period = props.get("Period")
        if "Metrics" in props:
            returned = next(m for m in props["Metrics"] if m.get("ReturnData", True))
            metric = f"{returned['Expression']} ({_math_inputs(props['Metrics'])})" if "Expression" in returned \
                else _math_inputs([returned])
            period = next((m["MetricStat"]["Period"] for m in props["Metrics"] if "MetricStat" in m), period)
        else:
            dimensions = ", ".join(f"{d['Name']}={_plain(d['Value'])}" for d in props.get("Dimensions", []))
            statistic = props.get("Statistic") or props.get("ExtendedStatistic")
            metric = f"{props['Namespace']} {props['MetricName']} {statistic}" + (f" [{dimensions}]" if dimensions
                                                                                    else "")
        evaluations = props["EvaluationPeriods"]
        datapoints = props.get("DatapointsToAlarm", evaluations)
        notify = [state for state, key in (("ALARM", "AlarmActions"), ("OK", "OKActions"),
                                           ("INSUFFICIENT_DATA", "InsufficientDataActions")) if props.get(key)]
        rows.append(AlarmRow(
            name=_plain(name) if name is not None else f"(generated: {logical_id})",
            metric=metric,
            condition=f"{_OPERATORS.get(props['ComparisonOperator'], props['ComparisonOperator'])} "
                      f"{props['Threshold']:g}",
            window=f"{datapoints} of {evaluations} x {_duration(period)}",
            missing_data=props.get("TreatMissingData", "missing"),
            actions=", ".join(notify) or "none",
        ))
    return sorted(rows, key=lambda row: row.name)


def alarm_table(templates: Mapping[str, Mapping[str, Any]]) -> str:
    """A Markdown table of the alarms of each stack (stack name -> template), for reviews (``make review``)."""
    lines = ["| stack | alarm | metric | fires when | window | missing data | notifies |",
             "|---|---|---|---|---|---|---|"]
    for stack, template in sorted(templates.items()):
        for row in describe_alarms(template):
            lines.append(f"| {stack} | {row.name} | {row.metric} | {row.condition} | {row.window} | "
                         f"{row.missing_data} | {row.actions} |")
    return "\n".join(lines) + "\n"


def _math_inputs(metrics: Sequence[Mapping[str, Any]]) -> str:
    inputs = []
    for metric in metrics:
        if "MetricStat" not in metric:
            continue
        stat = metric["MetricStat"]
        dimensions = ",".join(f"{d['Name']}={_plain(d['Value'])}" for d in stat["Metric"].get("Dimensions", []))
        inputs.append(f"{metric['Id']}={stat['Metric']['MetricName']} {stat['Stat']}[{dimensions}]")
    return "; ".join(inputs)


def _duration(seconds: Any) -> str:
    if not isinstance(seconds, int | float):
        return str(seconds)
    minutes = int(seconds) // 60
    if minutes and minutes % 1440 == 0:
        return f"{minutes // 1440} d"
    if minutes and minutes % 60 == 0:
        return f"{minutes // 60} h"
    return f"{minutes} min" if minutes else f"{seconds:g} s"


def _plain(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        if "Ref" in value:
            return f"<{value['Ref']}>"
        if "Fn::GetAtt" in value:
            return f"<{'.'.join(value['Fn::GetAtt'])}>"
        if "Fn::ImportValue" in value:
            return f"<import {_plain(value['Fn::ImportValue'])}>"
        if "Fn::Join" in value:
            delimiter, parts = value["Fn::Join"]
            return str(delimiter).join(_plain(part) for part in parts)
    return str(value)

