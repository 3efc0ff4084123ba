"""How long the platform's CloudWatch log groups keep their events, and the Aspect that gives every
Lambda function a log group with a retention.

CloudWatch Logs keeps events forever unless a group has a retention policy, and a Lambda function
that has no log group of its own creates ``/aws/lambda/<name>`` on its first invocation, without one.
CDK creates several such functions inside its own constructs (the kubectl provider and its
custom-resource framework, the SDK-call provider, the S3 bucket-notifications handler, the default
security group's custom resource provider), so a construct cannot pass them a prop.
:class:`LambdaLogRetention` reaches them all: add it once to the app (or a stack).

Retentions are ``logs.RetentionDays`` in the constructs' props; a config file gives days
(:class:`LogRetentionOptions`, the app's ``logging:``), which one rule checks (code ``Logs.RetentionDays``:
:meth:`LogRetentionOptions.check`, :func:`check_log_retention`) and :func:`retention_from_days` converts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeGuard

import jsii
from aws_cdk import CfnResource, IAspect, RemovalPolicy
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import IConstruct

from hyperpod_inference_iac.foundation.cdk_types import cfn_child
from hyperpod_inference_iac.foundation.props import Props, prop, real_signature
from hyperpod_inference_iac.foundation.validation import PROPS, KeyPaths, Problems, is_unresolved

# The retention periods CloudWatch Logs accepts (PutRetentionPolicy, AWS::Logs::LogGroup RetentionInDays).
RETENTION_DAYS: Mapping[int, logs.RetentionDays] = {
    1: logs.RetentionDays.ONE_DAY, 3: logs.RetentionDays.THREE_DAYS, 5: logs.RetentionDays.FIVE_DAYS,
    7: logs.RetentionDays.ONE_WEEK, 14: logs.RetentionDays.TWO_WEEKS, 30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS, 90: logs.RetentionDays.THREE_MONTHS, 120: logs.RetentionDays.FOUR_MONTHS,
    150: logs.RetentionDays.FIVE_MONTHS, 180: logs.RetentionDays.SIX_MONTHS, 365: logs.RetentionDays.ONE_YEAR,
    400: logs.RetentionDays.THIRTEEN_MONTHS, 545: logs.RetentionDays.EIGHTEEN_MONTHS,
    731: logs.RetentionDays.TWO_YEARS, 1096: logs.RetentionDays.THREE_YEARS, 1827: logs.RetentionDays.FIVE_YEARS,
    2192: logs.RetentionDays.SIX_YEARS, 2557: logs.RetentionDays.SEVEN_YEARS, 2922: logs.RetentionDays.EIGHT_YEARS,
    3288: logs.RetentionDays.NINE_YEARS, 3653: logs.RetentionDays.TEN_YEARS,
}
_DAYS_OF = {retention: days for days, retention in RETENTION_DAYS.items()}
# Audit-like logs (who called the Kubernetes API, which flows were made) are kept a year, the rest 90 days.
DEFAULT_AUDIT_RETENTION = logs.RetentionDays.ONE_YEAR
DEFAULT_RETENTION = logs.RetentionDays.THREE_MONTHS
LAMBDA_FUNCTION_TYPE = "AWS::Lambda::Function"
LOG_GROUP_ID = "LogGroup"  # the id CDK itself gives a function's log group (@aws-cdk/aws-lambda:useCdkManagedLogGroup)


def check_retention_days(problems: Problems, path: str, days: Any) -> None:
    """The one rule of a retention in days: one CloudWatch Logs accepts (``Logs.RetentionDays``)."""
    if not is_unresolved(days) and days not in RETENTION_DAYS:
        problems.add("Logs.RetentionDays", path,
                     f"must be a CloudWatch Logs retention in days: {', '.join(map(str, RETENTION_DAYS))}", days)


def check_log_retention(problems: Problems, at: KeyPaths = PROPS, **days: int) -> None:
    """Each keyword (a property name) is a number of days CloudWatch Logs accepts as a retention."""
    for name, value in days.items():
        check_retention_days(problems, at.at(name), value)


def retention_from_days(days: int) -> logs.RetentionDays:
    """The ``RetentionDays`` of a number of days that :func:`check_log_retention` accepted."""
    return RETENTION_DAYS[days]


def days_of(retention: logs.RetentionDays) -> int:
    """The number of days of a finite ``RetentionDays`` (for SDK calls such as ``PutRetentionPolicy``)."""
    if retention not in _DAYS_OF:
        raise ValueError(f"{retention} is not a finite CloudWatch Logs retention")
    return _DAYS_OF[retention]


@dataclass(frozen=True, kw_only=True)
class LogRetentionOptions(Props):
    """How long a platform's CloudWatch log groups keep their events, in days (the app's ``logging:``): audit-like
    logs, and the rest. A composition gives each construct's retention property one of them
    (:func:`retention_from_days`): :class:`LambdaLogRetention` and the capture processor get ``retention_days``."""

    CONSTRUCT: ClassVar[str] = "Logs"

    audit_retention_days: int = prop(
        _DAYS_OF[DEFAULT_AUDIT_RETENTION],
        doc="Days CloudWatch Logs keeps audit-like logs: the EKS control plane (`/aws/eks/<cluster>/cluster`: API, "
            "audit, authenticator, controller manager, scheduler) and the VPC flow logs. One of CloudWatch Logs' "
            f"retentions: {', '.join(map(str, RETENTION_DAYS))}.")
    retention_days: int = prop(
        _DAYS_OF[DEFAULT_RETENTION],
        doc="Days CloudWatch Logs keeps the other logs: the HyperPod cluster's log group "
            "(`/aws/sagemaker/Clusters/<cluster>/<id>`), the capture processor's, the API key rotation functions', the "
            "capture sidecars' metrics agent's (`/aws/containerinsights/<cluster>/capture-sidecar`), and every other "
            "Lambda function's (CDK's helpers: kubectl provider, custom-resource providers, bucket notifications; "
            "`LambdaLogRetention`). The same values.")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        for field in self.fields():
            check_retention_days(problems, at.at(field.name), getattr(self, field.name))

    @property
    def retention(self) -> logs.RetentionDays:
        """``retention_days`` as a ``RetentionDays`` (once checked)."""
        return retention_from_days(self.retention_days)

    @property
    def audit_retention(self) -> logs.RetentionDays:
        """``audit_retention_days`` as a ``RetentionDays`` (once checked)."""
        return retention_from_days(self.audit_retention_days)


@dataclass(frozen=True, kw_only=True)
class LambdaLogRetentionProps(Props):
    """:class:`LambdaLogRetention`'s properties (an Aspect's: only Python code passes them; the app gives it
    ``logging.retentionDays``, :class:`LogRetentionOptions`)."""

    CONSTRUCT: ClassVar[str] = "LambdaLogRetention"

    retention: logs.RetentionDays = prop(DEFAULT_RETENTION, config=False,
                                         doc="Retention of every group it creates or sets. Must be finite.")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        if self.retention not in _DAYS_OF:
            problems.add("Logs.RetentionDays", at.at("retention"),
                         "must be a finite CloudWatch Logs retention (a RetentionDays of RETENTION_DAYS)",
                         self.retention)


@real_signature
@jsii.implements(IAspect)
class LambdaLogRetention:
    """Every ``AWS::Lambda::Function`` under the scope it is added to gets a log group with ``retention``.

    * A function that names its own log group (``LoggingConfig.LogGroup``) is left alone: its owner chose.
    * A function with CDK's managed group beside it (``/aws/lambda/<name>``, created when an app sets
      ``@aws-cdk/aws-lambda:useCdkManagedLogGroup``) keeps that group, with ``retention`` set on it.
    * Any other function, whether built by ``lambda.Function`` or as a raw ``CfnResource`` by CDK's
      custom-resource providers, gets a new retained log group as its child and logs into it
      (``LoggingConfig.LogGroup``). The group exists before the function, so no invocation can create
      the default group first. The function's role must be allowed to write to it: CDK's helpers carry
      ``AWSLambdaBasicExecutionRole``, which allows every group.

    So the result does not depend on an app's feature flags. Events already in an old default group of
    a deployed function stay there (with that group's retention, forever unless set).

    Properties: :class:`LambdaLogRetentionProps`; ``props`` keeps them. (``retention`` may be given by position.)
    """

    PROPS: ClassVar[type[Props]] = LambdaLogRetentionProps

    def __init__(self, retention: logs.RetentionDays = LambdaLogRetentionProps.retention) -> None:
        """Create the construct. Its properties (:class:`LambdaLogRetentionProps`, kept as ``self.props``):

        :param retention: Retention of every group it creates or sets. Must be finite. Default:
            ``RetentionDays.THREE_MONTHS``.
        """
        self.props = props = LambdaLogRetentionProps(retention=retention)
        props.raise_if_invalid("LambdaLogRetention")
        self.retention = props.retention
        self._days = days_of(props.retention)

    def visit(self, node: IConstruct) -> None:
        if _is_lambda_function(node):
            self._give_retention(node)

    def _give_retention(self, function: CfnResource) -> None:
        if _names_its_log_group(function) or function.node.try_find_child(LOG_GROUP_ID) is not None:
            return  # its owner chose a group, or this aspect already ran here
        managed = _cdk_managed_log_group(function)
        if managed is not None:
            managed.retention_in_days = self._days
            return
        group = logs.LogGroup(function, LOG_GROUP_ID, retention=self.retention, removal_policy=RemovalPolicy.RETAIN)
        function.add_property_override("LoggingConfig.LogGroup", group.log_group_name)


def _is_lambda_function(node: IConstruct) -> TypeGuard[CfnResource]:
    """A ``lambda.CfnFunction``, or a plain ``CfnResource`` of that type (CDK's ``CustomResourceProvider``).
    Checked by Python class first: asking every L1 for its type would cost one jsii call each."""
    if isinstance(node, lambda_.CfnFunction):
        return True
    return type(node) is CfnResource and node.cfn_resource_type == LAMBDA_FUNCTION_TYPE


def _names_its_log_group(function: CfnResource) -> bool:
    logging_config = getattr(function, "logging_config", None)  # CfnFunction only; raw CfnResources have none
    return logging_config is not None and getattr(logging_config, "log_group", None) is not None


def _cdk_managed_log_group(function: CfnResource) -> logs.CfnLogGroup | None:
    """The ``/aws/lambda/<name>`` group ``lambda.Function`` creates beside its resource under the flag."""
    owner = function.node.scope
    sibling = owner.node.try_find_child(LOG_GROUP_ID) if owner is not None else None
    if isinstance(sibling, logs.LogGroup):
        return cfn_child(sibling, logs.CfnLogGroup)
    return None
