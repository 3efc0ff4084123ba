"""Run the real CDK CLI the way a user does, into a throw-away directory."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.shared import built_once

REPO = Path(__file__).resolve().parents[2]
CDK = REPO / "node_modules" / ".bin" / "cdk"
TELEMETRY_TRAP = "http://127.0.0.1:9/metrics"  # the discard port, closed: a telemetry send would fail here
VENV_BIN = REPO / ".venv" / "bin"


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}:{REPO / 'node_modules' / '.bin'}:{env.get('PATH', '')}"
    env["CDK_DISABLE_VERSION_CHECK"] = "true"
    # No telemetry from any CLI call of the tests (cdk.json says so too; tests/unit/test_cli_telemetry.py checks
    # both), and should anything still try, it goes to a closed port on loopback, never to the internet.
    env["CDK_DISABLE_CLI_TELEMETRY"] = "true"
    env["TELEMETRY_ENDPOINT"] = TELEMETRY_TRAP
    # No credentials and no profile: synth must work without any AWS access.
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        env.pop(name, None)
    env["AWS_CONFIG_FILE"] = env["AWS_SHARED_CREDENTIALS_FILE"] = "/nonexistent"
    return env


DEFAULT_CONFIG = "config/default.yaml"


def run_cdk_synth(outdir: Path, config: str | Path = DEFAULT_CONFIG, context: dict[str, str] | None = None,
                  env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``cdk synth`` into ``outdir``; the app writes its Kubernetes manifests to ``outdir/dist``. ``env``: variables
    set on top of ``cli_env()``."""
    extra = [arg for key, value in (context or {}).items() for arg in ("-c", f"{key}={value}")]
    return subprocess.run(
        [str(CDK), "synth", "--quiet", "--no-notices", "-o", str(outdir), "-c", f"config={config}",
         "-c", f"dist={outdir}/dist", *extra],
        cwd=REPO, env={**cli_env(), **(env or {})}, capture_output=True, text=True, timeout=600, check=False,
    )


DEFAULT_PLATFORM = "default-platform"  # the shared synth's folder in the run's base temp folder


def default_assembly(factory: pytest.TempPathFactory) -> Assembly:
    """The default platform (config/default.yaml) synthesized by the CDK CLI once per test run, for every test
    that reads it (tests/platform, tests/rehearsal), whichever worker runs them (tests/support/shared.py; the
    controller starts it as soon as a worker has collected a test that needs it). Read it, never write into it:
    ``recorded_fingerprint`` is what it held when the synth finished (tests/platform/test_quality_gates.py)."""
    return Assembly(built_once(factory, DEFAULT_PLATFORM, build_default_platform))


def build_default_platform(outdir: Path) -> None:
    """``cdk synth`` of config/default.yaml into ``outdir``, importing this checkout's library even when the venv's
    editable install points at another checkout (git worktrees sharing one venv): ``checkout_import_path`` comes
    first on PYTHONPATH."""
    from tests.support.rehearsal import checkout_import_path
    from tools.review.synth import Receipt, tools, working_tree

    shim = checkout_import_path(REPO, outdir.with_name(f"{outdir.name}.import-path"))
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(shim), os.environ.get("PYTHONPATH")]))}
    tree = working_tree(REPO)
    result = run_cdk_synth(outdir, env=env)
    assert result.returncode == 0, f"cdk synth failed:\n{result.stdout}\n{result.stderr}"
    outdir.with_name(f"{outdir.name}.fingerprint.json").write_text(json.dumps(fingerprint(outdir), indent=1))
    Receipt(outdir, outdir / "dist", DEFAULT_CONFIG, tree, tools(REPO), result.stdout + result.stderr).write(
        default_receipt(outdir))


def default_receipt(directory: Path) -> Path:
    """The shared synth's receipt for ``make review``'s ``--base-synth`` (tools/review/synth.py): its sources'
    git tree (this checkout's files as they are, uncommitted ones included), config and tools, beside it."""
    return directory.with_name(f"{directory.name}.receipt.json")


