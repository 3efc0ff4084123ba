"""``python -m tools.review``: the command behind ``make review`` (docs/review.md).

Exit status: 0, or 1 when ``--fail-on`` finds what it was asked to fail on (``broadening``: a line
marked as broadening access or data collection; ``any-change``: any line), or 2 when the review could
not be made (a ref that does not exist, a side that does not synthesize, the CDK diff failing)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from tools.review import render
from tools.review.cdkdiff import CdkDiffError
from tools.review.review import compare, exit_status
from tools.review.synth import (
    ReviewError,
    describe_head,
    git,
    prepare_and_synthesize,
    remove_worktree,
    resolve_base,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Options; each default comes from its ``REVIEW_*`` environment variable (how make passes them)."""
    env = os.environ.get
    parser = argparse.ArgumentParser(prog="make review", description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=env("REVIEW_BASE", ""),
                        help="git ref to compare with (default: the merge base with origin/main, else HEAD~1)")
    parser.add_argument("--config", default=env("REVIEW_CONFIG") or "config/default.yaml",
                        help="platform config, the same path on both sides")
    parser.add_argument("--format", choices=sorted(render.FORMATS), default=env("REVIEW_FORMAT") or "text")
    parser.add_argument("--fail-on", choices=("never", "broadening", "any-change"),
                        default=env("REVIEW_FAIL_ON") or "never", help="exit 1 when a line broadens (or on any change)")
    parser.add_argument("--output", default=env("REVIEW_OUTPUT", ""), help="also write the review to this file")
    parser.add_argument("--cdk-diff", action="store_true", help="text format: append the CDK's own diff per stack")
    parser.add_argument("--keep", default="", help="synthesize into this directory and keep it, with a receipt "
                        "per side for --base-synth (default: a temporary directory, removed after the run)")
    parser.add_argument("--sequential", action="store_true", help="synthesize base and head one after the other")
    parser.add_argument("--base-synth", default=env("REVIEW_BASE_SYNTH", ""),
                        help="reuse this synth of the base instead of checking it out and synthesizing it: the "
                        "receipt.json a review's --keep folder holds beside each side's cdk.out; refused unless it is "
                        "of the base commit's tree, with the same config and tools (for tests and CI)")
    parser.add_argument("--repo", default=".", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    repo = Path(git(Path(args.repo), "rev-parse", "--show-toplevel"))
    started = time.monotonic()
    worktree = None
    try:
        commit, chosen = resolve_base(repo, args.base or None)
        base_label = f"base {commit[:12]} ({chosen})"
        with tempfile.TemporaryDirectory(prefix="make-review-") as temporary:
            scratch = Path(args.keep).resolve() if args.keep else Path(temporary)
            scratch.mkdir(parents=True, exist_ok=True)
            try:
                synths = prepare_and_synthesize(repo, commit, args.config, scratch, parallel=not args.sequential,
                                                base_synth=Path(args.base_synth).resolve() if args.base_synth else None,
                                                receipts=bool(args.keep))
                worktree = synths.worktree
                synthesized = time.monotonic()
                review = compare(synths.base.assembly, synths.head.assembly, synths.base.dist, synths.head.dist,
                                 repo / "node_modules" / ".bin" / "cdk", repo, base_label, describe_head(repo),
                                 waiting=synths.waiting)
            finally:
                remove_worktree(repo, worktree or (scratch / "base-checkout"))
        if synths.dependency_changes:
            review.warnings.append(
                f"{', '.join(synths.dependency_changes)} differ from the base: both sides were synthesized with "
                "this checkout's installed packages and CDK CLI, so what the upgrade itself changes is not shown "
                "here (the snapshot tests show it)")
    except (ReviewError, CdkDiffError) as error:
        print(f"make review: {error}", file=sys.stderr)
        return 2
    output = render.FORMATS[args.format](review, **({"cdk_diff": args.cdk_diff} if args.format == "text" else {}))
    sys.stdout.write(output)
    if args.output:
        Path(args.output).write_text(output)
    done = time.monotonic()
    print(f"make review: {done - started:.1f} s (checkout and both synths {synthesized - started:.1f} s, "
          f"cdk diff and reading {done - synthesized:.1f} s)", file=sys.stderr)
    return exit_status(review, args.fail_on)


if __name__ == "__main__":
    sys.exit(main())
