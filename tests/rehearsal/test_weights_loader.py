"""Rehearsal of the NVMe weights loaders: every init container the manifests give a MODEL_SOURCE_S3_URI (the
portable Deployment's and each InferenceEndpointConfig's `nvme-weights-loader`) runs its own shell script, with
an `aws` on PATH, under the temporary credentials of the role its service account is annotated with.

Proves: the role allows what `aws s3 sync` really does (ListObjectsV2 = s3:ListBucket, GetObject per file) on the
model's prefix, and refuses another model's objects. moto ignores the ListBucket grant's ``s3:prefix`` condition
(listing another prefix is allowed there, only its GetObject is refused), so the prefixes the CLI really listed
are read back from moto's request log and matched against that condition here. Cannot prove (docs/rehearsal.md):
the weights bucket's own encryption and policy (it is not in the templates), the image's AWS CLI v2 (this is v1,
making the same S3 calls)."""

from __future__ import annotations

import fnmatch
import re
import subprocess
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

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
    # The script works in the copy's folder (`cd <mount path>`) and names its marker relative to it.
    [marker] = re.findall(r"^MARKER=(\S+)$", local_script, flags=re.MULTILINE)
    env = base_environment(workdir)
    env.update(runtime.env)
    env.update(overrides)
    env.update(rehearsal.environment(rehearsal.credentials(runtime.role_arn)))
    env["PATH"] = f"{aws_cli_bin}:/usr/bin:/bin"
    result = subprocess.run([*shell, local_script], env=env, capture_output=True, text=True, timeout=300, check=False)
    return result, folder, folder / marker


def listed_prefixes(rehearsal: Rehearsal, offset: int, bucket: str) -> list[str]:
    """The prefixes of the ListObjects calls on `bucket` moto logged since `offset`."""
    prefixes = []
    for method, target, _ in rehearsal.server.requests_since(offset):
        parts = urlsplit(target)
        if method == "GET" and parts.path.strip("/") == bucket and "list-type" in parse_qs(parts.query):
            prefixes.append(parse_qs(parts.query).get("prefix", [""])[0])
    return prefixes


def prefix_condition_allows(rehearsal: Rehearsal, role_arn: str, bucket: str, prefix: str) -> bool:
    """IAM's answer for s3:ListBucket with this s3:prefix, from the role's statements (StringLike/StringEquals)."""
    for document in rehearsal.role(role_arn).inline.values():
        for statement in document["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            if statement["Effect"] != "Allow" or not any(fnmatch.fnmatchcase("s3:ListBucket", a) for a in actions):
                continue
            if not any(fnmatch.fnmatchcase(f"arn:aws:s3:::{bucket}", r) for r in resources):
                continue
            condition = statement.get("Condition", {})
            like = condition.get("StringLike", {}).get("s3:prefix")
            equal = condition.get("StringEquals", {}).get("s3:prefix")
            if like is None and equal is None:
                return True
            patterns = [like] if isinstance(like, str) else like or []
            values = [equal] if isinstance(equal, str) else equal or []
            if any(fnmatch.fnmatchcase(prefix, pattern) for pattern in patterns) or prefix in values:
                return True
    return False


def files_under(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in folder.rglob("*")
            if path.is_file() and not path.name.startswith(".")}


def test_each_loader_copies_its_model_under_its_own_role(
    rehearsal: Rehearsal, seeded: list[ContainerRuntime], aws_cli_bin: Path, tmp_path: Path
) -> None:
    for index, runtime in enumerate(seeded):
        offset = rehearsal.server.log_offset()
        result, folder, marker = run_loader(rehearsal, runtime, aws_cli_bin, tmp_path / str(index))
        assert result.returncode == 0, f"{runtime.name} ({runtime.role_arn}):\n{result.stdout}\n{result.stderr}"
        assert files_under(folder) == WEIGHTS, runtime.name
        assert marker.is_file(), f"{runtime.name} wrote no marker"
        assert marker.read_text().strip() == runtime.env["MODEL_SOURCE_S3_URI"]  # the marker names its source
        # The condition moto skipped: every prefix the CLI listed is one the role's s3:prefix condition allows.
        bucket, _ = split_s3_uri(runtime.env["MODEL_SOURCE_S3_URI"])
        listed = listed_prefixes(rehearsal, offset, bucket)
        assert listed, "moto's log shows no ListObjects of the loader"
        assert [p for p in listed if not prefix_condition_allows(rehearsal, runtime.role_arn, bucket, p)] == []
        # A pod restart on the same node finds the complete copy and does not touch S3 again.
        again, _, _ = run_loader(rehearsal, runtime, aws_cli_bin, tmp_path / str(index))
        assert again.returncode == 0 and "skipping download" in again.stdout, again.stdout + again.stderr


def test_a_loader_pointed_at_another_models_prefix_is_refused(
    rehearsal: Rehearsal, seeded: list[ContainerRuntime], aws_cli_bin: Path, tmp_path: Path
) -> None:
    for index, runtime in enumerate(seeded):
        bucket, _ = split_s3_uri(runtime.env["MODEL_SOURCE_S3_URI"])
        offset = rehearsal.server.log_offset()
        result, folder, marker = run_loader(rehearsal, runtime, aws_cli_bin, tmp_path / str(index),
                                            MODEL_SOURCE_S3_URI=f"s3://{bucket}/{OTHER_MODEL}")
        assert result.returncode != 0, f"{runtime.name} read another model:\n{result.stdout}"
        assert "AccessDenied" in result.stderr, result.stderr  # moto refused the GetObject calls
        assert files_under(folder) == {} and not marker.exists()
        # AWS would have refused earlier, at the listing (the condition moto ignores).
        listed = listed_prefixes(rehearsal, offset, bucket)
        assert listed and not any(prefix_condition_allows(rehearsal, runtime.role_arn, bucket, p) for p in listed)
