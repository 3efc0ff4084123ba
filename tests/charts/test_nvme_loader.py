"""The NVMe loader's script, run with bash (and coreutils only) against a temporary directory and a stand-in ``aws``
that behaves like the real CLI's ``s3 cp`` and ``s3 sync``: sync copies a file only when it is missing, its size
differs or the source is newer (as the real one compares sizes and times, never contents), and honours
``--exclude``. The truth is the publisher's ``SHA256SUMS`` in the "bucket"; every test attacks the node's copy."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from hyperpod_inference_iac.charts import NvmeModelCache
from hyperpod_inference_iac.charts.nvme_cache import LOADER_COMMAND, LOADER_SCRIPT, WEIGHTS_MANIFEST
from hyperpod_inference_iac.charts.pod_credentials import ContainerCredentials, CredentialScope
from hyperpod_inference_iac.weights_manifest import write_manifest

SOURCE_URI = "s3://weights/qwen3-8b/"
FAKE_AWS = """#!{python}
import os, shutil, sys
from pathlib import Path
with open(os.environ["AWS_CALLS"], "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
if os.environ.get("AWS_FAIL"):
    sys.exit(1)
bucket = Path(os.environ["FAKE_S3"])
def local(uri):
    return bucket / uri.removeprefix(os.environ["SOURCE_URI"].rstrip("/")).lstrip("/")
if sys.argv[1:3] == ["s3", "cp"]:
    source = local(sys.argv[3])
    if not source.is_file():
        print(f"fatal error: An error occurred (404) when calling the HeadObject operation", file=sys.stderr)
        sys.exit(1)
    shutil.copyfile(source, sys.argv[4])
    sys.exit(0)
assert sys.argv[1:3] == ["s3", "sync"], sys.argv
source, dest = local(sys.argv[3]), Path(sys.argv[4])
excluded = sys.argv[sys.argv.index("--exclude") + 1] if "--exclude" in sys.argv else None
for path in sorted(p for p in source.rglob("*") if p.is_file()):
    name = path.relative_to(source)
    if str(name) == excluded:
        continue
    target = dest / name
    if (not target.exists() or target.stat().st_size != path.stat().st_size
            or path.stat().st_mtime > target.stat().st_mtime):
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
"""
WEIGHTS = {
    "config.json": b'{"architectures": ["Qwen3ForCausalLM"]}',
    "model-00001-of-00002.safetensors": b"\x00\x01" * 4096,
    "model-00002-of-00002.safetensors": b"\x02\x03" * 4096,
    "original/tokenizer.json": b'{"version": "1.0"}',
    ".gitattributes": b"*.safetensors filter=lfs",
    "name with spaces.txt": b"spaces are fine",
}
# What the loader may run besides bash and the stand-in aws: the aws-cli image has coreutils, not findutils, grep
# or sed.
COREUTILS = ("cat", "cut", "sort", "split", "sha256sum", "nproc", "mktemp", "rm", "mv", "mkdir", "uniq", "wc",
             "head", "tail", "tr", "ls", "env", "true", "false", "dirname", "basename", "stat", "id", "chmod")
# As root, every capability dropped (bounding, inheritable and ambient sets empty), as the pod runs the loader: root
# without CAP_DAC_READ_SEARCH or CAP_DAC_OVERRIDE cannot list a directory whose mode denies it to the owner.
AS_ROOT = os.geteuid() == 0
SETPRIV = shutil.which("setpriv")
DROP_CAPABILITIES: tuple[str, ...] = (
    (SETPRIV, "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all", "--no-new-privs")
    if AS_ROOT and SETPRIV else ())
needs_dropped_root = pytest.mark.skipif(not (AS_ROOT and SETPRIV),
                                        reason="needs root and setpriv (util-linux) to run as the pod's root does")


@dataclass
class Loader:
    """One node's cache directory, the bucket it syncs from (with the publisher's manifest), and the stand-in's log."""

    tmp_path: Path

    @property
    def mount(self) -> Path:
        return self.tmp_path / "nvme"

    @property
    def bucket(self) -> Path:
        return self.tmp_path / "s3"

    @property
    def manifest(self) -> Path:
        return self.bucket / WEIGHTS_MANIFEST

    def aws_calls(self) -> list[str]:
        calls = self.tmp_path / "aws-calls"
        return calls.read_text().splitlines() if calls.exists() else []

    def syncs(self) -> int:
        return sum(call.startswith("s3 sync") for call in self.aws_calls())

    def run(self, *, aws_fails: bool = False, pinned: str | None = None,
            extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """The container's own command (bash and its flags, then the script pointed at this directory), as root
        without any capability when the tests run as root, as the pod runs it (``capabilities: drop: [ALL]``)."""
        *shell, script = NvmeModelCache(model_key="m", source_s3_uri=SOURCE_URI).init_container()["command"]
        script = script.replace("cd /nvme-model", f"cd {self.mount}").replace(
            "mktemp -d /tmp/loader.XXXXXX", f"mktemp -d {self.tmp_path}/scratch/loader.XXXXXX")
        env = {"PATH": str(self.tmp_path / "bin"), "MODEL_SOURCE_S3_URI": SOURCE_URI, "SOURCE_URI": SOURCE_URI,
               "FAKE_S3": str(self.bucket), "AWS_CALLS": str(self.tmp_path / "aws-calls"),
               "AWS_FAIL": "1" if aws_fails else "", "LC_ALL": "C", **(extra_env or {})}
        if pinned is not None:
            env["MODEL_MANIFEST_SHA256"] = pinned
        bash = shutil.which("bash") or "/bin/bash"
        assert shell[0] == "/bin/bash"
        return subprocess.run([*DROP_CAPABILITIES, bash, *shell[1:], script], env=env, capture_output=True,
                              text=True, check=False, timeout=60)

    def copy(self) -> dict[str, bytes]:
        return {str(p.relative_to(self.mount)): p.read_bytes() for p in self.mount.rglob("*")
                if p.is_file() or p.is_symlink()}


@pytest.fixture
def loader(tmp_path: Path) -> Loader:
    loader = Loader(tmp_path)
    loader.mount.mkdir()
    (tmp_path / "scratch").mkdir()
    for name, content in WEIGHTS.items():
        (loader.bucket / name).parent.mkdir(parents=True, exist_ok=True)
        (loader.bucket / name).write_bytes(content)
    write_manifest(loader.bucket)  # what the publisher does after uploading the weights
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "aws").write_text(FAKE_AWS.format(python=sys.executable))
    (bin_dir / "aws").chmod(0o755)
    for tool in COREUTILS:
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    return loader


