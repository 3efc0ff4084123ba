"""The platform is decided once, from the config, and rendered twice: nothing the GitOps hand-off (dist/) holds is
read back from a construct of the stacks."""

from __future__ import annotations

import json

from hyperpod_inference_iac import sidecar_image_hash, sidecar_image_reference
from tests.support.synth import Assembly

ACCOUNT, REGION = "111122223333", "us-west-2"


def test_the_sidecar_image_is_known_before_the_stacks_are_built(assembly: Assembly) -> None:
    """dist/ names the image by a URI computed from the config (CDK's own asset hash of the image context), and the
    cluster stack builds exactly that asset."""
    assets = json.loads(next(assembly.directory.glob("*-cluster.assets.json")).read_text())
    assert list(assets["dockerImages"]) == [sidecar_image_hash()]
    # Staged into the assembly like every asset (computing the hash must not leave CDK's staging cache pointing at
    # the source folder of this machine).
    (image,) = assets["dockerImages"].values()
    assert image["source"]["directory"] == f"asset.{sidecar_image_hash()}"
    images = {container["image"] for manifests in assembly.manifests.values() for obj in manifests
              if obj["kind"] == "Deployment"
              for container in obj["spec"]["template"]["spec"].get("initContainers", [])
              if container["name"] == "capture-sidecar"}
    assert images == {sidecar_image_reference(ACCOUNT, REGION)}
