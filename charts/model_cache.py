"""``spec.modelCacheConfig`` (operator 3.3, both kinds): the operator's own host-local caches.

* ``imageCache``: the operator pre-pulls the inference server image onto the target nodes (it creates a
  ``ModelImageCache`` for it), so a new pod does not wait for a cold image pull.
* ``weightsCache``: the operator copies the model's weights from its remote source (S3, FSx, JumpStart) to
  host-local NVMe on each eligible node and mounts them read-only into the pods; a pod on a node whose cache is
  not warm yet falls back to the remote source.

Source: "Model weights caching and image caching"
(https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-model-deployment-model-caching.html).
Instance types without local NVMe are refused by the plan (``ModelCache.NoInstanceStore``): on them the
cache never warms and every pod downloads, which is the cost this block is meant to remove.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hyperpod_inference_iac.charts._spec_fields import SpecBlock, crd_field

# The CRD's bounds (1..255 characters) and the documentation's "non-empty absolute path".
HOST_PATH_PATTERN = r"^/"


def host_path_field(code: str) -> Any:
    return crd_field(default=None, code=code, pattern=HOST_PATH_PATTERN, max_length=255,
                     hint="an absolute host path such as /opt/dlami/nvme, at most 255 characters")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ImageCache(SpecBlock):
    enabled: bool = True


@dataclasses.dataclass(frozen=True, kw_only=True)
class WeightsCache(SpecBlock):
    """``host_path`` None: the CRD default ``/opt/dlami/nvme``, where HyperPod nodes mount instance-store NVMe."""

    enabled: bool = True
    host_path: str | None = host_path_field("ModelCache.HostPathInvalid")

    UNPLACED_AT = ("InferenceEndpointConfig", ("modelCacheConfig", "weightsCache"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelCacheConfig(SpecBlock):
    image_cache: ImageCache | None = None
    weights_cache: WeightsCache | None = None

    UNPLACED_AT = ("InferenceEndpointConfig", ("modelCacheConfig",))

    @property
    def caches_weights(self) -> bool:
        return self.weights_cache is not None and self.weights_cache.enabled


__all__ = ["ImageCache", "ModelCacheConfig", "WeightsCache", "host_path_field"]