def test_a_cold_node_gets_exactly_the_published_files(loader: Loader) -> None:
    result = loader.run()
    assert result.returncode == 0, result.stderr
    fetch, sync = loader.aws_calls()
    assert re.fullmatch(f"s3 cp {re.escape(SOURCE_URI + WEIGHTS_MANIFEST)} {re.escape(str(loader.tmp_path))}"
                        r"/scratch/loader\.\w{6}/reference\.sha256 --only-show-errors --no-progress", fetch), fetch
    assert sync == f"s3 sync {SOURCE_URI} . --exclude {WEIGHTS_MANIFEST} --only-show-errors --no-progress"
    # Nothing of the loader's own on the node: no manifest, no marker to forge.
    assert loader.copy() == WEIGHTS
    assert not any((loader.tmp_path / "scratch").iterdir())  # its scratch (the reference, the parts) went with it


def test_a_matching_copy_is_used_without_a_sync(loader: Loader) -> None:
    loader.run()
    result = loader.run()
    assert result.returncode == 0, result.stderr
    assert f"matches {SOURCE_URI}{WEIGHTS_MANIFEST} (6 files); skipping download" in result.stdout
    assert loader.syncs() == 1


@pytest.mark.parametrize("attack", [
    "edited in place",  # same size, newer time: a sync alone would keep it
    "edited, local manifest forged",  # what defeated the earlier loader: the manifest lived beside the weights
    "edited, old loader's files forged",
    "removed", "added", "added in a folder", "symlink to a file of the right content", "symlinked folder",
    "shard replaced by a folder", "named pipe", "truncated",
])
def test_a_poisoned_copy_is_detected_and_replaced(loader: Loader, attack: str) -> None:
    assert loader.run().returncode == 0
    shard = loader.mount / "model-00001-of-00002.safetensors"
    poisoned = b"\xff\xfe" * 4096
    if attack.startswith("edited"):
        shard.write_bytes(poisoned)
    if attack == "edited, local manifest forged":
        write_manifest(loader.mount)  # a manifest of the edited copy, where an attacker on the node can write
    elif attack == "edited, old loader's files forged":
        (loader.mount / ".download-complete").write_text(SOURCE_URI + "\n")
        (loader.mount / ".download-sha256sums").write_text(
            f"{hashlib.sha256(poisoned).hexdigest()}  model-00001-of-00002.safetensors\n")
    elif attack == "removed":
        shard.unlink()
    elif attack == "added":
        (loader.mount / "modeling_extra.py").write_text("import os\n")
    elif attack == "added in a folder":
        (loader.mount / "original" / "trust_remote_code.py").write_text("import os\n")
    elif attack == "symlink to a file of the right content":
        outside = loader.tmp_path / "elsewhere.bin"
        outside.write_bytes(WEIGHTS[shard.name])
        shard.unlink()
        shard.symlink_to(outside)  # right hash today, anything tomorrow
    elif attack == "symlinked folder":
        shutil.rmtree(loader.mount / "original")
        (loader.mount / "original").symlink_to(loader.bucket / "original")
    elif attack == "shard replaced by a folder":
        shard.unlink()
        shard.mkdir()
        (shard / "x").write_bytes(b"x")
    elif attack == "named pipe":
        os.mkfifo(loader.mount / "pipe")
    elif attack == "truncated":
        shard.write_bytes(WEIGHTS[shard.name][:100])
    result = loader.run()
    assert result.returncode == 0, result.stderr
    assert "syncing" in result.stdout
    assert loader.copy() == WEIGHTS
    assert not any(p.is_symlink() for p in loader.mount.rglob("*"))
    assert loader.run().returncode == 0 and loader.syncs() == 2  # matches again, no third sync


