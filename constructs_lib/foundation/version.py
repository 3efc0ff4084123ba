"""The library's version: ``RELEASE``, or ``RELEASE.devN`` for an unreleased build.

``RELEASE`` is the version being prepared (the first entry of CHANGELOG.md). While ``RELEASED`` is False, a build is
``RELEASE.devN``, ``N`` being the number of commits since the commit that last changed this file's ``RELEASE``
line (``git``), so two different unreleased builds never share a version (0.3.0 was once two different wheels).
Releasing sets ``RELEASED = True`` in the commit that dates the CHANGELOG entry; the next change of ``RELEASE``
starts the next series at ``.dev0``. Outside a checkout (an installed wheel) it is the version the wheel
was built with; without either (a copy of the sources), ``RELEASE.dev0+nogit``. ``pyproject.toml`` reads
``__version__`` (``[tool.setuptools.dynamic]``).
Nothing synthesized carries the version: templates and manifests stay byte-identical from one build to the next.
"""

from __future__ import annotations

import functools
import subprocess
from importlib import metadata
from pathlib import Path

RELEASE = "0.4.0"
RELEASED = False


def _commits_since_release_line() -> int | None:
    here = Path(__file__).resolve()
    try:
        def git(*args: str) -> str:
            return subprocess.run(["git", *args], cwd=here.parent, capture_output=True, text=True, check=True,
                                  timeout=30).stdout.strip()

        since = git("log", "-1", "--format=%H", "-S", f'RELEASE = "{RELEASE}"', "--", here.name)
        return int(git("rev-list", "--count", f"{since}..HEAD")) if since else None
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


@functools.cache
def library_version() -> str:
    """Asked once per process, and only when someone asks (``__version__`` is computed on first access, not at import:
    importing the library runs no ``git``). Outside this repository's checkout (an installed wheel) the version the
    wheel was built with."""
    if RELEASED:
        return RELEASE
    commits = _commits_since_release_line()
    if commits is not None:
        return f"{RELEASE}.dev{commits}"
    try:
        return metadata.version("hyperpod-inference-iac")
    except metadata.PackageNotFoundError:
        return f"{RELEASE}.dev0+nogit"


def __getattr__(name: str) -> str:
    if name == "__version__":
        return library_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
