"""What a synth produced and what is left to do by hand: ``python -m tools.synth_summary`` (the last step of
``make synth``; issue 26, 7).

It reads only what the synth wrote (``cdk.out/manifest.json`` and the stack templates it names, the files of
``dist/``) and the config file (whether the capture tables' layer is given), prints a short summary, and writes the
same as Markdown to ``cdk.out/SUMMARY.md`` (the README links it): the stacks with their account and Region, their
resources counted by service, what ``dist/`` holds, and the manual steps left with their commands (bootstrap, the
Lake Formation administrator, the capture tables' layer, the preflight). The file is replaced whole or not at all,
so a failed run leaves the previous summary (of the previous synth, which is what cdk.out/ still holds)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

STACK_ARTIFACT = "aws:cloudformation:stack"
SUMMARY_FILE = "SUMMARY.md"
# The CDK bootstrap's default qualifier: the deploy role's name holds it (cdk-hnb659fds-cfn-exec-role-…).
QUALIFIER = "hnb659fds"


@dataclass(frozen=True)
class StackSummary:
    name: str
    account: str
    region: str
    services: dict[str, int]  # resources by service (``S3``, ``IAM``, ``Custom``), most first

    @property
    def resources(self) -> int:
        return sum(self.services.values())


@dataclass(frozen=True)
class DistFile:
    path: str  # relative to dist/
    kinds: dict[str, int]  # Kubernetes objects (and Helm releases) by kind (none for a file that is not YAML)


@dataclass(frozen=True)
class ManualStep:
    title: str
    why: str
    commands: tuple[str, ...]
    done: str = ""  # why it is not needed, when the config says so


@dataclass(frozen=True)
class Summary:
    stacks: tuple[StackSummary, ...]
    dist: tuple[DistFile, ...]
    steps: tuple[ManualStep, ...]


class SummaryError(Exception):
    """The synth's output is not there or not readable: one line for the user, no traceback."""


def service_of(resource_type: str) -> str:
    """``AWS::S3::Bucket`` -> ``S3``; ``Custom::AWSCDK…`` -> ``Custom``; ``AWS::CDK::Metadata`` -> ``CDK``."""
    parts = resource_type.split("::")
    return parts[1] if parts[0] == "AWS" and len(parts) > 1 else parts[0]


def read_stacks(cdk_out: Path) -> tuple[StackSummary, ...]:
    try:
        manifest = json.loads((cdk_out / "manifest.json").read_text())
    except (OSError, ValueError) as error:
        raise SummaryError(f"{cdk_out}/manifest.json: {error}; run `make synth` first") from None
    stacks = []
    for artifact_id, artifact in sorted(manifest.get("artifacts", {}).items()):
        if artifact.get("type") != STACK_ARTIFACT:
            continue
        properties = artifact.get("properties", {})
        template_path = cdk_out / properties.get("templateFile", f"{artifact_id}.template.json")
        try:
            template = json.loads(template_path.read_text())
        except (OSError, ValueError) as error:
            raise SummaryError(f"{template_path}: {error}") from None
        counts = Counter(service_of(str(resource.get("Type", "?")))
                         for resource in template.get("Resources", {}).values())
        environment = str(artifact.get("environment", "aws://unknown-account/unknown-region"))
        account, _, region = environment.removeprefix("aws://").partition("/")
        stacks.append(StackSummary(properties.get("stackName", artifact_id), account, region,
                                   dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))))
    return tuple(stacks)


def read_dist(dist: Path) -> tuple[DistFile, ...]:
    if not dist.is_dir():
        return ()
    files = []
    for path in sorted(p for p in dist.rglob("*") if p.is_file()):
        kinds: Counter[str] = Counter()
        if path.suffix in (".yaml", ".yml"):
            try:
                documents = list(yaml.safe_load_all(path.read_text()))
            except (OSError, yaml.YAMLError) as error:
                raise SummaryError(f"{path}: {error}") from None
            kinds.update(_kind(doc) for doc in documents if isinstance(doc, dict))
        files.append(DistFile(path.relative_to(dist).as_posix(), dict(sorted(kinds.items()))))
    return tuple(files)


def _kind(document: dict[str, Any]) -> str:
    """A Kubernetes object's kind; a Helm release of ``dist/helm/`` (release, chart, version) is one too."""
    if "kind" in document:
        return str(document["kind"])
    return "Helm release" if "chart" in document and "release" in document else "?"


