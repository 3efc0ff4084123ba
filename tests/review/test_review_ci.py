"""The workflow's review jobs do what docs/review.md says: the summary from a read-only job, the comment
from a job that runs none of the pull request's code."""

from __future__ import annotations

from typing import Any

import yaml

from tests.support.synth import REPO

WORKFLOW = REPO / ".github" / "workflows" / "platform.yml"


def jobs() -> dict[str, Any]:
    return yaml.safe_load(WORKFLOW.read_text())["jobs"]


def runs(job: dict[str, Any]) -> list[str]:
    return [step["run"] for step in job["steps"] if "run" in step]


def test_the_review_job_reads_only_and_sees_the_merge_base() -> None:
    review = jobs()["review"]
    assert review["if"] == "github.event_name == 'pull_request'"
    assert review["permissions"] == {"contents": "read"}
    [checkout] = [s for s in review["steps"] if str(s.get("uses", "")).startswith("actions/checkout@")]
    assert checkout["with"] == {"fetch-depth": 0, "persist-credentials": False}
    [script] = [run for run in runs(review) if "make review" in run]
    assert 'REVIEW_BASE="origin/$GITHUB_BASE_REF" make review FORMAT=markdown OUT=review.md' in script
    assert 'cat review.md >> "$GITHUB_STEP_SUMMARY"' in script


def test_the_comment_job_writes_but_runs_no_code_of_the_pull_request() -> None:
    comment = jobs()["review-comment"]
    assert comment["needs"] == "review"
    assert comment["permissions"] == {"contents": "read", "pull-requests": "write"}
    assert "github.event.pull_request.head.repo.full_name == github.repository" in comment["if"]
    assert all("make" not in run and "python" not in run for run in runs(comment))
    assert any("gh pr comment" in run and "--edit-last" in run for run in runs(comment))


def test_no_expression_is_pasted_into_a_review_script() -> None:
    for name in ("review", "review-comment"):
        assert all("${{" not in run for run in runs(jobs()[name])), name
