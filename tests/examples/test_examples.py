"""The library as another team gets it: the wheel built from this repository, installed into a fresh
virtual environment outside it, and every consumer app in examples/ synthesized with the real CDK CLI.

Each example is synthesized twice: with its cdk.json as ``cdk init`` writes it, and with the ``context``
block removed (no feature flag of any app), the second time under cdk-nag's AWS Solutions pack, the way
a consumer who runs cdk-nag would. Findings on the library's constructs must all be acknowledged by
the library; only the example's own resources (its VPC, its cluster, its own role) may be reported.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.support.consumer import Consumer, consumer_for
from tests.support.synth import REPO

pytestmark = pytest.mark.slow

EXAMPLES = REPO / "examples"
NAG_APP = Path(__file__).with_name("nag_app.py")
# What the wheel must carry besides Python modules: what its constructs deploy or validate against.
PACKAGE_DATA = (
    "hyperpod_inference_iac/py.typed",
    "hyperpod_inference_iac/cluster/hyperpod_lifecycle/on_create.sh",
    "hyperpod_inference_iac/capture_processor/handler.py",
    "hyperpod_inference_iac/capture_processor/capture_core/processor.py",
    "hyperpod_inference_iac/capture_processor/node_hours_sampler.py",  # (GpuCost's sampler, in the same asset)
    "hyperpod_inference_iac/sidecar/Dockerfile",
    "hyperpod_inference_iac/sidecar/capture_sidecar/proxy.py",
    "hyperpod_inference_iac/charts/crds/inference.sagemaker.aws.amazon.com_inferenceendpointconfigs.yaml",
    "hyperpod_inference_iac/charts/crd_overlays/inferencegatewayconfig.v1alpha1.yaml",
    "hyperpod_inference_iac/charts/crd_overlays/iec-jsm.sidecar-resources.yaml",
)
# The construct ids each example gives its own (not the library's) resources: cdk-nag may report those.
OWN_RESOURCES = {
    "capture-storage": (),
    "hyperpod-operator": ("Vpc", "Eks", "Kubectl"),
    "inference-endpoint": (),
    "inference-gateway": (),
    "platform-alarms": (),
    "portable-server": (),
    "sidecar-metrics": (),
}


@pytest.fixture(scope="session")
def consumer(tmp_path_factory: pytest.TempPathFactory) -> Consumer:
    """One wheel and one venv per test run, whichever worker asks first (tests/support/consumer.py)."""
    return consumer_for(tmp_path_factory)


def test_the_wheel_ships_the_library_and_its_package_data_only(consumer: Consumer) -> None:
    names = zipfile.ZipFile(consumer.wheel).namelist()
    assert [n for n in PACKAGE_DATA if n not in names] == []
    top_level = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top_level == {"hyperpod_inference_iac"}  # no stacks/, charts/ or platform_config/ of its own
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    metadata = zipfile.ZipFile(consumer.wheel).read(
        next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    core = [line for line in requires if "extra ==" not in line]
    assert not [line for line in core if any(tool in line for tool in ("pytest", "cdk-nag", "moto", "ruff"))]


def test_the_installed_library_finds_its_package_data_outside_the_repository(consumer: Consumer) -> None:
    script = ("from hyperpod_inference_iac.foundation._package_data import package_dir as p\n"
              "print(p('hyperpod_inference_iac.capture_processor'))\n"
              "print(p('hyperpod_inference_iac.cluster', 'hyperpod_lifecycle'))\n"
              "print(p('hyperpod_inference_iac.sidecar'))\n")
    result = subprocess.run([str(consumer.venv / "bin" / "python"), "-c", script], capture_output=True, text=True,
                            cwd=consumer.venv, env=consumer.env(), check=True, timeout=120)
    for line in result.stdout.split():
        assert Path(line).is_dir() and str(REPO) not in line, line


def _synth(consumer: Consumer, folder: Path, outdir: Path, *app: str) -> subprocess.CompletedProcess[str]:
    command = [str(REPO / "node_modules" / ".bin" / "cdk"), "synth", "--quiet", "--no-notices", "-o", str(outdir)]
    if app:
        command += ["--app", " ".join(app)]
    return subprocess.run(command, cwd=folder, env=consumer.env(), capture_output=True, text=True, timeout=900,
                          check=False)


@pytest.mark.parametrize("example", sorted(OWN_RESOURCES))
def test_example_synthesizes_with_the_installed_wheel(consumer: Consumer, example: str, tmp_path: Path) -> None:
    folder = tmp_path / example
    shutil.copytree(EXAMPLES / example, folder, ignore=shutil.ignore_patterns("cdk.out", "__pycache__"))
    result = _synth(consumer, folder, tmp_path / "with-context")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert list((tmp_path / "with-context").glob("*.template.json"))
    manifest = json.loads((tmp_path / "with-context" / "manifest.json").read_text())
    assert "missing" not in manifest, "the example needed an account lookup"

    cdk_json = json.loads((folder / "cdk.json").read_text())
    assert cdk_json["context"], "the example keeps the cdk.json cdk init writes"
    del cdk_json["context"]
    (folder / "cdk.json").write_text(json.dumps(cdk_json, indent=2))
    nagged = _synth(consumer, folder, tmp_path / "without-context", "python3", str(NAG_APP), "app.py")
    report = json.loads((tmp_path / "without-context" / "validation-report.json").read_text())
    violations = [(v["ruleName"], c["constructPath"]) for plugin in report["pluginReports"]
                  for v in plugin["violations"] for c in v["violatingConstructs"]]
    stack_ids = {p.name.removesuffix(".template.json") for p in (tmp_path / "without-context").glob("*.template.json")}
    own = tuple(f"{stack}/{resource}/" for stack in stack_ids for resource in OWN_RESOURCES[example])
    library = [(rule, path) for rule, path in violations if not path.startswith(own)]
    assert library == [], json.dumps(library, indent=1)
    if own:  # cdk-nag did judge: the example's own VPC and cluster have findings of their own
        assert violations
    assert nagged.returncode == 0 or violations, nagged.stderr[-3000:]
