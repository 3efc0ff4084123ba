"""``python -m hyperpod_inference_iac.capture_table_ops``: create the curated Iceberg tables, erase rows on request
(a caller's, or a predicate's) from every place a copy lives with an audit record, verify an erasure, apply
retention, and verify the hash-chained audit trail (docs/capture-processor.md, "Deleting rows", "Erasure
everywhere", "The audit trail").

The operations live with the capture processor's runtime code (``capture_core.capture_tables``), so the same code
can run as a scheduled function; this module puts that folder on ``sys.path`` and runs its command line. It needs
the ``tables`` extra: ``pip install 'hyperpod-inference-iac[tables]'`` (pyiceberg with its Glue catalog, pyarrow,
boto3).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from hyperpod_inference_iac.foundation._package_data import package_dir


def main(argv: Sequence[str] | None = None) -> int:
    runtime = str(package_dir("hyperpod_inference_iac.capture_processor"))
    if runtime not in sys.path:
        sys.path.insert(0, runtime)
    module = importlib.import_module("capture_core.capture_tables")
    status: int = module.main(argv)
    return status


if __name__ == "__main__":
    sys.exit(main())
