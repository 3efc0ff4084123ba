"""The NVMe loader's script, run with bash against a temporary directory and a stand-in ``aws`` that
behaves like ``aws s3 sync``: it copies a local folder, skips files whose size already matches (as
the real one compares sizes and times, never contents) and removes extra files with ``--delete``."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from hyperpod_inference_iac.charts import NvmeModelCache
from hyperpod_inference_iac.charts.nvme_cache import CHECKSUMS, COMPLETE_MARKER, LOADER_SCRIPT

SOURCE_URI = "s3://weights/qwen3-8b/"
FAKE_AWS = """#!{python}
import os, shutil, sys
from pathlib import Path
with open(os.environ["AWS_CALLS"], "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
if os.environ.get("AWS_FAIL"):
    sys.exit(1)
source, dest = Path(os.environ["FAKE_S3"]), Path(sys.argv[4])
wanted = {{p.relative_to(source) for p in source.rglob("*") if p.is_file()}}
for name in sorted(wanted):
    target = dest / name
    if not target.exists() or target.stat().st_size != (source / name).stat().st_size:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / name, target)
if "--delete" in sys.argv:
    for path in sorted(dest.rglob("*"), reverse=True):
        if path.is_file() and path.relative_to(dest) not in wanted:
            path.unlink()
