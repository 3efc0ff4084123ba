"""Model weights on node-local NVMe, with S3 as the trusted upstream.

NVMe is a start-up accelerator, not a registry: a pod first looks for a verified copy on the node;
when there is none (new node, evicted cache, interrupted or damaged copy, another source) an init
container running under the workload's own service account (IRSA) syncs it from S3. After the sync
it writes a checksum manifest (``sha256sum`` of every file), then a marker naming the source URI;
the marker is written last, so a copy interrupted half-way is never taken for a complete one, and
the next pod resumes it (``aws s3 sync --delete`` fetches what is missing, removes what is not in
the source). Before a finished copy is trusted, its marker must name this source, its files must be
exactly the manifest's and each must match its checksum (``sha256sum --check``); otherwise it is
removed and synced again from nothing (``aws s3 sync`` compares sizes and times only, so it would
keep a file changed in place).

The manifest lives beside the copy, so it detects what happens to a copy (torn writes, disk errors,
files changed, added or removed by hand), not a writer who rewrites the manifest as well: the only
guard against those is who may mount the hostPath (docs/charts/portable-model-server-chart.md).

Used by both charts: the operator's ``kubernetesVolume`` source (volumes and init container go in
``spec.kubernetes``) and the portable Deployment.
"""

from __future__ import annotations

import dataclasses
import posixpath
from typing import Any

from hyperpod_inference_iac.charts._spec_fields import SpecBlock, crd_field
from hyperpod_inference_iac.patterns import DNS1123_LABEL, PINNED_IMAGE
from hyperpod_inference_iac.validation import Problems, join_path

# Pinned: a moving tag would change what runs with the workload's S3 credentials.
AWS_CLI_IMAGE = "public.ecr.aws/aws-cli/aws-cli:2.32.9"
# Instance-store NVMe on HyperPod nodes (the DLAMI mount; also the operator's weightsCache default).
HYPERPOD_NVME_ROOT = "/opt/dlami/nvme"
# Instance-store NVMe on plain EKS AL2023 nodes with nodeadm's RAID0 local storage.
EKS_AL2023_NVME_ROOT = "/mnt/k8s-disks/0/models"
COMPLETE_MARKER = ".download-complete"
CHECKSUMS = ".download-sha256sums"
LOADER_SCRATCH_VOLUME = "nvme-loader-tmp"
_INIT_MOUNT_PATH = "/nvme-model"
_SCRATCH_PATH = "/tmp"

