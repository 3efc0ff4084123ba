"""Run the real CDK CLI the way a user does, into a throw-away directory."""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

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


def run_cdk_synth(outdir: Path, config: str | Path = "config/default.yaml",
                  context: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``cdk synth`` into ``outdir``; the app writes its Kubernetes manifests to ``outdir/dist``."""
    extra = [arg for key, value in (context or {}).items() for arg in ("-c", f"{key}={value}")]
    return subprocess.run(
        [str(CDK), "synth", "--quiet", "--no-notices", "-o", str(outdir), "-c", f"config={config}",
         "-c", f"dist={outdir}/dist", *extra],
        cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=600, check=False,
    )


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
