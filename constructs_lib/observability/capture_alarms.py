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
from dataclasses import dataclass
from typing import Any, ClassVar

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_sns as sns
from constructs import Construct

from hyperpod_inference_iac.capture.capture_pipeline import FUNCTION_TIMEOUT, CapturePipeline
from hyperpod_inference_iac.foundation.props import Props, listed, prop, real_signature
from hyperpod_inference_iac.foundation.validation import PROPS, KeyPaths, Problems
from hyperpod_inference_iac.observability.alarm_topic import AlarmTopic
from hyperpod_inference_iac.observability.alarms import (
    AlarmSettings,
    AlarmWiring,
    AlarmWiringProps,
    alarm_names,
    alarm_prop,
    check_alarm_blocks,
    topic_actions,
)

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



def processor_metric(name: str, *, pipeline: str, tier: str | None = None, statistic: str = "Sum",
                     period: Duration = FIVE_MINUTES, label: str | None = None) -> cloudwatch.Metric:
    """One of the capture processor's own metrics, of one pipeline (``CapturePipeline.metrics_pipeline``;
    ``tier`` for the per-tier ones; ``label`` for graphs)."""
    dimensions = {PIPELINE_DIMENSION: pipeline, **({"Tier": tier} if tier is not None else {})}
    return cloudwatch.Metric(namespace=PROCESSOR_NAMESPACE, metric_name=name, dimensions_map=dimensions,
                             statistic=statistic, period=period, label=label)


@dataclass(frozen=True, kw_only=True)
class CaptureAlarmsOptions(Props):
    """The capture alarms' settings, one :class:`AlarmSettings` per alarm (None leaves it out): what a config file
    sets (``alarms.capture`` in the app's)."""

    CONSTRUCT: ClassVar[str] = "CaptureAlarms"

    failed_messages: AlarmSettings | None = alarm_prop(
        FAILED_MESSAGES, threshold=(0, 1e6), unit="failed messages per period",
        doc="`FailedMessages` (objects that could not be read or written; retried, then dead-lettered) above the "
            "threshold.")
    throttles: AlarmSettings | None = alarm_prop(
        THROTTLES, threshold=(0, 1e6), unit="throttled invocations per period",
        doc="`Throttles` of the processor function above the threshold in every period.")
    duration_near_timeout: AlarmSettings | None = alarm_prop(
        DURATION_NEAR_TIMEOUT, threshold=(1, 99), unit="percent of the 15-minute timeout",
        doc="The longest invocation of the processor (`Duration`, Maximum) above this share of its timeout.")
    backlog_age: AlarmSettings | None = alarm_prop(
        BACKLOG_AGE, threshold=(1, 20160), unit="minutes the oldest queued event waited (the queue keeps them 14 days)",
        doc="`ApproximateAgeOfOldestMessage` of the event queue above the threshold.")
    quarantined_lines: AlarmSettings | None = alarm_prop(
        QUARANTINED_LINES, threshold=(0, 1e9), unit="lines per period and tier",
        doc="`QuarantinedLines` of a tier above the threshold.")
    no_curated_output: AlarmSettings | None = alarm_prop(
        NO_CURATED_OUTPUT, threshold=(1, 1e6), unit="curated files per period and tier: fires below it",
        doc="`FilesWritten` of a tier below the threshold in every period (no data counts as none: nothing arrived).")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        check_alarm_blocks(self, problems, at, "CaptureAlarms")


