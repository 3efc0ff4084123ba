"""CertificateAlarms: an alarm per certificate when ACM's ``DaysToExpiry`` falls below a threshold.

ACM publishes ``DaysToExpiry`` (namespace ``AWS/CertificateManager``, dimension ``CertificateArn``) once a day
for every certificate, in the certificate's region, and stops after the certificate expired. For a certificate
ACM issued with DNS validation, managed renewal starts 60 days before expiry and needs the validation CNAME
records to still resolve and the certificate to be in use; if renewal fails, the days keep falling and this
alarm fires while there is still time (default: below 45 days). The recovery runbook is in docs/alarms.md
(section ``certificate-days-to-expiry``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from aws_cdk import Duration, Stack
from aws_cdk import aws_certificatemanager as acm
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_sns as sns
from constructs import Construct

from hyperpod_inference_iac.foundation.patterns import (
    DNS1123_LABEL,
)
from hyperpod_inference_iac.foundation.props import (
    Props,
    mapped,
    prop,
    real_signature,
    types_checked,
)
from hyperpod_inference_iac.foundation.risks import (
    RiskWarnings,
)
from hyperpod_inference_iac.foundation.validation import (
    PROPS,
    KeyPaths,
    Problems,
    is_unresolved,
)
from hyperpod_inference_iac.observability.alarm_topic import (
    AlarmTopic,
)
from hyperpod_inference_iac.observability.alarms import (
    AlarmSettings,
    AlarmWiring,
    AlarmWiringProps,
    alarm_names,
    alarm_prop,
    check_alarm_blocks,
    topic_actions,
)

DAYS_TO_EXPIRY = AlarmSettings(threshold=45, period=Duration.days(1))
# ACM starts managed renewal of the certificates it issued this many days before they expire.
MANAGED_RENEWAL_DAYS = 60
_ACM_ARN_REGION = re.compile(r"^arn:aws[a-z-]*:acm:(?P<region>[a-z0-9-]+):\d{12}:certificate/")


@dataclass(frozen=True, kw_only=True)
class CertificateAlarmsOptions(Props):
    """The certificate alarm's settings: what a config file sets (``alarms.certificate`` in the app's)."""

    CONSTRUCT: ClassVar[str] = "CertificateAlarms"

    days_to_expiry: AlarmSettings | None = alarm_prop(
        DAYS_TO_EXPIRY, threshold=(1, 365), unit="days left; fires below it",
        doc="The fewest days a certificate has left in a period (ACM's `DaysToExpiry`, Minimum) below the threshold "
            "(`LessThanThreshold`; missing data: missing, which notifies as INSUFFICIENT_DATA).")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        check_alarm_blocks(self, problems, at, "CertificateAlarms")


@dataclass(frozen=True, kw_only=True)
class CertificateAlarmsProps(CertificateAlarmsOptions, AlarmWiringProps):
    """:class:`CertificateAlarms`' properties: the alarm's settings, the shared ones of every alarm construct, and
    the certificates (only Python code passes them)."""

    certificates: Mapping[str, acm.ICertificate] = prop(
        config=False, doc="Label -> certificate (created here or imported by ARN); its alarm is named "
                          "`<prefix>-certificate-<label>-days-to-expiry`. The certificates must be in the stack's "
                          "region.")

    def check(self, problems: Problems, at: KeyPaths = PROPS, *, region: str | None = None) -> None:
        """Every rule (``region``: the stack's, which the certificates must be in; None: not checked). A certificate
        may be given by its ARN (``check_certificate_alarms``); ``certificates`` None skips their rules."""
        code = "CertificateAlarms"
        AlarmWiringProps.check(self, problems, at)
        certificates = self.certificates
        if certificates is not None and not certificates:
            problems.add(f"{code}.NoCertificates", at.at("certificates"), "give at least one certificate to watch")
        for label, certificate in (certificates or {}).items():
            if not (isinstance(label, str) and DNS1123_LABEL.match(label) and len(label) <= 40):
                problems.add(f"{code}.BadLabel", at.at("certificates"),
                             "each label must be 1-40 lowercase letters, digits and '-' (it names the alarm)", label)
            arn = certificate if isinstance(certificate, str) else certificate.certificate_arn
            if is_unresolved(arn) or region is None or is_unresolved(region):
                continue
            match = _ACM_ARN_REGION.match(arn)
            if match is None:
                problems.add(f"{code}.BadCertificateArn", at.at("certificates", label),
                             "must be an ACM certificate ARN", arn)
            elif match["region"] != region:
                problems.add(f"{code}.OtherRegion", at.at("certificates", label),
                             f"ACM publishes DaysToExpiry in the certificate's region ({match['region']}); watch it "
                             f"from a stack in that region, not {region}", arn)
        CertificateAlarmsOptions.check(self, problems, at)


def check_certificate_alarms(problems: Problems, at: KeyPaths = PROPS, *, region: str,
                             certificate_arns: Mapping[str, str] | None, **options: Any) -> None:
    """:meth:`CertificateAlarmsProps.check` of these properties, the certificates given by ARN (label -> ARN, tokens
    skipped; None skips the certificate rules, for a loader that checks them under another key). Kept for callers of
    0.2.0."""
    props = CertificateAlarmsProps(certificates=certificate_arns, **options)  # type: ignore[arg-type]
    with types_checked(props):  # (ARNs stand in for the certificates: the rules read only their ARNs)
        props.check(problems, at, region=region)


def warn_certificate_alarms(warnings: RiskWarnings, at: KeyPaths = PROPS, *,
                            days_to_expiry: AlarmSettings | None = DAYS_TO_EXPIRY) -> None:
    """The risky but legal choices of :class:`CertificateAlarms`'s properties (a config loader calls it with its key
    paths; the construct turns them into CDK warnings)."""
    if days_to_expiry is not None and not is_unresolved(days_to_expiry.threshold) \
            and days_to_expiry.threshold > MANAGED_RENEWAL_DAYS:
        warnings.add("CertificateAlarms:beforeManagedRenewal", at.at("days_to_expiry", "threshold"),
                     f"{days_to_expiry.threshold:g} days: ACM starts renewing the certificates it issued "
                     f"{MANAGED_RENEWAL_DAYS} days before expiry, so healthy certificates alarm every cycle until "
                     "their renewal completes")


def certificate_alarm_suffixes(labels: Sequence[str], options: CertificateAlarmsOptions) -> dict[str, str]:
    """The alarms :class:`CertificateAlarms` creates, label -> name suffix ``certificate-<label>-days-to-expiry``
    (none when ``days_to_expiry`` is None). The construct names its alarms with it; a loader plans them with it."""
    if options.days_to_expiry is None:
        return {}
    return {label: f"certificate-{label}-days-to-expiry" for label in labels}


@real_signature
class CertificateAlarms(Construct):
    """One ``DaysToExpiry`` alarm per certificate, notifying ``topic``.

    A certificate whose metric stops (it expired, was deleted, or the ARN names nothing) sends the alarm to
    INSUFFICIENT_DATA, which notifies too.

    Properties: :class:`CertificateAlarmsProps` (each with its type, default and meaning); ``props`` keeps them.

    Attributes: ``alarms`` (label -> ``cloudwatch.Alarm``; none when ``days_to_expiry`` is None), ``alarm_names``
    (label -> fixed name), ``certificates``.
    """

    PROPS: ClassVar[type[Props]] = CertificateAlarmsProps

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        certificates: Mapping[str, acm.ICertificate],
        topic: AlarmTopic | sns.ITopic | None = CertificateAlarmsProps.topic,
        alarm_name_prefix: str,
        runbook_url: str | None = CertificateAlarmsProps.runbook_url,
        notify_on_ok: bool = CertificateAlarmsProps.notify_on_ok,
        days_to_expiry: AlarmSettings | None = CertificateAlarmsProps.days_to_expiry,
    ) -> None:
        """Create the construct. Its properties (:class:`CertificateAlarmsProps`, kept as ``self.props``):

        :param runbook_url: The runbook page (`https://`, no fragment): each alarm's description links
            `<url>#<section>`. Default: ``None`` (descriptions name the library's docs/alarms.md).
        :param notify_on_ok: Also notify when an alarm recovers. Default: ``True``.
        :param topic: Where the alarms notify; an [AlarmTopic](alarm-topic.md) also forwards to its other
            topics. Default: ``None`` (the alarms change state without actions).
        :param alarm_name_prefix: Every alarm's name starts with `<prefix>-` (1-128 letters, digits, '.', '_',
            '-'). Default: required.
        :param days_to_expiry: The fewest days a certificate has left in a period (ACM's `DaysToExpiry`,
            Minimum) below the threshold (`LessThanThreshold`; missing data: missing, which notifies as
            INSUFFICIENT_DATA). Threshold: days left; fires below it (1 to 365). Default: threshold 45, 1 of 1 x
            1 d.
        :param certificates: Label -> certificate (created here or imported by ARN); its alarm is named
            `<prefix>-certificate-<label>-days-to-expiry`. The certificates must be in the stack's region.
            Default: required.
        """
        super().__init__(scope, id)
        stack = Stack.of(self)
        self.props = props = CertificateAlarmsProps(
            certificates=mapped(certificates), topic=topic, alarm_name_prefix=alarm_name_prefix,  # type: ignore[arg-type]
            runbook_url=runbook_url, notify_on_ok=notify_on_ok, days_to_expiry=days_to_expiry)
        problems = Problems()
        props.check(problems, region=stack.region)
        problems.raise_if_any(f"CertificateAlarms {self.node.path}")
        warnings = RiskWarnings()
        warn_certificate_alarms(warnings, days_to_expiry=props.days_to_expiry)
        warnings.annotate(self)
        self.certificates = dict(props.certificates)
        wiring = AlarmWiring(props.alarm_name_prefix, topic_actions(props.topic), props.notify_on_ok,
                             props.runbook_url)
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        settings = props.days_to_expiry
        suffixes = certificate_alarm_suffixes(list(self.certificates), props)
        for label, certificate in self.certificates.items():
            if settings is None:
                break
            self.alarms[label] = wiring.alarm(
                self, f"DaysToExpiry-{label}", suffix=suffixes[label],
                anchor="certificate-days-to-expiry",
                text=f"The {label} certificate expires in fewer than {settings.threshold:g} days: managed "
                     "renewal failed (missing DNS validation record, certificate not in use, CAA) or it is "
                     "imported and must be re-imported.",
                metric=certificate.metric_days_to_expiry(statistic="Minimum"), settings=settings,
                comparison=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
                missing=cloudwatch.TreatMissingData.MISSING, insufficient_data=True)
        self.alarm_names = alarm_names(self.alarms)