# The loader's script, in bash: the aws-cli image (Amazon Linux 2023 since 2.27.51) has bash and
# coreutils (sha256sum, sort, cut, split, nproc, mktemp) but not findutils, so the file list comes from bash's own
# globbing (``**``), not ``find``. Its three names are COMPLETE_MARKER, CHECKSUMS and _INIT_MOUNT_PATH.
LOADER_SCRIPT = r"""set -euo pipefail
shopt -s globstar dotglob nullglob
cd /nvme-model
MARKER=.download-complete
SUMS=.download-sha256sums

# Every entry of the copy that is not a directory, except the loader's own two files, sorted.
list_files() {
  local path
  for path in **; do
    if [ -d "$path" ] && [ ! -L "$path" ]; then continue; fi
    if [ "$path" != "$MARKER" ] && [ "$path" != "$SUMS" ]; then printf '%s\n' "$path"; fi
  done | LC_ALL=C sort
}

# Every file against its sum, in up to 8 sha256sum processes at once (models come in shards of a few GB).
sums_match() {
  local parts part pids=() status=0 jobs
  jobs=$(nproc)
  if [ "$jobs" -gt 8 ]; then jobs=8; fi
  parts=$(mktemp -d)
  split --number="r/$jobs" "$SUMS" "$parts/part."
  for part in "$parts"/part.*; do
    if [ -s "$part" ]; then
      sha256sum --check --quiet --strict "$part" &
      pids+=("$!")
    fi
  done
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  rm -rf "$parts"
  return "$status"
}

# Trusted only if complete (the marker), of this source, exactly the files summed, each unchanged.
copy_is_verified() {
  [ -f "$MARKER" ] && [ -s "$SUMS" ] || return 1
  [ "$(cat "$MARKER")" = "$MODEL_SOURCE_S3_URI" ] || return 1
  [ "$(list_files)" = "$(cut -c 67- "$SUMS")" ] || return 1  # 64 hex digits, 2 spaces, the name
  sums_match
}

if copy_is_verified; then
  echo "verified model copy on node-local NVMe; skipping download"
  exit 0
fi
if [ -f "$MARKER" ]; then
  # A finished copy that failed its check, or of another source: start clean, since sync compares
  # only sizes and times and would keep a file changed in place. The marker goes first.
  echo "the copy on NVMe is not a verified copy of $MODEL_SOURCE_S3_URI; removing it"
  rm -f "$MARKER"
  rm -rf -- ./*
fi
# No marker: a new or interrupted copy. Sync fetches what is missing and --delete removes the rest.
echo "syncing from $MODEL_SOURCE_S3_URI"
aws s3 sync "$MODEL_SOURCE_S3_URI" . --delete --only-show-errors --no-progress
mapfile -t files < <(list_files)
if [ "${#files[@]}" -eq 0 ]; then
  echo "no files under $MODEL_SOURCE_S3_URI" >&2
  exit 1
fi
sha256sum -- "${files[@]}" > "$SUMS.tmp"
mv "$SUMS.tmp" "$SUMS"
printf '%s\n' "$MODEL_SOURCE_S3_URI" > "$MARKER"
"""
_WEIGHTS_S3_URI_PATTERN = r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^\s]*)?$"


@dataclasses.dataclass(frozen=True, kw_only=True)
class NvmeModelCache(SpecBlock):
    """A hostPath ``<host_root>/<model_key>`` filled from ``source_s3_uri`` when incomplete.

    YAML (a ``models:`` entry's ``nvmeCache``)::

        nvmeCache:
          modelKey: qwen3-8b
          sourceS3Uri: s3://my-weights/qwen3-8b/
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

    def check_rules(self, path: str, problems: Problems) -> None:
        if self.aws_cli_image.endswith(":latest"):
            problems.add(
                "NvmeCache.ImageNotPinned",
                join_path(path, "awsCliImage"),
                "must name a version tag or digest, not :latest",
                self.aws_cli_image,
            )

    def host_path(self, default_root: str) -> str:
        return posixpath.join(self.host_root or default_root, self.model_key)

    def volume(self, default_root: str) -> dict[str, Any]:
        """core/v1 Volume; DirectoryOrCreate so the first pod on a node can fill it."""
        host_path = {"path": self.host_path(default_root), "type": "DirectoryOrCreate"}
        return {"name": self.volume_name, "hostPath": host_path}

    def volumes(self, default_root: str) -> list[dict[str, Any]]:
        """The hostPath volume and the loader's scratch volume: its /tmp and $HOME, where the AWS CLI
        caches credentials, so that its root filesystem stays read-only."""
        return [self.volume(default_root), {"name": LOADER_SCRATCH_VOLUME, "emptyDir": {"sizeLimit": "256Mi"}}]

    def init_container(self) -> dict[str, Any]:
        """core/v1 Container that makes the NVMe copy verified and complete before the model server starts."""
        return {
            "name": "nvme-weights-loader",
            "image": self.aws_cli_image,
            "command": ["/bin/bash", "-c", LOADER_SCRIPT],
            "env": [{"name": "MODEL_SOURCE_S3_URI", "value": self.source_s3_uri},
                    {"name": "HOME", "value": _SCRATCH_PATH}],
            "volumeMounts": [{"name": self.volume_name, "mountPath": _INIT_MOUNT_PATH},
                             {"name": LOADER_SCRATCH_VOLUME, "mountPath": _SCRATCH_PATH}],
            # Root is needed to write into the root-owned hostPath directory; nothing more is.
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                "readOnlyRootFilesystem": True},
        }
