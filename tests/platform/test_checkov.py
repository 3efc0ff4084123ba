"""checkov scans what this repository hands off: the synthesized CloudFormation templates of the default
app and the Kubernetes manifests in dist/. Every finding is fixed or accepted with a reason in
tests/security/accepted_findings.yaml; an acceptance that covers nothing any more fails too."""

from __future__ import annotations

from typing import Any

import pytest

from tests.security.gate import (
    Finding,
    cloudformation_findings,
    kubernetes_findings,
    load_accepted,
    report,
    stale,
    unaccepted,
)
from tests.support.synth import Assembly

# One worker runs this module: one checkov scan of each framework (the module's fixture), not one per worker.
pytestmark = pytest.mark.xdist_group("platform-checkov")


@pytest.fixture(scope="module")
def scans(assembly: Assembly) -> dict[str, tuple[list[Finding], dict[str, Any]]]:
    templates = sorted(assembly.directory.glob("*.template.json"))
    assert templates, "the synth wrote no template"
    return {"cloudformation": cloudformation_findings(templates),
            "kubernetes": kubernetes_findings(assembly.directory / "dist")}


@pytest.mark.parametrize("framework", ["cloudformation", "kubernetes"])
def test_everything_was_scanned(scans, framework: str) -> None:
    _, summary = scans[framework]
    assert summary["parsing_errors"] == 0, summary
    assert summary["resource_count"] >= (50 if framework == "cloudformation" else 5), summary
    assert summary["passed"] > 0, summary


@pytest.mark.parametrize("framework", ["cloudformation", "kubernetes"])
def test_no_unaccepted_finding(scans, framework: str) -> None:
    findings, _ = scans[framework]
    new = unaccepted(findings, load_accepted())
    assert not new, f"checkov ({framework}) findings nobody accepted:\n" + report(new)


def test_no_acceptance_outlives_its_finding(scans) -> None:
    findings = [f for framework in scans.values() for f in framework[0]]
    left = stale(findings, load_accepted(), tool="checkov")
    assert not left, f"accepted checkov findings that no longer occur (remove them): {left}"
