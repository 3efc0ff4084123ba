"""AlarmTopic: the SNS topic the platform's alarms notify, encrypted with a key of its own, published to by
CloudWatch alarms of this account only, and its subscribers.

CloudWatch can publish to an SSE-KMS topic only if the key's policy lets ``cloudwatch.amazonaws.com`` use the
key (``kms:GenerateDataKey*``, ``kms:Decrypt``; the AWS-managed ``alias/aws/sns`` key does not, and its policy
cannot be changed): hence a customer-managed key of its own, whose policy names exactly that use.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from aws_cdk import Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from hyperpod_inference_iac.foundation.props import Props, listed, prop, real_signature
from hyperpod_inference_iac.foundation.risks import RiskWarnings
from hyperpod_inference_iac.foundation.validation import PROPS, KeyPaths, Problems, is_unresolved
from hyperpod_inference_iac.security.data_perimeter import KEY_ADMIN_ACTIONS

TOPIC_NAME = re.compile(r"^[A-Za-z0-9_-]{1,256}$")
# Deliberately simple: one '@', no spaces, a dot in the domain. SNS sends a confirmation mail either way.
EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
HTTPS_URL = re.compile(r"^https://[^\s/]+(/\S*)?$")
LAMBDA_FUNCTION_ARN = re.compile(
    r"^arn:aws[a-z-]*:lambda:[a-z0-9-]+:\d{12}:function:[A-Za-z0-9_-]{1,64}(:[A-Za-z0-9$_-]+)?$")
SNS_TOPIC_ARN = re.compile(r"^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_-]{1,256}$")


@dataclass(frozen=True, kw_only=True)
class AlarmTopicOptions(Props):
    """An alarm topic's subscribers: what a config file sets (``alarms.subscribers`` in the app's)."""

    CONSTRUCT: ClassVar[str] = "AlarmTopic"

    emails: Sequence[str] = prop((), doc="Email subscribers (each confirms the subscription from the mail SNS sends).")
    https_endpoints: Sequence[str] = prop(
        (), doc="HTTPS subscribers (`https://` URLs, e.g. a paging service's SNS integration); each must confirm the "
                "subscription (most paging services do so on their own).")
    lambda_function_arns: Sequence[str] = prop(
        (), doc="Lambda functions invoked with every notification (same account: the invoke permission is added; "
                "another account must allow `sns.amazonaws.com` itself).")
    forward_to_topic_arns: Sequence[str] = prop(
        (), key="topicArns",
        doc="Existing topics that receive every alarm too, as additional alarm actions (a central operations topic, "
            "the topic an AWS Chatbot channel already lists). Their own policies and keys must admit CloudWatch.")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        code = "AlarmTopic"
        kinds = (
            ("emails", self.emails, EMAIL, f"{code}.BadEmail", "must be an email address such as oncall@example.com"),
            ("https_endpoints", self.https_endpoints, HTTPS_URL, f"{code}.BadHttpsEndpoint",
             "must be an https:// URL (SNS delivers alarms as JSON; plain http would carry them unencrypted)"),
            ("lambda_function_arns", self.lambda_function_arns, LAMBDA_FUNCTION_ARN, f"{code}.BadLambdaArn",
             "must be a Lambda function ARN (arn:aws:lambda:<region>:<account>:function:<name>)"),
            ("forward_to_topic_arns", self.forward_to_topic_arns, SNS_TOPIC_ARN, f"{code}.BadTopicArn",
             "must be an SNS topic ARN (arn:aws:sns:<region>:<account>:<name>)"),
        )
        for name, values, pattern, error, message in kinds:
            if isinstance(values, str):
                problems.add(error, at.at(name), "must be a list", values)
                continue
            seen: set[str] = set()
            for index, value in enumerate(values):
                if is_unresolved(value):
                    continue
                if not isinstance(value, str) or not pattern.match(value):
                    problems.add(error, at.at(name, index), message, value)
                elif value in seen:
                    problems.add(f"{code}.DuplicateSubscriber", at.at(name, index), "lists the same subscriber twice",
                                 value)
                else:
                    seen.add(value)


@dataclass(frozen=True, kw_only=True)
class AlarmTopicProps(AlarmTopicOptions):
    """:class:`AlarmTopic`'s properties: its subscribers, and what only Python code passes."""

    topic_name: str | None = prop(None, config=False, default_doc="generated",
                                  doc="A fixed name (1-256 letters, digits, '-', '_'), so the ARN is known before "
                                      "deploy (an AWS Chatbot channel or a paging service can be pointed at it).")
    display_name: str | None = prop(None, config=False, default_doc="none",
                                    doc="The sender name of email notifications.")
    encryption_key: kms.IKey | None = prop(
        None, config=False,
        default_doc="a new key with rotation, whose policy lets the account administer it and CloudWatch (this "
                    "account) use it",
        doc="The topic's key. A `kms.Key` of your app gets the CloudWatch statement added to its policy; an imported "
            "key must already allow `cloudwatch.amazonaws.com` `kms:GenerateDataKey*` and `kms:Decrypt` (warned: "
            "`AlarmTopic:importedKey`).")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        topic_name = self.topic_name
        if topic_name is not None and not is_unresolved(topic_name) and not TOPIC_NAME.match(topic_name):
            problems.add("AlarmTopic.BadTopicName", at.at("topic_name"),
                         "must be 1-256 letters, digits, '-' or '_' (an SNS standard topic name)", topic_name)
        super().check(problems, at)


