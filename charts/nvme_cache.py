"""Model weights on node-local NVMe, with S3 as the trusted upstream and the publisher's manifest as the truth.

NVMe is a start-up accelerator, not a registry. Before a model server starts, an init container (the loader)
makes the node's copy of the weights exactly what the publisher published, and nothing on the node decides
what that is:

* **The reference lives off the node.** The publisher writes a manifest next to the weights,
  ``<sourceS3Uri>/SHA256SUMS`` (``sha256sum`` format: ``<64 hex>  <relative path>`` per file; written by
  :func:`hyperpod_inference_iac.weights_manifest.write_manifest` or the ``sha256sum`` command in the docs). The
  loader reads it from S3, under its own role, into its private scratch volume (never into the cache), and
  optionally checks the manifest itself against a digest pinned in the config (``manifestSha256``), so even a
  writer of the weights bucket cannot swap the model without a reviewed config change.
* **The node's copy is checked against it on every start.** Every entry that is not a listed regular file
  (unlisted files, symlinks, devices) is removed; every listed file is hashed (``sha256sum --check``, up to 8 in
  parallel) and each one that is missing or differs is removed and fetched again (``aws s3 sync``, which also
  verifies S3's own checksums in transit). A copy edited in place, manifest and markers included, is detected and
  replaced: the loader keeps no manifest or marker of its own on the node, so there is nothing local to forge.
* **Nothing it cannot see is trusted.** The loader runs as root without any capability, so it cannot list a folder
  whose mode denies it: before it lists the copy it makes every folder ``0755`` and fails the pod on one it cannot
  chmod (not its own). A listed file must be a regular file of the loader's own with a single link (a second link
  outside the copy would let a write there change it), else it is removed and fetched again; a manifest naming
  ``-`` (which ``sha256sum`` reads from standard input) is refused. It runs ``bash -p``: no ``BASH_ENV``/``ENV`` file,
  no ``BASH_FUNC_*`` function from the environment.
* **Only the loader writes.** The model server mounts the cache read-only; the loader is the only container with
  a writable mount and the only one with credentials to read the weights (its own role, its own token audience:
  :mod:`charts.pod_credentials`). Who else may mount the host path is decided by admission
  (:mod:`charts.pod_security`), not by this script.

What it cannot stop: a writer with root on the node, or a pod that may mount the host path writable, changing a
file *after* the check and before the model server has read it (docs/security.md, *Weights*).

The script needs only bash and coreutils (the aws-cli image has no findutils, grep or sed). Used by both charts:
the operator's ``kubernetesVolume`` source (volumes and init container go in ``spec.kubernetes``) and the portable
Deployment.
"""

from __future__ import annotations

import dataclasses
import posixpath
from typing import Any

from hyperpod_inference_iac.charts._spec_fields import SpecBlock, crd_field, planned_field
from hyperpod_inference_iac.charts.pod_credentials import ContainerCredentials
from hyperpod_inference_iac.foundation.patterns import DNS1123_LABEL, PINNED_IMAGE
from hyperpod_inference_iac.foundation.validation import Problems, join_path

# Pinned: a moving tag would change what runs with the workload's S3 credentials.
AWS_CLI_IMAGE = "public.ecr.aws/aws-cli/aws-cli:2.32.9"
# Instance-store NVMe on HyperPod nodes (the DLAMI mount; also the operator's weightsCache default).
HYPERPOD_NVME_ROOT = "/opt/dlami/nvme"
# Instance-store NVMe on plain EKS AL2023 nodes with nodeadm's RAID0 local storage.
EKS_AL2023_NVME_ROOT = "/mnt/k8s-disks/0/models"
# The publisher's manifest, next to the weights in S3 (never in the node's copy).
WEIGHTS_MANIFEST = "SHA256SUMS"
LOADER_CONTAINER = "nvme-weights-loader"
LOADER_SCRATCH_VOLUME = "nvme-loader-tmp"
_INIT_MOUNT_PATH = "/nvme-model"
_SCRATCH_PATH = "/tmp"

