"""Model weights on node-local NVMe, with S3 as the trusted upstream.

NVMe is a start-up accelerator, not a registry: a pod first looks for a complete copy on the
node; when there is none (new node, evicted cache, interrupted copy) an init container running
under the workload's own service account (IRSA) copies the weights from S3, then writes a
marker file. The marker is written last, so a copy interrupted half-way is never mistaken for
a complete one; the next pod on that node resumes it (``aws s3 sync`` only fetches what is
missing).

Used by both charts: the operator's ``kubernetesVolume`` source (volume and init container go in
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
_INIT_MOUNT_PATH = "/nvme-model"
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

    def init_container(self) -> dict[str, Any]:
        """core/v1 Container that makes the NVMe copy complete before the model server starts."""
        marker = posixpath.join(_INIT_MOUNT_PATH, COMPLETE_MARKER)
        script = "\n".join(
            [
                "set -eu",
                f'if [ -f "{marker}" ]; then',
                '  echo "complete model copy found on node-local NVMe; skipping download"',
                "  exit 0",
                "fi",
                'echo "no complete copy on NVMe; syncing from $MODEL_SOURCE_S3_URI"',
                f'aws s3 sync "$MODEL_SOURCE_S3_URI" "{_INIT_MOUNT_PATH}" --only-show-errors --no-progress',
                f'touch "{marker}"',
            ]
        )
        return {
            "name": "nvme-weights-loader",
            "image": self.aws_cli_image,
            "command": ["/bin/sh", "-c", script],
            "env": [{"name": "MODEL_SOURCE_S3_URI", "value": self.source_s3_uri}],
            "volumeMounts": [{"name": self.volume_name, "mountPath": _INIT_MOUNT_PATH}],
            # Root is needed to write into the root-owned hostPath directory; nothing more is.
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        }
