"""Alarm names known before anything is built, and the two ways they go wrong: two alarms of one app with one name
(CloudFormation refuses the second at deploy, or a dashboard shows one alarm's state under the other's meaning), and a
name longer than CloudWatch's 255 characters.

Every alarm construct of the library names its alarms ``<alarm_name_prefix>-<suffix>``; each family's suffixes come from
one function of its module, which the construct itself uses and a loader can call with the same inputs
(:func:`~hyperpod_inference_iac.observability.sidecar_metrics.sidecar_alarm_suffixes` and the others listed in
docs/alarms.md#alarm-names). :func:`check_alarm_names` compares the names of everything planned, each with the key path
it comes from, and reports one problem per colliding name naming both paths, and one per name that is too long.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from hyperpod_inference_iac.foundation.validation import Problems

# PutMetricAlarm's AlarmName: 1 to 255 characters.
ALARM_NAME_MAX = 255


def alarm_name(prefix: str, suffix: str) -> str:
    """An alarm's name as every alarm construct gives it (``AlarmWiring.name``)."""
    return f"{prefix}-{suffix}"


@dataclass(frozen=True)
class PlannedAlarm:
    """One alarm a construct will create: its ``name``, the key path (or ``Construct.property``) its name comes from,
    and what makes it (for the message)."""

    name: str
    path: str
    owner: str = ""


def planned_alarms(prefix: str, suffixes: Mapping[str, str], path: str, owner: str = "") -> list[PlannedAlarm]:
    """The alarms of one construct (``suffixes``: key -> suffix, from its family's function), all from ``path``."""
    return [PlannedAlarm(alarm_name(prefix, suffix), path, owner) for suffix in suffixes.values()]


def check_alarm_names(problems: Problems, planned: Iterable[PlannedAlarm], code: str) -> None:
    """``{code}.AlarmNameCollision`` once per name that more than one planned alarm has, at the first one's path,
    naming the others' paths; ``{code}.AlarmNameTooLong`` once per name over :data:`ALARM_NAME_MAX` characters."""
    by_name: dict[str, list[PlannedAlarm]] = {}
    for alarm in planned:
        by_name.setdefault(alarm.name, []).append(alarm)
    for name, alarms in by_name.items():
        if len(alarms) > 1:
            first, others = alarms[0], alarms[1:]
            problems.add(f"{code}.AlarmNameCollision", first.path,
                         f"gives an alarm{_of(first)} the name that {_list(others)} gives too: CloudFormation refuses "
                         "the second alarm of one name (and a dashboard would show one alarm's state under the other's "
                         "meaning); rename one of them", name)
        if len(name) > ALARM_NAME_MAX:
            problems.add(f"{code}.AlarmNameTooLong", alarms[0].path,
                         f"gives an alarm{_of(alarms[0])} a name of {len(name)} characters: CloudWatch allows "
                         f"{ALARM_NAME_MAX}; shorten it", name)


def _of(alarm: PlannedAlarm) -> str:
    return f" ({alarm.owner})" if alarm.owner else ""


def _list(alarms: Sequence[PlannedAlarm]) -> str:
    return " and ".join(f"{alarm.path}{_of(alarm)}" for alarm in alarms)


__all__ = ["ALARM_NAME_MAX", "PlannedAlarm", "alarm_name", "check_alarm_names", "planned_alarms"]
