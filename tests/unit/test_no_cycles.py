"""No circular dependency in any supported arrangement (issue 26, 6).

``CaptureStorage`` with break-glass roles in a stack without ``env`` had one, shown only as a cfn-lint warning: the
key policy named the buckets by their ``Arn`` attribute (no literal name without an account), and the buckets are
encrypted with the key. Each arrangement below is synthesized and its templates' dependency graph (``Ref``,
``Fn::GetAtt``, ``Fn::Sub``, ``DependsOn``, and ``Fn::ImportValue`` to the resources the exporting stack's output
names) is searched for a cycle; a control shows the search finds one."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from aws_cdk import App, Environment, Stack
from aws_cdk import aws_iam as iam

from hyperpod_inference_iac import CapturePipeline, CaptureStorage

ACCOUNT = "111122223333"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/"


def _references(value: Any) -> Iterator[tuple[str, str]]:
    """("ref", logical id) and ("import", export name) of every reference in a template fragment."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "Ref" and isinstance(inner, str):
                yield "ref", inner
            elif key == "Fn::GetAtt":
                yield "ref", inner[0] if isinstance(inner, list) else inner.split(".")[0]
            elif key == "Fn::ImportValue" and isinstance(inner, str):
                yield "import", inner
            else:
                if key == "Fn::Sub":
                    text = inner if isinstance(inner, str) else inner[0]
                    yield from (("ref", name) for name in re.findall(r"\$\{([^}.!]+)", text))
                yield from _references(inner)
    elif isinstance(value, list):
        for item in value:
            yield from _references(item)


def dependency_graph(templates: Mapping[str, Mapping[str, Any]]) -> dict[str, set[str]]:
    """``stack/logical id`` -> what it depends on, across stacks through their exports."""
    exported: dict[str, set[str]] = {}
    for stack, template in templates.items():
        for output in template.get("Outputs", {}).values():
            name = output.get("Export", {}).get("Name")
            if isinstance(name, str):
                exported[name] = {f"{stack}/{ref}" for kind, ref in _references(output["Value"]) if kind == "ref"}
    graph: dict[str, set[str]] = {}
    for stack, template in templates.items():
        resources = template.get("Resources", {})
        for logical_id, resource in resources.items():
            edges: set[str] = set()
            for kind, ref in _references({k: v for k, v in resource.items() if k != "DependsOn"}):
                if kind == "ref" and ref in resources:
                    edges.add(f"{stack}/{ref}")
                elif kind == "import":
                    edges |= exported.get(ref, set())
            depends = resource.get("DependsOn", [])
            edges |= {f"{stack}/{name}" for name in ([depends] if isinstance(depends, str) else depends)}
            graph[f"{stack}/{logical_id}"] = edges
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    found: list[list[str]] = []
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                found.append([*path[path.index(target):], target])
            elif target not in state:
                visit(target)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def test_the_search_finds_a_cycle_within_and_across_stacks() -> None:
    """A control: a key whose policy names a bucket that uses the key; and two stacks that import each other."""
    within = {"A": {"Resources": {"Key": {"Properties": {"P": {"Fn::GetAtt": ["Bucket", "Arn"]}}},
                                  "Bucket": {"Properties": {"K": {"Ref": "Key"}}}}}}
    assert cycles(dependency_graph(within)) == [["A/Bucket", "A/Key", "A/Bucket"]]
    across = {"A": {"Resources": {"X": {"Properties": {"P": {"Fn::ImportValue": "b-y"}}}},
                    "Outputs": {"O": {"Value": {"Ref": "X"}, "Export": {"Name": "a-x"}}}},
              "B": {"Resources": {"Y": {"Properties": {"P": {"Fn::ImportValue": "a-x"}}}},
                    "Outputs": {"O": {"Value": {"Ref": "Y"}, "Export": {"Name": "b-y"}}}}}
    assert cycles(dependency_graph(across)) == [["A/X", "B/Y", "A/X"]]


def _storage_alone(app: App, env: Environment | None) -> None:
    CaptureStorage(Stack(app, "Storage", env=env), "Storage", break_glass_role_arns=[f"{ROLE}break-glass"],
                   reader_role_arns=[f"{ROLE}analysts"], raw_reader_role_arns=[f"{ROLE}auditors"])


def _storage_for_load_balancer_logs(app: App, env: Environment | None) -> None:
    CaptureStorage(Stack(app, "Storage", env=env), "Storage", break_glass_role_arns=[f"{ROLE}break-glass"],
                   load_balancer_logs=True, key_alias="alias/capture")


def _storage_pipeline_and_grants_in_another_stack(app: App, env: Environment | None) -> None:
    storage_stack = Stack(app, "Storage", env=env)
    storage = CaptureStorage(storage_stack, "Storage", break_glass_role_arns=[f"{ROLE}break-glass"],
                             reader_role_arns=[f"{ROLE}analysts"])
    CapturePipeline(storage_stack, "Pipeline", bucket=storage.capture_bucket, encryption_key=storage.key,
                    capture_prefixes=[storage.capture_prefix])
    workloads = Stack(app, "Workloads", env=env)
    writer = iam.Role(workloads, "Writer", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"))
    reader = iam.Role(workloads, "Reader", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"))
    storage.grant_write_captures(writer)
    storage.grant_read_curated(reader)
    workloads.add_dependency(storage_stack)


ARRANGEMENTS: dict[str, Callable[[App, Environment | None], None]] = {
    "storage with every reader kind": _storage_alone,
    "storage for load balancer logs": _storage_for_load_balancer_logs,
    "storage, pipeline and grants from another stack": _storage_pipeline_and_grants_in_another_stack,
}


@pytest.mark.parametrize("env", [None, Environment(account=ACCOUNT, region="us-west-2")], ids=["no env", "env"])
@pytest.mark.parametrize("arrangement", list(ARRANGEMENTS), ids=list(ARRANGEMENTS))
def test_no_arrangement_has_a_circular_dependency(arrangement: str, env: Environment | None) -> None:
    app = App(context={"aws:cdk:disable-creation-stack-traces": True})
    ARRANGEMENTS[arrangement](app, env)
    assembly = app.synth()
    templates = {stack.stack_name: stack.template for stack in assembly.stacks}
    assert cycles(dependency_graph(templates)) == []
