"""``python -m platform_config [path/to/config.yaml]``: check a config file without building anything.

Prints every problem (each once, under its key path) and exits 2, or prints what the file plans and
exits 0. ``make synth`` runs it first, so a mistake in the file stops the synth before the CDK CLI starts.
A valid file's risky choices (the warnings the synth gives, platform_config.acknowledgments) are printed too:
the acknowledged ones with their reasons, the others and any stale acknowledgment on stderr; they do not change
the exit status.
"""

from __future__ import annotations

import sys

from hyperpod_inference_iac import ConfigError
from platform_config.acknowledgments import review_warnings
from platform_config.loader import load_config

DEFAULT_CONFIG = "config/default.yaml"


def main(argv: list[str]) -> int:
    path = argv[0] if argv else DEFAULT_CONFIG
    try:
        config = load_config(path)
    except ConfigError as error:
        print(f"Configuration error: {error}", file=sys.stderr)
        return 2
    plan = config.workloads
    print(f"{path}: valid ({len(plan.models)} model(s), {len(plan.portable)} portable server(s), "
          f"{len(plan.identities)} workload identit{'y' if len(plan.identities) == 1 else 'ies'})")
    review = review_warnings(config)
    accepted = review.accepted_lines()
    if accepted:
        print("Acknowledged warnings (acknowledgedWarnings):")
        print("\n".join(accepted))
    for line in review.warning_lines(path):
        print(line, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
