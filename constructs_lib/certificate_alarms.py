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
from collections.abc import Mapping

from aws_cdk import Duration, Stack
from aws_cdk import aws_certificatemanager as acm
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
from hyperpod_inference_iac.patterns import DNS1123_LABEL
from hyperpod_inference_iac.risks import RiskWarnings
from hyperpod_inference_iac.validation import PROPS, KeyPaths, Problems, is_unresolved

DAYS_TO_EXPIRY = AlarmSettings(threshold=45, period=Duration.days(1))
# ACM starts managed renewal of the certificates it issued this many days before they expire.
MANAGED_RENEWAL_DAYS = 60
_ACM_ARN_REGION = re.compile(r"^arn:aws[a-z-]*:acm:(?P<region>[a-z0-9-]+):\d{12}:certificate/")


def check_certificate_alarms(problems: Problems, at: KeyPaths = PROPS, *, region: str,
                             certificate_arns: Mapping[str, str] | None, alarm_name_prefix: str,
                             runbook_url: str | None = None,
                             days_to_expiry: AlarmSettings | None = DAYS_TO_EXPIRY) -> None:
    """Every rule of :class:`CertificateAlarms`'s properties (``certificate_arns``: label -> ARN, tokens skipped;
    None skips the certificate rules, for a loader that checks them under another key)."""
    code = "CertificateAlarms"
    check_alarm_naming(problems, at, code, alarm_name_prefix=alarm_name_prefix, runbook_url=runbook_url)
    if certificate_arns is not None and not certificate_arns:
        problems.add(f"{code}.NoCertificates", at.at("certificates"), "give at least one certificate to watch")
    for label, arn in (certificate_arns or {}).items():
        if not (isinstance(label, str) and DNS1123_LABEL.match(label) and len(label) <= 40):
            problems.add(f"{code}.BadLabel", at.at("certificates"),
                         "each label must be 1-40 lowercase letters, digits and '-' (it names the alarm)", label)
        if is_unresolved(arn) or is_unresolved(region):
            continue
        match = _ACM_ARN_REGION.match(arn)
        if match is None:
            problems.add(f"{code}.BadCertificateArn", at.at("certificates", label), "must be an ACM certificate ARN",
                         arn)
        elif match["region"] != region:
            problems.add(f"{code}.OtherRegion", at.at("certificates", label),
                         f"ACM publishes DaysToExpiry in the certificate's region ({match['region']}); watch it from a "
                         f"stack in that region, not {region}", arn)
    check_alarm_settings(problems, at, code, "days_to_expiry", days_to_expiry, threshold=(1, 365),
                         unit="days left; fires below it")


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


class CertificateAlarms(Construct):
    """One ``DaysToExpiry`` alarm per certificate, notifying ``topic``.

    A certificate whose metric stops (it expired, was deleted, or the ARN names nothing) sends the alarm to
    INSUFFICIENT_DATA, which notifies too.

    Attributes: ``alarms`` (label -> ``cloudwatch.Alarm``), ``alarm_names`` (label -> fixed name),
    ``certificates``.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        certificates: Mapping[str, acm.ICertificate],
        topic: AlarmTopic | sns.ITopic | None = None,
        alarm_name_prefix: str,
        runbook_url: str | None = None,
        notify_on_ok: bool = True,
        days_to_expiry: AlarmSettings = DAYS_TO_EXPIRY,
    ) -> None:
        """
        :param certificates: label -> certificate (created here or imported by ARN); the alarm is named
            ``<prefix>-certificate-<label>-days-to-expiry``. The certificates must be in the stack's region.
        :param topic: where alarms notify. @default none: the alarms change state without actions
        :param alarm_name_prefix: the alarms' name prefix.
        :param runbook_url: the page with the runbooks. @default the library's docs/alarms.md is named
        :param notify_on_ok: also notify when an alarm recovers (a renewal succeeded). @default True
        :param days_to_expiry: fires when the fewest days left in a period are below ``threshold``.
            @default < 45 days, daily
        """
        super().__init__(scope, id)
        stack = Stack.of(self)
        problems = Problems()
        check_certificate_alarms(problems, region=stack.region,
                                 certificate_arns={label: cert.certificate_arn for label, cert in certificates.items()},
                                 alarm_name_prefix=alarm_name_prefix, runbook_url=runbook_url,
                                 days_to_expiry=days_to_expiry)
        problems.raise_if_any(f"CertificateAlarms {self.node.path}")
        warnings = RiskWarnings()
        warn_certificate_alarms(warnings, days_to_expiry=days_to_expiry)
        warnings.annotate(self)
        self.certificates = dict(certificates)
        wiring = AlarmWiring(alarm_name_prefix, topic_actions(topic), notify_on_ok, runbook_url)
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        for label, certificate in certificates.items():
            self.alarms[label] = wiring.alarm(
                self, f"DaysToExpiry-{label}", suffix=f"certificate-{label}-days-to-expiry",
                anchor="certificate-days-to-expiry",
                text=f"The {label} certificate expires in fewer than {days_to_expiry.threshold:g} days: managed "
                     "renewal failed (missing DNS validation record, certificate not in use, CAA) or it is "
                     "imported and must be re-imported.",
                metric=certificate.metric_days_to_expiry(statistic="Minimum"), settings=days_to_expiry,
                comparison=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
                missing=cloudwatch.TreatMissingData.MISSING, insufficient_data=True)
        self.alarm_names = alarm_names(self.alarms)
