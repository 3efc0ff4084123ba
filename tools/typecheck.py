"""``python -m tools.typecheck``: mypy, strict, over the library as the wheel lays it out and over the runtime code
the constructs deploy as it runs (docs/testing.md, "Type checking"). Run by ``make test`` (tests/unit/test_types.py)
and by ``make typecheck``; extra arguments go to mypy. Exit status: mypy's (0 clean, 1 errors, 2 a usage error).

Why a layout: ``pyproject.toml`` maps ``hyperpod_inference_iac`` to ``constructs_lib/``, ``.charts`` to ``charts/``
and so on. The editable install reaches those folders through an import hook, which no static checker follows, so
``mypy -p hyperpod_inference_iac`` finds nothing. This builds the package tree the wheel holds under
``.mypy_cache/layout/`` as symbolic links to the sources (rebuilt on every run, so new and removed files count;
mypy's cache stays valid, a link has its file's time), mypy reads it from there (``[tool.mypy] mypy_path``), and
every message is given back at the source path (``charts/plan.py:12: ...``), so an editor can jump to it.

The runtime code (the capture processor's and the key rotation's Lambda code, the capture sidecar) runs under its
own top-level names: Lambda imports ``handler``, ``capture_core`` and ``rotation`` from its folder, the image runs
``python -m capture_sidecar``. Those folders are on ``mypy_path`` and checked under those names; their packages stay
out of the layout (the same file under two module names would be two different modules to mypy).

The app (``app.py``, ``stacks``, ``platform_config``) runs under its own top-level names from the project's folder,
where mypy finds them too (the folder it runs in).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LAYOUT = Path(".mypy_cache", "layout")  # the first entry of [tool.mypy] mypy_path
_MESSAGE = re.compile(r"^(?P<path>[^\s:][^:]*\.pyi?)(?P<rest>:.*)$")


def _package_sources(pyproject: dict[str, Any], root: Path) -> Iterator[tuple[str, Path]]:
    """Each package setuptools ships (``[tool.setuptools] packages``) with the folder it comes from."""
    setuptools = pyproject["tool"]["setuptools"]
    mapping: dict[str, str] = setuptools.get("package-dir", {})
    for package in setuptools.get("packages", []):
        parts = package.split(".")
        # The longest mapped prefix decides (``a.b.c`` under a mapping of ``a.b``: that folder, then ``c``).
        mapped = next(n for n in range(len(parts), -1, -1) if n == 0 or ".".join(parts[:n]) in mapping)
        base = root / mapping[".".join(parts[:mapped])] if mapped else root
        yield package, base.joinpath(*parts[mapped:])


def build_layout(root: Path = ROOT) -> Path:
    """Link every module of every shipped package under ``root/.mypy_cache/layout`` at its import path; packages
    whose folder is on ``mypy_path`` (the runtime code) are left out. The layout is rebuilt from scratch."""
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    runtime_roots = [(root / entry).resolve() for entry in pyproject["tool"]["mypy"]["mypy_path"][1:]]
    layout = root / LAYOUT
    shutil.rmtree(layout, ignore_errors=True)
    for package, source in _package_sources(pyproject, root):
        source = source.resolve()
        if any(source.is_relative_to(runtime) for runtime in runtime_roots):
            continue
        target = layout.joinpath(*package.split("."))
        target.mkdir(parents=True, exist_ok=True)
        for module in sorted(source.iterdir()):
            if module.suffix in (".py", ".pyi") or module.name == "py.typed":
                (target / module.name).symlink_to(module)
    return layout


def source_path(line: str, root: Path = ROOT) -> str:
    """A mypy message about a linked file, given at the file's own path (relative to ``root`` when inside it)."""
    match = _MESSAGE.match(line)
    if match is None or not match["path"].startswith(str(LAYOUT)):
        return line
    real = (root / match["path"]).resolve()
    shown = real.relative_to(root) if real.is_relative_to(root) else real
    return f"{shown}{match['rest']}"


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    from mypy import api  # (imported here: listing the layout needs no mypy)

    build_layout(root)
    here = Path.cwd()
    os.chdir(root)  # mypy reads [tool.mypy] (mypy_path, packages, modules) relative to the project
    try:
        stdout, stderr, status = api.run(list(sys.argv[1:] if argv is None else argv))
    finally:
        os.chdir(here)
    sys.stdout.write("".join(source_path(line, root) + "\n" for line in stdout.splitlines()))
    sys.stderr.write(stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
