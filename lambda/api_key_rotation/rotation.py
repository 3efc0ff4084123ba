"""Secrets Manager rotation function of a portable model server's API key (``rotation.handler``).

Secrets Manager calls it four times per rotation, with the same ``ClientRequestToken`` (the new version's id),
after it has labelled an empty version with that id ``AWSPENDING``:

1. ``createSecret``: refuse when the rotation would drop the previous key before its period is over (it stopped
   being current less than ``ROTATION_DAYS`` days ago, less a day of Secrets Manager's schedule window: two
   rotations back to back); otherwise generate the new key (``GetRandomPassword``: 48 letters and digits by
   default) and store it as that ``AWSPENDING`` version. Nothing changes for clients: they read ``AWSCURRENT``.
2. ``setSecret``: the server needs no call. External Secrets syncs ``AWSCURRENT``, ``AWSPENDING`` and
   ``AWSPREVIOUS`` into the namespace's Secret (``<server>-api-key``, key ``api-keys``), whose file the capture
   sidecar re-reads, so from the next sync on the sidecar accepts the new key too.
3. ``testSecret``: check the new key (length, alphabet, not a key already in use), then wait until every sidecar
   says it accepts it (``ACCEPTANCE``: the sidecars' ``capture_sidecar_api_key_accepted`` gauge, by the key's
   fingerprint, as the metrics agent ships it to CloudWatch; :func:`_wait_for_acceptance`), so that no client can
   get it before every sidecar takes it. When that does not happen within the invocation (the sync is stalled, a
   sidecar refuses the file), the step fails: the current key stays current, nobody is locked out, and the failed
   rotation alarms. Without ``ACCEPTANCE`` (no metrics agent), it waits until the pending version has existed for
   ``PROPAGATION_SECONDS`` (External Secrets' refresh interval, the kubelet's update of the mounted Secret and the
   sidecar's re-read, with margin), which a stalled sync defeats.
4. ``finishSecret``: move ``AWSCURRENT`` to the new version (Secrets Manager moves ``AWSPREVIOUS`` to the old one)
   and take ``AWSPENDING`` off. Clients that read the key now get the new one; the old one stays accepted as
   ``AWSPREVIOUS`` until the next rotation, or until ``AWSPREVIOUS`` is taken off it (docs/secrets.md).

Every so often (``ApiKeySync``'s ``check_schedule``, an EventBridge rule with ``{"Check": "keys", "SecretId": ...}``)
the function is invoked to look, not rotate (:func:`check_keys`): it writes the key's age and how many of its
versions not every sidecar accepts as metrics (embedded metric format, namespace ``HyperPodInference/ApiKeys``,
dimension ``Secret``), which the key's alarms watch (a rotation overdue, a sync that does not deliver).

Every step is idempotent (Secrets Manager retries a failed rotation from the start with the same token). Keys are
never logged. The function's role may touch this one secret only (``ApiKeySync``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import string
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
from botocore.exceptions import ClientError

CURRENT, PENDING, PREVIOUS = "AWSCURRENT", "AWSPENDING", "AWSPREVIOUS"
DEFAULT_KEY_LENGTH = 48
KEY_ALPHABET = frozenset(string.ascii_letters + string.digits)
# What the step keeps of the invocation's time after waiting, for its own last calls.
RESERVE_SECONDS = 20.0
# Secrets Manager may rotate this much before the period is over (its schedule window): not a back-to-back rotation.
SCHEDULE_WINDOW = timedelta(days=1)

log = logging.getLogger("api_key_rotation")
log.setLevel(logging.INFO)


#: The capture sidecar's fingerprint of a key (``capture_sidecar.auth.key_label``; a test holds the two equal).
_FINGERPRINT_CONTEXT = b"capture-sidecar api key fingerprint v1\0"
FINGERPRINT_HEX = 12
ACCEPTED_METRIC = "capture_sidecar_api_key_accepted"
KEYS_METRIC = "capture_sidecar_api_keys"


class RotationError(Exception):
    """The rotation cannot go on; Secrets Manager marks it failed and retries it later."""


def key_fingerprint(key: str) -> str:
    """The ``fingerprint`` label under which a sidecar that accepts ``key`` shows it."""
    return hashlib.sha256(_FINGERPRINT_CONTEXT + key.encode()).hexdigest()[:FINGERPRINT_HEX]


@dataclass(frozen=True)
class Acceptance:
    """Where the sidecars of one server say which keys they accept (the function's ``ACCEPTANCE``, JSON): the
    CloudWatch ``namespace`` and ``dimensions`` of their ``capture_sidecar_api_keys`` gauge (every sidecar, every
    scrape); ``capture_sidecar_api_key_accepted`` has the same and ``fingerprint``. Every sidecar accepts the key
    when, over ``window_seconds`` ending ``settle_seconds`` ago (CloudWatch has had the scrapes of that window), the
    two have as many samples: each scrape of each sidecar listed the key. Looked at every ``poll_seconds``."""

    namespace: str
    dimensions: dict[str, str]
    window_seconds: int = 180
    settle_seconds: int = 60
    poll_seconds: float = 30.0

    @classmethod
    def from_json(cls, text: str) -> Acceptance:
        return cls(**json.loads(text))


CHECK_NAMESPACE = "HyperPodInference/ApiKeys"


def handler(event: dict[str, Any], context: Any) -> None:
    """Lambda entry point: one rotation step (event ``Step``, ``SecretId``, ``ClientRequestToken``), or a check
    (event ``Check``, ``SecretId``)."""
    acceptance = Acceptance.from_json(os.environ["ACCEPTANCE"]) if os.environ.get("ACCEPTANCE") else None
    if event.get("Check") == "keys":
        print(json.dumps(check_keys(boto3.client("secretsmanager"), event["SecretId"], acceptance=acceptance,
                                    cloudwatch=boto3.client("cloudwatch") if acceptance is not None else None)))
        return
    rotate(
        boto3.client("secretsmanager"),
        rotation_days=int(os.environ.get("ROTATION_DAYS") or 0),
        step=event["Step"],
        secret_id=event["SecretId"],
        token=event["ClientRequestToken"],
        key_length=int(os.environ.get("KEY_LENGTH", DEFAULT_KEY_LENGTH)),
        propagation_seconds=float(os.environ["PROPAGATION_SECONDS"]),
        remaining_seconds=lambda: context.get_remaining_time_in_millis() / 1000,
        acceptance=acceptance,
        cloudwatch=boto3.client("cloudwatch") if acceptance is not None and event["Step"] == "testSecret" else None,
    )


def rotate(client: Any, *, step: str, secret_id: str, token: str, key_length: int = DEFAULT_KEY_LENGTH,
           propagation_seconds: float, remaining_seconds: Callable[[], float],
           sleep: Callable[[float], None] = time.sleep, acceptance: Acceptance | None = None,
           cloudwatch: Any = None, now: Callable[[], datetime] = lambda: datetime.now(UTC),
           rotation_days: int = 0) -> None:
    """One step of the rotation of ``secret_id`` to the version ``token`` (``rotation_days`` 0: no guard against
    back-to-back rotations)."""
    metadata = client.describe_secret(SecretId=secret_id)
    if not metadata.get("RotationEnabled"):
        raise RotationError(f"rotation is not enabled for {secret_id}")
    stages = metadata.get("VersionIdsToStages", {})
    if token not in stages:
        raise RotationError(f"version {token} of {secret_id} has no stage for rotation")
    if CURRENT in stages[token]:
        log.info("%s: version %s is already %s, nothing to do for %s", secret_id, token, CURRENT, step)
        return
    if PENDING not in stages[token]:
        raise RotationError(f"version {token} of {secret_id} is not {PENDING}")
    log.info("%s: %s of version %s", secret_id, step, token)
    if step == "createSecret":
        if rotation_days:
            _keep_previous(client, secret_id, stages, timedelta(days=rotation_days) - SCHEDULE_WINDOW, now())
        _create(client, secret_id, token, key_length)
    elif step == "setSecret":
        # External Secrets brings the pending key to the sidecars (see the module docstring): nothing to call.
        pass
    elif step == "testSecret":
        new_key = _test(client, secret_id, token, key_length)
        if new_key is not None and acceptance is not None:
            _wait_for_acceptance(cloudwatch, acceptance, key_fingerprint(new_key), secret_id, remaining_seconds,
                                 sleep, now)
        elif new_key is not None:
            _wait_for_propagation(client, secret_id, token, propagation_seconds, remaining_seconds, sleep)
    elif step == "finishSecret":
        _finish(client, secret_id, token, stages)
    else:
        raise RotationError(f"unknown step {step!r}")


def _create(client: Any, secret_id: str, token: str, key_length: int) -> None:
    current = client.get_secret_value(SecretId=secret_id, VersionStage=CURRENT)["SecretString"]
    try:
        client.get_secret_value(SecretId=secret_id, VersionId=token, VersionStage=PENDING)
        log.info("%s: version %s holds its key already", secret_id, token)
        return
    except ClientError as error:
        if error.response["Error"]["Code"] != "ResourceNotFoundException":
            raise
    key = current
    while key == current:  # a repeat is as likely as guessing the key, but costs nothing to rule out
        key = client.get_random_password(PasswordLength=key_length, ExcludePunctuation=True, IncludeSpace=False,
                                         RequireEachIncludedType=True)["RandomPassword"]
    client.put_secret_value(SecretId=secret_id, ClientRequestToken=token, SecretString=key, VersionStages=[PENDING])
    log.info("%s: new key stored as version %s (%s)", secret_id, token, PENDING)


def _keep_previous(client: Any, secret_id: str, stages: dict[str, list[str]], period: timedelta,
                   at: datetime) -> None:
    """Refuse a rotation that would drop the ``AWSPREVIOUS`` key before it has been previous for ``period``: it
    stopped being current when the current version was made (that rotation began a few minutes earlier; it is
    counted from then). A key revoked on purpose has no ``AWSPREVIOUS`` label any more, so rotating after a
    revocation goes through."""
    if not any(PREVIOUS in labels for labels in stages.values()):
        return
    current = next((version for version, labels in stages.items() if CURRENT in labels), None)
    made = _created(client, secret_id, current) if current is not None else None
    if made is not None and at - made < period:
        raise RotationError(
            f"{secret_id}: the {PREVIOUS} key stopped being current {(at - made).total_seconds() / 3600:.1f} h ago; "
            f"rotating now would refuse it {(period - (at - made)).total_seconds() / 86400:.1f} days before clients "
            f"were promised. To rotate now on purpose, revoke the {PREVIOUS} key first, take {PENDING} off the "
            "version of this rotation and rotate again (docs/secrets.md, Rotate now)")


def _test(client: Any, secret_id: str, token: str, key_length: int) -> str | None:
    """The new key is one a sidecar accepts (at least 16 printable characters, no spaces: it checks the same when
    it reads the file) and the chart can pass on: the length asked for, letters and digits; and not the previous
    key again. The key when it is new (the sidecars must get it before it becomes current), else None.

    A pending version that holds the current key is Secrets Manager testing the configuration (``RotateSecret``
    with ``RotateImmediately`` false, as CloudFormation sets up the schedule here: it labels a copy of the secret
    ``AWSPENDING``, runs this step alone and removes it again): the function could read both, nothing to wait for.
    """
    pending: str = client.get_secret_value(SecretId=secret_id, VersionId=token, VersionStage=PENDING)["SecretString"]
    if len(pending) != key_length or not set(pending) <= KEY_ALPHABET:
        raise RotationError(f"version {token} of {secret_id} is not {key_length} letters and digits")
    if pending == client.get_secret_value(SecretId=secret_id, VersionStage=CURRENT)["SecretString"]:
        log.info("%s: version %s holds the current key: a test of the rotation's configuration", secret_id, token)
        return None
    try:
        previous = client.get_secret_value(SecretId=secret_id, VersionStage=PREVIOUS)["SecretString"]
    except ClientError as error:
        if error.response["Error"]["Code"] != "ResourceNotFoundException":
            raise
        return pending
    if previous == pending:
        raise RotationError(f"version {token} of {secret_id} repeats the {PREVIOUS} key")
    return pending


def _wait_for_propagation(client: Any, secret_id: str, token: str, propagation_seconds: float,
                          remaining_seconds: Callable[[], float], sleep: Callable[[float], None]) -> None:
    """Return once the pending version is ``propagation_seconds`` old. If the invocation cannot last that long,
    fail: Secrets Manager retries the rotation with the same token, and the version keeps its age."""
    created = _created(client, secret_id, token)
    age = (datetime.now(UTC) - created).total_seconds() if created is not None else 0.0
    wait = max(0.0, propagation_seconds - age)
    if wait > remaining_seconds() - RESERVE_SECONDS:
        raise RotationError(f"version {token} of {secret_id} needs {wait:.0f} s more to reach every sidecar, "
                            f"more than this invocation has left")
    if wait > 0:
        log.info("%s: waiting %.0f s for the new key to reach every sidecar", secret_id, wait)
        sleep(wait)


def _wait_for_acceptance(cloudwatch: Any, acceptance: Acceptance, fingerprint: str, secret_id: str,
                         remaining_seconds: Callable[[], float], sleep: Callable[[float], None],
                         now: Callable[[], datetime]) -> None:
    """Return once every sidecar accepts the key of this fingerprint (:class:`Acceptance`); fail when this
    invocation runs out first, or when no sidecar reports at all (nothing says a new pod would get the key)."""
    while True:
        scrapes, accepted = _samples(cloudwatch, acceptance, fingerprint, now())
        if scrapes > 0 and accepted == scrapes:
            log.info("%s: every sidecar accepts the pending key (%d of %d scrapes in %d s)", secret_id, accepted,
                     scrapes, acceptance.window_seconds)
            return
        if remaining_seconds() - RESERVE_SECONDS < acceptance.poll_seconds:
            raise RotationError(
                f"{secret_id}: the sidecars do not all accept the pending key ({accepted} of {scrapes} scrapes in "
                f"the last {acceptance.window_seconds} s show it); the current key stays current. Is the keys "
                "file synced (the ExternalSecret Ready, docs/alarms.md)?")
        log.info("%s: %d of %d scrapes show the pending key; looking again in %.0f s", secret_id, accepted,
                 scrapes, acceptance.poll_seconds)
        sleep(acceptance.poll_seconds)


def _samples(cloudwatch: Any, acceptance: Acceptance, fingerprint: str, at: datetime) -> tuple[int, int]:
    """How many scrapes of the sidecars CloudWatch has in the window, and how many of them list the key."""
    end = at - timedelta(seconds=acceptance.settle_seconds)
    start = end - timedelta(seconds=acceptance.window_seconds)

    def query(id: str, metric: str, dimensions: dict[str, str]) -> dict[str, Any]:
        return {"Id": id, "ReturnData": True, "MetricStat": {
            "Stat": "SampleCount", "Period": acceptance.window_seconds,
            "Metric": {"Namespace": acceptance.namespace, "MetricName": metric,
                       "Dimensions": [{"Name": name, "Value": value} for name, value in dimensions.items()]}}}

    queries = [query("scrapes", KEYS_METRIC, acceptance.dimensions),
               query("accepted", ACCEPTED_METRIC, {**acceptance.dimensions, "fingerprint": fingerprint})]
    counts = {"scrapes": 0.0, "accepted": 0.0}
    arguments: dict[str, Any] = {"MetricDataQueries": queries, "StartTime": start, "EndTime": end}
    while True:
        page = cloudwatch.get_metric_data(**arguments)
        for result in page.get("MetricDataResults", []):
            counts[result["Id"]] += sum(result.get("Values", []))
        if not page.get("NextToken"):
            return int(counts["scrapes"]), int(counts["accepted"])
        arguments["NextToken"] = page["NextToken"]


def check_keys(client: Any, secret_id: str, *, acceptance: Acceptance | None, cloudwatch: Any,
               now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> dict[str, Any]:
    """One look at the key, as an embedded-metric-format event: ``KeyAgeHours`` (since the last rotation, or since
    the secret was made), and with ``acceptance`` ``KeysNotAccepted`` (how many of the current, pending and
    previous versions not every sidecar accepts: 0 when the sync delivers; a pending key not yet delivered counts
    while its rotation waits for it)."""
    at = now()
    metadata = client.describe_secret(SecretId=secret_id)
    since = metadata.get("LastRotatedDate") or metadata.get("CreatedDate") or at
    since = since if since.tzinfo else since.replace(tzinfo=UTC)
    values: dict[str, float] = {"KeyAgeHours": round((at - since).total_seconds() / 3600, 2)}
    if acceptance is not None:
        missing = 0
        for stage in (CURRENT, PENDING, PREVIOUS):
            try:
                key = client.get_secret_value(SecretId=secret_id, VersionStage=stage)["SecretString"]
            except ClientError as error:
                if error.response["Error"]["Code"] != "ResourceNotFoundException":
                    raise
                continue
            scrapes, accepted = _samples(cloudwatch, acceptance, key_fingerprint(key), at)
            missing += scrapes == 0 or accepted < scrapes
        values["KeysNotAccepted"] = missing
    name = metadata.get("Name", secret_id)
    log.info("%s: %s", name, ", ".join(f"{metric} {value:g}" for metric, value in values.items()))
    return {"_aws": {"Timestamp": int(at.timestamp() * 1000), "CloudWatchMetrics": [{
        "Namespace": CHECK_NAMESPACE, "Dimensions": [["Secret"]],
        "Metrics": [{"Name": metric, "Unit": "None"} for metric in values]}]}, "Secret": name, **values}


def _created(client: Any, secret_id: str, token: str) -> datetime | None:
    """When the version ``token`` was created (Secrets Manager: when the rotation began), if listed."""
    arguments: dict[str, Any] = {"SecretId": secret_id}
    while True:
        page = client.list_secret_version_ids(**arguments)
        for version in page.get("Versions", []):
            if version["VersionId"] == token and isinstance(version.get("CreatedDate"), datetime):
                created: datetime = version["CreatedDate"]
                return created if created.tzinfo else created.replace(tzinfo=UTC)
        if not page.get("NextToken"):
            return None
        arguments["NextToken"] = page["NextToken"]


def _finish(client: Any, secret_id: str, token: str, stages: dict[str, list[str]]) -> None:
    current = next(version for version, labels in stages.items() if CURRENT in labels)
    client.update_secret_version_stage(SecretId=secret_id, VersionStage=CURRENT, MoveToVersionId=token,
                                       RemoveFromVersionId=current)
    # Off the new version: a pending key that is also current would be listed twice, and the next rotation would
    # take a pending label on another version for one still in progress.
    client.update_secret_version_stage(SecretId=secret_id, VersionStage=PENDING, RemoveFromVersionId=token)
    log.info("%s: version %s is %s, version %s is %s", secret_id, token, CURRENT, current, PREVIOUS)
