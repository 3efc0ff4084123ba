"""The library as another team gets it: the wheel built from this repository, installed into a fresh
virtual environment outside it, and every consumer app in examples/ synthesized with it.

Each example is synthesized twice: with its cdk.json as ``cdk init`` writes it, and with the ``context``
block removed (no feature flag of any app), the second time under cdk-nag's AWS Solutions pack, the way
a consumer who runs cdk-nag would. Findings on the library's constructs must all be acknowledged by
the library; only the example's own resources (its VPC, its cluster, its own role) may be reported.

All fourteen synths run in one Python process of the consumer venv (synth_driver.py: one jsii kernel, one import
of aws-cdk-lib and the library), each as the CDK CLI runs an app; once per test run, shared with
test_feature_flags.py (tests/support/consumer.py). One example (``CONTROL``) is synthesized by the real CLI too,
both variants, and what the CLI writes must be what the driver wrote: the context the CLI passes, the manifest,
the staged assets, the validation report, and nothing left behind by the examples synthesized before it.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.examples.synth_driver import CLI_VERSION
from tests.support.consumer import (
    CONTROL,
    DRIVER_CHECKS,
    DRIVER_CHECKS_FOLDER,
    VARIANTS,
    Consumer,
    ExamplesSynth,
    copy_example,
    example_names,
)
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


def _cli_synth(consumer: Consumer, folder: Path, outdir: Path, *app: str) -> subprocess.CompletedProcess[str]:
    command = [str(REPO / "node_modules" / ".bin" / "cdk"), "synth", "--quiet", "--no-notices", "-o", str(outdir)]
    if app:
        command += ["--app", " ".join(app)]
    return subprocess.run(command, cwd=folder, env=consumer.env(), capture_output=True, text=True, timeout=900,
                          check=False)


def _plugins(outdir: Path) -> list[str]:
    """The validation plugins that found something (aws-cdk-lib writes the report, empty, when none did; its own
    "Construct Annotations" reports the library's warnings where the project's feature flags ask for it)."""
    report = json.loads((outdir / "validation-report.json").read_text())
    return [plugin["pluginName"] for plugin in report["pluginReports"]]


def _violations(outdir: Path) -> list[tuple[str, str]]:
    report = json.loads((outdir / "validation-report.json").read_text())
    return [(v["ruleName"], c["constructPath"]) for plugin in report["pluginReports"]
            for v in plugin["violations"] for c in v["violatingConstructs"]]


@pytest.mark.parametrize("example", sorted(OWN_RESOURCES))
def test_example_synthesizes_with_the_installed_wheel(examples_synth: ExamplesSynth, example: str) -> None:
    assert sorted(OWN_RESOURCES) == sorted(example_names()), "each example says which resources are its own"
    with_context = examples_synth.outdir(example, "with-context")
    assert list(with_context.glob("*.template.json"))
    manifest = json.loads((with_context / "manifest.json").read_text())
    assert "missing" not in manifest, "the example needed an account lookup"
    assert "AwsSolutions" not in _plugins(with_context), "cdk-nag ran on an app that does not add it"

    cdk_json = json.loads((EXAMPLES / example / "cdk.json").read_text())
    assert cdk_json["context"], "the example keeps the cdk.json cdk init writes"
    without_context = examples_synth.outdir(example, "without-context")
    assert "context" not in json.loads((without_context.parent / "app" / "cdk.json").read_text())
    violations = _violations(without_context)
    stack_ids = {p.name.removesuffix(".template.json") for p in without_context.glob("*.template.json")}
    own = tuple(f"{stack}/{resource}/" for stack in stack_ids for resource in OWN_RESOURCES[example])
    library = [(rule, path) for rule, path in violations if not path.startswith(own)]
    assert library == [], json.dumps(library, indent=1)
    if own:  # cdk-nag did judge: the example's own VPC and cluster have findings of their own
        assert violations


# The jsii kernel unpacks aws-cdk-lib into a new temporary folder per process; the stack traces of warnings in
# <stack>.metadata.json name it, so two CLI synths of one app differ there too.
_KERNEL_DIR = re.compile(rb"/jsii-kernel-[A-Za-z0-9]+/")
# What the CLI's process writes besides the app's cloud assembly: performance counters, written by a synth slower
# than aws-cdk-lib's threshold (a machine under load), for the CLI's telemetry.
_CLI_SIDE_FILES = {"performance-counters.json"}


def _assembly_digest(outdir: Path) -> dict[str, str]:
    """Every file of a cloud assembly with the SHA-256 of its bytes, the kernel's folder masked."""
    return {str(p.relative_to(outdir)): hashlib.sha256(_KERNEL_DIR.sub(b"/jsii-kernel-X/", p.read_bytes())).hexdigest()
            for p in sorted(outdir.rglob("*")) if p.is_file() and p.name not in _CLI_SIDE_FILES}


