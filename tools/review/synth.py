"""Both sides synthesized offline into temporary directories, never into the working tree's cdk.out/ or dist/.

The base is checked out in a temporary git worktree (``git worktree add --detach``, removed after the
run). Each side runs its own ``app.py`` and ``cdk.json`` with this checkout's installed tools (the
venv's Python and Node.js, the pinned CDK CLI) and **its own copy of the library**: the editable
install maps ``hyperpod_inference_iac`` to this working tree's folders, so each side gets a
``hyperpod_inference_iac`` package laid out from its own ``pyproject.toml`` (the same folder-to-package
mapping the editable install and the wheel use) and put first on ``PYTHONPATH``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tools.review.cdkdiff import cli_env

# What decides the installed tools: when these differ, the base is still synthesized with this checkout's.
DEPENDENCY_FILES = ("pyproject.toml", "constraints.txt", "package.json", "package-lock.json")


class ReviewError(RuntimeError):
    """Something the review cannot work around (a bad ref, a synth that fails); exit status 2."""


def git(repo: Path, *args: str) -> str:
    result = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ReviewError(f"git {' '.join(args)}: {result.stderr.strip() or result.stdout.strip()}")
    return result.stdout.strip()


def resolve_base(repo: Path, base: str | None) -> tuple[str, str]:
    """(commit, how it was chosen). Default: the merge base with origin/main, else HEAD~1."""
    if base:
        if base.startswith("-"):
            raise ReviewError(f"BASE must be a git ref, not an option: {base!r}")
        return git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{base}^{{commit}}"), base
    try:
        git(repo, "rev-parse", "--verify", "--quiet", "origin/main^{commit}")
    except ReviewError:
        try:
            return git(repo, "rev-parse", "--verify", "--quiet", "HEAD~1^{commit}"), "HEAD~1"
        except ReviewError as error:
            raise ReviewError("no origin/main and no HEAD~1 to compare with; pass BASE=<git ref>") from error
    return git(repo, "merge-base", "HEAD", "origin/main"), "merge base with origin/main"


def describe_head(repo: Path) -> str:
    head = git(repo, "rev-parse", "--short", "HEAD")
    dirty = git(repo, "status", "--porcelain", "--untracked-files=normal")
    return f"working tree (HEAD {head}{', with uncommitted changes' if dirty else ''})"


def layout_library(source: Path, target: Path) -> bool:
    """Lay out the library of ``source`` under ``target`` as its pyproject maps it (package → folder).
    False when ``source`` has no such mapping (then the side imports what its own folders hold)."""
    pyproject = source / "pyproject.toml"
    if not pyproject.is_file():
        return False
    setuptools = tomllib.loads(pyproject.read_text()).get("tool", {}).get("setuptools", {})
    mapping: dict[str, str] = setuptools.get("package-dir", {}) or {}
    if not mapping:
        return False
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    # Outer packages first, so an inner mapping (charts, capture_processor, sidecar) lands inside.
    for package in sorted(mapping, key=lambda name: name.count(".")):
        folder = source / mapping[package]
        if folder.is_dir():
            destination = target.joinpath(*package.split("."))
            shutil.copytree(folder, destination, ignore=ignore, dirs_exist_ok=True)
    return True


@dataclass(frozen=True)
class Side:
    label: str
    source: Path  # the checkout whose app runs
    assembly: Path  # cdk.out of this side
    dist: Path  # dist/ of this side


def synthesize(side: Side, tools_root: Path, config: str, scratch: Path) -> dict[str, str]:
    """``cdk synth`` of one side into its own directories, offline, with the side's own library.
    Returns the dist/ files the app left out until stack outputs exist (file -> the outputs it needs)."""
    library = scratch / f"{side.label}-library"
    env = cli_env()
    env["PATH"] = f"{tools_root / '.venv' / 'bin'}:{tools_root / 'node_modules' / '.bin'}:{env.get('PATH', '')}"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if layout_library(side.source, library):
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(library), env.get("PYTHONPATH", "")]))
    if side.source != tools_root:
        # The side's cdk.json names `.venv/bin/python app.py`: let it find this checkout's venv.
        for name in (".venv", "node_modules"):
            link = side.source / name
            if not link.exists():
                link.symlink_to(tools_root / name)
    command = [str(tools_root / "node_modules" / ".bin" / "cdk"), "synth", "--quiet", "--no-notices",
               "-o", str(side.assembly), "-c", f"config={config}", "-c", f"dist={side.dist}"]
    result = subprocess.run(command, cwd=side.source, env=env, capture_output=True, text=True, timeout=900,
                            check=False)
    if result.returncode != 0:
        raise ReviewError(f"synthesizing the {side.label} ({side.source}) failed with status {result.returncode}:\n"
                          f"{(result.stdout + result.stderr)[-4000:]}")
    return waiting_files(result.stdout + result.stderr)


# app.py: "dist/: model-qwen3-8b waits for values that exist only after `cdk deploy` (CertificateArn, ...)"
_WAITING = re.compile(r"^dist/: (?P<name>\S+) waits for values that exist only after `cdk deploy` \((?P<needs>[^)]*)\)",
                      re.M)


def waiting_files(output: str) -> dict[str, str]:
    found = {}
    for match in _WAITING.finditer(output):
        name = match["name"]
        found[f"dist/{name}.yaml" if name.startswith("helm/") else f"dist/{name}.k8s.yaml"] = match["needs"]
    return found


@dataclass
class Synths:
    base: Side
    head: Side
    base_commit: str
    worktree: Path | None
    dependency_changes: list[str]
    # Per side: dist/ files left out until stack outputs exist (file -> outputs needed).
    waiting: dict[str, dict[str, str]] = field(default_factory=dict)


def prepare_and_synthesize(repo: Path, base_commit: str, config: str, scratch: Path, parallel: bool = True) -> Synths:
    worktree = scratch / "base-checkout"
    git(repo, "worktree", "add", "--detach", "--quiet", str(worktree), base_commit)
    synths = Synths(
        base=Side("base", worktree, scratch / "base" / "cdk.out", scratch / "base" / "dist"),
        head=Side("head", repo, scratch / "head" / "cdk.out", scratch / "head" / "dist"),
        base_commit=base_commit, worktree=worktree,
        dependency_changes=[name for name in DEPENDENCY_FILES if _read(worktree / name) != _read(repo / name)],
    )
    if not (worktree / config).is_file():
        raise ReviewError(f"the base {base_commit[:12]} has no {config}; pass CONFIG=<a file both sides have>")
    sides = (synths.base, synths.head)
    if parallel:
        with ThreadPoolExecutor(max_workers=2) as pool:
            futures = {side.label: pool.submit(synthesize, side, repo, config, scratch) for side in sides}
            synths.waiting = {label: future.result() for label, future in futures.items()}
    else:
        synths.waiting = {side.label: synthesize(side, repo, config, scratch) for side in sides}
    return synths


def remove_worktree(repo: Path, worktree: Path | None) -> None:
    if worktree is None or not worktree.exists():
        return
    for name in (".venv", "node_modules"):
        link = worktree / name
        if link.is_symlink():
            link.unlink()
    result = subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(worktree)],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        print(f"make review: could not remove the temporary worktree {worktree}: {result.stderr.strip()}",
              file=sys.stderr)


def _read(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None