def test_a_pinned_manifest_refuses_a_republished_one(loader: Loader) -> None:
    pinned = hashlib.sha256(loader.manifest.read_bytes()).hexdigest()
    assert loader.run(pinned=pinned).returncode == 0
    (loader.bucket / "config.json").write_bytes(b'{"architectures": ["Other"]}')
    write_manifest(loader.bucket)  # a writer of the bucket republishes weights and manifest
    result = loader.run(pinned=pinned)
    assert result.returncode == 1
    assert f"not the pinned {pinned}" in result.stderr
    assert loader.syncs() == 1 and loader.copy() == WEIGHTS  # the node's copy is left as it was


def test_a_missing_manifest_fails_the_pod(loader: Loader) -> None:
    loader.manifest.unlink()
    result = loader.run()
    assert result.returncode == 1
    assert f"cannot read {SOURCE_URI}{WEIGHTS_MANIFEST}" in result.stderr
    assert loader.syncs() == 0


@needs_dropped_root
@pytest.mark.parametrize("attack", ["folder that cannot be listed", "cache root that cannot be listed",
                                    "nested folders that cannot be listed"])
def test_a_folder_the_loader_cannot_list_hides_nothing(loader: Loader, attack: str) -> None:
    """Root without CAP_DAC_* cannot list a folder of mode 0311 (enter, not list): the files in it were invisible to
    the loader's glob, and "skipping download" followed while a model server could open them by name."""
    assert loader.run().returncode == 0
    if attack == "folder that cannot be listed":
        hidden = loader.mount / "original" / "trust_remote_code.py"
        hidden.write_text("import os\n")
        (loader.mount / "original").chmod(0o311)
    elif attack == "cache root that cannot be listed":
        hidden = loader.mount / "modeling_extra.py"
        hidden.write_text("import os\n")
        loader.mount.chmod(0o311)
    else:
        (loader.mount / "a" / "b").mkdir(parents=True)
        hidden = loader.mount / "a" / "b" / "x.py"
        hidden.write_text("import os\n")
        (loader.mount / "a" / "b").chmod(0o311)
        (loader.mount / "a").chmod(0o311)
    result = loader.run()
    assert result.returncode == 0, result.stderr
    assert "skipping download" not in result.stdout
    assert not hidden.exists()
    assert {k: v for k, v in loader.copy().items()} == WEIGHTS


