"""What the NVMe weights loader (the ``nvme-weights-loader`` init container of an ``nvmeCache`` workload) adds to a
pod's start when the node is already warm, and when it is not, with a stand-in ``aws`` that downloads nothing.

It times the container's own shell script, as rendered, so the figure is the loader's overhead only: the real
download (``aws s3 sync`` of the weights) and the model server's load are not part of it.

    .venv/bin/python benchmarks/nvme_loader_bench.py [--runs 200]
"""

from __future__ import annotations

import argparse
import os
import stat
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hyperpod_inference_iac.charts import NvmeModelCache  # noqa: E402
from hyperpod_inference_iac.charts.nvme_cache import COMPLETE_MARKER  # noqa: E402


def _time_runs(runs: int, *, warm: bool, folder: Path) -> list[float]:
    loader = NvmeModelCache(model_key="m", source_s3_uri="s3://bucket/m/").init_container()
    mount, bin_dir = folder / "nvme", folder / "bin"
    mount.mkdir(exist_ok=True)
    bin_dir.mkdir(exist_ok=True)
    aws = bin_dir / "aws"
    aws.write_text("#!/bin/sh\nexit 0\n")
    aws.chmod(aws.stat().st_mode | stat.S_IEXEC)
    shell, flag, script = loader["command"]
    script = script.replace(loader["volumeMounts"][0]["mountPath"], str(mount))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "MODEL_SOURCE_S3_URI": "s3://bucket/m/"}
    times = []
    for _ in range(runs):
        marker = mount / COMPLETE_MARKER
        if warm:
            marker.write_text("")
        else:
            marker.unlink(missing_ok=True)
        start = time.perf_counter()
        subprocess.run([shell, flag, script], env=env, check=True, capture_output=True)
        times.append((time.perf_counter() - start) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as tmp:
        for warm in (True, False):
            times = sorted(_time_runs(runs, warm=warm, folder=Path(tmp)))
            label = "warm node (marker present)" if warm else "cold node (stand-in aws, nothing copied)"
            print(f"{label}: median {statistics.median(times):.1f} ms, p95 {times[int(runs * 0.95) - 1]:.1f} ms "
                  f"over {runs} runs")


if __name__ == "__main__":
    main()
