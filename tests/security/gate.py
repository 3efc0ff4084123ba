"""The scanners' gate: every finding of zizmor and checkov is either fixed or listed, with its reason, in
``accepted_findings.yaml``. A finding that no entry covers fails the test that ran the scanner, and so
does an entry that covers nothing any more (an acceptance outlives the finding it was written for only
until the next run).

A finding is ``(tool, rule, location)``. Locations are stable names, not line numbers:

* zizmor: ``<workflow path>:<YAML route>``, e.g. ``.github/workflows/platform.yml:jobs.deploy.steps[0].uses``;
* checkov on CloudFormation: the resource's construct path (``aws:cdk:path``), e.g.
  ``llm-platform-storage/CapturePipeline/Function/Resource``;
* checkov on Kubernetes: ``<file name>:<checkov resource id>``, e.g.
  ``portable-qwen3-8b-portable.k8s.yaml:Deployment.inference.qwen3-8b-portable``.

An entry's ``resources`` are glob patterns (``fnmatch``, case-sensitive) over locations; its ``reason``
says why the finding is acceptable, or starts with ``OPEN:`` when it is a real weakness that is still to
be fixed (listed so that it is visible, and so that nothing new hides behind it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import yaml

from tests.support.synth import REPO

ACCEPTED_FILE = Path(__file__).with_name("accepted_findings.yaml")
TOOLS = ("zizmor", "checkov")
ZIZMOR = Path(sys.executable).parent / "zizmor"
CHECKOV = REPO / ".venv" / "checkov" / "bin" / "checkov"


@dataclass(frozen=True)
class Finding:
    tool: str
    rule: str
    location: str
    title: str = ""

    def __str__(self) -> str:
        return f"{self.tool} {self.rule} at {self.location}: {self.title}"


@dataclass(frozen=True)
class Acceptance:
    tool: str
    rule: str
    resources: tuple[str, ...]
    reason: str

    def covers(self, finding: Finding) -> bool:
        return (finding.tool == self.tool and finding.rule == self.rule
                and any(fnmatchcase(finding.location, pattern) for pattern in self.resources))


def load_accepted(path: Path = ACCEPTED_FILE) -> list[Acceptance]:
    document = yaml.safe_load(path.read_text()) or {}
    entries = document.get("accepted") or []
    accepted = []
    for index, entry in enumerate(entries):
        where = f"{path.name}: accepted[{index}]"
        assert set(entry) == {"tool", "rule", "resources", "reason"}, f"{where}: keys tool, rule, resources, reason"
        assert entry["tool"] in TOOLS, f"{where}: tool must be one of {TOOLS}"
        assert isinstance(entry["resources"], list) and entry["resources"], f"{where}: resources must be a list"
        assert all(isinstance(r, str) and r for r in entry["resources"]), f"{where}: resources are strings"
        assert isinstance(entry["reason"], str) and len(entry["reason"]) >= 40, f"{where}: say why, in a sentence"
        accepted.append(Acceptance(entry["tool"], entry["rule"], tuple(entry["resources"]), entry["reason"].strip()))
    return accepted


def unaccepted(findings: Iterable[Finding], accepted: Sequence[Acceptance]) -> list[Finding]:
    return [f for f in findings if not any(a.covers(f) for a in accepted)]


def stale(findings: Sequence[Finding], accepted: Sequence[Acceptance], *, tool: str) -> list[str]:
    """Patterns of ``tool``'s entries that cover none of ``findings`` (all of that tool's findings)."""
    return [f"{entry.rule} {pattern}" for entry in accepted if entry.tool == tool for pattern in entry.resources
            if not any(f.rule == entry.rule and fnmatchcase(f.location, pattern) for f in findings)]


def report(findings: Sequence[Finding]) -> str:
    return "\n".join(f"  - {f}" for f in findings) + (
        "\nFix each, or list it in tests/security/accepted_findings.yaml with a reason a reviewer accepts"
        " (docs/security-ci.md).")


def _require(binary: Path) -> None:
    assert binary.exists(), f"{binary} is missing: run `make setup` (it installs the scanners)"


# zizmor --------------------------------------------------------------------------------------------

def _route(route: Sequence[dict[str, Any]]) -> str:
    text = ""
    for part in route:
        if "Key" in part:
            text += ("." if text else "") + str(part["Key"])
        else:
            text += f"[{part['Index']}]"
    return text


def run_zizmor(*inputs: Path, relative_to: Path = REPO) -> list[Finding]:
    """Every zizmor finding (auditor persona: the most findings, false positives included), offline,
    with no configuration file and no ignore comment honoured: acceptances live in one place only."""
    _require(ZIZMOR)
    result = subprocess.run(
        [str(ZIZMOR), "--offline", "--no-config", "--no-ignores", "--persona", "auditor", "--format", "json-v1",
         "--no-exit-codes", "--no-progress", "--strict-collection", *map(str, inputs)],
        capture_output=True, text=True, timeout=300, check=False, cwd=relative_to,
    )
    assert result.returncode == 0, f"zizmor failed:\n{result.stdout}\n{result.stderr}"
    findings = []
    for item in json.loads(result.stdout):
        primary = next((loc for loc in item["locations"] if loc["symbolic"].get("kind") == "Primary"),
                       item["locations"][0])
        symbolic = primary["symbolic"]
        path = Path(symbolic["key"]["Local"]["verbatim_path"])
        if path.is_absolute() and path.is_relative_to(relative_to):
            path = path.relative_to(relative_to)
        findings.append(Finding("zizmor", item["ident"], f"{path.as_posix()}:{_route(symbolic['route']['route'])}",
                                item["desc"]))
    return findings


# checkov -------------------------------------------------------------------------------------------

def run_checkov(framework: str, *targets: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """checkov's failed (and inline-skipped) checks and its summary for ``targets`` (files, or directories),
    offline: no download of external checks, no Prisma Cloud mapping, no version check."""
    _require(CHECKOV)
    args: list[str] = []
    for target in targets:
        args += ["-d" if target.is_dir() else "-f", str(target)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BC_", "PRISMA_", "CKV_", "CHECKOV_"))}
    env.update({"BC_SKIP_MAPPING": "TRUE", "CHECKOV_NO_VERSION_CHECK": "TRUE", "LOG_LEVEL": "WARNING"})
    result = subprocess.run(
        [str(CHECKOV), "--framework", framework, *args, "--output", "json", "--compact",
         "--soft-fail", "--skip-download"],
        capture_output=True, text=True, timeout=600, check=False, env=env, cwd=targets[0].parent,
    )
    assert result.returncode == 0, f"checkov failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    reports = json.loads(result.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    # A check skipped by an inline `checkov:skip` counts as failed: acceptances live in one file only.
    failed = [check for r in reports for kind in ("failed_checks", "skipped_checks")
              for check in r.get("results", {}).get(kind, [])]
    summary = {key: sum(r["summary"].get(key, 0) for r in reports)
               for key in ("passed", "failed", "parsing_errors", "resource_count")}
    return failed, summary


def cloudformation_findings(templates: Sequence[Path]) -> tuple[list[Finding], dict[str, Any]]:
    """checkov's findings on synthesized templates, each named by its resource's construct path."""
    paths = {}
    for template in templates:
        resources = json.loads(template.read_text()).get("Resources", {})
        stack = template.name.removesuffix(".template.json")
        paths[template.name] = {lid: r.get("Metadata", {}).get("aws:cdk:path", f"{stack}/{lid}")
                                for lid, r in resources.items()}
    failed, summary = run_checkov("cloudformation", *templates)
    findings = []
    for check in failed:
        name = Path(check["file_path"]).name
        logical_id = check["resource"].split(".", 1)[1]
        findings.append(Finding("checkov", check["check_id"], paths[name].get(logical_id, f"{name}:{logical_id}"),
                                check["check_name"]))
    return findings, summary


def kubernetes_findings(directory: Path) -> tuple[list[Finding], dict[str, Any]]:
    failed, summary = run_checkov("kubernetes", directory)
    return [Finding("checkov", c["check_id"], f"{Path(c['file_path']).name}:{c['resource']}", c["check_name"])
            for c in failed], summary