# The loader's script, in bash with coreutils only. Its names: WEIGHTS_MANIFEST, _INIT_MOUNT_PATH, _SCRATCH_PATH.
LOADER_SCRIPT = r"""set -euo pipefail
shopt -s globstar dotglob nullglob
cd /nvme-model
MANIFEST=SHA256SUMS
SOURCE="${MODEL_SOURCE_S3_URI%/}"
WORK=$(mktemp -d /tmp/loader.XXXXXX)
trap 'rm -rf -- "$WORK"' EXIT  # the scratch goes with the script, whatever its end
REFERENCE="$WORK/reference.sha256"
LOADER_UID=$(id -u)
declare -A LISTED=()

fail() { printf '%s\n' "$*" >&2; exit 1; }

# Every directory of the copy listable by the loader, which has no CAP_DAC_* (a folder of mode 0311 would hide its
# files from the glob below): each is made u=rwx,go=rx before it is listed; one the loader cannot chmod is not its
# own, and fails the pod.
listable_tree() {
  local path
  chmod 0755 -- "$1" 2>/dev/null \
    || fail "cannot make $1 listable: it is not the loader's own; remove the node's copy of the model"
  for path in "$1"/*; do
    if [ -d "$path" ] && [ ! -L "$path" ]; then listable_tree "$path"; fi
  done
}

# The publisher's manifest, read from S3 into the loader's own scratch space: the only reference.
fetch_reference() {
  local line name actual count=0
  aws s3 cp "$SOURCE/$MANIFEST" "$REFERENCE" --only-show-errors --no-progress \
    || fail "cannot read $SOURCE/$MANIFEST: the publisher of the weights writes this manifest next to them"
  if [ -n "${MODEL_MANIFEST_SHA256:-}" ]; then
    actual=$(sha256sum < "$REFERENCE")
    actual=${actual%% *}
    [ "$actual" = "$MODEL_MANIFEST_SHA256" ] \
      || fail "$SOURCE/$MANIFEST has SHA-256 $actual, not the pinned $MODEL_MANIFEST_SHA256:" \
              "the weights were republished; review them and pin the new manifest (manifestSha256)"
  fi
  while IFS= read -r line || [ -n "$line" ]; do
    # "<64 lowercase hex>  <relative path>": no absolute path, no "." or ".." part, no backslash (sha256sum's
    # escaped names), nothing named like the manifest.
    [[ "$line" =~ ^[0-9a-f]{64}\ \ ([^/\\]([^\\]*[^/\\])?)$ ]] \
      || fail "$SOURCE/$MANIFEST: not a sha256sum line of a relative path: ${line:0:200}"
    name=${BASH_REMATCH[1]}
    [[ "/$name/" != *"/./"* && "/$name/" != *"/../"* ]] || fail "$SOURCE/$MANIFEST: a path with . or ..: $name"
    [ "$name" != "$MANIFEST" ] || fail "$SOURCE/$MANIFEST lists itself"
    # sha256sum --check reads a file named - from standard input: it would never be compared.
    [ "$name" != "-" ] || fail "$SOURCE/$MANIFEST lists -, which sha256sum reads as standard input"
    [ -z "${LISTED[$name]:-}" ] || fail "$SOURCE/$MANIFEST lists $name twice"
    LISTED[$name]=1
    count=$((count + 1))
  done < "$REFERENCE"
  [ "$count" -gt 0 ] || fail "$SOURCE/$MANIFEST lists no files"
}

# Removes every entry that can never be part of the copy: symlinks, devices, pipes, files the manifest does not
# list, and listed files that are not the loader's own or have another link (a write through a link outside the
# copy would change it); the others are made u=rw,go=r. Prints how many were removed.
remove_unlisted() {
  local path owner links removed=0
  listable_tree .
  for path in **; do
    if [ -L "$path" ] || { [ ! -d "$path" ] && { [ ! -f "$path" ] || [ -z "${LISTED[$path]:-}" ]; }; }; then
      rm -rf -- "$path"
      removed=$((removed + 1))
    elif [ -f "$path" ]; then
      read -r owner links < <(stat -c '%u %h' -- "$path")
      if [ "$owner" != "$LOADER_UID" ] || [ "$links" != 1 ]; then
        rm -f -- "$path"
        removed=$((removed + 1))
      else
        chmod 0644 -- "$path"
      fi
    fi
  done
  printf '%s\n' "$removed"
}

# Every listed file that is missing or differs from the reference, one name per line; sha256sum in up to 8
# processes at once (models come in shards of a few GB).
failing_files() {
  local parts="$WORK/parts" part line pids=() jobs
  jobs=$(nproc)
  if [ "$jobs" -gt 8 ]; then jobs=8; fi
  rm -rf "$parts" && mkdir "$parts"
  split --number="r/$jobs" "$REFERENCE" "$parts/part."
  for part in "$parts"/part.*; do
    if [ -s "$part" ]; then
      sha256sum --check --quiet --strict "$part" > "$part.out" 2>/dev/null &
      pids+=("$!")
    fi
  done
  for pid in "${pids[@]}"; do wait "$pid" || true; done
  for part in "$parts"/part.*.out; do
    while IFS= read -r line; do
      case "$line" in *": FAILED"*) printf '%s\n' "${line%: FAILED*}" ;; esac
    done < "$part"
  done
}

fetch_reference
unlisted=$(remove_unlisted)
mapfile -t failing < <(failing_files)
if [ "$unlisted" -eq 0 ] && [ "${#failing[@]}" -eq 0 ]; then
  echo "the copy on node-local NVMe matches $SOURCE/$MANIFEST (${#LISTED[@]} files); skipping download"
  exit 0
fi
for name in "${failing[@]}"; do rm -rf -- "$name"; done
echo "$SOURCE/$MANIFEST: ${#failing[@]} of ${#LISTED[@]} files missing or changed," \
  "$unlisted unlisted entries removed; syncing"
aws s3 sync "$SOURCE/" . --exclude "$MANIFEST" --only-show-errors --no-progress
remove_unlisted > /dev/null
mapfile -t failing < <(failing_files)
if [ "${#failing[@]}" -gt 0 ]; then
  fail "$SOURCE does not match its manifest after the sync (${#failing[@]} files differ, first: ${failing[0]}):" \
       "the weights in S3 changed after the manifest was written; republish the manifest"
fi
echo "the copy on node-local NVMe matches $SOURCE/$MANIFEST (${#LISTED[@]} files)"
"""
# bash -p: no BASH_ENV or ENV file is read and no BASH_FUNC_* function imported, so nothing in the container's
# environment runs as code before the script (admission also holds the environment to the planned one).
LOADER_COMMAND = ("/bin/bash", "-p", "-c", LOADER_SCRIPT)
_WEIGHTS_S3_URI_PATTERN = r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^\s]*)?$"


