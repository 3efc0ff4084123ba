"""`make review` on a repository of its own: a copy of this project with two more commits.

The first adds a capture reader and raises a sampling percentage: both must show, each under its group,
marked as broadening, and ``--fail-on broadening`` must exit 1. The second changes comments only (in
the config and in the app's code): the summary must be empty and the gate must pass.

Two synths of the platform in all, each review synthesizing only its changed side: the first review's base is
the project as it is, which the run's shared synth (tests/support/synth.py) already is, so it is passed as
``--base-synth`` (its receipt: the tool refuses it unless it is of the base commit's tree, config and tools; two
synths of the same sources are byte-identical, tests/platform/test_quality_gates.py); the second review's base is
the first one's head, kept with ``--keep``. The tool's own checkout of a base (a git worktree with its own library)
is reviewed on a small app of its own (test_a_base_is_checked_out_and_synthesized_with_its_own_library), and a
receipt of other sources is refused (test_a_receipt_of_other_sources_is_refused)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import warnings
from pathlib import Path
from typing import Any

import pytest

from tests.support.synth import REPO, VENV_BIN, default_assembly, default_receipt
from tools.review import render
from tools.review.model import Review

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("review")]

READER = "arn:aws:iam::111122223333:role/bi-dashboards"
CONFIG = "config/default.yaml"


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "test", "GIT_AUTHOR_EMAIL": "test@example.com",
           "GIT_COMMITTER_NAME": "test", "GIT_COMMITTER_EMAIL": "test@example.com"}
    return subprocess.run(["git", "-C", str(repo), *args], env=env, capture_output=True, text=True, check=True).stdout


def edit(repo: Path, path: str, old: str, new: str) -> None:
    file = repo / path
    text = file.read_text()
    assert text.count(old) == 1, f"{old!r} must occur once in {path}"
    file.write_text(text.replace(old, new))


def review(repo: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    result = subprocess.run(
        [str(VENV_BIN / "python"), "-m", "tools.review", "--base", "HEAD~1", "--format", "json", *args],
        cwd=repo, env={**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}"}, capture_output=True, text=True,
        timeout=900, check=False)
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout), result.stderr


@pytest.fixture(scope="module")
def assembly(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run's shared synth of this checkout's platform (built once per run), by its receipt."""
    return default_receipt(default_assembly(tmp_path_factory).directory)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository holding this project's files as they are now (tracked and new ones), one commit."""
    repo = tmp_path_factory.mktemp("project")
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, repo / name)
    git(repo, "init", "--quiet", "--initial-branch=main")
    # The installed tools, shared: links, which .gitignore's ".venv/" (a folder) does not ignore; the
    # repository's own exclude file does, so the commit holds this checkout's files and nothing else.
    (repo / ".git" / "info" / "exclude").write_text("/.venv\n/node_modules\n")
    for name in (".venv", "node_modules"):
        (repo / name).symlink_to(REPO / name)
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "-m", "the project as it is")
    return repo


def test_a_new_reader_and_more_sampling_show_as_broadening_and_comments_show_nothing(
        project: Path, assembly: Path, tmp_path: Path) -> None:
    shared = json.loads(assembly.read_text())
    if shared["tree"] == git(project, "rev-parse", "HEAD^{tree}").strip():
        base = ["--base-synth", str(assembly)]
    else:  # the checkout changed between the shared synth and the copy (a file written meanwhile): synthesize it
        warnings.warn("tests/review: the shared synth is of other sources than the project copy; the review "
                      "synthesizes its base", stacklevel=1)
        base = []
    edit(project, CONFIG, "    - arn:aws:iam::111122223333:role/ml-analysts\n",
         f"    - arn:aws:iam::111122223333:role/ml-analysts\n    - {READER}\n")
    edit(project, CONFIG, "          initialSamplingPercentage: 5\n          bufferConfig: {batchSize: 50",
         "          initialSamplingPercentage: 100\n          bufferConfig: {batchSize: 50")
    git(project, "commit", "--quiet", "--all", "-m", "a capture reader; sample every request of mistral-7b's pods")

    status, found, log = review(project, "--fail-on", "broadening", "--keep", str(tmp_path / "first"), *base)
    assert status == 1, log  # the gate: something broadens
    lines = found["lines"]
    sampling = [line for line in lines if line["subject"] == "mistral-7b/modelPod"]
    assert sampling == [{"group": "data_governance", "subject": "mistral-7b/modelPod", "text": "sampling 5 % → 100 %",
                         "broadens": True, "where": ["llm-platform-cluster/Eks/Cluster/model-mistral-7b/Resource",
                                                     "dist/model-mistral-7b.k8s.yaml"]}]
    readers = [line for line in lines if READER in line["text"]]
    assert {line["group"] for line in readers} == {"data_governance", "encryption"}
    exempt = [line for line in readers if line["text"].startswith("CapturesOnlyListedPrincipals (Deny): now exempts")]
    assert len(exempt) == 1 and exempt[0]["broadens"] and exempt[0]["subject"].startswith("who reads captures")
    may_read = [line for line in readers if line["group"] == "data_governance" and "principals +" in line["text"]]
    assert may_read and all(line["broadens"] for line in may_read)
    key = [line for line in readers if line["group"] == "encryption"]
    assert key and all(line["broadens"] and line["subject"] == "key policy of CaptureStorage/Key" for line in key)
    assert not [line for line in lines if line["group"] == "other"], lines  # nothing left unexplained
    assert found["cdk"]["llm-platform-storage"]["broadening"]  # the CDK's own verdict agrees

    text = render.text(Review.from_json(found))
    assert "data governance (" in text and "! mistral-7b/modelPod: sampling 5 % → 100 % [broadens]" in text
    markdown = render.markdown(Review.from_json(found))
    assert "### data governance" in markdown
    assert "⚠️ **broadens** **mistral-7b/modelPod**: sampling 5 % → 100 %" in markdown
    assert "<details><summary>The CDK's own diff of llm-platform-storage" in markdown

    edit(project, CONFIG, "# Capture policy first", "# The capture policy comes first")
    edit(project, "stacks/platform.py", '"""The whole platform', '# (a comment only)\n"""The whole platform')
    git(project, "commit", "--quiet", "--all", "-m", "comments only")

    # Its base is the first review's head: the same commit, synthesized then (the receipt says so, or is refused).
    status, found, log = review(project, "--fail-on", "broadening", "--base-synth",
                                str(tmp_path / "first" / "head" / "receipt.json"))
    assert status == 0, log
    assert found["lines"] == [] and found["broadening"] == 0
    assert all(stack["changes"] == 0 and not stack["broadening"] for stack in found["cdk"].values())
    assert render.text(Review.from_json(found)).startswith("No infrastructure changes")

    # Neither run wrote into the working tree's cdk.out/ or dist/, and the base worktrees are gone.
    assert not (project / "cdk.out").exists() and not (project / "dist").exists()
    assert git(project, "worktree", "list").count("\n") == 1
    assert git(project, "status", "--porcelain") == ""