def check_alarm_topic(problems: Problems, at: KeyPaths = PROPS, **options: Any) -> None:
    """:meth:`AlarmTopicProps.check` of these properties (kept for callers of 0.2.0)."""
    AlarmTopicProps(**options).check(problems, at)


@real_signature
class AlarmTopic(Construct):
    """The topic the alarms notify, its own KMS key, a topic policy that admits CloudWatch alarms of this
    account and region only, and its subscribers.

    Properties: :class:`AlarmTopicProps` (each with its type, default and meaning); ``props`` keeps them.

    Attributes: ``topic``, ``key``, ``topic_arn``, ``alarm_actions`` (notify this topic and every topic in
    ``forward_to_topic_arns``; the alarm constructs use them), ``forwarded_topics``.
    """

    PROPS: ClassVar[type[Props]] = AlarmTopicProps

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        topic_name: str | None = AlarmTopicProps.topic_name,
        display_name: str | None = AlarmTopicProps.display_name,
        emails: Sequence[str] = AlarmTopicProps.emails,
        https_endpoints: Sequence[str] = AlarmTopicProps.https_endpoints,
        lambda_function_arns: Sequence[str] = AlarmTopicProps.lambda_function_arns,
        forward_to_topic_arns: Sequence[str] = AlarmTopicProps.forward_to_topic_arns,
        encryption_key: kms.IKey | None = AlarmTopicProps.encryption_key,
    ) -> None:
        """Create the construct. Its properties (:class:`AlarmTopicProps`, kept as ``self.props``):

        :param emails: Email subscribers (each confirms the subscription from the mail SNS sends). Default:
            ``()``.
        :param https_endpoints: HTTPS subscribers (`https://` URLs, e.g. a paging service's SNS integration);
            each must confirm the subscription (most paging services do so on their own). Default: ``()``.
        :param lambda_function_arns: Lambda functions invoked with every notification (same account: the invoke
            permission is added; another account must allow `sns.amazonaws.com` itself). Default: ``()``.
        :param forward_to_topic_arns: Existing topics that receive every alarm too, as additional alarm actions
            (a central operations topic, the topic an AWS Chatbot channel already lists). Their own policies and
            keys must admit CloudWatch. Default: ``()``.
        :param topic_name: A fixed name (1-256 letters, digits, '-', '_'), so the ARN is known before deploy (an
            AWS Chatbot channel or a paging service can be pointed at it). Default: ``None`` (generated).
        :param display_name: The sender name of email notifications. Default: ``None`` (none).
        :param encryption_key: The topic's key. A `kms.Key` of your app gets the CloudWatch statement added to
            its policy; an imported key must already allow `cloudwatch.amazonaws.com` `kms:GenerateDataKey*` and
            `kms:Decrypt` (warned: `AlarmTopic:importedKey`). Default: ``None`` (a new key with rotation, whose
            policy lets the account administer it and CloudWatch (this account) use it).
        """
        super().__init__(scope, id)
        self.props = props = AlarmTopicProps(
            topic_name=topic_name, display_name=display_name, emails=listed(emails),
            https_endpoints=listed(https_endpoints), lambda_function_arns=listed(lambda_function_arns),
            forward_to_topic_arns=listed(forward_to_topic_arns), encryption_key=encryption_key)
        props.raise_if_invalid(f"AlarmTopic {self.node.path}")
        emails, https_endpoints = props.emails, props.https_endpoints
        lambda_function_arns, forward_to_topic_arns = props.lambda_function_arns, props.forward_to_topic_arns
        encryption_key = props.encryption_key
        stack = Stack.of(self)
        if encryption_key is None:
            encryption_key = kms.Key(
                self, "Key", enable_key_rotation=True, description="Encrypts the platform's alarm notifications",
                policy=iam.PolicyDocument(statements=[
                    iam.PolicyStatement(
                        sid="KeyAdministrationWithoutUse", principals=[iam.AccountRootPrincipal()],
                        actions=list(KEY_ADMIN_ACTIONS), resources=["*"]),
                    _cloudwatch_may_use_key(stack),
                ]),
            )
        elif isinstance(encryption_key, kms.Key):
            encryption_key.add_to_resource_policy(_cloudwatch_may_use_key(stack))
        warnings = RiskWarnings()
        warn_alarm_topic(warnings, emails=emails, https_endpoints=https_endpoints,
                         lambda_function_arns=lambda_function_arns, forward_to_topic_arns=forward_to_topic_arns,
                         imported_key=encryption_key is not None and not isinstance(encryption_key, kms.Key))
        warnings.annotate(self)
        self.key = encryption_key
        self.topic = sns.Topic(self, "Topic", topic_name=topic_name, display_name=display_name,
                               master_key=encryption_key, enforce_ssl=True)
        self.topic_arn = self.topic.topic_arn
        self.topic.add_to_resource_policy(iam.PolicyStatement(
            sid="CloudWatchAlarmsOfThisAccount",
            principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
            actions=["sns:Publish"],
            resources=[self.topic.topic_arn],
            conditions={
                "StringEquals": {"aws:SourceAccount": stack.account},
                "ArnLike": {"aws:SourceArn":
                            f"arn:{stack.partition}:cloudwatch:{stack.region}:{stack.account}:alarm:*"},
            },
        ))
        for email in emails:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))
        for url in https_endpoints:
            self.topic.add_subscription(subscriptions.UrlSubscription(url, protocol=sns.SubscriptionProtocol.HTTPS))
        for index, arn in enumerate(lambda_function_arns):
            function = lambda_.Function.from_function_arn(self, f"Subscriber{index}", arn)
            self.topic.add_subscription(subscriptions.LambdaSubscription(function))
        self.forwarded_topics = [sns.Topic.from_topic_arn(self, f"Forward{index}", arn)
                                 for index, arn in enumerate(forward_to_topic_arns)]
        self.alarm_actions: list[cloudwatch.IAlarmAction] = [
            cloudwatch_actions.SnsAction(topic) for topic in (self.topic, *self.forwarded_topics)]


