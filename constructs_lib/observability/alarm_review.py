"""``python -m hyperpod_inference_iac.observability.alarm_review [cdk.out]``: the alarm table of a synthesized cloud
assembly,
for reviews (every alarm's name, metric, threshold, window, missing-data treatment and notified states, per stack;
:func:`hyperpod_inference_iac.observability.alarms.alarm_table`)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from hyperpod_inference_iac.observability.alarms import alarm_table


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    folder = Path(args[0] if args else "cdk.out")
    templates = {path.name.removesuffix(".template.json"): json.loads(path.read_text(encoding="utf-8"))
                 for path in sorted(folder.glob("*.template.json"))}
    if not templates:
        print(f"no *.template.json in {folder} (run cdk synth first)", file=sys.stderr)
        return 2
    sys.stdout.write(alarm_table(templates))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
