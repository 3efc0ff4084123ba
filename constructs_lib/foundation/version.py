"""The library's version: ``RELEASE``, or ``RELEASE.devN`` for an unreleased build.

``RELEASE`` is the version being prepared (the first entry of CHANGELOG.md). While ``RELEASED`` is False, a build is
``RELEASE.devN``, ``N`` being the number of commits since the commit that last changed this file's ``RELEASE``
line (``git``), so two different unreleased builds never share a version (0.3.0 was once two different wheels).
Releasing sets ``RELEASED = True`` in the commit that dates the CHANGELOG entry; the next change of ``RELEASE``
starts the next series at ``.dev0``. Without git (a copy of the sources, an sdist), ``N`` is 0 and a local label
says so: ``RELEASE.dev0+nogit``. ``pyproject.toml`` reads :data:`__version__` (``[tool.setuptools.dynamic]``).
Nothing synthesized carries the version: templates and manifests stay byte-identical from one build to the next.
"""

from __future__ import annotations

import subprocess
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


def library_version() -> str:
    if RELEASED:
        return RELEASE
    commits = _commits_since_release_line()
    return f"{RELEASE}.dev{commits}" if commits is not None else f"{RELEASE}.dev0+nogit"


__version__ = library_version()