def test_the_driver_does_what_this_cli_does() -> None:
    """synth_driver.py gives each app the context and variables of the CDK CLI in node_modules, read from its source
    (@aws-cdk/toolkit-lib's contextFromSettings); a new CLI may give others: read them again, then change this."""
    cli = json.loads((REPO / "node_modules" / "aws-cdk" / "package.json").read_text())
    assert cli["version"] == CLI_VERSION


def test_the_real_cli_writes_what_the_driver_wrote(consumer: Consumer, examples_synth: ExamplesSynth,
                                                   tmp_path: Path) -> None:
    """``cdk synth`` of ``CONTROL``, both variants (the second through nag_app.py, as a consumer runs cdk-nag): the
    CLI exits as it should and writes, file for file and byte for byte, the cloud assembly the driver wrote for it
    after synthesizing every other example in the same process."""
    jobs = json.loads((examples_synth.root / "jobs.json").read_text())
    assert [job["name"] for job in jobs][:len(DRIVER_CHECKS)] == [f"check: {name}" for name in DRIVER_CHECKS]
    assert [job["name"] for job in jobs][-2:] == [f"{CONTROL} ({variant})" for variant in VARIANTS]
    for variant, nag in VARIANTS.items():
        folder = copy_example(CONTROL, tmp_path / variant / "app", with_context=not nag)
        outdir = tmp_path / variant / "cdk.out"
        result = _cli_synth(consumer, folder, outdir, *(("python3", str(NAG_APP), "app.py") if nag else ()))
        if nag:  # the CLI reports the example's own findings and exits 1
            assert result.returncode == 0 or _violations(outdir), result.stderr[-3000:]
        else:
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        cli, driver = _assembly_digest(outdir), _assembly_digest(examples_synth.outdir(CONTROL, variant))
        assert sorted(cli) == sorted(driver), variant
        assert [name for name in cli if cli[name] != driver[name]] == [], variant


def test_the_driver_reports_each_apps_failure_under_its_name_and_leaks_nothing(examples_synth: ExamplesSynth) -> None:
    """The driver's own checks, run before the examples in the same process (tests/support/consumer.py,
    ``DRIVER_CHECKS``): three broken apps and one with an app command the driver does not run, then the same small
    app twice, with a context value under cdk-nag, then without either. Each broken one fails alone with its own
    error (and the examples after them synthesize); each small one gets its own outdir, context and working
    directory, and cdk-nag only where asked."""
    root = examples_synth.root / DRIVER_CHECKS_FOLDER
    results = {name: json.loads((root / name / "cdk.out.result.json").read_text()) for name in DRIVER_CHECKS}
    assert results["raises"]["ok"] is False and "ValueError: broken on purpose" in results["raises"]["error"]
    assert results["exits"]["ok"] is False and "SystemExit: 3" in results["exits"]["error"]
    assert results["makes-no-app"]["ok"] is False and "wrote no cloud assembly" in results["makes-no-app"]["error"]
    assert results["node-app"]["ok"] is False and "'node app.js'" in results["node-app"]["error"]
    for name in ("nagged", "plain"):
        assert results[name] == {"name": f"check: {name}", "ok": True}
        seen = json.loads((root / name / "seen.json").read_text())
        marker = "first" if name == "nagged" else None
        assert seen == {"marker": marker, "outdir": str(root / name / "cdk.out"), "cwd": str(root / name / "app")}
        assert (root / name / "cdk.out" / "Small.template.json").is_file()
    assert _plugins(root / "nagged" / "cdk.out") == ["AwsSolutions"]
    assert _violations(root / "nagged" / "cdk.out")
    assert "AwsSolutions" not in _plugins(root / "plain" / "cdk.out")
