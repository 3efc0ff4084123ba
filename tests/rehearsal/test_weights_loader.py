"""Rehearsal of the NVMe weights loaders: every init container the manifests give a MODEL_SOURCE_S3_URI (the
portable Deployment's and each InferenceEndpointConfig's `nvme-weights-loader`) runs its own shell script, with
an `aws` on PATH, under the temporary credentials of its own role (the one its AWS_ROLE_ARN names). The publisher's
SHA256SUMS is in the bucket beside the weights, as the publisher writes it (hyperpod_inference_iac.weights_manifest).

Proves: the role allows what `aws s3 sync` really does (ListObjectsV2 = s3:ListBucket, GetObject per file) on the
model's prefix, and refuses another model's objects. moto ignores the ListBucket grant's ``s3:prefix`` condition
(listing another prefix is allowed there, only its GetObject is refused), so the prefixes the CLI really listed
are read back from moto's request log and matched against that condition here. Cannot prove (docs/rehearsal.md):
the weights bucket's own encryption and policy (it is not in the templates), the image's AWS CLI v2 (this is v1,
making the same S3 calls)."""

from __future__ import annotations

import fnmatch
import hashlib
import subprocess
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from hyperpod_inference_iac.charts.nvme_cache import WEIGHTS_MANIFEST
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
        for where in (prefix, OTHER_MODEL):
            s3.put_object(Bucket=bucket, Key=f"{where}{WEIGHTS_MANIFEST}", Body=MANIFEST)
    return loaders


MANIFEST = "".join(f"{hashlib.sha256(body).hexdigest()}  {name}\n" for name, body in sorted(WEIGHTS.items())).encode()


