"""The library type-checks (issue 18, 6): mypy, strict, over ``hyperpod_inference_iac`` as the wheel lays it out,
over the runtime code its constructs deploy and over the app (``app.py``, ``stacks``, ``platform_config``; issue 30,
5), by the same command as ``make typecheck`` (``python -m tools.typecheck``; docs/testing.md, "Type checking").

mypy's cache is the repository's ``.mypy_cache/``: the four tests take about 4 s of CPU when it is warm; on a fresh
clone the first one takes about 34 s of CPU and 1 GB (nearly all of it aws-cdk-lib's own modules, read once). The
consumer apps of ``examples/`` are checked as strictly. A control checks a copy of the sources with one
module of mistakes added, with the same tool and cache: each mistake is reported at its source path, under its
error code, and nothing else is; it also shows that aws-cdk-lib's ``Cluster`` is still no ``ICluster`` to a type
checker (the quirk :mod:`hyperpod_inference_iac.foundation.cdk_types` handles: when it fails there, that module can
go)."""

from __future__ import annotations

import ast
import importlib.util
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# What mypy checks: the library and its runtime code, and the app (its own top-level names).
LIBRARY = ("constructs_lib", "charts", "lambda", "sidecar")
APP = ("app.py", "stacks", "platform_config")
# One worker runs both, one after the other: the first pays for a cold cache, the control reuses it.
pytestmark = [pytest.mark.xdist_group("mypy"), pytest.mark.slow]

PROBE = '''\
from aws_cdk import aws_eks_v2 as eks

from hyperpod_inference_iac.foundation.cdk_types import ClusterLike, as_icluster


def untyped(value):
    return value


def wants(cluster: eks.ICluster) -> None:
    del cluster


def created(cluster: eks.Cluster, like: ClusterLike) -> None:
    wants(cluster)
    wants(as_icluster(cluster))
    wants(as_icluster(like))


count: int = "three"
anything: int = "four"  # type: ignore
'''
PROBE_ERRORS = {
    (6, "no-untyped-def"),
    (15, "arg-type"),  # the quirk: a created Cluster where an ICluster is wanted (16 and 17: as_icluster passes)
    (20, "assignment"),
    (21, "ignore-without-code"),
}
APP_PROBE = '''\
from platform_config.reader import Section


def width(section: Section) -> int:
    return section.string("width")
'''
APP_PROBE_ERRORS = {(5, "return-value")}  # (str | None where an int is promised)
_ERROR = re.compile(r"^(?P<path>[^:\s]+):(?P<line>\d+): error: .*\[(?P<code>[a-z-]+)\]$")


def _typecheck(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tools.typecheck", *args], cwd=root, capture_output=True, text=True,
                          timeout=1200, check=False)


def test_the_app_is_checked_with_the_library() -> None:
    """``make typecheck`` names every package and module of the app: a new top-level one is listed too."""
    mypy = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    # (the root's modules and packages but the library's folders, the tests' and the tools')
    app = {path.stem for path in REPO.glob("*.py")} | {
        path.parent.name for path in REPO.glob("*/__init__.py") if path.parent.name not in (*LIBRARY, "tests", "tools")}
    assert app == {Path(name).stem for name in APP}
    assert app <= {*mypy["packages"], *mypy["modules"]}
    assert mypy["strict"] is True


def test_library_and_runtime_code_type_check() -> None:
    result = _typecheck(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("Success: no issues found"), result.stdout


def test_the_examples_type_check_without_a_cast(tmp_path: Path) -> None:
    """The consumer apps, as strict as the library: a created ``eks.Cluster`` goes into the constructs as it is
    (``examples/hyperpod-operator``). Each ``app.py`` is linked under a name of its own, so one run checks all."""
    apps = sorted((REPO / "examples").glob("*/app.py"))
    assert len(apps) >= 6
    for app in apps:
        (tmp_path / f"example_{app.parent.name.replace('-', '_')}.py").symlink_to(app)
    result = _typecheck(REPO, *sorted(str(link) for link in tmp_path.iterdir()))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"no issues found in {len(apps)} source files" in result.stdout


def _aws_cdk_modules_imported() -> set[str]:
    """Every aws-cdk-lib module the library and its runtime code import (``from aws_cdk import aws_s3 as s3`` too)."""
    found: set[str] = set()
    for folder in (*LIBRARY, *APP):
        for path in (REPO / folder).rglob("*.py") if (REPO / folder).is_dir() else [REPO / folder]:
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "aws_cdk")
                elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "aws_cdk":
                    found.add(str(node.module))
                    found.update(f"{node.module}.{alias.name}" for alias in node.names
                                 if importlib.util.find_spec(f"{node.module}.{alias.name}") is not None)
    return found


def test_every_aws_cdk_module_the_library_imports_is_read() -> None:
    """mypy skips aws-cdk-lib's modules but those listed (their types would be Any): a new import is listed too."""
    overrides = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"]
    read = next(o["module"] for o in overrides if o.get("follow_imports") == "normal")

    def listed(module: str) -> bool:
        return module in read or any(p.endswith(".*") and module.startswith(p[:-1]) for p in read)

    imported = _aws_cdk_modules_imported()
    assert {"aws_cdk", "aws_cdk.aws_eks_v2", "aws_cdk.region_info"} <= imported
    assert sorted(m for m in imported if not listed(m)) == []


def test_mistakes_are_reported_at_their_source_path(tmp_path: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in (*LIBRARY, *APP):
        if (REPO / folder).is_dir():
            shutil.copytree(REPO / folder, tmp_path / folder, ignore=ignore)
        else:
            shutil.copy2(REPO / folder, tmp_path / folder)
    (tmp_path / "tools").mkdir()
    for path in ("pyproject.toml", "tools/__init__.py", "tools/typecheck.py"):
        shutil.copy2(REPO / path, tmp_path / path)
    (tmp_path / "constructs_lib" / "_probe.py").write_text(PROBE)
    # The app is checked as strictly: one mistake in it, at its own path.
    (tmp_path / "platform_config" / "_probe.py").write_text(APP_PROBE)

    result = _typecheck(tmp_path, "--cache-dir", str(REPO / ".mypy_cache"))

    assert result.returncode == 1, result.stdout + result.stderr
    errors = [match for line in result.stdout.splitlines() if (match := _ERROR.match(line))]
    assert {match["path"] for match in errors} == {"constructs_lib/_probe.py", "platform_config/_probe.py"}, \
        result.stdout
    assert {(int(match["line"]), match["code"]) for match in errors if match["path"].startswith("constructs_lib")} \
        == PROBE_ERRORS, result.stdout
    assert {(int(match["line"]), match["code"]) for match in errors if match["path"].startswith("platform_config")} \
        == APP_PROBE_ERRORS, result.stdout
