"""Synth speed: the whole platform app against a minimal aws_eks_v2 cluster app, in one run.

Both are synthesized by the real CDK CLI (`cdk synth --quiet`), alternating, N times each, on the
same machine; the figure that matters is the ratio (goal: the platform at most 1.5x the minimal app).

    .venv/bin/python benchmarks/synth_bench.py [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.synth import CDK, cli_env  # noqa: E402

MINIMAL_APP = textwrap.dedent("""
    import aws_cdk as cdk
    from aws_cdk import aws_ec2 as ec2, aws_eks_v2 as eks
    from aws_cdk.lambda_layer_kubectl_v34 import KubectlV34Layer

    class MinimalStack(cdk.Stack):
        @property
        def availability_zones(self):  # as the platform does: no account lookup
            return [cdk.Fn.select(i, cdk.Fn.get_azs()) for i in range(2)]

    app = cdk.App()
    stack = MinimalStack(app, "minimal-eks", env=cdk.Environment(account="111122223333", region="us-west-2"))
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=stack.availability_zones)
    eks.Cluster(stack, "Cluster", version=eks.KubernetesVersion.V1_34, vpc=vpc,
                default_capacity_type=eks.DefaultCapacityType.NODEGROUP, default_capacity=0,
                kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=KubectlV34Layer(stack, "Kubectl")))
    app.synth()
""")


def synth_seconds(app_command: str, workdir: Path, extra: list[str]) -> float:
    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        result = subprocess.run(
            [str(CDK), "synth", "--quiet", "--app", app_command, "-o", out, *extra],
            cwd=workdir,
            env=cli_env(),
            capture_output=True,
            text=True,
            check=False,
        )
        elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"synth failed ({app_command}):\n{result.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    python = str(REPO / ".venv" / "bin" / "python")
    with tempfile.TemporaryDirectory() as tmp:
        minimal = Path(tmp) / "minimal_app.py"
        minimal.write_text(MINIMAL_APP)
        dist = Path(tmp) / "dist"
        timings: dict[str, list[float]] = {"platform (all stacks + dist/)": [], "minimal aws_eks_v2 cluster": []}
        for _ in range(args.runs):
            timings["platform (all stacks + dist/)"].append(
                synth_seconds(f"{python} app.py", REPO, ["-c", f"dist={dist}"])
            )
            timings["minimal aws_eks_v2 cluster"].append(synth_seconds(f"{python} {minimal}", REPO, []))
    print(f"{'app':32} {'median s':>9} {'min s':>7} {'max s':>7}")
    for name, values in timings.items():
        print(f"{name:32} {statistics.median(values):9.2f} {min(values):7.2f} {max(values):7.2f}")
    ratio = statistics.median(timings["platform (all stacks + dist/)"]) / statistics.median(
        timings["minimal aws_eks_v2 cluster"]
    )
    print(f"ratio platform/minimal: {ratio:.2f}x (goal <= 1.5x)")


if __name__ == "__main__":
    main()
