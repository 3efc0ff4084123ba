"""Budgets, their alerts and what the GPUs cost (docs/usage-and-budgets.md), in a reviewer's words.

One helper for every setting issue 29 made configurable, whichever side holds it:

- the capture sidecar's environment (a portable server's or a gateway entry's Deployment, in ``dist/`` and in the
  cluster stack's manifests): ``CALLER_LIMITS`` limit by limit, ``BUDGET_ALERT_PERCENTS`` with it as the budget
  alerts of each caller, the store and its failure mode, ``USAGE_RECORDS``, the metering settings, the JWT claim that
  names a gateway caller;
- CloudFormation: the budget alarms (one per level), the cost sampler's prices and cost groups (``GpuCost``'s
  ``INSTANCE_PRICES`` and ``COST_GROUPS``), the usage store's size caps.

What broadens (``FAIL_ON=broadening``, the one rule of ``review.exit_status``): a budget raised or removed, the store
failing open or gone, counters started again (a new key prefix), a budget alert level removed (for a caller, or
the alarm of a level, or its actions), records of every exchange (``USAGE_RECORDS=all``). Prices, cost groups and
the store's size are shown in the "budgets and costs" group and do not broaden: they change the cost each team is
reported, not what a caller may use or what is collected (docs/review.md)."""

from __future__ import annotations

import json
from typing import Any

from tools.review.model import MISSING, change, listing, number

GROUP = "budgets_costs"
# The sidecar's default levels when BUDGET_ALERT_PERCENTS is absent (capture_sidecar.limits.DEFAULT_ALERT_PERCENTS).
DEFAULT_ALERT_PERCENTS = (80, 100)
# The limits a level applies to: a minute's budget runs out every minute and has no alert.
ALERTED_LIMITS = ("tokensPerDay", "tokensPerMonth")
# The counter the budget alarms read (hyperpod_inference_iac.observability.budget_alarms.BUDGET_ALERTS).
BUDGET_ALERTS_METRIC = "capture_sidecar_budget_alerts_total"
PRICE_UNIT = "USD per node-hour"

# The sidecar's usage and budget settings this module reads (the rest of its environment is read elsewhere).
SIDECAR_VARS = ("CALLER_LIMITS", "BUDGET_ALERT_PERCENTS", "LIMITS_STORE_FAILURE", "LIMITS_STORE_URL",
                "LIMITS_KEY_PREFIX", "LIMITS_STORE_IAM_USER", "LIMITS_STORE_IAM_CACHE", "LIMITS_STORE_TIMEOUT_SECONDS",
                "USAGE_RECORDS", "STREAM_USAGE", "USAGE_PATHS", "TOKEN_ESTIMATE_BYTES_PER_TOKEN",
                "TOKEN_ESTIMATE_OUTPUT_TOKENS", "JWT_CALLER_CLAIM")

Said = tuple[str, str, bool]  # group, text, broadens


def _missing(value: Any) -> Any:
    return MISSING if value is None else value


def _json(value: Any) -> Any:
    if not isinstance(value, str):
        return None
    try:
        return json.loads(value)
    except ValueError:
        return None


def _amount(value: float) -> str:
    return "none" if value == float("inf") else (str(int(value)) if value == int(value) else str(value))


# ---- per-caller limits and their alerts ---------------------------------------------------------------------


def caller_limits(value: Any) -> dict[tuple[str, str], float]:
    """CALLER_LIMITS as (caller, limit) -> value; absent or unreadable: no limit at all."""
    document = _json(value)
    if not isinstance(document, dict):
        return {}
    found = {(str(caller), str(kind)): number(amount) for caller, limits in document.items()
             if isinstance(limits, dict) for kind, amount in limits.items()}
    return {key: amount for key, amount in found.items() if amount is not None}