@needs_dropped_root
def test_a_hard_link_from_outside_cannot_change_the_copy(loader: Loader) -> None:
    """A second link to a cached file (made while the cache was writable to someone else): writing through it would
    change the copy after the check. The file is replaced by one of a single link."""
    assert loader.run().returncode == 0
    shard = loader.mount / "model-00001-of-00002.safetensors"
    outside = loader.tmp_path / "outside-link"
    os.link(shard, outside)
    result = loader.run()
    assert result.returncode == 0, result.stderr
    assert "skipping download" not in result.stdout
    assert shard.stat().st_nlink == 1
    with outside.open("r+b") as link:
        link.write(b"\xff" * 16)
    assert loader.copy() == WEIGHTS


@needs_dropped_root
def test_a_file_of_another_owner_is_replaced(loader: Loader) -> None:
    assert loader.run().returncode == 0
    shard = loader.mount / "model-00002-of-00002.safetensors"
    os.chown(shard, 1000, 1000)
    result = loader.run()
    assert result.returncode == 0, result.stderr
    assert "skipping download" not in result.stdout
    assert shard.stat().st_uid == os.geteuid() and loader.copy() == WEIGHTS


@needs_dropped_root
def test_a_folder_of_another_owner_fails_the_pod(loader: Loader) -> None:
    """A folder the loader cannot make listable (not its own, and it has no CAP_FOWNER) is never trusted."""
    assert loader.run().returncode == 0
    os.chown(loader.mount / "original", 1000, 1000)
    (loader.mount / "original").chmod(0o311)
    result = loader.run()
    assert result.returncode == 1
    assert "cannot make ./original listable: it is not the loader's own" in result.stderr


@pytest.mark.parametrize("variable", ["BASH_ENV", "ENV", "BASH_FUNC_cd%%", "BASH_FUNC_set%%", "SHELLOPTS"])
def test_the_environment_cannot_inject_code_into_the_loader_s_shell(loader: Loader, variable: str) -> None:
    """A look-alike pod's env (admission refuses it too): BASH_ENV names a file bash runs before the script, a
    BASH_FUNC_<name>%% variable defines a function that replaces a command of the script. The container's command
    runs bash -p, which reads neither."""
    marker = loader.tmp_path / "injected"
    payload = loader.tmp_path / "payload.sh"
    payload.write_text(f"echo injected > {marker}\n")
    value = {"BASH_ENV": str(payload), "ENV": str(payload), "SHELLOPTS": "xtrace",
             "BASH_FUNC_cd%%": f"() {{ echo injected > {marker}; builtin cd \"$@\"; }}",
             "BASH_FUNC_set%%": f"() {{ echo injected > {marker}; builtin set \"$@\"; }}"}[variable]
    result = loader.run(extra_env={variable: value})
    assert result.returncode == 0, result.stderr
    assert not marker.exists()
    assert "+ " not in result.stderr  # SHELLOPTS=xtrace ignored


