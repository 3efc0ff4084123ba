"""The publisher's side of the NVMe weights cache: ``SHA256SUMS``, the manifest the loader checks every copy against.

Whoever publishes model weights to S3 writes this manifest next to them, after the weights::

    python -m hyperpod_inference_iac.weights_manifest ./qwen3-8b        # writes ./qwen3-8b/SHA256SUMS
    aws s3 sync ./qwen3-8b s3://my-weights/qwen3-8b/ --checksum-algorithm SHA256
    sha256sum ./qwen3-8b/SHA256SUMS                                     # the manifestSha256 to pin in the config

The format is ``sha256sum``'s own (``<64 hex>  <relative path>``, one per file, sorted by byte value), so
``sha256sum --check SHA256SUMS`` verifies a copy anywhere, and the same manifest can be written without this
module: ``cd weights && find . -type f ! -name SHA256SUMS -printf '%P\\0' | LC_ALL=C sort -z | xargs -0 sha256sum
> SHA256SUMS``. The loader (:mod:`hyperpod_inference_iac.charts.nvme_cache`) refuses a manifest with absolute paths,
``.`` or ``..`` parts or escaped names, so neither may the weights have them.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from hyperpod_inference_iac.charts.nvme_cache import WEIGHTS_MANIFEST

_CHUNK = 8 * 1024 * 1024


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def manifest_lines(directory: Path) -> list[str]:
    """``<sha256>  <path>`` for every regular file under ``directory`` except the manifest, sorted by byte value.
    Raises ``ValueError`` for what the loader would refuse (a symlink, a name with a backslash or a line break)."""
    lines = []
    for path in sorted(directory.rglob("*"), key=lambda p: p.relative_to(directory).as_posix().encode()):
        name = path.relative_to(directory).as_posix()
        if path.is_symlink():
            raise ValueError(f"{name}: a symlink; publish the file it points to")
        if path.is_dir() or name == WEIGHTS_MANIFEST:
            continue
        if not path.is_file():
            raise ValueError(f"{name}: not a regular file")
        if "\\" in name or "\n" in name or "\r" in name:
            raise ValueError(f"{name!r}: a backslash or a line break in a name")
        lines.append(f"{_sha256(path)}  {name}")
    if not lines:
        raise ValueError(f"{directory}: no files to publish")
    return lines


def write_manifest(directory: str | Path) -> Path:
    """Write ``<directory>/SHA256SUMS`` for the files under ``directory`` and return its path."""
    folder = Path(directory)
    manifest = folder / WEIGHTS_MANIFEST
    manifest.write_text("".join(f"{line}\n" for line in manifest_lines(folder)), encoding="utf-8")
    return manifest


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m hyperpod_inference_iac.weights_manifest WEIGHTS_DIRECTORY "
              f"(writes {WEIGHTS_MANIFEST})", file=sys.stderr)
        return 2
    try:
        manifest = write_manifest(argv[0])
    except (ValueError, OSError) as error:
        print(f"cannot write the manifest: {error}", file=sys.stderr)
        return 2
    print(f"{manifest}: sha256 {_sha256(manifest)} (pin it as nvmeCache.manifestSha256)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
