"""The hashed lock files in requirements/ install exactly what they claim, and cannot drift from constraints.txt.

requirements/deploy.lock is what the deploy job installs with ``pip install --require-hashes --no-deps``:
the project's core and ``app`` dependencies at the pins of constraints.txt, plus the build backend for
installing the checkout itself without build isolation. requirements/checkov.lock is the scanner's own venv.
Regenerate both with ``make lock`` (docs/security-ci.md)."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.synth import REPO

DEPLOY_LOCK = REPO / "requirements" / "deploy.lock"
CHECKOV_LOCK = REPO / "requirements" / "checkov.lock"
CONSTRAINTS = REPO / "constraints.txt"
PROJECT = "hyperpod-inference-iac"
# Installed into the deploy venv so that `pip install --no-build-isolation -e .` needs no unhashed download.
BUILD_BACKEND = {"setuptools", "wheel"}

_ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)((?:\s*\\?\s*--hash=sha256:[0-9a-f]{64})+)", re.M)


def _lock(path: Path) -> dict[str, tuple[str, int]]:
    """name -> (version, number of hashes); every requirement line must be an exact, hashed pin."""
    text = re.sub(r"#.*", "", path.read_text())
    entries = {canonicalize_name(m[1]): (m[2], m[3].count("--hash=")) for m in _ENTRY.finditer(text)}
    requirement_lines = [line for line in text.splitlines() if line.strip() and not line.startswith(" ")]
    assert len(requirement_lines) == len(entries), f"{path.name}: a line that is not `name==version --hash=...`"
    return entries


def _constraints() -> dict[str, str]:
    pins = {}
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[canonicalize_name(name)] = version.strip()
    return pins


def _closure(root: str, extras: set[str] = frozenset()) -> set[str]:
    """The distributions ``root`` needs with ``extras``, per the installed metadata (markers of this Python);
    for the project itself, without the project."""
    seen: set[str] = set() if root == PROJECT else {canonicalize_name(root) + "[]"}
    todo = [(root, frozenset(extras))]
    while todo:
        name, wanted = todo.pop()
        for text in metadata.requires(name) or []:
            requirement = Requirement(text)
            environments = [dict(default_environment(), extra=e) for e in (wanted or {""})]
            if requirement.marker and not any(requirement.marker.evaluate(env) for env in environments):
                continue
            dependency = canonicalize_name(requirement.name)
            if dependency == canonicalize_name(PROJECT):
                todo.append((PROJECT, frozenset(requirement.extras)))
                continue
            key = dependency + "[" + ",".join(sorted(requirement.extras)) + "]"
            if key not in seen:
                seen.add(key)
                todo.append((dependency, frozenset(requirement.extras)))
    return {key.split("[")[0] for key in seen}


def test_every_entry_is_an_exact_pin_with_hashes() -> None:
    for path in (DEPLOY_LOCK, CHECKOV_LOCK):
        entries = _lock(path)
        assert entries, path
        assert all(hashes >= 1 for _, hashes in entries.values()), path


def test_deploy_lock_agrees_with_constraints_for_every_shared_package() -> None:
    constraints = _constraints()
    lock = _lock(DEPLOY_LOCK)
    drift = {name: (version, constraints[name]) for name, (version, _) in lock.items()
             if name in constraints and constraints[name] != version}
    assert not drift, f"requirements/deploy.lock differs from constraints.txt (run `make lock`): {drift}"
    assert not set(lock) - set(constraints), "every locked package is pinned in constraints.txt too"


def test_deploy_lock_is_exactly_the_core_and_app_dependencies() -> None:
    needed = _closure(PROJECT, {"app"})
    assert "cdk-nag" in needed and "aws-cdk-lib" in needed and "pytest" not in needed
    needed |= {name for backend in BUILD_BACKEND for name in _closure(backend)}
    locked = set(_lock(DEPLOY_LOCK))
    assert needed - locked == set(), f"needed for deploying, missing from the lock: {sorted(needed - locked)}"
    assert locked - needed == set(), f"in the lock, not needed for deploying: {sorted(locked - needed)}"


def test_deploy_lock_matches_what_make_setup_installs() -> None:
    for name, (version, _) in _lock(DEPLOY_LOCK).items():
        assert metadata.version(name) == version, f"{name}: lock {version}, installed {metadata.version(name)}"


def test_checkov_lock_pins_the_requested_checkov() -> None:
    wanted = [Requirement(line) for line in (REPO / "requirements" / "checkov.in").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    lock = _lock(CHECKOV_LOCK)
    for requirement in wanted:
        version, _ = lock[canonicalize_name(requirement.name)]
        assert requirement.specifier.contains(version), (requirement, version)


def test_the_scanner_venv_has_exactly_the_checkov_lock() -> None:
    site = next((REPO / ".venv" / "checkov" / "lib").glob("python3*/site-packages"))
    installed = {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions(path=[str(site)])}
    bundled = {"pip", "setuptools"}  # what `python -m venv` puts in, whatever the lock says
    installed = {name: version for name, version in installed.items() if name not in bundled}
    expected = {name: version for name, (version, _) in _lock(CHECKOV_LOCK).items() if name not in bundled}
    assert installed == expected