@pytest.mark.parametrize(("line", "why"), [
    (f"{'a' * 64}  -", "lists -, which sha256sum reads as standard input"),
    (f"{'a' * 64}  /etc/passwd", "not a sha256sum line"),
    (f"{'a' * 64}  ../outside", "a path with . or .."),
    (f"{'a' * 64}  original/../../x", "a path with . or .."),
    (f"{'a' * 64}  ./config.json", "a path with . or .."),
    (f"{'a' * 64}  weird\\\\name", "not a sha256sum line"),
    (f"{'a' * 64} *binary-mode", "not a sha256sum line"),
    (f"{'A' * 64}  upper-case", "not a sha256sum line"),
    (f"{'a' * 64}  {WEIGHTS_MANIFEST}", "lists itself"),
    (f"{'a' * 64}  config.json", "lists config.json twice"),
])
def test_a_malformed_manifest_fails_before_anything_is_touched(loader: Loader, line: str, why: str) -> None:
    with loader.manifest.open("a") as manifest:
        manifest.write(line + "\n")
    (loader.mount / "keep").write_text("untouched")
    result = loader.run()
    assert result.returncode == 1
    assert why in result.stderr
    assert loader.syncs() == 0 and (loader.mount / "keep").exists()


def test_an_empty_manifest_fails_the_pod(loader: Loader) -> None:
    loader.manifest.write_text("")
    result = loader.run()
    assert result.returncode == 1
    assert "lists no files" in result.stderr


def test_weights_changed_in_s3_after_the_manifest_fail_loudly(loader: Loader) -> None:
    (loader.bucket / "config.json").write_bytes(b'{"architectures": ["Changed"]}')
    result = loader.run()
    assert result.returncode == 1
    assert "does not match its manifest after the sync (1 files differ, first: config.json)" in result.stderr


def test_files_in_s3_the_manifest_does_not_list_never_reach_the_copy(loader: Loader) -> None:
    (loader.bucket / "unreviewed.py").write_text("import os\n")
    assert loader.run().returncode == 0
    assert loader.copy() == WEIGHTS


def test_a_failed_download_fails_the_pod(loader: Loader) -> None:
    result = loader.run(aws_fails=True)
    assert result.returncode != 0
    assert loader.copy() == {}
    assert not any((loader.tmp_path / "scratch").iterdir())  # a failed run leaves no scratch behind either


def test_the_container_runs_that_script_read_only_with_the_loader_s_own_credentials() -> None:
    credentials = ContainerCredentials("arn:aws:iam::111122223333:role/p-qwen", CredentialScope.WEIGHTS_LOADER,
                                       "us-west-2")
    pin = "0" * 64
    cache = NvmeModelCache(model_key="qwen3-8b", source_s3_uri=SOURCE_URI, manifest_sha256=pin,
                           credentials=credentials)
    container = cache.init_container()
    assert container["command"] == ["/bin/bash", "-p", "-c", LOADER_SCRIPT] == list(LOADER_COMMAND)
    assert f"MANIFEST={WEIGHTS_MANIFEST}" in LOADER_SCRIPT
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    env = {item["name"]: item["value"] for item in container["env"]}
    assert env == {"MODEL_SOURCE_S3_URI": SOURCE_URI, "HOME": "/tmp", "MODEL_MANIFEST_SHA256": pin,
                   "AWS_ROLE_ARN": credentials.role_arn,
                   "AWS_WEB_IDENTITY_TOKEN_FILE": "/var/run/secrets/hyperpod-inference-iac/weights-loader/token",
                   "AWS_STS_REGIONAL_ENDPOINTS": "regional", "AWS_REGION": "us-west-2",
                   "AWS_DEFAULT_REGION": "us-west-2"}
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in cache.volumes("/opt/dlami/nvme")}
    assert mounts == {"/nvme-model": "model-weights", "/tmp": "nvme-loader-tmp",
                      "/var/run/secrets/hyperpod-inference-iac/weights-loader": "aws-token-weights-loader"}
    assert set(mounts.values()) == set(volumes)
    token = volumes["aws-token-weights-loader"]["projected"]["sources"][0]["serviceAccountToken"]
    assert token["audience"] == "hyperpod-inference-iac/weights-loader"


def test_the_manifest_is_sha256sum_s_own_format(tmp_path: Path) -> None:
    for name, content in WEIGHTS.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(content)
    manifest = write_manifest(tmp_path)
    check = subprocess.run(["sha256sum", "--check", "--strict", manifest.name], cwd=tmp_path, capture_output=True,
                           text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    assert [line.split("  ", 1)[1] for line in manifest.read_text().splitlines()] == sorted(WEIGHTS)
