"""The library as another team gets it (tests/examples): the wheel built from a copy of this checkout's sources,
installed with its dependencies into a fresh venv outside the repository; and the examples synthesized with it;
each once per test run."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.support.shared import built_once
from tests.support.synth import REPO, cli_env

NAME = "consumer"  # its folder in the run's base temp folder


@dataclass(frozen=True)
class Consumer:
    venv: Path
    wheel: Path

    def env(self) -> dict[str, str]:
        env = cli_env()
        env["PATH"] = f"{self.venv / 'bin'}:{REPO / 'node_modules' / '.bin'}:/usr/bin:/bin"
        env.pop("PYTHONPATH", None)
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # the first example compiles what it imports, for the others
        return env


def build_consumer(root: Path) -> None:
    """The wheel, built from a copy of the sources (the repository is left untouched), and a fresh venv with it
    (and cdk-nag, which consumers bring themselves) installed from the package registry.

    ``--no-compile``: pip would byte-compile all of site-packages (about 20 s of CPU, most of it aws-cdk-lib's
    modules no example imports); Python compiles what the examples import on first use instead, and writes it
    (``Consumer.env``), once for all of them."""
    source = root / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for name in ("constructs_lib", "charts", "lambda", "sidecar"):
        shutil.copytree(REPO / name, source / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(root / "wheel"),
                    str(source)], check=True, capture_output=True, text=True, timeout=300)
    (wheel,) = (root / "wheel").glob("*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    install = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "--no-compile", "-c", str(REPO / "constraints.txt"), str(wheel), "cdk-nag"],
        capture_output=True, text=True, timeout=1200, check=False)
    assert install.returncode == 0, install.stderr[-3000:]


def consumer_for(factory: pytest.TempPathFactory) -> Consumer:
    """The run's one consumer (tests/support/shared.py): built by the first worker that asks, or already by the
    controller, which starts it as soon as a worker has collected an example's test (tests/conftest.py)."""
    root = built_once(factory, NAME, build_consumer)
    (wheel,) = (root / "wheel").glob("*.whl")
    return Consumer(root / "venv", wheel)


# ----------------------------------------------------------------------------------- the examples, synthesized once
# tests/examples/synth_driver.py synthesizes every example of examples/ in one process of the consumer venv, as the
# CDK CLI would (one jsii kernel and one aws-cdk-lib import for all), twice: with its cdk.json as ``cdk init`` writes
# it, and without the ``context`` block under cdk-nag's AWS Solutions pack. tests/examples/test_examples.py and
# test_feature_flags.py read its output; test_examples.py keeps the real CLI for one example (``CONTROL``) and
# compares what the CLI writes with what the driver wrote.

SYNTH_NAME = "examples-synth"  # its folder in the run's base temp folder
EXAMPLES = REPO / "examples"
DRIVER = REPO / "tests" / "examples" / "synth_driver.py"
# The example kept on the real CLI: the one the CLI has the most to do for (seven staged assets with its cdk.json,
# eight without, two of them zip files; the most resources, 91 against 7-42; findings of its own under cdk-nag, so a
# non-zero exit of ``cdk synth``). The driver synthesizes it last, after the twelve other synths, so that anything
# one app leaves behind in the process shows in the comparison with the CLI's output.
CONTROL = "hyperpod-operator"
# Each variant's folder and whether it runs under cdk-nag (tests/examples/nag_app.py).
VARIANTS = {"with-context": False, "without-context": True}


def example_names() -> list[str]:
    """The examples, ``CONTROL`` last: the order the driver runs them in."""
    names = sorted(p.name for p in EXAMPLES.iterdir() if (p / "cdk.json").is_file())
    return [name for name in names if name != CONTROL] + [CONTROL]


def copy_example(name: str, folder: Path, with_context: bool) -> Path:
    """A copy of ``examples/<name>`` in ``folder`` (the repository's is never written), its cdk.json without the
    ``context`` block unless ``with_context``."""
    shutil.copytree(EXAMPLES / name, folder, ignore=shutil.ignore_patterns("cdk.out", "__pycache__"))
    if not with_context:
        cdk_json = json.loads((folder / "cdk.json").read_text())
        cdk_json.pop("context", None)
        (folder / "cdk.json").write_text(json.dumps(cdk_json, indent=2))
    return folder


