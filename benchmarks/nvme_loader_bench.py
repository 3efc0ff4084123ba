"""What the NVMe weights loader (the ``nvme-weights-loader`` init container of an ``nvmeCache`` workload) adds to a
pod's start: on a warm node (the copy checked against the publisher's ``SHA256SUMS``, which a stand-in ``aws``
"downloads"), and on a cold one (the stand-in copies a local folder instead of downloading, then every file is
checked against the manifest).

It runs the container's own bash script, as rendered, over a model of ``--mib`` MiB in ``--shards`` files of
random bytes, so the figures are the loader's own work: the real download (``aws s3 sync``) and the model
server's load are not part of them. Elapsed time and the CPU of the script and its children (``sha256sum``)
are reported, with the figure per GiB.

    .venv/bin/python benchmarks/nvme_loader_bench.py [--runs 5] [--mib 512] [--shards 4]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
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
from hyperpod_inference_iac.weights_manifest import write_manifest  # noqa: E402

SOURCE_URI = "s3://bucket/m/"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _model(folder: Path, mib: int, shards: int) -> None:
    folder.mkdir()
    per_shard = mib * 1024 * 1024 // shards
    for index in range(shards):
        with (folder / f"model-{index + 1:05d}-of-{shards:05d}.safetensors").open("wb") as out:
            for _ in range(per_shard // (1 << 20)):
                out.write(os.urandom(1 << 20))
    (folder / "config.json").write_text('{"architectures": ["Stand-in"]}\n')


def _run(shell: str, flag: str, script: str, env: dict[str, str]) -> tuple[float, float, str]:
    cpu, start = _children_cpu(), time.perf_counter()
    result = subprocess.run([shell, flag, script], env=env, check=False, capture_output=True, text=True)
    elapsed, used = time.perf_counter() - start, _children_cpu() - cpu
    if result.returncode != 0:
        raise SystemExit(f"the loader failed ({result.returncode}):\n{result.stdout}{result.stderr}")
    return elapsed, used, result.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--mib", type=int, default=512, help="model size (default 512 MiB)")
    parser.add_argument("--shards", type=int, default=4)
    args = parser.parse_args()
    missing = [tool for tool in ("bash", "sha256sum", "split", "nproc", "cp") if shutil.which(tool) is None]
    if missing:
        raise SystemExit(f"needs {', '.join(missing)} (GNU coreutils and bash), as the aws-cli image has")
    loader = NvmeModelCache(model_key="m", source_s3_uri=SOURCE_URI).init_container()
    shell, flag, script = loader["command"]
    gib = args.mib / 1024
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        source, mount, bin_dir = root / "source", root / "nvme", root / "bin"
        _model(source, args.mib, args.shards)
        write_manifest(source)  # what the publisher writes next to the weights
        bin_dir.mkdir()
        aws = bin_dir / "aws"  # `aws s3 cp <uri>/SHA256SUMS <file>` and `aws s3 sync <uri> . ...` as local copies
        aws.write_text(f'#!/bin/sh\nif [ "$2" = cp ]; then exec cp "{source}/SHA256SUMS" "$4"; fi\n'
                       f'cp -R "{source}/." . && rm -f ./SHA256SUMS\n')
        aws.chmod(aws.stat().st_mode | stat.S_IEXEC)
        local = script.replace(loader["volumeMounts"][0]["mountPath"], str(mount))
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "MODEL_SOURCE_S3_URI": SOURCE_URI,
               "HOME": str(root)}
        rows: dict[str, list[tuple[float, float]]] = {"cold": [], "warm": []}
        for _ in range(args.runs):
            shutil.rmtree(mount, ignore_errors=True)
            mount.mkdir()
            elapsed, cpu, out = _run(shell, flag, local, env)
            assert "syncing" in out, out
            rows["cold"].append((elapsed, cpu))
            elapsed, cpu, out = _run(shell, flag, local, env)
            assert "skipping download" in out, out
            rows["warm"].append((elapsed, cpu))
    print(f"model: {args.mib} MiB in {args.shards} shards; {os.cpu_count()} CPUs; load average "
          f"{os.getloadavg()[0]:.1f}; {args.runs} runs; median [min-max]")
    labels = {"cold": "cold node (local copy as the download, then every file checked against the manifest)",
              "warm": "warm node (the copy checked against the publisher's manifest)"}
    for name, values in rows.items():
        elapsed = sorted(v[0] for v in values)
        cpu = sorted(v[1] for v in values)
        print(f"{labels[name]}: {statistics.median(elapsed):.2f} s [{elapsed[0]:.2f}-{elapsed[-1]:.2f}] elapsed, "
              f"{statistics.median(cpu):.2f} s CPU; per GiB {statistics.median(elapsed) / gib:.2f} s elapsed, "
              f"{statistics.median(cpu) / gib:.2f} s CPU")


if __name__ == "__main__":
    main()