def _config_value(config: dict[str, Any], *keys: str) -> Any:
    value: Any = config
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def manual_steps(stacks: Sequence[StackSummary], config_path: str, config: dict[str, Any]) -> tuple[ManualStep, ...]:
    """The one-time and before-every-deploy steps no synth can do, with their commands for this app's accounts."""
    environments = sorted({(s.account, s.region) for s in stacks})
    account, region = environments[0] if environments else ("<account>", "<region>")
    project = _config_value(config, "project") or "<project>"
    deploy_role = f"arn:aws:iam::{account}:role/cdk-{QUALIFIER}-cfn-exec-role-{account}-{region}"
    layer_arn = _config_value(config, "capture", "tablesLayerArn")
    return (
        ManualStep(
            "Bootstrap the account and Region (once)",
            "cdk deploy needs the CDK's toolkit stack: its asset bucket, image repository and deploy roles.",
            tuple(f"npx cdk bootstrap aws://{a}/{r}" for a, r in environments) or ("npx cdk bootstrap",)),
        ManualStep(
            "Make the deploying role a Lake Formation administrator (once)",
            "the storage stack registers the capture tables' location and grants their columns; the platform does "
            "not set the administrators itself (that would replace the account's list).",
            (f"aws lakeformation get-data-lake-settings --region {region}",
             f"# add {deploy_role} to DataLakeAdmins, keeping the administrators listed, then:",
             f"aws lakeformation put-data-lake-settings --region {region} --data-lake-settings file://settings.json")),
        ManualStep(
            "Publish the capture tables' layer (once per lock change)",
            "the capture processor writes the Iceberg tables with pyiceberg, which a synth cannot fetch offline.",
            ("make capture-layer",
             "(cd build/capture-processor-layer && zip -qr ../capture-processor-layer.zip python)",
             f"aws lambda publish-layer-version --region {region} --layer-name {project}-capture-tables "
             "--zip-file fileb://build/capture-processor-layer.zip --compatible-runtimes python3.13 "
             "--compatible-architectures arm64",
             f"# then set capture.tablesLayerArn in {config_path} to the LayerVersionArn it prints"),
            done=f"capture.tablesLayerArn is set ({layer_arn})" if layer_arn else ""),
        ManualStep(
            "Run the preflight against the account and cluster (before every deploy)",
            "checks what no offline check can (bootstrap version, Lake Formation administrator, the layer, quotas, "
            "the zone and certificate, the add-on's configuration schema, the installed CRDs); exit 2 on a failure.",
            (f"python -m hyperpod_inference_iac.preflight  # with read-only credentials for {account} {region}",)),
    )


def summarize(cdk_out: Path, dist: Path, config_path: str) -> Summary:
    try:
        loaded = yaml.safe_load(Path(config_path).read_text()) if config_path else {}
    except (OSError, yaml.YAMLError) as error:
        raise SummaryError(f"{config_path}: {error}") from None
    config = loaded if isinstance(loaded, dict) else {}
    stacks = read_stacks(cdk_out)
    return Summary(stacks, read_dist(dist), manual_steps(stacks, config_path, config))


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {count}" for name, count in counts.items()) or "none"


def render_text(summary: Summary, dist: Path) -> str:
    lines = ["Synthesized:"]
    for stack in summary.stacks:
        lines.append(f"  {stack.name} ({stack.account}/{stack.region}): {stack.resources} resources: "
                     f"{_counts(stack.services)}")
    objects = Counter[str]()
    for file in summary.dist:
        objects.update(file.kinds)
    lines.append(f"  {dist}/: {len(summary.dist)} files, {sum(objects.values())} documents "
                 f"({_counts(dict(sorted(objects.items())))})")
    lines.append("Left to do by hand:")
    for number, step in enumerate(summary.steps, 1):
        lines.append(f"  {number}. {step.title}" + (f": not needed, {step.done}" if step.done else ""))
        if not step.done:
            lines.extend(f"       {command}" for command in step.commands)
    return "\n".join(lines) + "\n"


def render_markdown(summary: Summary, dist: Path) -> str:
    lines = ["# What `make synth` produced", "",
             "Written by `python -m tools.synth_summary` at the end of `make synth`;",
             "it describes the `cdk.out/` and `dist/` beside it.", "", "## Stacks", "",
             "| stack | account | Region | resources | by service |", "|---|---|---|---|---|"]
    lines += [f"| `{s.name}` | {s.account} | {s.region} | {s.resources} | {_counts(s.services)} |"
              for s in summary.stacks]
    lines += ["", f"## `{dist}/`", ""]
    if summary.dist:
        lines += ["| file | Kubernetes objects and Helm releases |", "|---|---|"]
        lines += [f"| `{f.path}` | {_counts(f.kinds) if f.kinds else '-'} |" for f in summary.dist]
    else:
        lines.append("(empty)")
    lines += ["", "## Left to do by hand", ""]
    for number, step in enumerate(summary.steps, 1):
        lines.append(f"{number}. **{step.title}**: {step.why}")
        if step.done:
            lines.append(f"   Not needed: {step.done}.")
        else:
            lines += ["", "   ```sh", *(f"   {command}" for command in step.commands), "   ```"]
        lines.append("")
    lines.append("The order and the rest of a first deploy: docs/deploying.md.")
    return "\n".join(lines) + "\n"


def write_atomically(path: Path, text: str) -> None:
    """The whole file or none of it: written beside, then renamed over the old one."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.synth_summary", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cdk-out", type=Path, default=Path("cdk.out"))
    parser.add_argument("--dist", type=Path, default=Path("dist"))
    parser.add_argument("--config", default="config/default.yaml")
    args = parser.parse_args(argv)
    try:
        summary = summarize(args.cdk_out, args.dist, args.config)
        write_atomically(args.cdk_out / SUMMARY_FILE, render_markdown(summary, args.dist))
    except (SummaryError, OSError) as error:
        print(f"synth summary: {error}", file=sys.stderr)
        return 2
    print(render_text(summary, args.dist), end="")
    print(f"(also in {args.cdk_out / SUMMARY_FILE})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