@dataclass(frozen=True, kw_only=True)
class CaptureAlarmsProps(CaptureAlarmsOptions, AlarmWiringProps):
    """:class:`CaptureAlarms`' properties: the alarms' settings, the shared ones of every alarm construct, and what
    only Python code passes."""

    pipeline: CapturePipeline = prop(
        config=False, doc="The pipeline to watch; its `dead_letters` and `function_errors` alarms are named "
                          "`<prefix>-capture-dead-letters` and `<prefix>-capture-processor-errors` and notify `topic`.")
    expected_tiers: Sequence[str] = prop(
        TIERS, config=False,
        doc="The tiers capture is on for (`sme`, `pod`, `alb`): each gets the quarantine and the no-output alarm. "
            "Empty: neither (capture is off).")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        code = "CaptureAlarms"
        AlarmWiringProps.check(self, problems, at)
        expected_tiers = self.expected_tiers
        if isinstance(expected_tiers, str):
            problems.add(f"{code}.UnknownTier", at.at("expected_tiers"), "must be a list of tiers", expected_tiers)
        else:
            for index, tier in enumerate(expected_tiers):
                if tier not in TIERS:
                    problems.add(f"{code}.UnknownTier", at.at("expected_tiers", index),
                                 f"must be one of {', '.join(TIERS)}", tier)
        CaptureAlarmsOptions.check(self, problems, at)


def check_capture_alarms(problems: Problems, at: KeyPaths = PROPS, **options: Any) -> None:
    """:meth:`CaptureAlarmsProps.check` of these properties (kept for callers of 0.2.0; ``pipeline`` not needed)."""
    CaptureAlarmsProps(**{"pipeline": None, **options}).check(problems, at)


# The pipeline's own alarms, then the optional ones, each key with its name suffix (and runbook section).
PIPELINE_ALARMS = {"dead_letters": "capture-dead-letters", "processor_errors": "capture-processor-errors"}
OPTIONAL_ALARMS = {"failed_messages": "capture-failed-messages", "throttles": "capture-processor-throttles",
                   "duration_near_timeout": "capture-duration-near-timeout", "backlog_age": "capture-backlog-age"}


def capture_alarm_suffixes(tiers: Sequence[str], options: CaptureAlarmsOptions) -> dict[str, str]:
    """The alarms :class:`CaptureAlarms` names, key (as in its ``alarms``) -> name suffix (the name is
    ``<alarm_name_prefix>-<suffix>``), per expected tier ``capture-quarantined-lines-<tier>`` and
    ``capture-no-curated-output-<tier>``; an alarm whose settings are None is not created. The construct names its
    alarms with it; a loader plans them with it (docs/alarms.md#alarm-names)."""
    suffixes = dict(PIPELINE_ALARMS)
    suffixes.update({key: suffix for key, suffix in OPTIONAL_ALARMS.items() if getattr(options, key) is not None})
    for tier in (tier for tier in TIERS if tier in tiers):
        if options.quarantined_lines is not None:
            suffixes[f"quarantined_lines_{tier}"] = f"capture-quarantined-lines-{tier}"
        if options.no_curated_output is not None:
            suffixes[f"no_curated_output_{tier}"] = f"capture-no-curated-output-{tier}"
    return suffixes


