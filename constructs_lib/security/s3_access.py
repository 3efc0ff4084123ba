"""The S3 and KMS permissions of this library, written once.

Every grant on objects of an SSE-KMS bucket needs the same KMS rule: the key may be used only by
S3 in this region (``kms:ViaService``) and only for that bucket's objects
(``kms:EncryptionContext:aws:s3:arn``: the bucket ARN for bucket keys, the object ARN otherwise).
:func:`kms_through_s3` is that rule; the grant functions below and every key policy of the library
use it, so it cannot exist in two shapes.

Grants take bucket ARNs (strings) as well as bucket objects' ARNs, so a role in one stack can be
granted on a bucket of another by its deterministic name, without a cross-stack export.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from aws_cdk import Stack, Token
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from hyperpod_inference_iac.foundation.validation import is_unresolved
from hyperpod_inference_iac.security.data_perimeter import (
    ObjectAccess,
    bucket_guard,
    key_guard,
    principal_arn,
    unnamed_principal,
)
from hyperpod_inference_iac.security.data_perimeter import kms_through_s3 as kms_through_s3  # a name of this module

# Identity policies: the resource (bucket, key) must belong to the caller's own account.
SAME_ACCOUNT = {"StringEquals": {"aws:ResourceAccount": "${aws:PrincipalAccount}"}}
OBJECT_WRITE_ACTIONS = ("s3:PutObject", "s3:AbortMultipartUpload")
OBJECT_READ_ACTIONS = ("s3:GetObject",)
# What writing an object with SSE-KMS needs (Decrypt: multipart uploads re-read their data keys).
KMS_WRITE_ACTIONS = ("kms:GenerateDataKey", "kms:Decrypt")
KMS_READ_ACTIONS = ("kms:Decrypt",)
# A key prefix the library writes, reads, notifies or admits under: S3's safe characters and '/', not starting with
# '/', ending in '/'. No '*': a grant's resource is the prefix and '*', and a policy would read a '*' of the prefix
# as a wildcard too.
KEY_PREFIX = re.compile(r"^[A-Za-z0-9!_.'()= -][A-Za-z0-9!_.'()/= -]*/$")
KEY_PREFIX_RULE = ("must be an S3 key prefix such as 'data-capture/': S3's safe characters (letters, digits, "
                   "! _ . ' ( ) = - and space) and '/', ending in '/', not starting with '/', no '*'")
EMPTY_KEY_PREFIX = ("must not be empty: that is the whole bucket, outputs included; leave the key out for the "
                    "default 'data-capture/', or name a prefix")


def key_prefix_fault(prefix: Any) -> str | None:
    """What is wrong with ``prefix`` as a key prefix of the library's buckets (None: nothing, or a token): the one
    rule of every prefix :class:`~hyperpod_inference_iac.CaptureStorage` and
    :class:`~hyperpod_inference_iac.CapturePipeline` take, and so of the app's ``capture.prefix``."""
    if is_unresolved(prefix):
        return None
    if prefix == "":
        return EMPTY_KEY_PREFIX
    if not isinstance(prefix, str) or not KEY_PREFIX.match(prefix):
        return KEY_PREFIX_RULE
    return None


def objects_arn(bucket_arn: str, prefix: str = "") -> str:
    """``arn:...:bucket/prefix*``; ``prefix`` is a key prefix such as ``data-capture/`` (or empty)."""
    return f"{bucket_arn}/{prefix}*"


def grant_key_through_s3(grantee: iam.IGrantable, key: kms.IKey, actions: Sequence[str], bucket_arn: str, *,
                         prefixes: Sequence[str] = ()) -> None:
    """Use ``key`` for ``bucket_arn``'s objects through S3 only (under ``prefixes`` only, for a bucket without an
    S3 Bucket Key: :func:`kms_through_s3`); a guarded key (:mod:`~hyperpod_inference_iac.security.data_perimeter`) also
    lists the grantee in its key policy."""
    iam.Grant.add_to_principal(
        grantee=grantee, actions=list(actions), resource_arns=[key.key_arn],
        conditions=kms_through_s3(key.env.region, bucket_arn, prefixes=prefixes),
    )
    guard = key_guard(key)
    if guard is not None:
        arn = principal_arn(grantee, key)
        if arn is None:
            unnamed_principal(grantee, key, "the key")
        else:
            guard.admit(arn, actions, bucket_arn, prefixes=prefixes)


def admit_objects(grantee: iam.IGrantable, bucket_arn: str, access: ObjectAccess, prefix: str = "") -> None:
    """List the grantee on a guarded bucket's allowlist for ``access`` under ``prefix`` (nothing for a bucket
    that is not guarded). The grant functions here call it; call it for IAM statements written by hand."""
    scope = grantee if isinstance(grantee, Construct) else grantee.grant_principal
    if not isinstance(scope, Construct):
        return
    guard = bucket_guard(scope, bucket_arn)
    if guard is None:
        return
    arn = principal_arn(grantee, guard.bucket)
    if arn is None:
        unnamed_principal(grantee, guard.bucket, f"the bucket {bucket_arn}")
    else:
        guard.admit(arn, access, prefix)


