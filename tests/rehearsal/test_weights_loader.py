"""Rehearsal of the NVMe weights loaders: every init container the manifests give a MODEL_SOURCE_S3_URI (the
portable Deployment's and each InferenceEndpointConfig's `nvme-weights-loader`) runs its own shell script, with
an `aws` on PATH, under the temporary credentials of the role its service account is annotated with.

Proves: the role allows what `aws s3 sync` really does (ListObjectsV2 = s3:ListBucket, GetObject per file) on the
model's prefix, and refuses another model's objects. Cannot prove (docs/rehearsal.md): the ListBucket grant's
``s3:prefix`` condition (moto ignores it: listing another prefix is allowed here, only its GetObject is refused),
the weights bucket's own encryption and policy (it is not in the templates), the image's AWS CLI v2 (this is
v1, the same S3 calls)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.rehearsal.conftest import base_environment
from tests.support.rehearsal import ContainerRuntime, Rehearsal, container_runtimes, split_s3_uri
from tests.support.synth import Assembly

pytestmark = [pytest.mark.xdist_group("rehearsal"), pytest.mark.slow]

# A small model: what a loader must copy, byte for byte, nested folders included.
WEIGHTS = {
    "config.json": b'{"architectures": ["Qwen3ForCausalLM"], "torch_dtype": "bfloat16"}',
    "model-00001-of-00002.safetensors": bytes(range(256)) * 2048,
    "model-00002-of-00002.safetensors": bytes(reversed(range(256))) * 1024,
    "tokenizer/tokenizer.json": b'{"version": "1.0"}',
}
OTHER_MODEL = "another-model/"  # a sibling prefix in the same bucket: no loader's role may read it


def weights_loaders(assembly: Assembly) -> list[ContainerRuntime]:
    found = [runtime for runtime in container_runtimes(assembly.manifests) if "MODEL_SOURCE_S3_URI" in runtime.env]
    assert found, "the manifests configure no weights loader: nothing to rehearse"
    return found


@pytest.fixture(scope="module")
def seeded(rehearsal: Rehearsal, assembly: Assembly) -> list[ContainerRuntime]:
    """Set-up (as the admin): every source a loader names holds the model, and its bucket another model too. A
    bucket no template creates (the weights bucket is the platform team's) is created here."""
    s3 = rehearsal.client("s3")
    loaders = weights_loaders(assembly)
    for uri in {runtime.env["MODEL_SOURCE_S3_URI"] for runtime in loaders}:
        bucket, prefix = split_s3_uri(uri)
        if bucket not in {b["Name"] for b in s3.list_buckets()["Buckets"]}:
            rehearsal.create_bucket(bucket)
        for name, body in WEIGHTS.items():
            s3.put_object(Bucket=bucket, Key=f"{prefix}{name}", Body=body)
            s3.put_object(Bucket=bucket, Key=f"{OTHER_MODEL}{name}", Body=body)
    return loaders


def run_loader(rehearsal: Rehearsal, runtime: ContainerRuntime, aws_cli_bin: Path, workdir: Path,
               **overrides: str) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    """The init container's command (`/bin/sh -c <script>`) with the manifest's env and its role's credentials;
    the volume's mount path in the script becomes a folder here. The result, the folder, the marker file."""
    shell, script = runtime.container["command"][:2], runtime.container["command"][2]
    [mount_path] = [path for path in runtime.mounts if path in script]
    folder = workdir / "nvme"
    folder.mkdir(parents=True, exist_ok=True)
    local_script = script.replace(mount_path, str(folder))
    [marker] = re.findall(r'touch "([^"]+)"', local_script)
    env = base_environment(workdir)
    env.update(runtime.env)
    env.update(overrides)
    env.update(rehearsal.environment(rehearsal.credentials(runtime.role_arn)))
    env["PATH"] = f"{aws_cli_bin}:/usr/bin:/bin"
    result = subprocess.run([*shell, local_script], env=env, capture_output=True, text=True, timeout=300, check=False)
    return result, folder, Path(marker)


def files_under(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in folder.rglob("*")
            if path.is_file() and not path.name.startswith(".")}


def test_each_loader_copies_its_model_under_its_own_role(
    rehearsal: Rehearsal, seeded: list[ContainerRuntime], aws_cli_bin: Path, tmp_path: Path
) -> None:
    for index, runtime in enumerate(seeded):
        result, folder, marker = run_loader(rehearsal, runtime, aws_cli_bin, tmp_path / str(index))
        assert result.returncode == 0, f"{runtime.name} ({runtime.role_arn}):\n{result.stdout}\n{result.stderr}"
        assert files_under(folder) == WEIGHTS, runtime.name
        assert marker.is_file(), f"{runtime.name} wrote no marker"
        # A pod restart on the same node finds the complete copy and does not touch S3 again.
        again, _, _ = run_loader(rehearsal, runtime, aws_cli_bin, tmp_path / str(index))
        assert again.returncode == 0 and "skipping download" in again.stdout, again.stdout + again.stderr


def test_a_loader_pointed_at_another_models_prefix_is_refused(
    rehearsal: Rehearsal, seeded: list[ContainerRuntime], aws_cli_bin: Path, tmp_path: Path
) -> None:
    for index, runtime in enumerate(seeded):
        bucket, _ = split_s3_uri(runtime.env["MODEL_SOURCE_S3_URI"])
        result, folder, marker = run_loader(rehearsal, runtime, aws_cli_bin, tmp_path / str(index),
                                            MODEL_SOURCE_S3_URI=f"s3://{bucket}/{OTHER_MODEL}")
        assert result.returncode != 0, f"{runtime.name} read another model:\n{result.stdout}"
        assert "AccessDenied" in result.stderr, result.stderr
        assert files_under(folder) == {} and not marker.exists()
