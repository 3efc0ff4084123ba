"""CaptureAlarms: what tells the on-call engineer that captured inference data stopped flowing or is going bad.

It builds on :class:`~hyperpod_inference_iac.CapturePipeline`'s own two alarms (dead letters, function errors),
which it names and wires to the topic, and adds: failed messages and throttles of the processor, invocations
near its timeout, a growing backlog, and per tier quarantined lines and hours without curated output.

The processor's own figures come from its embedded metric format lines (``lambda/capture_processor``,
``capture_core/telemetry.py``): namespace ``HyperPodInference/CaptureProcessor``, dimensions ``Pipeline`` (the
pipeline's construct path, ``CapturePipeline.metrics_pipeline``) and ``Tier`` (``sme``, ``pod``, ``alb``) for
``Objects``, ``Records``, ``SourceBytes``, ``QuarantinedLines``, ``FilesWritten``, and ``Pipeline`` alone for
``FailedMessages`` and ``SkippedObjects``.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_sns as sns
from constructs import Construct

from hyperpod_inference_iac.alarm_topic import AlarmTopic
from hyperpod_inference_iac.alarms import (
    AlarmSettings,
    AlarmWiring,
    alarm_names,
    check_alarm_naming,
    check_alarm_settings,
    topic_actions,
)
from hyperpod_inference_iac.capture_pipeline import FUNCTION_TIMEOUT, CapturePipeline
from hyperpod_inference_iac.validation import PROPS, KeyPaths, Problems

# What the capture processor emits (kept in step with lambda/capture_processor by a test).
PROCESSOR_NAMESPACE = "HyperPodInference/CaptureProcessor"
# The dimension naming the pipeline on every processor metric (its value: CapturePipeline.metrics_pipeline, the
# construct path, which the function gets as METRICS_PIPELINE): two pipelines in one account never share a series.
PIPELINE_DIMENSION = "Pipeline"
TIERS = ("sme", "pod", "alb")
TIER_METRICS = ("Objects", "Records", "SourceBytes", "QuarantinedLines", "FilesWritten")
FUNCTION_METRICS = ("FailedMessages", "SkippedObjects")

FIVE_MINUTES = Duration.minutes(5)
FAILED_MESSAGES = AlarmSettings(threshold=0, period=Duration.minutes(5))
THROTTLES = AlarmSettings(threshold=0, period=Duration.minutes(5), evaluation_periods=3)
DURATION_NEAR_TIMEOUT = AlarmSettings(threshold=80, period=Duration.minutes(5))
BACKLOG_AGE = AlarmSettings(threshold=60, period=Duration.minutes(5), evaluation_periods=3)
QUARANTINED_LINES = AlarmSettings(threshold=0, period=Duration.hours(1))
NO_CURATED_OUTPUT = AlarmSettings(threshold=1, period=Duration.hours(1), evaluation_periods=12)

# Each alarm: threshold bounds, unit (for messages and docs).
LIMITS = {
    "failed_messages": ((0, 1e6), "failed messages per period"),
    "throttles": ((0, 1e6), "throttled invocations per period"),
    "duration_near_timeout": ((1, 99), "percent of the 15-minute timeout"),
    "backlog_age": ((1, 20160), "minutes the oldest queued event waited (the queue keeps them 14 days)"),
    "quarantined_lines": ((0, 1e9), "lines per period and tier"),
    "no_curated_output": ((1, 1e6), "curated files per period and tier: fires below it"),
}


def processor_metric(name: str, *, pipeline: str, tier: str | None = None, statistic: str = "Sum",
                     period: Duration = FIVE_MINUTES, label: str | None = None) -> cloudwatch.Metric:
    """One of the capture processor's own metrics, of one pipeline (``CapturePipeline.metrics_pipeline``;
    ``tier`` for the per-tier ones; ``label`` for graphs)."""
    dimensions = {PIPELINE_DIMENSION: pipeline, **({"Tier": tier} if tier is not None else {})}
    return cloudwatch.Metric(namespace=PROCESSOR_NAMESPACE, metric_name=name, dimensions_map=dimensions,
                             statistic=statistic, period=period, label=label)


def check_capture_alarms(
    problems: Problems,
    at: KeyPaths = PROPS,
    *,
    alarm_name_prefix: str,
    runbook_url: str | None = None,
    expected_tiers: Sequence[str] = TIERS,
    failed_messages: AlarmSettings | None = FAILED_MESSAGES,
    throttles: AlarmSettings | None = THROTTLES,
    duration_near_timeout: AlarmSettings | None = DURATION_NEAR_TIMEOUT,
    backlog_age: AlarmSettings | None = BACKLOG_AGE,
    quarantined_lines: AlarmSettings | None = QUARANTINED_LINES,
    no_curated_output: AlarmSettings | None = NO_CURATED_OUTPUT,
) -> None:
    """Every rule of :class:`CaptureAlarms`'s properties (a config loader calls it with its key paths)."""
    code = "CaptureAlarms"
    check_alarm_naming(problems, at, code, alarm_name_prefix=alarm_name_prefix, runbook_url=runbook_url)
    if isinstance(expected_tiers, str):
        problems.add(f"{code}.UnknownTier", at.at("expected_tiers"), "must be a list of tiers", expected_tiers)
    else:
        for index, tier in enumerate(expected_tiers):
            if tier not in TIERS:
                problems.add(f"{code}.UnknownTier", at.at("expected_tiers", index),
                             f"must be one of {', '.join(TIERS)}", tier)
    settings = {"failed_messages": failed_messages, "throttles": throttles,
                "duration_near_timeout": duration_near_timeout, "backlog_age": backlog_age,
                "quarantined_lines": quarantined_lines, "no_curated_output": no_curated_output}
    for prop, value in settings.items():
        bounds, unit = LIMITS[prop]
        check_alarm_settings(problems, at, code, prop, value, threshold=bounds, unit=unit)