def warn_alarm_topic(warnings: RiskWarnings, at: KeyPaths = PROPS, *, emails: Sequence[str] = (),
                     https_endpoints: Sequence[str] = (), lambda_function_arns: Sequence[str] = (),
                     forward_to_topic_arns: Sequence[str] = (), imported_key: bool = False) -> None:
    """The risky but legal choices of :class:`AlarmTopic`'s properties (a config loader calls it with its key paths;
    the construct turns them into CDK warnings). ``imported_key``: ``encryption_key`` is not a ``kms.Key`` of this
    app."""
    if imported_key:
        warnings.add("AlarmTopic:importedKey", at.at("encryption_key"),
                     "the topic's key is imported: its policy must allow cloudwatch.amazonaws.com "
                     "kms:GenerateDataKey* and kms:Decrypt, or every alarm notification is dropped (the alarm history "
                     "shows the KMS error)")
    if not (emails or https_endpoints or lambda_function_arns or forward_to_topic_arns):
        warnings.add("AlarmTopic:noSubscribers", at.at(),
                     "nobody is subscribed to the alarm topic: alarms change state without telling anyone (subscribe "
                     "emails, an HTTPS endpoint or a Lambda function, forward to a topic, or add the topic to an AWS "
                     "Chatbot channel)")


def _cloudwatch_may_use_key(stack: Stack) -> iam.PolicyStatement:
    # CloudWatch publishes to the SSE-KMS topic with the key; only on behalf of this account's alarms.
    return iam.PolicyStatement(
        sid="CloudWatchAlarmsPublishEncrypted",
        principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
        actions=["kms:Decrypt", "kms:GenerateDataKey*"],
        resources=["*"],
        conditions={"StringEquals": {"aws:SourceAccount": stack.account}},
    )
