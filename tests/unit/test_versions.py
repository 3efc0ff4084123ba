"""One version, said the same everywhere: ``hyperpod_inference_iac.__version__`` (which pyproject.toml reads), the
newest entry of CHANGELOG.md and the newest section of docs/upgrading.md; an unreleased build is ``X.Y.Z.devN``
(never the version of a release); and ``make wheel`` builds a wheel of that version."""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
import zipfile
from pathlib import Path

import hyperpod_inference_iac
from hyperpod_inference_iac.foundation import version as version_module
from tests.support.synth import REPO, cli_env

VERSION = re.compile(r"\d+\.\d+\.\d+")


def _pyproject_version() -> str:
    """The version of the last release, or of the one being prepared (``RELEASE``; without its ``.devN``)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "version" in project.get("dynamic", ()), "pyproject.toml reads the version from foundation/version.py"
    return version_module.RELEASE


def _changelog_versions() -> list[str]:
    return re.findall(r"^## (\d+\.\d+\.\d+)\s*$", (REPO / "CHANGELOG.md").read_text(), flags=re.MULTILINE)


def _library_section() -> str:
    text = (REPO / "docs" / "upgrading.md").read_text()
    library = text[text.index("\n## This library\n"):]
    return library[:m.start()] if (m := re.search(r"\n## (?!This library)", library[1:])) else library


# The changes merged for the next release, before pyproject.toml names it: one section, first, `### X.Y.Z (unreleased)`.
UNRELEASED = re.compile(r"^### (\d+\.\d+\.\d+) \(unreleased\)", flags=re.MULTILINE)


def _upgrading_versions() -> list[str]:
    """The released versions' sections (the unreleased one left out)."""
    return re.findall(r"^### (\d+\.\d+\.\d+)\b(?! \(unreleased\))", _library_section(), flags=re.MULTILINE)


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def test_pyproject_changelog_and_upgrading_name_the_same_newest_version() -> None:
    version = _pyproject_version()
    assert VERSION.fullmatch(version), version
    if version_module.RELEASED:
        assert hyperpod_inference_iac.__version__ == version
        changelog, upgrading = _changelog_versions(), _upgrading_versions()
    else:  # the version being prepared: its unreleased entry and section come first, the rest are releases
        assert re.fullmatch(re.escape(version) + r"\.dev\d+(\+nogit)?", hyperpod_inference_iac.__version__)
        unreleased = re.findall(r"^## (\d+\.\d+\.\d+) \(unreleased\)\s*$", (REPO / "CHANGELOG.md").read_text(),
                                flags=re.MULTILINE)
        assert unreleased == [version], unreleased
        assert UNRELEASED.findall(_library_section()) == [version]
        changelog, upgrading = [version, *_changelog_versions()], [version, *_upgrading_versions()]
    assert changelog and changelog[0] == version, changelog
    assert upgrading and upgrading[0] == version, upgrading
    assert changelog == upgrading, "each version has an entry in CHANGELOG.md and a section in docs/upgrading.md"
    assert changelog == sorted(changelog, key=_key, reverse=True), "newest first"


def test_an_unreleased_section_is_the_next_version_and_comes_first() -> None:
    """At most one ``### X.Y.Z (unreleased)`` section, above the released ones, for a version past pyproject.toml's:
    what is merged for the next release is said with its version, never as an undated "next release"."""
    library = _library_section()
    unreleased = UNRELEASED.findall(library)
    assert len(unreleased) <= 1, unreleased
    if unreleased:
        first = re.search(r"^### .*$", library, flags=re.MULTILINE)
        assert first is not None and UNRELEASED.match(first[0]), "the unreleased section comes first"
        assert _key(unreleased[0]) >= _key(_pyproject_version())


def test_upgrading_has_no_undated_release_and_no_version_past_the_current_one() -> None:
    text = (REPO / "docs" / "upgrading.md").read_text()
    assert not re.search(r"^#+ .*\b(Next|Earlier) release", text, flags=re.MULTILINE | re.IGNORECASE)
    named = re.findall(r"\b(?:release|version) \(?(\d+\.\d+\.\d+)\)?", text) + _upgrading_versions()
    too_new = [v for v in named if _key(v) > _key(_pyproject_version())]  # (the one being prepared is not past it)
    assert too_new == []


def test_the_readme_pins_the_cli_version_the_repository_pins() -> None:
    pinned = json.loads((REPO / "package.json").read_text())["devDependencies"]["aws-cdk"]
    named = set(re.findall(r"aws-cdk@([0-9][^\s`]*)", (REPO / "README.md").read_text()))
    assert named == {pinned}


def test_make_wheel_builds_the_library_of_this_version(tmp_path: Path) -> None:
    """The README's ``make wheel`` (into a temporary folder here; the venv counts as set up)."""
    result = subprocess.run(["make", "--no-print-directory", "-o", ".venv/.installed", "wheel",
                             f"WHEEL_DIR={tmp_path}"], cwd=REPO, env=cli_env(), capture_output=True, text=True,
                            timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    (wheel,) = tmp_path.glob("*.whl")
    built = hyperpod_inference_iac.__version__  # 0.4.0.devN in a clone: the commits since RELEASE was set
    assert wheel.name == f"hyperpod_inference_iac-{built}-py3-none-any.whl"
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names} == {"hyperpod_inference_iac",
                                                      f"hyperpod_inference_iac-{built}.dist-info"}
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]


def test_two_unreleased_builds_of_different_commits_have_different_versions() -> None:
    """``N`` counts the commits since RELEASE was set: the next commit builds ``.dev(N+1)``."""
    if version_module.RELEASED:
        return
    count = version_module._commits_since_release_line()
    assert count is not None and hyperpod_inference_iac.__version__ == f"{version_module.RELEASE}.dev{count}"
