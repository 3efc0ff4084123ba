"""Folders this library deploys (Lambda code, lifecycle scripts, the sidecar's image context, CRD
schemas), found through the import system so they work the same from a wheel, an editable install
or a source checkout, never through a path relative to the repository."""

from __future__ import annotations

import importlib.resources
from pathlib import Path


def package_dir(package: str, *parts: str) -> Path:
    """The folder of ``package`` (plus ``parts``) on disk. CDK assets are staged from real folders,
    so a zipped install (zipimport) is refused with a message rather than failing later."""
    location = importlib.resources.files(package).joinpath(*parts)
    if not isinstance(location, Path):
        raise RuntimeError(f"{package} is installed in a zip archive; install it unzipped (pip install) so its "
                           f"package data can be staged as CDK assets")
    return location
