"""``spec.modelSourceConfig`` of an InferenceEndpointConfig: where the weights come from.

Helpers: :meth:`ModelSourceConfig.s3`, :meth:`~ModelSourceConfig.fsx`,
:meth:`~ModelSourceConfig.hugging_face`, :meth:`~ModelSourceConfig.kubernetes_volume` (for
node-local NVMe, see :mod:`charts.nvme_cache`).
"""

from __future__ import annotations

import dataclasses
import enum

from hyperpod_inference_iac.charts._spec_fields import SpecBlock, crd_field
from hyperpod_inference_iac.foundation.patterns import DNS1123_SUBDOMAIN, S3_BUCKET_NAME
from hyperpod_inference_iac.foundation.validation import Problems, join_path

HF_MODEL_ID_PATTERN = r"^[a-zA-Z0-9_.-]+/[a-zA-Z0-9_.-]+$"
COMMIT_SHA_PATTERN = r"^[0-9a-f]{40}$"


class ModelSourceType(enum.StrEnum):
    FSX = "fsx"
    S3 = "s3"
    HUGGING_FACE = "huggingface"
    KUBERNETES_VOLUME = "kubernetesVolume"


@dataclasses.dataclass(frozen=True, kw_only=True)
class S3Storage(SpecBlock):
    bucket_name: str = crd_field(code="ModelSource.S3BucketNameInvalid", pattern=S3_BUCKET_NAME.pattern)
    region: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class FsxStorage(SpecBlock):
    file_system_id: str
    dns_name: str | None = None
    mount_name: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class SecretKeyRef(SpecBlock):
    """A key in a Kubernetes Secret (synced from Secrets Manager, never written in a manifest)."""

    name: str = crd_field(
        code="HuggingFace.TokenSecretRefInvalid",
        pattern=DNS1123_SUBDOMAIN.pattern,
        max_length=253,
        hint="the name of a Secret in the workload's namespace",
    )
    key: str = crd_field(code="HuggingFace.TokenSecretRefInvalid", pattern=r"^[-._a-zA-Z0-9]+$")


@dataclasses.dataclass(frozen=True, kw_only=True)
class HuggingFaceModel(SpecBlock):
    """A Hub repository pinned to one commit.

    Policy stricter than the CRD, on purpose: ``commit_sha`` is required (the operator would
    otherwise follow ``main`` and upgrade the model silently) and so is ``token_secret_ref``
    (needed for gated models, recommended for all to avoid anonymous rate limits).
    """

    model_id: str = crd_field(
        code="HuggingFace.ModelIdInvalid", pattern=HF_MODEL_ID_PATTERN, hint="an owner/name repository id"
    )
    commit_sha: str | None = crd_field(
        default=None,
        key="commitSHA",
        code="HuggingFace.CommitNotPinned",
        pattern=COMMIT_SHA_PATTERN,
        hint="a full 40-character lowercase commit SHA; branch and tag names are refused so the model "
        "cannot change between deployments",
    )
    token_secret_ref: SecretKeyRef | None = None

    def check_rules(self, path: str, problems: Problems) -> None:
        if self.commit_sha is None:
            problems.add(
                "HuggingFace.CommitNotPinned",
                join_path(path, "commitSHA"),
                "is required: pin the repository to a full 40-character commit SHA (no implicit upgrades)",
            )
        if self.token_secret_ref is None:
            problems.add(
                "HuggingFace.TokenSecretRefMissing",
                join_path(path, "tokenSecretRef"),
                "is required by this library's policy: name the Secret (name, key) that holds the Hub "
                "token; it reaches only the operator's download init container as HF_TOKEN",
            )


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelSourceConfig(SpecBlock):
    model_source_type: ModelSourceType = crd_field(
        code="ModelSource.TypeInvalid", allowed=ModelSourceType
    )
    s3_storage: S3Storage | None = None
    fsx_storage: FsxStorage | None = None
    hugging_face_model: HuggingFaceModel | None = None
    model_location: str | None = None
    prefetch_enabled: bool | None = None

    @classmethod
    def s3(
        cls, *, bucket_name: str, region: str, model_location: str | None = None, prefetch: bool = False
    ) -> ModelSourceConfig:
        return cls(
            model_source_type=ModelSourceType.S3,
            s3_storage=S3Storage(bucket_name=bucket_name, region=region),
            model_location=model_location,
            prefetch_enabled=prefetch or None,
        )

    @classmethod
    def fsx(
        cls,
        *,
        file_system_id: str,
        dns_name: str | None = None,
        mount_name: str | None = None,
        model_location: str | None = None,
    ) -> ModelSourceConfig:
        return cls(
            model_source_type=ModelSourceType.FSX,
            fsx_storage=FsxStorage(file_system_id=file_system_id, dns_name=dns_name, mount_name=mount_name),
            model_location=model_location,
        )

    @classmethod
    def hugging_face(
        cls, *, model_id: str, commit_sha: str, token_secret: SecretKeyRef, prefetch: bool = False
    ) -> ModelSourceConfig:
        return cls(
            model_source_type=ModelSourceType.HUGGING_FACE,
            hugging_face_model=HuggingFaceModel(
                model_id=model_id, commit_sha=commit_sha, token_secret_ref=token_secret
            ),
            prefetch_enabled=prefetch or None,
        )

    @classmethod
    def kubernetes_volume(cls) -> ModelSourceConfig:
        """Weights on a volume declared in ``spec.kubernetes.volumes`` (see charts.nvme_cache)."""
        return cls(model_source_type=ModelSourceType.KUBERNETES_VOLUME)

    def check_rules(self, path: str, problems: Problems) -> None:
        required_block = {
            ModelSourceType.S3: ("s3Storage", self.s3_storage, "ModelSource.S3StorageMissing"),
            ModelSourceType.FSX: ("fsxStorage", self.fsx_storage, "ModelSource.FsxStorageMissing"),
            ModelSourceType.HUGGING_FACE: (
                "huggingFaceModel",
                self.hugging_face_model,
                "ModelSource.HuggingFaceModelMissing",
            ),
        }
        if self.model_source_type in required_block:
            key, block, code = required_block[self.model_source_type]
            if block is None:
                problems.add(
                    code,
                    join_path(path, key),
                    f"is required when modelSourceType is {self.model_source_type}",
                )
        given = {
            "s3Storage": self.s3_storage,
            "fsxStorage": self.fsx_storage,
            "huggingFaceModel": self.hugging_face_model,
        }
        expected = required_block.get(self.model_source_type, (None,))[0]
        for key, block in given.items():
            if block is not None and key != expected:
                problems.add(
                    "ModelSource.StorageMismatch",
                    join_path(path, key),
                    f"does not apply to modelSourceType {self.model_source_type}; remove it",
                )