def alert_percents(value: Any) -> tuple[int, ...]:
    """BUDGET_ALERT_PERCENTS as the sidecar reads it: absent is its default levels, empty is none."""
    if value is MISSING or value is None:
        return DEFAULT_ALERT_PERCENTS
    parts = [part.strip() for part in str(value).split(",") if part.strip()]
    return tuple(sorted({int(part) for part in parts if part.isdigit()}))


def budget_alerts(limits: Any, percents: Any) -> set[tuple[str, str, int]]:
    """(caller, limit, percent) of every alert a sidecar reports: each level of each day or month budget. A sidecar
    without CALLER_LIMITS has no budget, so no alert (whatever its levels)."""
    budgets = [key for key in caller_limits(limits) if key[1] in ALERTED_LIMITS]
    if not budgets:
        return set()
    return {(caller, kind, percent) for caller, kind in budgets for percent in alert_percents(percents)}


def _alert_words(alerts: set[tuple[str, str, int]], verb: str) -> list[str]:
    """``budget alert for team-a at 80 % of tokensPerDay removed``: callers of the same limit and levels together."""
    levels: dict[tuple[str, str], list[int]] = {}
    for caller, kind, percent in alerts:
        levels.setdefault((caller, kind), []).append(percent)
    together: dict[tuple[str, tuple[int, ...]], list[str]] = {}
    for (caller, kind), percents in sorted(levels.items()):
        together.setdefault((kind, tuple(sorted(percents))), []).append(caller)
    words = []
    for (kind, percents), callers in sorted(together.items()):
        plural = "s" if len(percents) > 1 else ""
        named = [f"{caller} (every other caller)" if caller == "*" else caller for caller in callers]
        words.append(f"budget alert{plural} for {listing(named)} at {' %, '.join(map(str, percents))} % of "
                     f"{kind} {verb}")
    return words


def alerts_change(old_limits: Any, new_limits: Any, old_percents: Any, new_percents: Any) -> list[Said]:
    """The budget alerts a sidecar gained or lost: one lost is a weakening a reviewer must see (broadening), one
    gained is not. Levels changed where no day or month budget exists alert nobody: one neutral line says so."""
    before = budget_alerts(old_limits, old_percents)
    after = budget_alerts(new_limits, new_percents)
    said: list[Said] = [(GROUP, words, True) for words in _alert_words(before - after, "removed")]
    said += [(GROUP, words, False) for words in _alert_words(after - before, "added")]
    if not said and alert_percents(old_percents) != alert_percents(new_percents):
        levels = [", ".join(f"{p} %" for p in alert_percents(v)) or "none" for v in (old_percents, new_percents)]
        said.append((GROUP, f"budget alert levels {levels[0]} → {levels[1]} (no day or month budget: no alert "
                            "changes)", False))
    return said


def caller_limits_words(old: Any, new: Any) -> Said:
    """``caller limits: team-a tokensPerDay 20000000 → 40000000``: a limit raised or gone broadens."""
    before, after = caller_limits(old), caller_limits(new)
    unlimited = float("inf")
    words, broadens = [], False
    for caller, kind in sorted(set(before) | set(after)):
        was, now = before.get((caller, kind), unlimited), after.get((caller, kind), unlimited)
        if was != now:
            words.append(f"{caller} {kind} {_amount(was)} → {_amount(now)}")
            broadens = broadens or now > was
    return (GROUP, "caller limits: " + (listing(words) or "unchanged"), broadens)


# ---- the sidecar's other usage settings ----------------------------------------------------------------------


