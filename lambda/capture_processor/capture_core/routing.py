"""Which parser an object needs, decided from its key alone.

The operator's `{hash}` prefix is not reproducible (its algorithm is not public), so the tier is
found from the path segment right after it: `sme`, `pod` or `alb`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum


class Tier(StrEnum):
    SME = "sme"
    POD = "pod"
    ALB = "alb"


@dataclass(frozen=True)
class Route:
    tier: Tier | None  # None: not ours; skip_reason says why
    deployment_hash: str | None = None
    key_time: datetime | None = None  # fallback partition time for records without a usable time
    skip_reason: str | None = None


_CAPTURE_HOUR = re.compile(r"(?:^|/)(\d{4})/(\d{2})/(\d{2})/(\d{2})/")
_ALB_END_TIME = re.compile(r"_(\d{8}T\d{4}Z)_")
_ALB_SUFFIXES = (".log", ".log.gz")


def route_object(key: str, *, skip_prefixes: tuple[str, ...]) -> Route:
    if key.startswith(skip_prefixes):
        return Route(None, skip_reason="key is under the output or quarantine prefix (our own output)")
    directories = key.split("/")[:-1]
    for index, segment in enumerate(directories):
        if segment in (Tier.SME, Tier.POD, Tier.ALB):
            deployment_hash = directories[index - 1] if index > 0 else None
            return _route_for_tier(Tier(segment), key, deployment_hash)
    if "elasticloadbalancing" in directories:
        return _route_for_tier(Tier.ALB, key, None)
    return Route(None, skip_reason="no sme/pod/alb path segment and not an ALB access log key")


def _route_for_tier(tier: Tier, key: str, deployment_hash: str | None) -> Route:
    if tier is Tier.ALB:
        if not key.endswith(_ALB_SUFFIXES):
            # ALB writes e.g. ELBAccessLogTestFile when logging is switched on.
            return Route(None, skip_reason="ALB object that is not an access log file (.log or .log.gz)")
        return Route(tier, deployment_hash, _alb_file_time(key))
    return Route(tier, deployment_hash, _capture_hour(key))


def _capture_hour(key: str) -> datetime | None:
    match = _CAPTURE_HOUR.search(key)
    if match is None:
        return None
    try:
        year, month, day, hour = (int(part) for part in match.groups())
        return datetime(year, month, day, hour, tzinfo=UTC)
    except ValueError:
        return None


def _alb_file_time(key: str) -> datetime | None:
    match = _ALB_END_TIME.search(key.rsplit("/", 1)[-1])
    if match is None:
        return None
    try:
        end = datetime.strptime(match.group(1), "%Y%m%dT%H%MZ").replace(tzinfo=UTC)
    except ValueError:
        return None
    # The file covers the 5 minutes before its end time: a 00:00 file belongs to the previous hour.
    return end - timedelta(microseconds=1)
