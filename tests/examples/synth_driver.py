"""Synthesize several consumer CDK apps in ONE Python process, each as ``cdk synth`` would run it, for tests/examples.

Run with the consumer venv's Python (the installed wheel, cdk-nag): ``python synth_driver.py JOBS.json``. JOBS.json
is a list of jobs ``{"name", "folder", "outdir", "nag"}``: for each, in order, this process does what the CDK CLI
does for an app and what ``python3 app.py`` (cdk.json's ``app``) does in the child the CLI starts:

- the context: cdk.json's ``context`` (and cdk.context.json's, if any) with the keys the CLI adds from its settings
  (``CLI_CONTEXT``), and the output folder: the CLI passes them in ``CDK_CONTEXT_JSON`` and ``CDK_OUTDIR``, which
  aws-cdk-lib reads in the jsii kernel; the kernel is one Node.js process for all jobs and keeps the environment it
  started with, so each App the job makes gets them through its constructor instead, with the precedence
  aws-cdk-lib gives them (``as_the_cli_runs``); they are in ``os.environ`` too, for app code that reads them;
- the app: cdk.json's ``app`` must be ``python3 <script>`` (anything else is reported as this job's failure); the
  script runs with ``runpy`` as ``__main__``, in the job's folder, with ``sys.argv`` and ``sys.path[0]`` as
  ``python3 <script>`` gives them;
- ``nag``: cdk-nag's AWS Solutions pack is added to the app's validations as tests/examples/nag_app.py does
  (``cdk_nag_on``), the way a consumer who runs cdk-nag would.

Each job writes ``<outdir>.result.json``: ``{"ok": true}`` or ``{"ok": false, "error": <traceback>}``. One job's
failure never stops the next, and the driver exits 0 whenever it could run the jobs at all (each test reads its own
job's result and fails with its error, by name). Between jobs the process is put back as it was: the environment,
the working directory, ``sys.argv``, ``sys.path``, the modules the app imported from its own folder, and
``aws_cdk.App`` (replaced for the job; its ``synth`` patched only for a ``nag`` job). Each App the job made is
synthesized once more at its end, as the CLI's ``autoSynth`` does when the app's process ends (a no-op after the
app's own ``app.synth()``). Each App is a new construct tree; what could still leak
(an Aspect, a context value, a module-level cache) is what tests/examples/test_examples.py's control looks for, by
comparing this process's output for one example with what the real CLI writes for it.

This module imports no test code: it runs outside the repository's venv.
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import shlex
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# What the CDK CLI (2.1148) adds to an app's context from its settings, none of them a feature flag
# (@aws-cdk/toolkit-lib's contextFromSettings): the construct paths and asset metadata in the templates, the version
# reporting (CDKMetadata), bundling for every stack, and validation findings reported (not thrown) by synth.
CLI_CONTEXT: dict[str, Any] = {
    "aws:cdk:enable-path-metadata": True,
    "aws:cdk:enable-asset-metadata": True,
    "aws:cdk:version-reporting": True,
    "aws:cdk:bundling-stacks": ["**"],
    "@aws-cdk/core:failSynthOnValidationErrors": False,
}
# The CLI's version and the cloud assembly schema version it reads, as it passes them to the app (test_examples.py
# checks that node_modules holds this CLI: another one may pass other context and variables).
CLI_VERSION = "2.1148.1"
CLI_ASM_VERSION = "55.0.0"
# The region the CLI passes when no profile or configuration names one (the tests run with none).
CLI_DEFAULT_REGION = "us-east-1"


def app_context(folder: Path) -> dict[str, Any]:
    """The context the CLI passes to the app in ``folder``: cdk.json's, then cdk.context.json's, then its own."""
    context: dict[str, Any] = {}
    for name in ("cdk.json", "cdk.context.json"):
        path = folder / name
        if path.is_file():
            data = json.loads(path.read_text())
            context.update(data.get("context", {}) if name == "cdk.json" else data)
    return {**context, **CLI_CONTEXT}


def cli_env(folder: Path, outdir: Path) -> dict[str, str]:
    """The variables the CLI sets for the app (besides its own environment), but its two side channels, which are no
    part of the cloud assembly: ``CDK_ERROR_FILE`` (where a failing app writes its error code) and
    ``CDK_PERF_COUNTERS_FILE`` (where a slow synth writes its performance counters)."""
    return {
        "CDK_OUTDIR": str(outdir),
        "CDK_CONTEXT_JSON": json.dumps(app_context(folder)),
        "CDK_CLI_VERSION": CLI_VERSION,
        "CDK_CLI_ASM_VERSION": CLI_ASM_VERSION,
        "CDK_DEFAULT_REGION": CLI_DEFAULT_REGION,
    }


def app_script(folder: Path) -> str:
    """The script cdk.json's ``app`` runs: it must be ``python3 <script>`` (or ``python``)."""
    command = shlex.split(json.loads((folder / "cdk.json").read_text())["app"])
    if len(command) != 2 or command[0] not in ("python3", "python"):
        raise ValueError(f"cdk.json's app is {' '.join(command)!r}; this driver runs 'python3 <script>' only")
    return command[1]


