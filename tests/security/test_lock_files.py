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
    needed = _closure(PROJECT, {"app", "preflight"})  # synth, deploy and the preflight before it
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


# -- the capture sidecar image: sidecar/Dockerfile and sidecar/requirements.lock -----------------------------------
SIDECAR = REPO / "sidecar"
SIDECAR_LOCK = SIDECAR / "requirements.lock"
_FROM = re.compile(r"^FROM\s+(?:--platform=\S+\s+)?(\S+)", re.M | re.I)
_PINNED_IMAGE = re.compile(r"^(?P<repository>[a-z0-9][a-z0-9._/-]*):(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]*)"
                           r"@sha256:[0-9a-f]{64}$")


def _sidecar_python() -> str:
    """The Python of the image, from its base image's tag (``python:3.12-slim-bookworm@...`` -> ``3.12``)."""
    (image,) = _FROM.findall((SIDECAR / "Dockerfile").read_text())
    match = re.match(r"python:(3\.\d+)-", image)
    assert match, image
    return match[1]


def test_the_sidecar_image_starts_from_a_tag_and_its_digest() -> None:
    """A tag alone can be moved to other content by whoever controls the registry; the digest cannot. Every stage
    names both: the tag for the reader, the digest for the build."""
    images = _FROM.findall((SIDECAR / "Dockerfile").read_text())
    assert images
    for image in images:
        assert _PINNED_IMAGE.match(image), f"{image}: give it as repository:tag@sha256:<64 hex>"


def test_the_sidecar_image_installs_the_hashed_lock_and_nothing_else() -> None:
    instructions = [line for line in (SIDECAR / "Dockerfile").read_text().replace("\\\n", " ").splitlines()
                    if line and not line.startswith("#")]
    installs = [match[1].split() for line in instructions if line.startswith("RUN")
                for match in re.finditer(r"pip3? install ([^&;|]*)", line)]
    assert installs == [["--require-hashes", "--no-deps", "--only-binary=:all:", "-r", "requirements.lock"]]
    assert [line for line in instructions if line.startswith(("COPY", "ADD"))] == [
        "COPY requirements.lock .", "COPY capture_sidecar ./capture_sidecar"]
    assert "requirements.in" in (SIDECAR / ".dockerignore").read_text().splitlines()  # not in the image context


def test_every_sidecar_lock_entry_is_an_exact_pin_with_hashes() -> None:
    entries = _lock(SIDECAR_LOCK)
    assert entries and all(hashes >= 1 for _, hashes in entries.values())


def test_the_sidecar_lock_agrees_with_what_the_tests_run_against() -> None:
    """The image runs the versions tests/sidecar/ tested: constraints.txt's pins, which `make setup` installed."""
    constraints = _constraints()
    lock = _lock(SIDECAR_LOCK)
    assert not set(lock) - set(constraints), "every package of the sidecar lock is pinned in constraints.txt"
    for name, (version, _) in lock.items():
        assert constraints[name] == version, f"{name}: sidecar lock {version}, constraints.txt {constraints[name]}"
        assert metadata.version(name) == version, f"{name}: sidecar lock {version}, installed {metadata.version(name)}"


def test_the_sidecar_lock_is_exactly_its_requirements_and_their_dependencies() -> None:
    """The closure of sidecar/requirements.in on the image's Python (Linux), from the installed metadata; and
    requirements.in's own pins are the lock's."""
    direct = [Requirement(line) for line in (SIDECAR / "requirements.in").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    lock = _lock(SIDECAR_LOCK)
    for requirement in direct:
        assert requirement.specifier.contains(lock[canonicalize_name(requirement.name)][0]), requirement
    environment = {**default_environment(), "python_version": _sidecar_python(), "sys_platform": "linux",
                   "platform_system": "Linux", "platform_python_implementation": "CPython",
                   "implementation_name": "cpython", "extra": ""}
    needed: set[str] = set()
    todo = [requirement.name for requirement in direct]
    while todo:
        name = canonicalize_name(todo.pop())
        if name in needed:
            continue
        needed.add(name)
        for text in metadata.requires(name) or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate(environment):
                todo.append(requirement.name)
    assert needed == set(lock), f"missing: {sorted(needed - set(lock))}, not needed: {sorted(set(lock) - needed)}"


CAPTURE_LOCK = REPO / "lambda" / "capture_processor" / "requirements.lock"


def test_the_capture_layer_lock_is_hashed_and_agrees_with_what_the_tests_run_against() -> None:
    """The capture processor's layer (make capture-layer) holds the pyiceberg that tests/capture_processor/ tested."""
    constraints = _constraints()
    lock = _lock(CAPTURE_LOCK)
    assert "pyiceberg" in lock and "pyiceberg-core" in lock
    assert all(hashes >= 1 for _, hashes in lock.values())
    assert not set(lock) - set(constraints), "every package of the layer lock is pinned in constraints.txt"
    for name, (version, _) in lock.items():
        assert constraints[name] == version, f"{name}: layer lock {version}, constraints.txt {constraints[name]}"
        assert metadata.version(name) == version, f"{name}: layer lock {version}, installed {metadata.version(name)}"
