"""Which EC2 and SageMaker instance types carry instance-store NVMe, written once.

:class:`~hyperpod_inference_iac.GpuNodeGroup` builds its local volume from these disks and refuses
types without them; the charts refuse an NVMe model cache on a workload whose instance type has
none (SageMaker's ``ml.`` types are the EC2 types behind them). An unlisted family is refused rather
than guessed at: a new family is added here once its "Instance storage" column has been checked.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from hyperpod_inference_iac.foundation.patterns import EC2_INSTANCE_TYPE


@dataclass(frozen=True)
class _Family:
    """Sizes of an x86_64 NVIDIA GPU family that have instance-store NVMe, and a note for reviewers."""

    sizes: frozenset[str]
    note: str


def _sizes(*names: str) -> frozenset[str]:
    return frozenset(names)


_G_SIZES = _sizes("xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge", "48xlarge")

# x86_64 NVIDIA GPU families with instance-store NVMe SSDs on every listed size (EC2 instance type
# pages, "Instance storage" column). An unlisted family is rejected rather than guessed at: a new
# family is added here once its instance-store column has been checked.
NVME_GPU_FAMILIES: Mapping[str, _Family] = {
    "g4dn": _Family(_sizes("xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "metal"),
                    "NVIDIA T4; 1 NVMe SSD (125 GB to 900 GB), 2 on metal"),
    "g5": _Family(_G_SIZES, "NVIDIA A10G; 1 or 2 NVMe SSDs (250 GB on g5.xlarge up to 2 x 3.8 TB)"),
    "g6": _Family(_G_SIZES, "NVIDIA L4; NVMe SSDs on every size (250 GB on g6.xlarge and up)"),
    "gr6": _Family(_sizes("4xlarge", "8xlarge"), "NVIDIA L4, more memory per vCPU; NVMe SSD"),
    "g6e": _Family(_G_SIZES, "NVIDIA L40S; NVMe SSDs on every size (250 GB on g6e.xlarge and up)"),
    "p3dn": _Family(_sizes("24xlarge"), "NVIDIA V100 32 GB; 2 x 900 GB NVMe"),
    "p4d": _Family(_sizes("24xlarge"), "NVIDIA A100 40 GB; 8 x 1 TB NVMe"),
    "p4de": _Family(_sizes("24xlarge"), "NVIDIA A100 80 GB; 8 x 1 TB NVMe"),
    "p5": _Family(_sizes("4xlarge", "48xlarge"), "NVIDIA H100; 1 x 3.84 TB (4xlarge) or 8 x 3.84 TB NVMe"),
    "p5e": _Family(_sizes("48xlarge"), "NVIDIA H200; 8 x 3.84 TB NVMe"),
    "p5en": _Family(_sizes("48xlarge"), "NVIDIA H200; 8 x 3.84 TB NVMe"),
    "p6-b200": _Family(_sizes("48xlarge"), "NVIDIA B200; 8 x 3.84 TB NVMe"),
}
# NVIDIA GPU families without any instance store (EBS only): the reason for NoInstanceStore.
GPU_FAMILIES_WITHOUT_INSTANCE_STORE: Mapping[str, str] = {
    "p2": "NVIDIA K80, EBS only",
    "p3": "NVIDIA V100, EBS only (p3dn.24xlarge is the V100 size with NVMe)",
    "g3": "NVIDIA M60, EBS only",
    "g3s": "NVIDIA M60, EBS only",
    "g5g": "NVIDIA T4G on Graviton (arm64), EBS only",
}
# AWS Trainium / Inferentia accelerators: no NVIDIA GPU, so the NVIDIA AMI and device plugin do not
# apply (trn1, trn1n and trn2 do have instance-store NVMe; inf1 and inf2 are EBS only).
NEURON_FAMILIES = frozenset({"inf1", "inf2", "trn1", "trn1n", "trn2"})

# Families with instance-store NVMe that are not NVIDIA GPUs (an NVMe cache works there too).
NEURON_FAMILIES_WITH_NVME = frozenset({"trn1", "trn1n", "trn2"})


def family_and_size(instance_type: str) -> tuple[str, str] | None:
    """``("g6e", "12xlarge")`` for ``g6e.12xlarge`` or ``ml.g6e.12xlarge``; None when malformed."""
    match = EC2_INSTANCE_TYPE.match(instance_type.removeprefix("ml."))
    return (match["family"], match["size"]) if match else None


def has_instance_store_nvme(instance_type: str) -> bool:
    parts = family_and_size(instance_type)
    if parts is None:
        return False
    family, size = parts
    if family in NEURON_FAMILIES_WITH_NVME:
        return True
    return family in NVME_GPU_FAMILIES and size in NVME_GPU_FAMILIES[family].sizes


def families_with_nvme() -> str:
    return ", ".join([*NVME_GPU_FAMILIES, *sorted(NEURON_FAMILIES_WITH_NVME)])


def size_order(size: str) -> tuple[int, str]:
    digits = re.match(r"^(\d*)", size)
    return (int(digits[1]) if digits and digits[1] else 1 if size == "xlarge" else 10**6, size)