def setting_change(var: str, old: Any, new: Any, has_limits: bool = True) -> Said:
    """One of the sidecar's usage settings (not CALLER_LIMITS or BUDGET_ALERT_PERCENTS: those are read together).
    ``has_limits``: the sidecar enforces budgets after the change (a caller claim matters then)."""
    old, new = _missing(old), _missing(new)
    if var == "LIMITS_STORE_FAILURE":
        return (GROUP, change("budget store down means", old, new), new != "closed" and old == "closed")
    if var == "LIMITS_STORE_URL":
        return (GROUP, change("budget store", old, new), new is MISSING and old is not MISSING)
    if var == "LIMITS_KEY_PREFIX":
        # Counters are keyed by it: a new prefix starts every caller's counters of the current windows at 0.
        moved = old is not MISSING and new is not MISSING
        return (GROUP, change("budget counters' key prefix", old, new)
                + (" (the current windows' counters start again at 0)" if moved else ""), moved)
    if var == "USAGE_RECORDS":
        # "all": the caller, model and tokens of every metered exchange are recorded, not a sample (no prompt).
        every = new == "all" and old != "all"
        return ("data_governance", change("usage records", old, new)
                + (" (a record of the caller, model and tokens of every metered exchange; no prompt)" if every
                   else ""), every)
    if var == "JWT_CALLER_CLAIM":
        # The caller id of a gateway caller: budgets, records and costs are keyed on it.
        return (GROUP, change("caller id from the JWT claim", old, new)
                + (" (callers named in usageLimits may no longer match; counters start again)" if has_limits
                   else ""), has_limits and old is not MISSING)
    words = {"LIMITS_STORE_IAM_USER": ("budget store IAM user", ""),
             "LIMITS_STORE_IAM_CACHE": ("budget store cache", ""),
             "LIMITS_STORE_TIMEOUT_SECONDS": ("budget store timeout", " s"),
             "STREAM_USAGE": ("streams asked for their usage", ""), "USAGE_PATHS": ("metered paths", ""),
             "TOKEN_ESTIMATE_BYTES_PER_TOKEN": ("token estimate bytes per token", ""),
             "TOKEN_ESTIMATE_OUTPUT_TOKENS": ("token estimate of an output without max_tokens", "")}
    what, unit = words.get(var, (var.lower().replace("_", " "), ""))
    return (GROUP, change(what, old, new, unit), False)


# ---- the budget alarms (CloudFormation) ----------------------------------------------------------------------


def budget_alarm_level(props: dict[str, Any] | None) -> str | None:
    """The level (``80``) of a budget alarm (its metric is the sidecars' alerts counter), else None."""
    if not props or props.get("MetricName") != BUDGET_ALERTS_METRIC:
        return None
    for dimension in props.get("Dimensions") or []:
        if isinstance(dimension, dict) and dimension.get("Name") == "percent":
            return str(dimension.get("Value"))
    return "?"


def budget_alarm_weakened(level: str, field: str, old: Any, new: Any) -> str | None:
    """What a change of a budget alarm's ``field`` takes away (its actions lost, or switched off: nobody it told is
    told), in words; None when it takes nothing away. ``old``/``new``: rendered values (MISSING when absent)."""
    if field == "AlarmActions":
        lost = [action for action in (old if isinstance(old, list) else []) if action not in (
            new if isinstance(new, list) else [])]
        return f"the {level} % budget alert no longer notifies {listing(lost)}" if lost else None
    if field == "ActionsEnabled" and (new is False or new == "false"):
        return f"the {level} % budget alert notifies nobody"
    return None


# ---- prices and cost groups (the GpuCost sampler's environment) ----------------------------------------------


def _price(value: Any) -> str:
    parsed = number(value)
    return f"{parsed:g}" if parsed is not None else str(value)


def prices_change(old: Any, new: Any) -> list[tuple[str, str]]:
    """INSTANCE_PRICES (instance type -> USD per node-hour): (subject, text) per price changed, added or removed."""
    before, after = _json(old), _json(new)
    before = before if isinstance(before, dict) else {}
    after = after if isinstance(after, dict) else {}
    found = []
    for instance_type in sorted(set(before) | set(after)):
        was, now = before.get(instance_type, MISSING), after.get(instance_type, MISSING)
        if was is MISSING:
            found.append((f"price of {instance_type}", f"{_price(now)} {PRICE_UNIT} (new)"))
        elif now is MISSING:
            found.append((f"price of {instance_type}", f"{_price(was)} {PRICE_UNIT} (removed)"))
        elif number(was) != number(now):
            found.append((f"price of {instance_type}", f"{_price(was)} → {_price(now)} {PRICE_UNIT}"))
    return found