# The driver's own checks (tests/examples/test_examples.py), run first, before the examples, in the same process:
# name -> (app.py, cdk.json's context, cdk.json's app command, under cdk-nag). Each broken app's failure must stay
# its own; the small app twice, with a context value under cdk-nag and then without either, must find only its own
# outdir, context and working directory (seen.json beside its outdir), and cdk-nag only where asked.
DRIVER_CHECKS_FOLDER = "driver-checks"
_SMALL_APP = """import json, os
import aws_cdk
from aws_cdk import aws_s3 as s3
app = aws_cdk.App()
stack = aws_cdk.Stack(app, "Small")
s3.CfnBucket(stack, "Bucket")  # no encryption, no logging, no TLS policy: cdk-nag has findings
seen = {"marker": app.node.try_get_context("marker"), "outdir": os.environ["CDK_OUTDIR"], "cwd": os.getcwd()}
open(os.path.join(os.environ["CDK_OUTDIR"], "..", "seen.json"), "w").write(json.dumps(seen))
app.synth()
"""
DRIVER_CHECKS: dict[str, tuple[str, dict[str, Any], str, bool]] = {
    "raises": ("raise ValueError('broken on purpose')\n", {}, "python3 app.py", False),
    "exits": ("import sys\nsys.exit(3)\n", {}, "python3 app.py", False),
    "makes-no-app": ("print('no App here')\n", {}, "python3 app.py", False),
    "node-app": ("", {}, "node app.js", False),
    "nagged": (_SMALL_APP, {"marker": "first"}, "python3 app.py", True),
    "plain": (_SMALL_APP, {}, "python3 app.py", False),
}


def driver_check_jobs(root: Path) -> list[dict[str, Any]]:
    jobs = []
    for name, (script, context, command, nag) in DRIVER_CHECKS.items():
        app = root / name / "app"
        app.mkdir(parents=True)
        (app / "app.py").write_text(script)
        (app / "cdk.json").write_text(json.dumps({"app": command, **({"context": context} if context else {})}))
        jobs.append({"name": f"check: {name}", "folder": str(app), "outdir": str(app.parent / "cdk.out"), "nag": nag})
    return jobs


def build_examples_synth(factory: pytest.TempPathFactory, root: Path) -> None:
    """Every example in both variants, by one run of the driver with the consumer venv's Python. A job that fails
    is recorded in its own result (``ExamplesSynth.outdir`` fails with it); only a driver that could not run its
    jobs at all fails the build."""
    consumer = consumer_for(factory)
    jobs = driver_check_jobs(root / DRIVER_CHECKS_FOLDER)
    for name in example_names():
        for variant, nag in VARIANTS.items():
            app = copy_example(name, root / name / variant / "app", with_context=not nag)
            jobs.append({"name": f"{name} ({variant})", "folder": str(app), "outdir": str(app.parent / "cdk.out"),
                         "nag": nag})
    (root / "jobs.json").write_text(json.dumps(jobs, indent=1))
    with (root / "driver.log").open("w") as log:
        result = subprocess.run([str(consumer.venv / "bin" / "python"), str(DRIVER), str(root / "jobs.json")],
                                cwd=root, env=consumer.env(), stdout=log, stderr=subprocess.STDOUT, timeout=1800,
                                check=False)
    assert result.returncode == 0, f"the driver failed:\n{(root / 'driver.log').read_text()[-5000:]}"


@dataclass(frozen=True)
class ExamplesSynth:
    root: Path

    def outdir(self, name: str, variant: str) -> Path:
        """The cloud assembly of ``name`` in ``variant``; fails with that job's own error if it failed."""
        result_file = self.root / name / variant / "cdk.out.result.json"
        if not result_file.is_file():
            pytest.fail(f"{name} ({variant}): the driver did not run it:\n"
                        f"{(self.root / 'driver.log').read_text()[-5000:]}", pytrace=False)
        result = json.loads(result_file.read_text())
        if not result["ok"]:
            pytest.fail(f"{name} ({variant}) failed to synthesize with the installed wheel:\n{result['error']}",
                        pytrace=False)
        return result_file.parent / "cdk.out"

    def templates(self, name: str, variant: str) -> dict[str, dict[str, Any]]:
        """Stack name -> template, from the assembly's manifest."""
        outdir = self.outdir(name, variant)
        manifest = json.loads((outdir / "manifest.json").read_text())
        return {props.get("stackName", artifact_id): json.loads((outdir / props["templateFile"]).read_text())
                for artifact_id, artifact in manifest["artifacts"].items()
                if artifact["type"] == "aws:cloudformation:stack" for props in [artifact["properties"]]}


def examples_synth_for(factory: pytest.TempPathFactory) -> ExamplesSynth:
    """The run's one synth of the examples (tests/support/shared.py), after the consumer it needs."""
    return ExamplesSynth(built_once(factory, SYNTH_NAME, partial(build_examples_synth, factory)))