"""
WEIGHTS = {
    "config.json": b'{"architectures": ["Qwen3ForCausalLM"]}',
    "model-00001-of-00002.safetensors": b"\x00\x01" * 4096,
    "model-00002-of-00002.safetensors": b"\x02\x03" * 4096,
    "original/tokenizer.json": b'{"version": "1.0"}',
    ".gitattributes": b"*.safetensors filter=lfs",
}


@dataclass
class Loader:
    """One node's cache directory, the bucket it syncs from, and the stand-in's log of calls."""

    tmp_path: Path

    @property
    def mount(self) -> Path:
        return self.tmp_path / "nvme"

    @property
    def bucket(self) -> Path:
        return self.tmp_path / "s3"

    def aws_calls(self) -> list[str]:
        calls = self.tmp_path / "aws-calls"
        return calls.read_text().splitlines() if calls.exists() else []

    def run(self, *, source_uri: str = SOURCE_URI, aws_fails: bool = False) -> subprocess.CompletedProcess[str]:
        script = LOADER_SCRIPT.replace("cd /nvme-model", f"cd {self.mount}")
        env = {**os.environ, "PATH": f"{self.tmp_path / 'bin'}:{os.environ['PATH']}",
               "MODEL_SOURCE_S3_URI": source_uri, "FAKE_S3": str(self.bucket),
               "AWS_CALLS": str(self.tmp_path / "aws-calls"), "AWS_FAIL": "1" if aws_fails else ""}
        return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, check=False)


@pytest.fixture
def loader(tmp_path: Path) -> Loader:
    loader = Loader(tmp_path)
    loader.mount.mkdir()
    for name, content in WEIGHTS.items():
        (loader.bucket / name).parent.mkdir(parents=True, exist_ok=True)
        (loader.bucket / name).write_bytes(content)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "aws").write_text(FAKE_AWS.format(python=sys.executable))
    (bin_dir / "aws").chmod(0o755)
    return loader


def _copied(loader: Loader) -> dict[str, bytes]:
    return {str(p.relative_to(loader.mount)): p.read_bytes() for p in loader.mount.rglob("*")
            if p.is_file() and p.name not in (COMPLETE_MARKER, CHECKSUMS)}


def test_a_fresh_copy_is_synced_summed_then_marked_with_its_source(loader: Loader) -> None:
    result = loader.run()
    assert result.returncode == 0, result.stderr
    assert loader.aws_calls() == [f"s3 sync {SOURCE_URI} . --delete --only-show-errors --no-progress"]
    assert _copied(loader) == WEIGHTS
    listed = [line.split("  ", 1)[1] for line in (loader.mount / CHECKSUMS).read_text().splitlines()]
    assert listed == sorted(WEIGHTS)  # nested and hidden files too, the loader's own two not
    assert (loader.mount / COMPLETE_MARKER).read_text() == f"{SOURCE_URI}\n"


def test_a_verified_copy_is_used_without_calling_s3(loader: Loader) -> None:
    loader.run()
    result = loader.run()
    assert result.returncode == 0
    assert "verified model copy" in result.stdout
    assert len(loader.aws_calls()) == 1


@pytest.mark.parametrize("damage", ["changed in place", "removed", "added", "symlink added"])
def test_a_damaged_copy_is_removed_and_synced_again(loader: Loader, damage: str) -> None:
    loader.run()
    shard = loader.mount / "model-00001-of-00002.safetensors"
    if damage == "changed in place":  # same size: a sync alone would keep it
        shard.write_bytes(b"\xff\xfe" * 4096)
    elif damage == "removed":
        shard.unlink()
    elif damage == "added":
        (loader.mount / "original" / "modeling_extra.py").write_text("import os\n")
    else:
        (loader.mount / "weights.bin").symlink_to("/etc/hostname")
    result = loader.run()
    assert result.returncode == 0, result.stderr
    assert "removing it" in result.stdout
    assert len(loader.aws_calls()) == 2
    assert _copied(loader) == WEIGHTS
    assert not (loader.mount / "weights.bin").is_symlink()
    assert loader.run().returncode == 0 and len(loader.aws_calls()) == 2  # verified again


def test_a_copy_of_another_source_is_replaced(loader: Loader) -> None:
    loader.run(source_uri="s3://weights/qwen3-8b-v1/")
    loader.run()
    assert len(loader.aws_calls()) == 2
    assert (loader.mount / COMPLETE_MARKER).read_text() == f"{SOURCE_URI}\n"


def test_a_copy_marked_by_the_old_loader_without_checksums_is_replaced(loader: Loader) -> None:
    for name, content in WEIGHTS.items():
        (loader.mount / name).parent.mkdir(parents=True, exist_ok=True)
        (loader.mount / name).write_bytes(content)
    (loader.mount / COMPLETE_MARKER).touch()  # what the loader wrote before checksums
    assert loader.run().returncode == 0
    assert len(loader.aws_calls()) == 1
    assert (loader.mount / CHECKSUMS).exists()


def test_an_interrupted_copy_is_resumed_without_starting_over(loader: Loader) -> None:
    (loader.mount / "config.json").write_bytes(WEIGHTS["config.json"])
    (loader.mount / "model-00001-of-00002.safetensors.tmp1234").write_bytes(b"partial")  # sync's temp file
    assert loader.run().returncode == 0
    assert _copied(loader) == WEIGHTS  # the leftover is gone (--delete), the rest fetched


def test_a_failed_sync_fails_the_pod_and_leaves_no_marker(loader: Loader) -> None:
    result = loader.run(aws_fails=True)
    assert result.returncode != 0
    assert not (loader.mount / COMPLETE_MARKER).exists()
    assert not (loader.mount / CHECKSUMS).exists()


def test_an_empty_source_fails_the_pod(loader: Loader) -> None:
    for path in sorted(loader.bucket.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    result = loader.run()
    assert result.returncode != 0
    assert "no files under" in result.stderr
    assert not (loader.mount / COMPLETE_MARKER).exists()


def test_the_loader_runs_that_script_with_bash_read_only_under_the_workload_identity() -> None:
    cache = NvmeModelCache(model_key="qwen3-8b", source_s3_uri=SOURCE_URI)
    container = cache.init_container()
    assert container["command"] == ["/bin/bash", "-c", LOADER_SCRIPT]
    assert f"MARKER={COMPLETE_MARKER}" in LOADER_SCRIPT and f"SUMS={CHECKSUMS}" in LOADER_SCRIPT
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"name": "HOME", "value": "/tmp"} in container["env"]
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    volumes = {volume["name"] for volume in cache.volumes("/opt/dlami/nvme")}
    assert mounts == {"/nvme-model": "model-weights", "/tmp": "nvme-loader-tmp"}
    assert set(mounts.values()) == volumes
