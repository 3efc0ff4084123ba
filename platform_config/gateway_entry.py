"""``gateways[i].entry``: the platform's capture entry in front of a gateway (docs/gateway.md, "The capture entry"),
read into :class:`~hyperpod_inference_iac.charts.gateway_entry.GatewayEntryOptions` (its keys, types and rules are
the props class's; ``usageLimits`` is a portable server's block, read by its own class)."""

from __future__ import annotations

from typing import Any

from hyperpod_inference_iac.charts.gateway_entry import GatewayEntryOptions
from hyperpod_inference_iac.charts.usage_limits import UsageLimits
from hyperpod_inference_iac.foundation.validation import Problems
from platform_config.reader import Section, read_props


def read_gateway_entry(data: Any, path: str, problems: Problems) -> GatewayEntryOptions | None:
    """The ``entry`` mapping of one gateway (None when left out or ``null``)."""
    if data is None:
        return None
    section = Section(data, path, problems)
    limits_data = section.raw("usageLimits")
    limits = UsageLimits.from_dict(limits_data, section.at("usageLimits"), problems) \
        if limits_data is not None else None
    options = read_props(GatewayEntryOptions, section, usage_limits=limits)
    section.finish()
    return options


__all__ = ["read_gateway_entry"]