class CaptureAlarms(Construct):
    """Alarms on a :class:`~hyperpod_inference_iac.CapturePipeline`, notifying ``topic``.

    Attributes: ``alarms`` (key -> ``cloudwatch.Alarm``: ``dead_letters`` and ``processor_errors`` are the
    pipeline's own, then ``failed_messages``, ``throttles``, ``duration_near_timeout``, ``backlog_age``,
    ``quarantined_lines_<tier>``, ``no_curated_output_<tier>``; the ones switched off are absent),
    ``alarm_names`` (key -> the fixed name).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        pipeline: CapturePipeline,
        topic: AlarmTopic | sns.ITopic | None = None,
        alarm_name_prefix: str,
        runbook_url: str | None = None,
        notify_on_ok: bool = True,
        expected_tiers: Sequence[str] = TIERS,
        failed_messages: AlarmSettings | None = FAILED_MESSAGES,
        throttles: AlarmSettings | None = THROTTLES,
        duration_near_timeout: AlarmSettings | None = DURATION_NEAR_TIMEOUT,
        backlog_age: AlarmSettings | None = BACKLOG_AGE,
        quarantined_lines: AlarmSettings | None = QUARANTINED_LINES,
        no_curated_output: AlarmSettings | None = NO_CURATED_OUTPUT,
    ) -> None:
        """
        :param pipeline: the pipeline to watch; its ``dead_letters`` and ``function_errors`` alarms are named
            ``<prefix>-capture-dead-letters`` and ``<prefix>-capture-processor-errors`` and notify ``topic``.
        :param topic: where alarms notify (an :class:`AlarmTopic` also forwards to its other topics).
            @default none: the alarms change state without actions
        :param alarm_name_prefix: every alarm is named ``<prefix>-capture-<what>``.
        :param runbook_url: the page with the runbooks (each alarm links its own section). @default the
            library's docs/alarms.md is named in the description
        :param notify_on_ok: also notify when an alarm recovers. @default True
        :param expected_tiers: the tiers that capture is on for (``sme``, ``pod``, ``alb``): they get the
            quarantine and the no-output alarms. An empty list leaves both out (capture is off). @default all
        :param failed_messages: ``FailedMessages`` (objects that could not be read or written; retried, then
            dead-lettered) above the threshold. @default > 0 in 5 minutes
        :param throttles: ``Throttles`` of the function above the threshold. @default > 0 in each of 3 x 5 minutes
        :param duration_near_timeout: the longest invocation above this percentage of the 15-minute timeout.
            @default > 80 % in 5 minutes
        :param backlog_age: the oldest queued capture event older than this many minutes.
            @default > 60 minutes in each of 3 x 5 minutes
        :param quarantined_lines: ``QuarantinedLines`` of a tier above the threshold. @default > 0 in an hour
        :param no_curated_output: ``FilesWritten`` of a tier below the threshold in every period (no data counts
            as none: nothing arrived). @default < 1 in each of 12 x 1 hour
        """
        super().__init__(scope, id)
        problems = Problems()
        check_capture_alarms(problems, alarm_name_prefix=alarm_name_prefix, runbook_url=runbook_url,
                             expected_tiers=expected_tiers, failed_messages=failed_messages, throttles=throttles,
                             duration_near_timeout=duration_near_timeout, backlog_age=backlog_age,
                             quarantined_lines=quarantined_lines, no_curated_output=no_curated_output)
        problems.raise_if_any(f"CaptureAlarms {self.node.path}")
        self.pipeline = pipeline
        self.expected_tiers = tuple(tier for tier in TIERS if tier in expected_tiers)
        wiring = AlarmWiring(alarm_name_prefix, topic_actions(topic), notify_on_ok, runbook_url)
        above = cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD
        quiet = cloudwatch.TreatMissingData.NOT_BREACHING
        alarms: dict[str, cloudwatch.Alarm] = {
            "dead_letters": wiring.adopt(pipeline.alarms["dead_letters"], "capture-dead-letters",
                                         anchor="capture-dead-letters"),
            "processor_errors": wiring.adopt(pipeline.alarms["function_errors"], "capture-processor-errors",
                                             anchor="capture-processor-errors"),
        }
        if failed_messages is not None:
            alarms["failed_messages"] = wiring.alarm(
                self, "FailedMessages", suffix="capture-failed-messages", anchor="capture-failed-messages",
                text="The capture processor could not read or write captured objects (S3, KMS or a corrupt "
                     "object); SQS retries them, then moves them to the dead-letter queue.",
                metric=processor_metric("FailedMessages", pipeline=pipeline.metrics_pipeline),
                settings=failed_messages, comparison=above, missing=quiet)
        if throttles is not None:
            alarms["throttles"] = wiring.alarm(
                self, "Throttles", suffix="capture-processor-throttles", anchor="capture-processor-throttles",
                text="The capture processor is throttled (reserved or account concurrency): captures queue up.",
                metric=pipeline.function.metric_throttles(statistic="Sum"), settings=throttles, comparison=above,
                missing=quiet)
        if duration_near_timeout is not None:
            timeout_ms = FUNCTION_TIMEOUT.to_milliseconds()
            alarms["duration_near_timeout"] = wiring.alarm(
                self, "DurationNearTimeout", suffix="capture-duration-near-timeout",
                anchor="capture-duration-near-timeout",
                text=f"A capture processor invocation ran longer than {duration_near_timeout.threshold:g} % of its "
                     "15-minute timeout: larger objects will time out, be retried and dead-lettered.",
                metric=pipeline.function.metric_duration(statistic="Maximum"), settings=duration_near_timeout,
                comparison=above, missing=quiet, threshold=timeout_ms * duration_near_timeout.threshold / 100)
        if backlog_age is not None:
            alarms["backlog_age"] = wiring.alarm(
                self, "BacklogAge", suffix="capture-backlog-age", anchor="capture-backlog-age",
                text=f"Capture events have waited more than {backlog_age.threshold:g} minutes in the queue: the "
                     "processor falls behind (throttled, failing or too little concurrency).",
                metric=pipeline.queue.metric_approximate_age_of_oldest_message(statistic="Maximum"),
                settings=backlog_age, comparison=above, missing=quiet, threshold=backlog_age.threshold * 60)
        for tier in self.expected_tiers:
            if quarantined_lines is not None:
                alarms[f"quarantined_lines_{tier}"] = wiring.alarm(
                    self, f"QuarantinedLines{tier.capitalize()}", suffix=f"capture-quarantined-lines-{tier}",
                    anchor="capture-quarantined-lines",
                    text=f"The capture processor quarantined lines of the {tier} tier it could not parse (a format "
                         "change or truncated objects); they are under the quarantine prefix.",
                    metric=processor_metric("QuarantinedLines", pipeline=pipeline.metrics_pipeline, tier=tier),
                    settings=quarantined_lines,
                    comparison=above, missing=quiet)
            if no_curated_output is not None:
                hours = no_curated_output.period.to_seconds() * no_curated_output.evaluation_periods / 3600
                alarms[f"no_curated_output_{tier}"] = wiring.alarm(
                    self, f"NoCuratedOutput{tier.capitalize()}", suffix=f"capture-no-curated-output-{tier}",
                    anchor="capture-no-curated-output",
                    text=f"No curated {tier} data was written for {hours:g} hours although capture is on for this "
                         "tier: capture stopped upstream, or every object fails or is skipped.",
                    metric=processor_metric("FilesWritten", pipeline=pipeline.metrics_pipeline, tier=tier),
                    settings=no_curated_output,
                    comparison=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
                    missing=cloudwatch.TreatMissingData.BREACHING)
        self.alarms = alarms
        self.alarm_names = alarm_names(alarms)