def run_loader(rehearsal: Rehearsal, runtime: ContainerRuntime, aws_cli_bin: Path, workdir: Path,
               **overrides: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The init container's command (`/bin/bash -c <script>`) with the manifest's env and its role's credentials;
    the volume's mount path in the script becomes a folder here. The result and the folder."""
    shell, script = runtime.container["command"][:-1], runtime.container["command"][-1]  # /bin/bash -p -c <script>
    [mount_path] = [path for path in runtime.mounts if f"cd {path}\n" in script]
    folder = workdir / "nvme"
    folder.mkdir(parents=True, exist_ok=True)
    local_script = script.replace(mount_path, str(folder))
    env = base_environment(workdir)
    env.update(runtime.env)
    env.update(overrides)
    env.update(rehearsal.environment(rehearsal.credentials(runtime.role_arn)))
    env["PATH"] = f"{aws_cli_bin}:/usr/bin:/bin"
    result = subprocess.run([*shell, local_script], env=env, capture_output=True, text=True, timeout=300, check=False)
    return result, folder


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
    return {str(path.relative_to(folder)): path.read_bytes() for path in folder.rglob("*") if path.is_file()}


def test_each_loader_copies_its_model_under_its_own_role(
    rehearsal: Rehearsal, seeded: list[ContainerRuntime], aws_cli_bin: Path, tmp_path: Path
) -> None:
    for index, runtime in enumerate(seeded):
        offset = rehearsal.server.log_offset()
        result, folder = run_loader(rehearsal, runtime, aws_cli_bin, tmp_path / str(index))
        assert result.returncode == 0, f"{runtime.name} ({runtime.role_arn}):\n{result.stdout}\n{result.stderr}"
        assert files_under(folder) == WEIGHTS, runtime.name  # exactly the published files, nothing of the loader's
        # The condition moto skipped: every prefix the CLI listed is one the role's s3:prefix condition allows.
        bucket, _ = split_s3_uri(runtime.env["MODEL_SOURCE_S3_URI"])
        listed = listed_prefixes(rehearsal, offset, bucket)
        assert listed, "moto's log shows no ListObjects of the loader"
        assert [p for p in listed if not prefix_condition_allows(rehearsal, runtime.role_arn, bucket, p)] == []
        # A pod restart on the same node finds a copy that matches the manifest in S3 and syncs nothing.
        again, _ = run_loader(rehearsal, runtime, aws_cli_bin, tmp_path / str(index))
        assert again.returncode == 0 and "skipping download" in again.stdout, again.stdout + again.stderr
        # A file changed in place (same size: sync alone would keep it), with a forged manifest beside it on the node:
        # the manifest in S3 decides, the file is fetched again and the forgery removed.
        (name, body), *_ = WEIGHTS.items()
        (folder / name).write_bytes(bytes(255 - b for b in body))
        (folder / WEIGHTS_MANIFEST).write_text(f"{hashlib.sha256(bytes(255 - b for b in body)).hexdigest()}  {name}\n")
        repaired, _ = run_loader(rehearsal, runtime, aws_cli_bin, tmp_path / str(index))
        assert repaired.returncode == 0 and "syncing" in repaired.stdout, repaired.stdout + repaired.stderr
        assert files_under(folder) == WEIGHTS, runtime.name


def test_a_loader_pointed_at_another_models_prefix_is_refused(
    rehearsal: Rehearsal, seeded: list[ContainerRuntime], aws_cli_bin: Path, tmp_path: Path
) -> None:
    for index, runtime in enumerate(seeded):
        bucket, _ = split_s3_uri(runtime.env["MODEL_SOURCE_S3_URI"])
        offset = rehearsal.server.log_offset()
        result, folder = run_loader(rehearsal, runtime, aws_cli_bin, tmp_path / str(index),
                                    MODEL_SOURCE_S3_URI=f"s3://{bucket}/{OTHER_MODEL}")
        assert result.returncode != 0, f"{runtime.name} read another model:\n{result.stdout}"
        assert f"cannot read s3://{bucket}/{OTHER_MODEL}{WEIGHTS_MANIFEST}" in result.stderr, result.stderr
        assert files_under(folder) == {}
        # moto refused the first read, the other model's manifest, and nothing of it was listed or read after.
        requests = rehearsal.server.requests_since(offset)
        assert [status for _, target, status in requests if OTHER_MODEL + WEIGHTS_MANIFEST in target] == [403]
        assert not any(status == 200 and OTHER_MODEL in target for _, target, status in requests), requests
        assert not prefix_condition_allows(rehearsal, runtime.role_arn, bucket, OTHER_MODEL)


def test_the_loader_and_the_sidecar_cannot_use_each_other_s_rights(
    rehearsal: Rehearsal, seeded: list[ContainerRuntime], assembly: Assembly
) -> None:
    """One pod, two roles: the loader's may not write captures, the sidecar's may not read weights, and the model
    server in between holds neither (tests/platform/test_composition.py)."""
    from botocore.exceptions import ClientError

    runtimes = container_runtimes(assembly.manifests)
    # The sidecars of pods with a weights loader (a gateway's capture entry has none: its role is checked by
    # tests/platform/test_composition.py::test_the_gateway_entry_may_write_its_own_captures_only).
    sidecars = [r for r in runtimes if "CAPTURE_S3_URI" in r.env and any(s.workload == r.workload for s in seeded)]
    assert sidecars and seeded
    for sidecar in sidecars:
        pod = sidecar.workload
        (loader,) = [r for r in seeded if r.workload == pod]
        assert loader.role_arn != sidecar.role_arn
        capture_bucket, capture_prefix = split_s3_uri(sidecar.env["CAPTURE_S3_URI"])
        weights_bucket, weights_prefix = split_s3_uri(loader.env["MODEL_SOURCE_S3_URI"])
        as_loader = rehearsal.client("s3", rehearsal.credentials(loader.role_arn))
        as_sidecar = rehearsal.client("s3", rehearsal.credentials(sidecar.role_arn))
        with pytest.raises(ClientError, match="AccessDenied"):
            as_loader.put_object(Bucket=capture_bucket, Key=f"{capture_prefix}forged.jsonl", Body=b"{}")
        with pytest.raises(ClientError, match=r"AccessDenied|Forbidden|403"):
            as_sidecar.get_object(Bucket=weights_bucket, Key=f"{weights_prefix}config.json")
