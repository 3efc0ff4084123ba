"""The CDK's own diff engine, through its CLI: ``cdk diff --template <base template> --app <head assembly>``.

``--template`` implies ``--method=template`` (no change set, no AWS call) and ``--app <directory>``
reads a synthesized cloud assembly without running the app, so the comparison is offline. Its output
is read only as far as needed: which resources it reports added (``[+]``), removed (``[-]``) or changed
(``[~]``), with the top-level properties of each change, and its own verdict on broadened permissions
(``--fail-on broadening``: status 1 when an IAM statement, managed policy, Lambda permission or security
group rule widens). The full text travels along for the reviewer."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tools.review.template import Template

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_ENTRY = re.compile(r"^\[(?P<op>[+\-~])\] (?P<rest>.+)$")
_PROPERTY = re.compile(r"^ [├└]─ \[(?P<op>[+\-~])\] (?P<name>[^\s:]+)")
_DONE = re.compile(r"Number of stacks with differences: (\d+)")
SECTIONS = {"Parameters", "Metadata", "Mappings", "Conditions", "Resources", "Outputs", "Other Changes",
            "IAM Statement Changes", "IAM Policy Changes", "Security Group Changes", "Transform", "Description",
            "AWSTemplateFormatVersion", "Rules", "Hooks"}


@dataclass
class ResourceChange:
    op: str  # "+", "-" or "~"
    type: str
    logical_id: str
    path: str
    properties: list[str] = field(default_factory=list)
    impact: str = ""


@dataclass
class StackDiff:
    stack: str
    text: str
    broadening: bool
    resources: list[ResourceChange] = field(default_factory=list)
    # Entries of the other sections (Outputs, Parameters, Conditions...): (section, op, rest of line).
    others: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def changes(self) -> int:
        return len(self.resources) + len(self.others)


class CdkDiffError(RuntimeError):
    pass


def parse(stack: str, text: str, known_ids: set[str], broadening: bool) -> StackDiff:
    """Read ``cdk diff`` output (colour off). ``known_ids``: logical ids of either template, so an entry
    line is split at its logical id whatever spaces the construct path holds."""
    result = StackDiff(stack=stack, text=text, broadening=broadening)
    section = ""
    current: ResourceChange | None = None
    for raw in text.splitlines():
        line = _ANSI.sub("", raw).rstrip()
        if line in SECTIONS:
            section, current = line, None
            continue
        entry = _ENTRY.match(line)
        if entry and section == "Resources":
            words = entry["rest"].split(" ")
            type_ = words[0]
            at = next((i for i in range(len(words) - 1, 0, -1) if words[i] in known_ids), None)
            if at is None:
                result.others.append((section, entry["op"], entry["rest"]))
                current = None
                continue
            current = ResourceChange(op=entry["op"], type=type_, logical_id=words[at],
                                     path=" ".join(words[1:at]) or words[at], impact=" ".join(words[at + 1:]))
            result.resources.append(current)
            continue
        if entry and section and section not in ("IAM Statement Changes", "IAM Policy Changes",
                                                 "Security Group Changes"):
            result.others.append((section, entry["op"], entry["rest"]))
            current = None
            continue
        prop = _PROPERTY.match(line)
        if prop and current is not None:
            current.properties.append(prop["name"])
    return result


def cli_env() -> dict[str, str]:
    """No credentials, no profile, no colour: the diff must never reach an AWS account."""
    env = dict(os.environ)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_DEFAULT_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN",
                 "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"):
        env.pop(name, None)
    env.update({"AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
                "AWS_EC2_METADATA_DISABLED": "true", "CDK_DISABLE_VERSION_CHECK": "true",
                # No telemetry: the base side's cdk.json (an older commit) may not turn it off itself.
                "CDK_DISABLE_CLI_TELEMETRY": "true",
                "NO_COLOR": "1", "FORCE_COLOR": "0"})
    return env


def run(cdk: Path, stack: str, base_template: Path | None, head_assembly: Path, known_ids: set[str],
        cwd: Path, env: dict[str, str]) -> StackDiff:
    """``cdk diff`` of one stack of the head assembly against the base template (an empty template when
    the stack is new)."""
    with tempfile.TemporaryDirectory(prefix="review-empty-") as scratch:
        if base_template is None:
            base_template = Path(scratch) / "empty.template.json"
            base_template.write_text(json.dumps({"Resources": {}}))
        command = [str(cdk), "diff", stack, "--exclusively", "--no-color", "--fail-on", "broadening",
                   "--template", str(base_template), "--app", str(head_assembly),
                   "--context-lines", "2", "--no-notices", "--no-version-reporting"]
        result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)
    text = (result.stdout + result.stderr).strip("\n")
    if not _DONE.search(text) or result.returncode not in (0, 1):
        raise CdkDiffError(f"`cdk diff` of {stack} failed (status {result.returncode}):\n{text[-4000:]}")
    return parse(stack, text, known_ids, broadening=result.returncode == 1)


def known_ids(*templates: Template) -> set[str]:
    return {logical_id for template in templates for logical_id in template.resources}
