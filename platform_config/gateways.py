"""The ``gateways:`` section: each entry read into the library's :class:`InferenceGateway` props by
:func:`platform_config.reader.read_props`, as every other section is (its keys, types and defaults are the props
class's; docs/configuration.md's table of them is generated from it).

The gateway's own rules run as the entry is read, under its key paths (``gateways[0].jwt.issuer``); the plan runs
them again for a gateway a Python consumer built, and leaves out what a key that could not be read (a stand-in
value) would give. The rules between a gateway and its models are the plan's
(:func:`hyperpod_inference_iac.charts.plan_workloads`).

A sub-key with reading of its own (a block the plan derives more from) is read by :func:`read_gateway` before the
gateway, with ``read_props(<ItsProps>, section.section("<key>"))`` (or ``optional_section``), and passed to it by
name: ``read_props(InferenceGateway, section, <field>=<value>)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hyperpod_inference_iac.charts.gateway import InferenceGateway
from hyperpod_inference_iac.foundation.validation import WRONG_TYPE, Problems, join_path, wrong_type
from platform_config.gateway_entry import read_gateway_entry
from platform_config.reader import Section, read_props


def read_gateway(data: Any, path: str, problems: Problems) -> InferenceGateway | None:
    """One ``gateways:`` entry at ``path`` (``gateways[0]``), every problem into ``problems``; None when it is no
    mapping. A key that could not be read holds a stand-in (a name that could not be read: ``""``, which the plan
    leaves unplanned, without telling the models that name a gateway that it is unknown)."""
    if not isinstance(data, Mapping):
        problems.add(WRONG_TYPE, path, wrong_type("a mapping", data), data)
        return None
    section = Section(data, path, problems)
    entry = read_gateway_entry(section.raw("entry"), join_path(path, "entry"), problems)  # (gateways[i].entry)
    gateway = read_props(InferenceGateway, section, entry=entry)
    section.finish()
    return gateway


def read_gateways(root: Section) -> list[InferenceGateway]:
    """The ``gateways:`` list: Inference Gateways the models opt into with ``gateway: <name>`` (docs/gateway.md)."""
    gateways = []
    for path, entry in root.items("gateways"):
        gateway = read_gateway(entry, path, root.problems)
        if gateway is not None:
            gateways.append(gateway)
    return gateways


__all__ = ["read_gateway", "read_gateways"]
