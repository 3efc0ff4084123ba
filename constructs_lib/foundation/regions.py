"""AWS regions by partition, as the installed aws-cdk-lib knows them (``aws_cdk.region_info``): a region name
is checked against its partition's list, so a typo is named at its own key, not through what it breaks."""

from __future__ import annotations

import difflib
from functools import cache

from aws_cdk.region_info import RegionInfo

from hyperpod_inference_iac.foundation.validation import Problems, is_unresolved

UNKNOWN_REGION = "Region.Unknown"


@cache
def known_regions() -> dict[str, str]:
    """Region name -> partition (``aws``, ``aws-cn``, ``aws-us-gov``, ...), read once from aws-cdk-lib."""
    return {info.name: info.partition for info in RegionInfo.regions if info.partition is not None}


def partition_of(region: str) -> str:
    """The partition of a known region; for another name, the partition of the known regions that begin like
    it (``us-gov-wset-1``: ``aws-us-gov``), else ``aws``."""
    regions = known_regions()
    if region in regions:
        return regions[region]
    head = region.split("-")[:-2]
    return next((partition for name, partition in regions.items() if name.split("-")[:-2] == head), "aws")


def check_region(problems: Problems, path: str, region: str) -> None:
    """``Region.Unknown`` at ``path`` unless ``region`` is a region of its partition (tokens skipped), with the
    close matches of that partition, or its whole list."""
    if is_unresolved(region) or region in known_regions():
        return
    partition = partition_of(region)
    regions = sorted(name for name, of in known_regions().items() if of == partition)
    close = difflib.get_close_matches(region, regions, n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(close)}?" if close else f"its regions: {', '.join(regions)}"
    problems.add(UNKNOWN_REGION, path, f"is not a region of the {partition} partition; {hint} (a region newer than "
                 "the installed aws-cdk-lib needs a newer aws-cdk-lib)", region)