@real_signature
class CaptureAlarms(Construct):
    """Alarms on a :class:`~hyperpod_inference_iac.CapturePipeline`, notifying ``topic``.

    Properties: :class:`CaptureAlarmsProps` (each with its type, default and meaning); ``props`` keeps them.

    Attributes: ``alarms`` (key -> ``cloudwatch.Alarm``: ``dead_letters`` and ``processor_errors`` are the
    pipeline's own, then ``failed_messages``, ``throttles``, ``duration_near_timeout``, ``backlog_age``,
    ``quarantined_lines_<tier>``, ``no_curated_output_<tier>``; the ones switched off are absent),
    ``alarm_names`` (key -> the fixed name).
    """

    PROPS: ClassVar[type[Props]] = CaptureAlarmsProps

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        pipeline: CapturePipeline,
        topic: AlarmTopic | sns.ITopic | None = CaptureAlarmsProps.topic,
        alarm_name_prefix: str,
        runbook_url: str | None = CaptureAlarmsProps.runbook_url,
        notify_on_ok: bool = CaptureAlarmsProps.notify_on_ok,
        expected_tiers: Sequence[str] = CaptureAlarmsProps.expected_tiers,
        failed_messages: AlarmSettings | None = CaptureAlarmsProps.failed_messages,
        throttles: AlarmSettings | None = CaptureAlarmsProps.throttles,
        duration_near_timeout: AlarmSettings | None = CaptureAlarmsProps.duration_near_timeout,
        backlog_age: AlarmSettings | None = CaptureAlarmsProps.backlog_age,
        quarantined_lines: AlarmSettings | None = CaptureAlarmsProps.quarantined_lines,
        no_curated_output: AlarmSettings | None = CaptureAlarmsProps.no_curated_output,
    ) -> None:
        """Create the construct. Its properties (:class:`CaptureAlarmsProps`, kept as ``self.props``):

        :param runbook_url: The runbook page (`https://`, no fragment): each alarm's description links
            `<url>#<section>`. Default: ``None`` (descriptions name the library's docs/alarms.md).
        :param notify_on_ok: Also notify when an alarm recovers. Default: ``True``.
        :param topic: Where the alarms notify; an [AlarmTopic](alarm-topic.md) also forwards to its other
            topics. Default: ``None`` (the alarms change state without actions).
        :param alarm_name_prefix: Every alarm's name starts with `<prefix>-` (1-128 letters, digits, '.', '_',
            '-'). Default: required.
        :param failed_messages: `FailedMessages` (objects that could not be read or written; retried, then
            dead-lettered) above the threshold. Threshold: failed messages per period (0 to 1,000,000). Default:
            threshold 0, 1 of 1 x 5 min.
        :param throttles: `Throttles` of the processor function above the threshold in every period. Threshold:
            throttled invocations per period (0 to 1,000,000). Default: threshold 0, 3 of 3 x 5 min.
        :param duration_near_timeout: The longest invocation of the processor (`Duration`, Maximum) above this
            share of its timeout. Threshold: percent of the 15-minute timeout (1 to 99). Default: threshold 80,
            1 of 1 x 5 min.
        :param backlog_age: `ApproximateAgeOfOldestMessage` of the event queue above the threshold. Threshold:
            minutes the oldest queued event waited (the queue keeps them 14 days) (1 to 20,160). Default:
            threshold 60, 3 of 3 x 5 min.
        :param quarantined_lines: `QuarantinedLines` of a tier above the threshold. Threshold: lines per period
            and tier (0 to 1,000,000,000). Default: threshold 0, 1 of 1 x 1 h.
        :param no_curated_output: `FilesWritten` of a tier below the threshold in every period (no data counts
            as none: nothing arrived). Threshold: curated files per period and tier: fires below it (1 to
            1,000,000). Default: threshold 1, 12 of 12 x 1 h.
        :param pipeline: The pipeline to watch; its `dead_letters` and `function_errors` alarms are named
            `<prefix>-capture-dead-letters` and `<prefix>-capture-processor-errors` and notify `topic`. Default:
            required.
        :param expected_tiers: The tiers capture is on for (`sme`, `pod`, `alb`): each gets the quarantine and
            the no-output alarm. Empty: neither (capture is off). Default: ``('sme', 'pod', 'alb')``.
        """
        super().__init__(scope, id)
        self.props = props = CaptureAlarmsProps(
            pipeline=pipeline, topic=topic, alarm_name_prefix=alarm_name_prefix, runbook_url=runbook_url,
            notify_on_ok=notify_on_ok, expected_tiers=listed(expected_tiers), failed_messages=failed_messages,
            throttles=throttles, duration_near_timeout=duration_near_timeout, backlog_age=backlog_age,
            quarantined_lines=quarantined_lines, no_curated_output=no_curated_output)
        props.raise_if_invalid(f"CaptureAlarms {self.node.path}")
        self.pipeline = props.pipeline
        self.expected_tiers = tuple(tier for tier in TIERS if tier in props.expected_tiers)
        wiring = AlarmWiring(props.alarm_name_prefix, topic_actions(props.topic), props.notify_on_ok, props.runbook_url)
        above = cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD
        quiet = cloudwatch.TreatMissingData.NOT_BREACHING
        suffixes = capture_alarm_suffixes(self.expected_tiers, props)
        alarms: dict[str, cloudwatch.Alarm] = {
            "dead_letters": wiring.adopt(props.pipeline.alarms["dead_letters"], suffixes["dead_letters"],
                                         anchor="capture-dead-letters"),
            "processor_errors": wiring.adopt(props.pipeline.alarms["function_errors"], suffixes["processor_errors"],
                                             anchor="capture-processor-errors"),
        }
        if props.failed_messages is not None:
            alarms["failed_messages"] = wiring.alarm(
                self, "FailedMessages", suffix=suffixes["failed_messages"], anchor="capture-failed-messages",
                text="The capture processor could not read or write captured objects (S3, KMS or a corrupt "
                     "object); SQS retries them, then moves them to the dead-letter queue.",
                metric=processor_metric("FailedMessages", pipeline=props.pipeline.metrics_pipeline),
                settings=props.failed_messages, comparison=above, missing=quiet)
        if props.throttles is not None:
            alarms["throttles"] = wiring.alarm(
                self, "Throttles", suffix=suffixes["throttles"], anchor="capture-processor-throttles",
                text="The capture processor is throttled (reserved or account concurrency): captures queue up.",
                metric=props.pipeline.function.metric_throttles(statistic="Sum"), settings=props.throttles,
                comparison=above, missing=quiet)
        if props.duration_near_timeout is not None:
            timeout_ms = FUNCTION_TIMEOUT.to_milliseconds()
            alarms["duration_near_timeout"] = wiring.alarm(
                self, "DurationNearTimeout", suffix=suffixes["duration_near_timeout"],
                anchor="capture-duration-near-timeout",
                text=f"A capture processor invocation ran longer than {props.duration_near_timeout.threshold:g} % of "
                     "its 15-minute timeout: larger objects will time out, be retried and dead-lettered.",
                metric=props.pipeline.function.metric_duration(statistic="Maximum"),
                settings=props.duration_near_timeout, comparison=above, missing=quiet,
                threshold=timeout_ms * props.duration_near_timeout.threshold / 100)
        if props.backlog_age is not None:
            alarms["backlog_age"] = wiring.alarm(
                self, "BacklogAge", suffix=suffixes["backlog_age"], anchor="capture-backlog-age",
                text=f"Capture events have waited more than {props.backlog_age.threshold:g} minutes in the queue: the "
                     "processor falls behind (throttled, failing or too little concurrency).",
                metric=props.pipeline.queue.metric_approximate_age_of_oldest_message(statistic="Maximum"),
                settings=props.backlog_age, comparison=above, missing=quiet, threshold=props.backlog_age.threshold * 60)
        for tier in self.expected_tiers:
            if props.quarantined_lines is not None:
                alarms[f"quarantined_lines_{tier}"] = wiring.alarm(
                    self, f"QuarantinedLines{tier.capitalize()}", suffix=suffixes[f"quarantined_lines_{tier}"],
                    anchor="capture-quarantined-lines",
                    text=f"The capture processor quarantined lines of the {tier} tier it could not parse (a format "
                         "change or truncated objects); they are under the quarantine prefix.",
                    metric=processor_metric("QuarantinedLines", pipeline=props.pipeline.metrics_pipeline, tier=tier),
                    settings=props.quarantined_lines,
                    comparison=above, missing=quiet)
            if props.no_curated_output is not None:
                hours = props.no_curated_output.period.to_seconds() * props.no_curated_output.evaluation_periods / 3600
                alarms[f"no_curated_output_{tier}"] = wiring.alarm(
                    self, f"NoCuratedOutput{tier.capitalize()}", suffix=suffixes[f"no_curated_output_{tier}"],
                    anchor="capture-no-curated-output",
                    text=f"No curated {tier} data was written for {hours:g} hours although capture is on for this "
                         "tier: capture stopped upstream, or every object fails or is skipped.",
                    metric=processor_metric("FilesWritten", pipeline=props.pipeline.metrics_pipeline, tier=tier),
                    settings=props.no_curated_output,
                    comparison=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
                    missing=cloudwatch.TreatMissingData.BREACHING)
        self.alarms = alarms
        self.alarm_names = alarm_names(alarms)
