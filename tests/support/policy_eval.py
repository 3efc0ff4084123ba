"""A small evaluator of the S3 bucket and KMS key policy statements this library writes, with their conditions.

Moto (the rehearsal) evaluates identity policies but not conditions; these tests evaluate the conditions the
data perimeter depends on (``aws:PrincipalArn``, ``aws:PrincipalIsAWSService``, the SSE headers, ``Null``,
``kms:ViaService``, the encryption context; for the log bucket ``aws:SourceArn``, ``aws:SourceAccount`` and
``s3:TlsVersion``; ``ForAllValues`` over Route 53's multivalued keys) for the statement shapes it renders. It is
not a general IAM engine: an operator or condition it does not know fails the test instead of guessing.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Request:
    action: str  # e.g. s3:GetObject
    resource: str  # e.g. arn:aws:s3:::bucket/key
    principal_arn: str | None = None  # None: an AWS service acting as itself
    service: str | None = None  # the service principal, e.g. logdelivery.elasticloadbalancing.amazonaws.com
    # request condition keys (headers, kms:...); a multivalued key (route53:ChangeResourceRecordSets...) is a tuple
    context: Mapping[str, str | tuple[str, ...]] = field(default_factory=dict)

    def keys(self) -> dict[str, str | tuple[str, ...]]:
        keys = dict(self.context)
        keys["aws:PrincipalIsAWSService"] = "true" if self.principal_arn is None else "false"
        if self.principal_arn is not None:
            keys["aws:PrincipalArn"] = self.principal_arn
        return keys


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _matches_principal(statement: Mapping[str, Any], request: Request) -> bool:
    principal = statement["Principal"]
    if principal == "*" or principal == {"AWS": "*"}:
        return True
    if "Service" in principal:
        return request.service in _list(principal["Service"])
    if request.principal_arn is None:
        return False
    account = request.principal_arn.split(":")[4]
    return any(arn == request.principal_arn or arn.endswith(f":{account}:root") for arn in _list(principal["AWS"]))


def _condition(operator: str, key: str, expected: Any, keys: Mapping[str, str | tuple[str, ...]]) -> bool:
    if operator.startswith("ForAllValues:"):
        # Every value of the (multivalued) key must match; no value at all matches too (AWS's semantics).
        base = operator.removeprefix("ForAllValues:")
        return all(_condition(base, key, expected, {key: value}) for value in _list(list(keys.get(key, ()))))
    values = [str(v).lower() if isinstance(v, bool) else str(v) for v in _list(expected)]
    if_exists = operator.endswith("IfExists")
    base = operator.removesuffix("IfExists")
    if base == "Null":
        return (key not in keys) == (values[0] == "true")
    if key not in keys:
        # A missing key: positive operators fail, negated ones ("Not") succeed; IfExists makes both succeed.
        return if_exists or "Not" in base
    actual = keys[key]
    if base in ("StringEquals", "Bool", "ArnEquals"):
        return actual in values
    if base in ("StringNotEquals", "ArnNotEquals"):
        return actual not in values
    if base in ("StringLike", "ArnLike"):
        return any(fnmatch.fnmatchcase(actual, v) for v in values)
    if base in ("StringNotLike", "ArnNotLike"):
        return not any(fnmatch.fnmatchcase(actual, v) for v in values)
    if base == "NumericLessThan":
        return any(float(actual) < float(v) for v in values)
    raise AssertionError(f"condition operator {operator} is not known to this evaluator")


def _applies(statement: Mapping[str, Any], request: Request) -> bool:
    if not _matches_principal(statement, request):
        return False
    if not any(fnmatch.fnmatchcase(request.action, a) for a in _list(statement["Action"])):
        return False
    if "Resource" in statement:
        if not any(fnmatch.fnmatchcase(request.resource, r) for r in _list(statement["Resource"])):
            return False
    elif any(fnmatch.fnmatchcase(request.resource, r) for r in _list(statement["NotResource"])):
        return False
    keys = request.keys()
    return all(_condition(operator, key, expected, keys)
               for operator, block in statement.get("Condition", {}).items() for key, expected in block.items())


def _names_the_caller(statement: Mapping[str, Any], request: Request) -> bool:
    """An allow that names the caller (or a service) grants on its own; one that names the caller's *account*
    (``arn:...:root``) only lets the caller's own IAM policy decide (AWS's "enable IAM policies" semantics)."""
    principal = statement["Principal"]
    if principal == "*" or principal == {"AWS": "*"} or "Service" in principal:
        return True
    return request.principal_arn in _list(principal.get("AWS", []))


def decision(statements: Sequence[Mapping[str, Any]], request: Request) -> str:
    """``deny`` (an explicit deny applies), ``allow`` (an allow names the caller, no deny), ``iam`` (an allow
    names the caller's account: its IAM policy must allow too) or ``neutral``."""
    applying = [s for s in statements if _applies(s, request)]
    if any(s["Effect"] == "Deny" for s in applying):
        return "deny"
    if any(_names_the_caller(s, request) for s in applying):
        return "allow"
    return "iam" if applying else "neutral"