def grant_object_writes(grantee: iam.IGrantable, *, bucket_arn: str, prefix: str = "", key: kms.IKey | None = None,
                        actions: Sequence[str] = OBJECT_WRITE_ACTIONS,
                        conditions: Mapping[str, Any] | None = None) -> iam.Grant:
    """Write objects under ``prefix`` (and use ``key`` for them, through S3 only)."""
    if key is not None:
        grant_key_through_s3(grantee, key, KMS_WRITE_ACTIONS, bucket_arn)
    grant = iam.Grant.add_to_principal(
        grantee=grantee, actions=list(actions), resource_arns=[objects_arn(bucket_arn, prefix)],
        conditions=dict(conditions or SAME_ACCOUNT),
    )
    _acknowledge_prefix_wildcard(grantee, objects_arn(bucket_arn, prefix), whole_bucket=not prefix)
    admit_objects(grantee, bucket_arn, ObjectAccess.WRITE, prefix)
    return grant


def grant_object_deletes(grantee: iam.IGrantable, bucket_arn: str, prefix: str,
                         actions: Sequence[str] = ("s3:DeleteObjectVersion",)) -> iam.Grant:
    """Delete objects under ``prefix`` (by default: versions by id, what an erasure does in a versioned bucket)."""
    grant = iam.Grant.add_to_principal(grantee=grantee, actions=list(actions),
                                       resource_arns=[objects_arn(bucket_arn, prefix)], conditions=SAME_ACCOUNT)
    _acknowledge_prefix_wildcard(grantee, objects_arn(bucket_arn, prefix), whole_bucket=not prefix)
    admit_objects(grantee, bucket_arn, ObjectAccess.DELETE, prefix)
    return grant


def grant_object_reads(grantee: iam.IGrantable, *, bucket_arn: str, prefix: str = "", key: kms.IKey | None = None,
                       actions: Sequence[str] = OBJECT_READ_ACTIONS, list_bucket: bool = True,
                       decrypt_under_prefix_only: bool = False) -> iam.Grant:
    """Read objects under ``prefix``; list the bucket only for keys under ``prefix``.

    ``decrypt_under_prefix_only``: the key too may decrypt only the objects under ``prefix`` (for a bucket without
    an S3 Bucket Key, whose encryption context is the object's ARN; with a bucket key nothing could be read)."""
    if key is not None:
        grant_key_through_s3(grantee, key, KMS_READ_ACTIONS, bucket_arn,
                             prefixes=(prefix,) if decrypt_under_prefix_only and prefix else ())
    if list_bucket:
        iam.Grant.add_to_principal(
            grantee=grantee, actions=["s3:ListBucket"], resource_arns=[bucket_arn],
            conditions={"StringLike": {"s3:prefix": [prefix.rstrip("/"), f"{prefix}*"]}} if prefix else None,
        )
    grant = iam.Grant.add_to_principal(grantee=grantee, actions=list(actions),
                                       resource_arns=[objects_arn(bucket_arn, prefix)])
    _acknowledge_prefix_wildcard(grantee, objects_arn(bucket_arn, prefix), whole_bucket=not prefix)
    admit_objects(grantee, bucket_arn, ObjectAccess.READ, prefix)
    return grant


def _acknowledge_prefix_wildcard(grantee: iam.IGrantable, arn: str, *, whole_bucket: bool) -> None:
    """The object wildcard a grant adds is a reviewed finding (``s3-object-wildcard-under-fixed-prefix``, or
    ``s3-object-wildcard-dedicated-bucket`` for a bucket granted whole: the TLS bucket, a weights bucket); it is
    acknowledged on the grantee (when it is a construct of this app), so a role that receives one of these
    grants passes cdk-nag without repeating the review."""
    from hyperpod_inference_iac.foundation.nag import acknowledge, resource_evidence

    reason = "s3-object-wildcard-dedicated-bucket" if whole_bucket else "s3-object-wildcard-under-fixed-prefix"
    principal = grantee.grant_principal
    for candidate in (grantee, principal):
        if isinstance(candidate, Construct):
            acknowledge(candidate, reason, *resource_evidence(candidate, arn))
            return


def literal_bucket_name(bucket: s3.IBucket) -> str | None:
    """The name a bucket was given (or imported by), as a plain string; None when CloudFormation names it."""
    cfn_bucket = bucket.node.default_child if isinstance(bucket, s3.Bucket) else None
    name = cfn_bucket.bucket_name if isinstance(cfn_bucket, s3.CfnBucket) else bucket.bucket_name
    return name if isinstance(name, str) and not Token.is_unresolved(name) else None


def bucket_name(bucket: s3.IBucket) -> str:
    """The bucket's name, literal when known (no cross-stack export), else its token."""
    return literal_bucket_name(bucket) or bucket.bucket_name


def bucket_arn(bucket: s3.IBucket) -> str:
    """The bucket's ARN, as a literal string when the bucket has a literal name (so a grant in another
    stack reads the real bucket and needs no cross-stack export), else the bucket's own token."""
    name = literal_bucket_name(bucket)
    return f"arn:{Stack.of(bucket).partition}:s3:::{name}" if name else bucket.bucket_arn