@dataclasses.dataclass(frozen=True, kw_only=True)
class NvmeModelCache(SpecBlock):
    """A hostPath ``<host_root>/<model_key>`` kept identical to ``source_s3_uri`` as its manifest lists it.

    YAML (a ``models:`` entry's ``nvmeCache``)::

        nvmeCache:
          modelKey: qwen3-8b
          sourceS3Uri: s3://my-weights/qwen3-8b/
          manifestSha256: 3b0c…   # optional: the SHA-256 of s3://my-weights/qwen3-8b/SHA256SUMS you reviewed

    ``credentials`` is set by the plan (the loader's own role and token audience), never written by a user.
    """

    model_key: str = crd_field(
        code="NvmeCache.ModelKeyInvalid",
        pattern=DNS1123_LABEL.pattern,
        hint="a lowercase folder name (DNS-1123 label), e.g. qwen3-8b",
    )
    source_s3_uri: str = crd_field(
        code="NvmeCache.SourceS3UriInvalid", pattern=_WEIGHTS_S3_URI_PATTERN, hint="s3://bucket/prefix"
    )
    # None: the chart's default (HyperPod: HYPERPOD_NVME_ROOT, portable: EKS_AL2023_NVME_ROOT).
    host_root: str | None = crd_field(default=None, code="NvmeCache.HostRootInvalid", pattern=r"^/[^\s]*[^/\s]$")
    volume_name: str = crd_field(
        default="model-weights", code="NvmeCache.VolumeNameInvalid", pattern=DNS1123_LABEL.pattern
    )
    aws_cli_image: str = crd_field(
        default=AWS_CLI_IMAGE,
        code="NvmeCache.ImageNotPinned",
        pattern=PINNED_IMAGE.pattern,
        hint="pin a version tag or digest",
    )
    # The reviewed SHA-256 of the publisher's manifest: a new manifest (new weights) needs a config change.
    manifest_sha256: str | None = crd_field(
        default=None, code="NvmeCache.ManifestSha256Invalid", pattern=r"^[0-9a-f]{64}$",
        hint=f"the 64 lowercase hex digits of sha256sum of <sourceS3Uri>/{WEIGHTS_MANIFEST}",
    )
    credentials: ContainerCredentials | None = planned_field()

    def check_rules(self, path: str, problems: Problems) -> None:
        if self.aws_cli_image.endswith(":latest"):
            problems.add(
                "NvmeCache.ImageNotPinned",
                join_path(path, "awsCliImage"),
                "must name a version tag or digest, not :latest",
                self.aws_cli_image,
            )

    @property
    def manifest_uri(self) -> str:
        """Where the loader reads the publisher's manifest."""
        return f"{self.source_s3_uri.rstrip('/')}/{WEIGHTS_MANIFEST}"

    def host_path(self, default_root: str) -> str:
        return posixpath.join(self.host_root or default_root, self.model_key)

    def volume(self, default_root: str) -> dict[str, Any]:
        """core/v1 Volume; DirectoryOrCreate so the first pod on a node can fill it."""
        host_path = {"path": self.host_path(default_root), "type": "DirectoryOrCreate"}
        return {"name": self.volume_name, "hostPath": host_path}

    def volumes(self, default_root: str) -> list[dict[str, Any]]:
        """The hostPath volume, the loader's scratch volume (its /tmp and $HOME, where the AWS CLI caches
        credentials and the manifest is kept, so that its root filesystem stays read-only) and, when planned, the
        loader's own token."""
        volumes = [self.volume(default_root), {"name": LOADER_SCRATCH_VOLUME, "emptyDir": {"sizeLimit": "256Mi"}}]
        if self.credentials is not None:
            volumes.append(self.credentials.volume())
        return volumes

    def environment(self) -> list[dict[str, str]]:
        env = [{"name": "MODEL_SOURCE_S3_URI", "value": self.source_s3_uri}, {"name": "HOME", "value": _SCRATCH_PATH}]
        if self.manifest_sha256 is not None:
            env.append({"name": "MODEL_MANIFEST_SHA256", "value": self.manifest_sha256})
        return env

    def init_container(self) -> dict[str, Any]:
        """core/v1 Container that makes the NVMe copy match the publisher's manifest before the model server starts.
        With planned credentials it is the only container of the pod that holds any."""
        container: dict[str, Any] = {
            "name": LOADER_CONTAINER,
            "image": self.aws_cli_image,
            "command": list(LOADER_COMMAND),
            "env": self.environment(),
            "volumeMounts": [{"name": self.volume_name, "mountPath": _INIT_MOUNT_PATH},
                             {"name": LOADER_SCRATCH_VOLUME, "mountPath": _SCRATCH_PATH}],
            # Root is needed to write into the root-owned hostPath directory; nothing more is.
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                "privileged": False, "readOnlyRootFilesystem": True, "runAsNonRoot": False},
        }
        if self.credentials is not None:
            container["volumeMounts"].append(self.credentials.mount())
            container["env"] += self.credentials.env()
        return container
