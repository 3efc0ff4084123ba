"""Both sides synthesized offline into temporary directories, never into the working tree's cdk.out/ or dist/.

The base is checked out in a temporary git worktree (``git worktree add --detach``, removed after the
run). Each side runs its own ``app.py`` and ``cdk.json`` with this checkout's installed tools (the
venv's Python and Node.js, the pinned CDK CLI) and **its own copy of the library**: the editable
install maps ``hyperpod_inference_iac`` to this working tree's folders, so each side gets a
``hyperpod_inference_iac`` package laid out from its own ``pyproject.toml`` (the same folder-to-package
mapping the editable install and the wheel use) and put first on ``PYTHONPATH``.

A synthesized side can be reused instead of synthesized again (``--base-synth``, for tests and CI): with
``--keep``, each synth this module makes writes a *receipt* beside it (``receipt.json``: the git tree it was made
from, the config path, the assembly and dist/ folders, the synth's output), and a receipt is accepted as the base
only when its tree is the base commit's tree and its config and tools are the review's. Two synths of the same
sources and config are byte-identical (tests/platform/test_quality_gates.py), so the reused side is what the synth
would make."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
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


def synthesize(side: Side, tools_root: Path, config: str, scratch: Path, receipt: bool = False) -> dict[str, str]:
    """``cdk synth`` of one side into its own directories, offline, with the side's own library, and with
    ``receipt`` its receipt (``receipt_path(side)``). Returns the dist/ files the app left out until stack outputs
    exist (file -> the outputs it needs)."""
    tree = working_tree(side.source) if receipt else ""
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
    if receipt:
        Receipt(side.assembly, side.dist, config, tree, tools(tools_root), result.stdout + result.stderr).write(
            receipt_path(side))
    return waiting_files(result.stdout + result.stderr)


# ------------------------------------------------------------------------------------------------- receipts


def working_tree(repo: Path) -> str:
    """The git tree id of ``repo``'s files as they are (uncommitted changes and new files included, ignored files
    not): what ``git add --all && git write-tree`` would give, computed in a temporary index and a temporary object
    folder (the repository's own index and objects are read, never written)."""
    index = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-path", "index"))
    objects = git(repo, "rev-parse", "--path-format=absolute", "--git-path", "objects")
    with tempfile.TemporaryDirectory(prefix="review-index-") as temporary:
        scratch_index = Path(temporary) / "index"
        if index.is_file():
            shutil.copyfile(index, scratch_index)  # its stat cache: only changed files are read
        (Path(temporary) / "objects").mkdir()
        env = {**os.environ, "GIT_INDEX_FILE": str(scratch_index), "GIT_OBJECT_DIRECTORY": str(Path(temporary) /
               "objects"), "GIT_ALTERNATE_OBJECT_DIRECTORIES": objects}
        outputs = []
        for args in (["add", "--all"], ["write-tree"]):
            result = subprocess.run(["git", "-C", str(repo), *args], env=env, capture_output=True, text=True,
                                    check=False)
            if result.returncode != 0:
                raise ReviewError(f"git {' '.join(args)} in {repo}: {result.stderr.strip()}")
            outputs.append(result.stdout.strip())
    return outputs[-1]


def tools(tools_root: Path) -> dict[str, str]:
    """What else decides a synth: the venv and the CDK CLI it ran with (their real paths)."""
    return {name: str((tools_root / name).resolve()) for name in (".venv", "node_modules")}


def receipt_path(side: Side) -> Path:
    return side.assembly.parent / "receipt.json"


@dataclass(frozen=True)
class Receipt:
    """What a synth was made of and where it is: ``python -m tools.review --base-synth <receipt.json>`` reuses it."""

    assembly: Path  # the cloud assembly (cdk.out)
    dist: Path  # the app's dist/
    config: str  # the config path given to the app
    tree: str  # git tree id of the sources synthesized (``working_tree``)
    tools: dict[str, str]  # ``tools(...)`` of the synth
    output: str  # the synth's stdout and stderr (which dist/ files wait for stack outputs)

    def write(self, path: Path) -> None:
        path.write_text(json.dumps({"assembly": str(self.assembly), "dist": str(self.dist), "config": self.config,
                                    "tree": self.tree, "tools": self.tools, "output": self.output}, indent=1))

    @classmethod
    def read(cls, path: Path) -> Receipt:
        try:
            data = json.loads(path.read_text())
            return cls(Path(data["assembly"]), Path(data["dist"]), str(data["config"]), str(data["tree"]),
                       dict(data["tools"]), str(data["output"]))
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ReviewError(f"--base-synth {path}: not a synth receipt ({error})") from error


def prepared_base(repo: Path, base_commit: str, config: str, receipt_file: Path) -> tuple[Side, dict[str, str]]:
    """The base side from a receipt, and the dist/ files it left waiting; a ReviewError unless the receipt is of the
    base commit's tree, with the same config and tools, and its folders are there."""
    receipt = Receipt.read(receipt_file)
    base_tree = git(repo, "rev-parse", "--verify", "--quiet", f"{base_commit}^{{tree}}")
    mismatches = [f"{what}: {mine!r}, the review's: {theirs!r}" for what, mine, theirs in (
        ("tree", receipt.tree, base_tree), ("config", receipt.config, config),
        ("tools", receipt.tools, tools(repo))) if mine != theirs]
    if not (receipt.assembly / "manifest.json").is_file():
        mismatches.append(f"no cloud assembly at {receipt.assembly}")
    if mismatches:
        raise ReviewError(f"--base-synth {receipt_file} is not a synth of the base {base_commit[:12]} "
                          f"({'; '.join(mismatches)})")
    return Side("base", receipt_file.parent, receipt.assembly, receipt.dist), waiting_files(receipt.output)


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


def prepare_and_synthesize(repo: Path, base_commit: str, config: str, scratch: Path, parallel: bool = True,
                           base_synth: Path | None = None, receipts: bool = False) -> Synths:
    """Both sides synthesized into ``scratch`` (with ``receipts``, each with its receipt: ``--keep``); with
    ``base_synth`` (a receipt), only the head, the base being the receipt's synth."""
    if base_synth is not None:
        base, base_waiting = prepared_base(repo, base_commit, config, base_synth)
        head = Side("head", repo, scratch / "head" / "cdk.out", scratch / "head" / "dist")
        changed = [name for name in DEPENDENCY_FILES if _at(repo, base_commit, name) != _read(repo / name)]
        synths = Synths(base=base, head=head, base_commit=base_commit, worktree=None, dependency_changes=changed)
        synths.waiting = {"base": base_waiting, "head": synthesize(head, repo, config, scratch, receipts)}
        return synths
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
            futures = {side.label: pool.submit(synthesize, side, repo, config, scratch, receipts) for side in sides}
            synths.waiting = {label: future.result() for label, future in futures.items()}
    else:
        synths.waiting = {side.label: synthesize(side, repo, config, scratch, receipts) for side in sides}
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


def _at(repo: Path, commit: str, name: str) -> bytes | None:
    """The file ``name`` as ``commit`` holds it, None when it has none."""
    result = subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{name}"], capture_output=True, check=False)
    return result.stdout if result.returncode == 0 else None