def fingerprint(directory: Path) -> dict[str, str]:
    """Every file under ``directory`` (relative path) with the SHA-256 of its bytes."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


@dataclass(frozen=True)
class Assembly:
    directory: Path

    @property
    def templates(self) -> dict[str, dict[str, Any]]:
        return {p.name.removesuffix(".template.json"): json.loads(p.read_text())
                for p in sorted(self.directory.glob("*.template.json"))}

    def template(self, suffix: str) -> dict[str, Any]:
        matches = [t for name, t in self.templates.items() if name.endswith(suffix)]
        assert len(matches) == 1, f"expected one stack ending in {suffix!r}, have {list(self.templates)}"
        return matches[0]

    @property
    def manifests(self) -> dict[str, list[dict[str, Any]]]:
        """dist/: chart file name -> its Kubernetes objects."""
        return {p.name: [doc for doc in yaml.safe_load_all(p.read_text()) if doc]
                for p in sorted((self.directory / "dist").glob("*.k8s.yaml"))}

    @property
    def validation_report(self) -> dict[str, Any]:
        return json.loads((self.directory / "validation-report.json").read_text())

    @property
    def recorded_fingerprint(self) -> dict[str, str]:
        """``fingerprint`` of the directory as the synth left it (shared synths record it)."""
        return json.loads(self.directory.with_name(f"{self.directory.name}.fingerprint.json").read_text())


_ASSET_HASH = re.compile(r"[0-9a-f]{64}")


def mask_volatile(value: Any) -> Any:
    """Replace asset hashes (content digests of staged files) so a snapshot diff shows only real
    changes; everything else in a template is deterministic and stays as it is."""
    if isinstance(value, dict):
        return {k: mask_volatile(v) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_volatile(v) for v in value]
    if isinstance(value, str):
        return _ASSET_HASH.sub("<asset-hash>", value)
    return value


# ------------------------------------------------------------------------------- acknowledgments in snapshots
# cdk-nag writes every acknowledgment into the metadata of each resource it covers (``cdk_nag.rules_to_suppress``,
# the audit trail), the whole reason each time: one reason of the cluster stack is there 36 times. A template
# snapshot keeps, in its place, a reference that does not depend on the wording; the reasons are snapshotted once
# each, in a table of their own (tests/platform/test_acknowledgments.py): rewording one changes one line there.


def reason_refs(templates: Iterable[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """(rule, reason) -> its reference, for every acknowledgment in ``templates``. A reason of the library's
    ``hyperpod_inference_iac.foundation.nag.REASONS`` is referred to by its key there; any other (aws-cdk-lib writes a
    few
    of its own) by its rule and its rank among that rule's other such reasons, in order of appearance."""
    from hyperpod_inference_iac.foundation.nag import REASONS

    keys = {(rule, reason): key for key, (rule, reason) in REASONS.items()}
    refs: dict[tuple[str, str], str] = {}
    for template in templates:
        for where, rule, reason in acknowledgments(template):
            assert isinstance(reason, str) and reason.strip(), f"{where}: {rule} is acknowledged without a reason"
            if (rule, reason) not in refs:
                rank = sum(1 for other_rule, _ in refs if other_rule == rule) + 1
                refs[(rule, reason)] = keys.get((rule, reason), f"{rule}#{rank}")
    return refs


def acknowledgments(template: dict[str, Any]) -> Iterator[tuple[str, str, Any]]:
    """(resource, rule, reason) of every acknowledgment in the template's cdk_nag metadata; the rule without
    its evidence (``AwsSolutions-IAM5[Resource::*]`` -> ``AwsSolutions-IAM5``)."""
    for logical_id, resource in template.get("Resources", {}).items():
        for entry in resource.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", []):
            yield logical_id, entry["id"].split("[")[0], entry.get("reason")


def snapshot_view(template: dict[str, Any], refs: dict[tuple[str, str], str]) -> dict[str, Any]:
    """The template as its snapshot holds it: asset hashes masked (``mask_volatile``), each acknowledgment's
    reason replaced by ``<reason REF>`` (``reason_refs``)."""
    view = mask_volatile(template)
    for resource in view.get("Resources", {}).values():
        for entry in resource.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", []):
            entry["reason"] = f"<reason {refs[(entry['id'].split('[')[0], entry['reason'])]}>"
    return view
