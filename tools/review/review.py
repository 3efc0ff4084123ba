"""From two synthesized sides to one review: the CDK's diff per stack, the manifests by object."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tools.review import cdkdiff, cfn, k8s
from tools.review.cdkdiff import StackDiff
from tools.review.model import Line, Review, merge_lines
from tools.review.template import Template


def stacks(assembly: Path) -> dict[str, Path]:
    """Stack name -> template file of a cloud assembly (from its manifest)."""
    manifest = json.loads((assembly / "manifest.json").read_text())
    found: dict[str, Path] = {}
    for artifact_id, artifact in (manifest.get("artifacts") or {}).items():
        if artifact.get("type") == "aws:cloudformation:stack":
            properties = artifact.get("properties") or {}
            name = properties.get("stackName") or artifact.get("displayName") or artifact_id
            found[artifact_id] = assembly / properties.get("templateFile", f"{name}.template.json")
    return found


def _template(stack: str, path: Path | None) -> Template:
    return Template(stack, json.loads(path.read_text())) if path and path.is_file() else Template.empty(stack)


def compare(base_assembly: Path, head_assembly: Path, base_dist: Path, head_dist: Path, cdk: Path, cwd: Path,
            base: str, head: str, waiting: dict[str, dict[str, str]] | None = None) -> Review:
    """``waiting``: per side ("base", "head"), the dist/ files its app left out until stack outputs exist."""
    review = Review(base=base, head=head)
    base_stacks, head_stacks = stacks(base_assembly), stacks(head_assembly)
    env = cdkdiff.cli_env()
    env["PATH"] = f"{cdk.parent}:{cwd / '.venv' / 'bin'}:{env.get('PATH', '')}"

    def one(stack: str) -> tuple[str, StackDiff, Template, Template]:
        old = _template(stack, base_stacks.get(stack))
        new = _template(stack, head_stacks[stack])
        diff = cdkdiff.run(cdk, stack, base_stacks.get(stack), head_assembly, cdkdiff.known_ids(old, new), cwd, env)
        return stack, diff, old, new

    lines: list[Line] = []
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(one, sorted(head_stacks)))
    for stack, diff, old, new in results:
        review.cdk[stack] = {"changes": diff.changes, "broadening": diff.broadening,
                             "resources": [[c.op, c.type, c.logical_id, c.properties] for c in diff.resources],
                             "text": diff.text}
        lines += cfn.review_stack(diff, old, new)
    for stack in sorted(set(base_stacks) - set(head_stacks)):
        old = _template(stack, base_stacks[stack])
        lines.append(Line("other", f"stack {stack}", f"removed ({len(old.resources)} resources)", False, (stack,)))
        review.warnings.append(f"stack {stack} exists only in the base: the CDK cannot diff a stack the head app "
                               "does not have; its resources are not read one by one")
    waiting = waiting or {}
    lines += diff_dist(base_dist, head_dist, waiting.get("base", {}), waiting.get("head", {}))
    review.lines = merge_lines(lines)
    return review


def diff_dist(base_dist: Path, head_dist: Path, base_waiting: dict[str, str] | None = None,
              head_waiting: dict[str, str] | None = None) -> list[Line]:
    old, new = k8s.load_dist(base_dist), k8s.load_dist(head_dist)
    lines: list[Line] = []
    # An object one side's app left out of dist/ until stack outputs exist is not removed (or new): it
    # waits; what it holds is read from the cluster stack's manifest, which has it either way.
    for mine, other, waits, verb in ((old, new, head_waiting or {}, "now waits"), (new, old, base_waiting or {},
                                                                                  "no longer waits")):
        for key in [key for key, (_, file) in mine.items() if key not in other and file in waits]:
            file = mine.pop(key)[1]
            lines.append(Line("other", k8s.label(key), f"{verb} for stack outputs ({waits[file]}) to be written "
                              "to dist/", False, (file,)))
    places: dict[k8s.Key, tuple[str, ...]] = {}
    for key in set(old) | set(new):
        files = [entry[1] for entry in (new.get(key), old.get(key)) if entry]
        places[key] = tuple(dict.fromkeys(files))
    lines += k8s.diff_objects({k: v[0] for k, v in old.items()}, {k: v[0] for k, v in new.items()},
                              lambda key: places[key])
    lines += _dist_readme(base_dist, head_dist)
    return lines


def _dist_readme(base_dist: Path, head_dist: Path) -> list[Line]:
    before = (base_dist / "README.md").read_text() if (base_dist / "README.md").is_file() else None
    after = (head_dist / "README.md").read_text() if (head_dist / "README.md").is_file() else None
    if before == after:
        return []
    if before is None or after is None:
        return [Line("other", "dist/README.md", "added" if before is None else "removed", False, ("dist/README.md",))]
    gone = [line for line in before.splitlines() if line not in after.splitlines()]
    came = [line for line in after.splitlines() if line not in before.splitlines()]
    return [Line("other", "dist/README.md", f"{len(came)} line(s) added, {len(gone)} removed (the hand-off's "
                 "instructions)", False, ("dist/README.md",))]


def exit_status(review: Review, fail_on: str) -> int:
    if fail_on == "broadening" and review.broadening:
        return 1
    if fail_on == "any-change" and review.lines:
        return 1
    return 0