def _groups(value: Any) -> dict[str, dict[str, Any]]:
    document = _json(value)
    found: dict[str, dict[str, Any]] = {}
    for group in document if isinstance(document, list) else []:
        if isinstance(group, dict):
            found[f"{group.get('group')}"] = group
    return found


def cost_groups_change(old: Any, new: Any) -> list[tuple[str, str]]:
    """COST_GROUPS (every sampled group: kind, cluster, name, instance types, models, own price): (subject, text)
    per group added or removed and per setting changed."""
    before, after = _groups(old), _groups(new)
    found = []
    for name in sorted(set(before) | set(after)):
        was, now = before.get(name), after.get(name)
        subject = f"cost group {name}"
        if was is None or now is None:
            group = now if now is not None else was
            assert group is not None
            models = listing(group.get("models") or []) or "none (all its hours idle)"
            own = group.get("usdPerNodeHour")
            price = f"{_price(own)} {PRICE_UNIT} of its own" if own is not None else "its instance type's price"
            summary = (f"{group.get('kind')} of {group.get('cluster')}, {listing(group.get('instanceTypes') or [])}, "
                       f"models {models}, priced at {price}")
            found.append((subject, f"sampled (new): {summary}" if was is None
                          else f"no longer sampled (removed): its node-hours are no longer costed ({summary})"))
            continue
        gained = [m for m in now.get("models") or [] if m not in (was.get("models") or [])]
        lost = [m for m in was.get("models") or [] if m not in (now.get("models") or [])]
        if gained or lost:
            parts = ([f"+ {listing(gained)}"] if gained else []) + ([f"- {listing(lost)}"] if lost else [])
            found.append((subject, f"models {'; '.join(parts)} (its node-hours are shared among these models' "
                                   "callers)"))
        own_was, own_now = was.get("usdPerNodeHour"), now.get("usdPerNodeHour")
        if number(own_was) != number(own_now):
            if own_was is None:
                text = f"own price {_price(own_now)} {PRICE_UNIT} (new; was its instance type's price)"
            elif own_now is None:
                text = f"own price {_price(own_was)} {PRICE_UNIT} (removed; now its instance type's price)"
            else:
                text = f"own price {_price(own_was)} → {_price(own_now)} {PRICE_UNIT}"
            found.append((subject, text))
        for key, what in (("instanceTypes", "instance types"), ("cluster", "cluster"), ("kind", "kind")):
            if was.get(key) != now.get(key):
                found.append((subject, change(what, _missing(was.get(key)), _missing(now.get(key)))))
    return found


# ---- the usage store (CloudFormation) -------------------------------------------------------------------------

STORE_FIELDS = {"CacheUsageLimits.DataStorage.Maximum": ("most data", " GB"),
                "CacheUsageLimits.DataStorage.Minimum": ("least data billed", " GB"),
                "CacheUsageLimits.ECPUPerSecond.Maximum": ("most ECPUs per second", ""),
                "CacheUsageLimits.ECPUPerSecond.Minimum": ("least ECPUs per second", ""),
                "SnapshotRetentionLimit": ("snapshots kept", " days")}


def store_change(field: str, old: Any, new: Any) -> str:
    what, unit = STORE_FIELDS.get(field, (field, ""))
    return change(what, old, new, unit)


__all__ = ["BUDGET_ALERTS_METRIC", "DEFAULT_ALERT_PERCENTS", "GROUP", "SIDECAR_VARS", "alert_percents",
           "alerts_change", "budget_alarm_level", "budget_alarm_weakened", "budget_alerts", "caller_limits",
           "caller_limits_words", "cost_groups_change", "prices_change", "setting_change", "store_change"]
