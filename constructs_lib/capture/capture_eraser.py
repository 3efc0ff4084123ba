"""CaptureEraser: a role of its own for erasure requests (``python -m hyperpod_inference_iac.capture_table_ops
delete|verify|expire|verify-trail``), holding exactly what the command calls (``CaptureStorage.grant_erase``,
``CaptureTables.grant_erase``) and assumable only by the principals named. Without it, an erasure needs the
break-glass role (docs/capture-processor.md#erasure-everywhere-and-verify).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from aws_cdk import Duration, Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from hyperpod_inference_iac.capture.capture_storage import CaptureStorage
from hyperpod_inference_iac.capture.capture_tables import CaptureTables
from hyperpod_inference_iac.foundation.patterns import IAM_ROLE_ARN
from hyperpod_inference_iac.foundation.props import Props, listed, prop, real_signature
from hyperpod_inference_iac.foundation.validation import PROPS, KeyPaths, Problems, is_unresolved


@dataclass(frozen=True, kw_only=True)
class CaptureEraserOptions(Props):
    """:class:`CaptureEraser`'s properties a config file can set (``capture.eraserPrincipals`` in the app's)."""

    CONSTRUCT: ClassVar[str] = "CaptureEraser"

    eraser_principals: Sequence[str] = prop(
        (), doc="IAM role ARNs of this account that may assume the erasure role (privacy officers, a ticketing "
                "automation); each session lasts at most an hour. Empty: no erasure role (the app creates none; an "
                "erasure then needs the break-glass role). Each must be a role of the stack's account "
                "(`CaptureEraser.PrincipalOtherAccount`).")
    role_name: str | None = prop(None, config=False, default_doc="generated",
                                 doc="Name of the erasure role (the app's: `<project>-capture-eraser`).")

    def check(self, problems: Problems, at: KeyPaths = PROPS, *, account: str | None = None) -> None:
        for index, arn in enumerate(self.eraser_principals):
            if is_unresolved(arn):
                continue
            if not isinstance(arn, str) or not IAM_ROLE_ARN.match(arn):
                problems.add("CaptureEraser.BadPrincipalArn", at.at("eraser_principals", index),
                             "must be an IAM role ARN such as arn:aws:iam::111122223333:role/privacy-officers", arn)
            elif account is not None and not is_unresolved(account) and arn.split(":")[4] != account:
                problems.add("CaptureEraser.PrincipalOtherAccount", at.at("eraser_principals", index),
                             f"must be a role of this account ({account}), not of {arn.split(':')[4]}: the erasure "
                             "role deletes captures and writes the audit trail, so whoever governs the principal's "
                             "account would decide who erases; create the requesting role in this account", arn)


@dataclass(frozen=True, kw_only=True)
class CaptureEraserProps(CaptureEraserOptions):
    """:class:`CaptureEraser`'s properties: its options, and the constructs whose grants it holds."""

    storage: CaptureStorage = prop(config=False, doc="The capture storage whose buckets the erasure reaches.")
    tables: CaptureTables | None = prop(
        None, config=False, default_doc="none: the tables' part is not granted",
        doc="The capture tables (the catalog, `curated-iceberg/`, Lake Formation permissions).")


@real_signature
class CaptureEraser(Construct):
    """The erasure role (``role``): trusted by ``eraser_principals`` only (``sts:AssumeRole``, an hour at most),
    granted ``storage.grant_erase`` and ``tables.grant_erase``: every version under the capture prefixes, the
    register and audit records, the tables, the trail's append; no delete on the trail, no governance bypass, no
    Object Lock change.

    Properties: :class:`CaptureEraserProps`; ``props`` keeps them."""

    PROPS: ClassVar[type[Props]] = CaptureEraserProps

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        storage: CaptureStorage,
        eraser_principals: Sequence[str] = CaptureEraserProps.eraser_principals,
        tables: CaptureTables | None = CaptureEraserProps.tables,
        role_name: str | None = CaptureEraserProps.role_name,
    ) -> None:
        """Create the construct. Its properties (:class:`CaptureEraserProps`, kept as ``self.props``):

        :param eraser_principals: IAM role ARNs of this account that may assume the erasure role (privacy
            officers, a ticketing automation); each session lasts at most an hour. Empty: no erasure role (the
            app creates none; an erasure then needs the break-glass role). Each must be a role of the stack's
            account (`CaptureEraser.PrincipalOtherAccount`). Default: ``()``.
        :param role_name: Name of the erasure role (the app's: `<project>-capture-eraser`). Default: ``None``
            (generated).
        :param storage: The capture storage whose buckets the erasure reaches. Default: required.
        :param tables: The capture tables (the catalog, `curated-iceberg/`, Lake Formation permissions).
            Default: ``None`` (none: the tables' part is not granted).
        """
        super().__init__(scope, id)
        self.props = props = CaptureEraserProps(storage=storage, eraser_principals=listed(eraser_principals),
                                                tables=tables, role_name=role_name)
        problems = Problems()
        if not props.eraser_principals:
            problems.add("CaptureEraser.NoPrincipals", PROPS.at("eraser_principals"),
                         "must name at least one role that may assume the erasure role", [])
        props.check(problems, account=Stack.of(self).account)
        problems.raise_if_any(f"CaptureEraser {self.node.path}")
        self.role = iam.Role(
            self, "Role", role_name=props.role_name, max_session_duration=Duration.hours(1),
            assumed_by=iam.CompositePrincipal(*(iam.ArnPrincipal(arn) for arn in props.eraser_principals)),
            description="Erases captured rows on request (capture_table_ops delete, verify, expire, verify-trail)")
        storage.grant_erase(self.role)
        if tables is not None:
            tables.grant_erase(self.role)
