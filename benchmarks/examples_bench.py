"""Where tests/examples' CPU goes: the consumer's wheel and venv, the examples synthesized by the real CDK CLI one
process each (as tests/examples did before issue 30), all of them in one process (tests/examples/synth_driver.py,
as it does now), and the feature-flag synths in this repository's venv.

Every part runs in a child process; its figure is the CPU (user + system) of that child and of whatever it waited
for (the jsii kernel, the CLI's app), from ``getrusage(RUSAGE_CHILDREN)``, so the load of the machine does not
inflate it much (wall times are printed too, for what they are worth on a shared machine).

    .venv/bin/python benchmarks/examples_bench.py [--consumer DIR] [--parts consumer,cli,driver,flags]

``--consumer DIR``: reuse a consumer built by an earlier run (its ``venv/``); without it one is built into a
temporary folder (the ``consumer`` part).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.consumer import (  # noqa: E402
    CONTROL,
    DRIVER,
    VARIANTS,
    Consumer,
    copy_example,
    example_names,
)
from tests.support.synth import cli_env  # noqa: E402

NAG_APP = REPO / "tests" / "examples" / "nag_app.py"
CDK = REPO / "node_modules" / ".bin" / "cdk"


def measured(label: str, run: Callable[[], object]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    run()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(f"{label:<48} {cpu:7.1f} s CPU {time.monotonic() - started:7.1f} s wall  (load {os.getloadavg()[0]:.1f})",
          flush=True)
    return cpu


def consumer_part(root: Path) -> Consumer:
    code = ("from pathlib import Path\nfrom tests.support.consumer import build_consumer\n"
            f"build_consumer(Path({str(root)!r}))")
    measured("wheel + venv (build_consumer)", lambda: subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, check=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": ""}))
    (wheel,) = (root / "wheel").glob("*.whl")
    return Consumer(root / "venv", wheel)


def cli_part(consumer: Consumer, root: Path, names: list[str]) -> float:
    total = 0.0
    for name in names:
        for variant, nag in VARIANTS.items():
            folder = copy_example(name, root / name / variant / "app", with_context=not nag)
            command = [str(CDK), "synth", "--quiet", "--no-notices", "-o", str(folder.parent / "cdk.out")]
            if nag:
                command += ["--app", f"python3 {NAG_APP} app.py"]
            total += measured(f"CLI synth {name} ({variant})", partial(
                subprocess.run, command, cwd=folder, env=consumer.env(), capture_output=True, check=False))
    print(f"{'CLI synths in all':<48} {total:7.1f} s CPU")
    return total


def driver_part(consumer: Consumer, root: Path) -> float:
    jobs = []
    for name in example_names():
        for variant, nag in VARIANTS.items():
            folder = copy_example(name, root / name / variant / "app", with_context=not nag)
            jobs.append({"name": f"{name} ({variant})", "folder": str(folder), "outdir": str(folder.parent / "cdk.out"),
                         "nag": nag})
    (root / "jobs.json").write_text(json.dumps(jobs))
    return measured(f"driver: {len(jobs)} synths in one process", lambda: subprocess.run(
        [str(consumer.venv / "bin" / "python"), str(DRIVER), str(root / "jobs.json")], cwd=root, env=consumer.env(),
        capture_output=True, check=True))


FLAGS = """
import json, runpy, sys
from pathlib import Path
import aws_cdk
from tests.examples.test_feature_flags import PATHS, PROJECT_CONTEXT, synth_platform

def synth_example(name, context, outdir):  # test_feature_flags.py's own synth of an example, before issue 30
    original = aws_cdk.App
    apps = []
    class App(original):
        def __init__(self, *args, **kwargs):
            kwargs["context"] = {**context, **(kwargs.get("context") or {}), **PATHS}
            kwargs["outdir"] = str(outdir / str(len(apps)))
            super().__init__(*args, **kwargs)
            apps.append(self)
    aws_cdk.App = App
    try:
        runpy.run_path(f"examples/{name}/app.py", run_name="__main__")
    finally:
        aws_cdk.App = original

out = Path(sys.argv[1])
for name in sys.argv[2:]:
    for flags in (False, True):
        target = synth_platform if name == "platform" else (lambda c, o, n=name: synth_example(n, c, o))
        target(dict(PROJECT_CONTEXT) if flags else {}, out / f"{name}-{flags}")
"""


def flags_part(root: Path) -> None:
    """The feature-flag test's in-process synths of the examples, as it did them before issue 30 (each example twice
    in this repository's venv): the process that does them less the one that does the platform's alone."""
    names = example_names()

    def run(*targets: str) -> None:
        subprocess.run([sys.executable, "-c", FLAGS, str(root / "-".join(targets)[:40]), *targets], cwd=REPO,
                       check=True, env={**cli_env(), "PYTHONDONTWRITEBYTECODE": ""}, capture_output=True)

    platform = measured("flags: the platform twice, in-process", lambda: run("platform"))
    everything = measured("flags: the platform and the examples twice each", lambda: run("platform", *names))
    print(f"{'flags: the examples twice each (difference)':<48} {everything - platform:7.1f} s CPU")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--consumer", type=Path, help="a consumer folder built before (with venv/ and wheel/)")
    parser.add_argument("--parts", default="consumer,cli,driver,flags")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    with tempfile.TemporaryDirectory(prefix="examples-bench-") as tmp:
        root = Path(tmp)
        if args.consumer:
            (wheel,) = (args.consumer / "wheel").glob("*.whl")
            consumer = Consumer(args.consumer / "venv", wheel)
        else:
            (root / "consumer").mkdir()
            consumer = consumer_part(root / "consumer")
        if "cli" in parts:
            cli_part(consumer, root / "cli", example_names())
        if "driver" in parts:
            driver_part(consumer, root / "driver")
            cli_part(consumer, root / "control", [CONTROL])
        if "flags" in parts:
            (root / "flags").mkdir()
            flags_part(root / "flags")


if __name__ == "__main__":
    main()