@contextlib.contextmanager
def cdk_nag_on() -> Iterator[None]:
    """Every ``aws_cdk.App`` synthesized meanwhile has cdk-nag's AWS Solutions pack among its validations."""
    import aws_cdk
    from cdk_nag import AwsSolutionsChecks

    synth = aws_cdk.App.synth

    def synth_with_nag(self: aws_cdk.App, *args: Any, **kwargs: Any) -> Any:
        aws_cdk.Validations.of(self).add_plugins(AwsSolutionsChecks(self))
        return synth(self, *args, **kwargs)

    aws_cdk.App.synth = synth_with_nag  # type: ignore[method-assign]
    try:
        yield
    finally:
        aws_cdk.App.synth = synth  # type: ignore[method-assign]


@contextlib.contextmanager
def as_the_cli_runs(folder: Path, outdir: Path, script: str) -> Iterator[list[Any]]:
    """The process as ``python3 <script>`` started by the CLI in ``folder`` finds it; put back afterwards. Yields
    the list of the Apps the script makes.

    The jsii kernel (Node.js) was started once, by the driver's first ``import aws_cdk``, and keeps the environment
    it was started with: aws-cdk-lib reads ``CDK_OUTDIR`` and ``CDK_CONTEXT_JSON`` there, in the kernel, so setting
    them in ``os.environ`` reaches the app's Python code only (they are set there too, for an app that reads them).
    Each App made meanwhile gets them as its constructor would have read them instead: ``outdir`` unless the app
    gives its own, the context over the app's own ``context`` and under its ``post_cli_context`` (aws-cdk-lib's
    App.loadContext). The CLI's environment also makes every App synthesize when its process ends (``autoSynth``):
    ``run_job`` synthesizes each App the script made (a second ``synth()`` of an App returns what it has)."""
    import aws_cdk

    environ, cwd, argv, path = dict(os.environ), os.getcwd(), list(sys.argv), list(sys.path)
    modules = set(sys.modules)
    original = aws_cdk.App
    context = app_context(folder)
    apps: list[Any] = []

    class App(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["context"] = {**(kwargs.get("context") or {}), **context}
            kwargs["outdir"] = kwargs.get("outdir") or str(outdir)
            super().__init__(*args, **kwargs)
            apps.append(self)

    os.environ.update(cli_env(folder, outdir))
    os.chdir(folder)
    sys.argv = [script]
    sys.path[0] = str(folder)
    aws_cdk.App = App  # type: ignore[misc]
    try:
        yield apps
    finally:
        aws_cdk.App = original  # type: ignore[misc]
        os.environ.clear()
        os.environ.update(environ)
        os.chdir(cwd)
        sys.argv, sys.path[:] = argv, path
        for name in set(sys.modules) - modules:  # the app's own modules (an example of several files)
            file = getattr(sys.modules[name], "__file__", None) or ""
            if file.startswith(str(folder)):
                del sys.modules[name]


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    folder, outdir = Path(job["folder"]), Path(job["outdir"])
    try:
        script = app_script(folder)
        outdir.mkdir(parents=True, exist_ok=True)
        with as_the_cli_runs(folder, outdir, script) as apps:
            with cdk_nag_on() if job["nag"] else contextlib.nullcontext():
                runpy.run_path(str(folder / script), run_name="__main__")
            for app in apps:  # the CLI's autoSynth, which runs in the kernel, without nag_app.py's patch
                app.synth()
        if not (outdir / "manifest.json").is_file():
            raise RuntimeError(f"{script} ran but wrote no cloud assembly to {outdir}")
    except BaseException:  # SystemExit of an app included: it is this job's failure, not the driver's
        return {"ok": False, "error": traceback.format_exc()[-20000:]}
    return {"ok": True}


def start_kernel() -> None:
    """Start the jsii kernel with the environment every job shares: the CLI's version variables and default region,
    and none of a job's own (``as_the_cli_runs``)."""
    for name in ("CDK_OUTDIR", "CDK_CONTEXT_JSON", "CONTEXT_OVERFLOW_LOCATION_ENV", "CDK_ERROR_FILE",
                 "CDK_PERF_COUNTERS_FILE"):
        os.environ.pop(name, None)
    os.environ.update({"CDK_CLI_VERSION": CLI_VERSION, "CDK_CLI_ASM_VERSION": CLI_ASM_VERSION,
                       "CDK_DEFAULT_REGION": CLI_DEFAULT_REGION})
    import aws_cdk  # noqa: F401  (loading aws-cdk-lib starts the kernel)


def main(jobs_file: str) -> int:
    jobs = json.loads(Path(jobs_file).read_text())
    start_kernel()
    for job in jobs:
        result = run_job(job)
        Path(f"{job['outdir']}.result.json").write_text(json.dumps({"name": job["name"], **result}, indent=1))
        print(f"{job['name']}: {'ok' if result['ok'] else 'FAILED'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
