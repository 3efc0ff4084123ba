"""zizmor audits the repository's GitHub Actions workflows and Dependabot configuration (everything under
.github/); every finding is fixed or accepted with a reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.security.gate import load_accepted, report, run_zizmor, stale, unaccepted
from tests.support.synth import REPO

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("zizmor")]  # the scanner runs

GITHUB = REPO / ".github"

# The classic "pwn request": a privileged trigger that runs the pull request's own code.
PWN_REQUEST = """\
name: pwn-request
on: pull_request_target
jobs:
  build:
    runs-on: ubuntu-24.04
    steps:
      - uses: actions/checkout@v4
        with:
          ref: ${{ github.event.pull_request.head.sha }}
      - run: make test
"""


def test_workflows_have_no_unaccepted_finding() -> None:
    findings = run_zizmor(GITHUB)
    new = unaccepted(findings, load_accepted())
    assert not new, "zizmor findings nobody accepted:\n" + report(new)


def test_no_acceptance_outlives_its_finding() -> None:
    left = stale(run_zizmor(GITHUB), load_accepted(), tool="zizmor")
    assert not left, f"accepted zizmor findings that no longer occur (remove them): {left}"


def test_a_new_unlisted_finding_fails_the_gate(tmp_path: Path) -> None:
    workflows = tmp_path / ".github" / "workflows"
    workflows.mkdir(parents=True)
    (workflows / "pwn.yml").write_text(PWN_REQUEST)
    new = unaccepted(run_zizmor(workflows, relative_to=tmp_path), load_accepted())
    rules = {f.rule for f in new}
    assert {"dangerous-triggers", "unpinned-uses", "artipacked", "excessive-permissions"} <= rules, report(new)
    assert any(f.location == ".github/workflows/pwn.yml:on" for f in new if f.rule == "dangerous-triggers")
