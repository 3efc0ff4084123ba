"""`make review`'s own checkout of the base, on a small app of its own (seconds, not the platform's minute), and
the receipts of ``--base-synth`` (tools/review/synth.py).

tests/review/test_review.py reviews the whole platform with its base reused from a synth receipt; what that
skips, checking the base out in a git worktree and synthesizing it with *its own* library (the editable install
maps the package to the working tree, so the base must not import it), is reviewed here: the small app imports a
library mapped by its pyproject.toml, whose value differs between base and head, and the review must show the
change the two libraries make."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.review.test_review import git
from tests.support.synth import REPO, VENV_BIN
from tools.review.__main__ import main
from tools.review.synth import Receipt, tools, working_tree

APP = '''\
import json
import os
from pathlib import Path

import toylib  # only from the library the review lays out for this side (lib/ is not on sys.path)

# A cloud assembly written by hand (no aws-cdk-lib to load: seconds less per side), as the CDK CLI reads one.
out = Path(os.environ["CDK_OUTDIR"])
context = json.loads(os.environ.get("CDK_CONTEXT_JSON", "{}"))
dist = Path(context["dist"])
dist.mkdir(parents=True, exist_ok=True)
(dist / "toy.k8s.yaml").write_text(
    "apiVersion: v1\\nkind: ConfigMap\\nmetadata: {name: toy, namespace: default}\\n"
    f"data: {{greeting: {toylib.GREETING}}}\\n")
queue = {"Type": "AWS::SQS::Queue", "Properties": {"MessageRetentionPeriod": toylib.DAYS * 86400},
         "Metadata": {"aws:cdk:path": "toy/Queue/Resource"}}
(out / "toy.template.json").write_text(json.dumps({"Resources": {"Queue4A7E3555": queue}}))
(out / "manifest.json").write_text(json.dumps({"version": "55.0.0", "artifacts": {"toy": {
    "type": "aws:cloudformation:stack", "environment": "aws://unknown-account/unknown-region",
    "properties": {"templateFile": "toy.template.json", "validateOnSynth": False}, "displayName": "toy"}}}))
'''


def rev(repo: Path, ref: str) -> str:
    return git(repo, "rev-parse", ref).strip()


def library(repo: Path, greeting: str, days: int) -> None:
    (repo / "lib").mkdir(exist_ok=True)
    (repo / "lib" / "__init__.py").write_text(f"GREETING = {greeting!r}\nDAYS = {days}\n")


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    """A repository of two commits: the small app with its library, then the library changed."""
    repo = tmp_path / "toy"
    repo.mkdir()
    git(repo, "init", "--quiet", "--initial-branch=main")
    (repo / ".git" / "info" / "exclude").write_text("/.venv\n/node_modules\n")
    for name in (".venv", "node_modules"):  # the installed tools, as tests/review/test_review.py shares them
        (repo / name).symlink_to(REPO / name)
    (repo / "app.py").write_text(APP)
    (repo / "cdk.json").write_text(json.dumps({"app": ".venv/bin/python app.py"}))
    (repo / "pyproject.toml").write_text('[tool.setuptools.package-dir]\ntoylib = "lib"\n')
    (repo / "toy.yaml").write_text("name: toy\n")
    library(repo, "hello", 4)
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "-m", "the small app")
    library(repo, "bonjour", 4)
    git(repo, "commit", "--quiet", "--all", "-m", "its library says it in French")
    return repo


@pytest.mark.slow
def test_a_base_is_checked_out_and_synthesized_with_its_own_library(toy: Path, tmp_path: Path) -> None:
    found = run_review(toy, tmp_path / "kept")
    greeting = [line for line in found["lines"] if "greeting" in line["text"]]
    assert greeting and "hello" in greeting[0]["text"] and "bonjour" in greeting[0]["text"], found["lines"]
    assert all(stack["changes"] == 0 for stack in found["cdk"].values()), found["cdk"]  # the queue is the same
    # Each side left its receipt: the base of the parent commit's tree, the head of the working tree's.
    base = Receipt.read(tmp_path / "kept" / "base" / "receipt.json")
    head = Receipt.read(tmp_path / "kept" / "head" / "receipt.json")
    assert base.tree == rev(toy, "HEAD~1^{tree}") and head.tree == rev(toy, "HEAD^{tree}")
    assert base.config == head.config == "toy.yaml" and base.tools == head.tools == tools(REPO)
    # The base worktree is gone, and nothing was written into the repository.
    assert git(toy, "worktree", "list").count("\n") == 1
    assert git(toy, "status", "--porcelain") == ""


def run_review(repo: Path, keep: Path) -> dict[str, Any]:
    result = subprocess.run(
        [str(VENV_BIN / "python"), "-m", "tools.review", "--base", "HEAD~1", "--config", "toy.yaml",
         "--format", "json", "--keep", str(keep)],
        cwd=repo, env={**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}",
                       "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))},
        capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr
    found: dict[str, Any] = json.loads(result.stdout)
    return found


def test_a_receipt_of_other_sources_is_refused(toy: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Reusing a synth of the head as the base (or of another config, or other tools) would hide every change:
    the review stops with status 2 and says which of them differs, before synthesizing anything."""
    (tmp_path / "cdk.out").mkdir()
    (tmp_path / "cdk.out" / "manifest.json").write_text("{}")
    receipt = tmp_path / "receipt.json"
    Receipt(tmp_path / "cdk.out", tmp_path / "dist", "config/other.yaml", working_tree(toy),
            {".venv": "/elsewhere/.venv", "node_modules": "/elsewhere/node_modules"}, "").write(receipt)
    status = main(["--repo", str(toy), "--base", "HEAD~1", "--config", "toy.yaml", "--base-synth", str(receipt),
                   "--keep", str(tmp_path / "kept")])
    error = capsys.readouterr().err
    assert status == 2, error
    assert f"--base-synth {receipt} is not a synth of the base {rev(toy, 'HEAD~1')[:12]}" in error
    assert f"tree: {rev(toy, 'HEAD^{tree}')!r}" in error  # the head's: would hide the change
    assert "config: 'config/other.yaml', the review's: 'toy.yaml'" in error and "/elsewhere/.venv" in error
    assert not (tmp_path / "kept" / "head").exists()  # nothing synthesized

    Receipt(tmp_path / "cdk.out", tmp_path / "dist", "toy.yaml", rev(toy, "HEAD~1^{tree}"),
            tools(toy), "").write(receipt)
    (tmp_path / "cdk.out" / "manifest.json").unlink()
    assert main(["--repo", str(toy), "--base", "HEAD~1", "--config", "toy.yaml", "--base-synth", str(receipt)]) == 2
    assert f"no cloud assembly at {tmp_path / 'cdk.out'}" in capsys.readouterr().err

    receipt.write_text("{}")
    assert main(["--repo", str(toy), "--base", "HEAD~1", "--config", "toy.yaml", "--base-synth", str(receipt)]) == 2
    assert "not a synth receipt" in capsys.readouterr().err
