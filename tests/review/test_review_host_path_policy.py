"""`make review` reads the host-path admission policy by its paths and writers (docs/review.md): the policy's
expression holds each loader's container whole and every allowed path inside CEL literals, so without this a path
added (even ``/``) was a raw, cut CEL line under *everything else* that did not count as broadening, and a loader's
image change showed twice. Inputs are the charts' own objects (the namespace objects of a plan with an operator model
and a portable server, both with an NVMe cache; no platform synth), changed as a change of the plan would change them,
and compared by ``k8s.diff_objects``."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from hyperpod_inference_iac.charts.pod_security import (
    HOST_PATH_POLICY,
    HOST_PATHS_ANNOTATION,
    CacheWriter,
    host_path_policy,
    host_paths_of_annotation,
)
from hyperpod_inference_iac.charts.render import namespace_objects
from tests.charts.test_admission_policy import _plan
from tools.review import k8s
from tools.review.model import Line

Objects = dict[k8s.Key, dict[str, Any]]
POLICY_KEY: k8s.Key = ("ValidatingAdmissionPolicy", "", HOST_PATH_POLICY)
POLICY_LABEL = k8s.label(POLICY_KEY)


@pytest.fixture(scope="module")
def base() -> Objects:
    """The host-path policy and its bindings, as the charts render them for the plan."""
    found = {k8s.key_of(o): o for o in namespace_objects(_plan())
             if o["kind"] in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")}
    assert POLICY_KEY in found
    return found


def _read(objects: Objects) -> tuple[Any, list[CacheWriter]]:
    return host_paths_of_annotation(objects[POLICY_KEY]["metadata"]["annotations"][HOST_PATHS_ANNOTATION])


def _with_policy(objects: Objects, paths: Any, writers: list[CacheWriter]) -> Objects:
    """``objects`` with the policy the library makes of ``paths`` and ``writers`` (as a changed plan renders it)."""
    return {**objects, POLICY_KEY: host_path_policy(paths, writers)[0]}


def _lines(old: Objects, new: Objects) -> list[Line]:
    return k8s.diff_objects(old, new, lambda key: ("dist/x.k8s.yaml",))


def _on_policy(lines: list[Line]) -> list[tuple[str, str, bool]]:
    return [(line.group, line.text, line.broadens) for line in lines if line.subject == POLICY_LABEL]


def test_the_rendered_policy_reads_by_its_paths_and_writers(base: Objects) -> None:
    reading = k8s.read_host_path_policy(base[POLICY_KEY])
    assert reading is not None
    paths, writers = _read(base)
    assert isinstance(paths, dict) and reading.paths == {(ns, p) for ns, found in paths.items() for p in found}
    assert len(writers) == 2 and {w.workload for w in writers} == {key[5] for key in reading.writers}
    assert all(w.workload for w in writers)  # each writer names the workload that plans it


def test_a_path_added_broadens_and_names_it(base: Objects) -> None:
    paths, writers = _read(base)
    head = _with_policy(base, {**paths, "team-x": ["/"]}, writers)
    assert _on_policy(_lines(base, head)) == [
        ("exposure", "host path allowed: / in namespace team-x (pods there may mount it read-only)", True)]


def test_a_path_removed_narrows(base: Objects) -> None:
    paths, writers = _read(base)
    namespace, found = next(iter(paths.items()))
    head = _with_policy(base, {**paths, namespace: found[1:]}, writers)
    assert _on_policy(_lines(base, head)) == [
        ("exposure", f"host path no longer allowed: {found[0]} in namespace {namespace}", False)]


def test_a_writer_added_broadens_and_one_removed_narrows(base: Objects) -> None:
    paths, writers = _read(base)
    intruder = CacheWriter.of(host_path=writers[0].host_path, namespace=writers[0].namespace,
                              service_account="runner", volume="cache",
                              container={"name": "writer", "image": "example.invalid/writer:1"}, workload="batch")
    head = _with_policy(base, paths, [*writers, intruder])
    assert _on_policy(_lines(base, head)) == [(
        "exposure", f"host path writer added: {writers[0].host_path} by container writer of batch in "
        f"{writers[0].namespace}/runner (volume cache) (one more container that may write on the node)", True)]
    [(group, text, broadens)] = _on_policy(_lines(head, base))
    assert (group, broadens) == ("exposure", False) and text.startswith("host path writer removed:")


def test_a_loader_change_is_one_neutral_line_not_a_cel_diff(base: Objects) -> None:
    paths, writers = _read(base)
    changed = writers[0].container | {"image": "example.invalid/loader:2"}
    moved = CacheWriter.of(host_path=writers[0].host_path, namespace=writers[0].namespace,
                           service_account=writers[0].service_account, volume=writers[0].volume,
                           container=changed, workload=writers[0].workload)
    lines = _lines(base, _with_policy(base, paths, [moved, *writers[1:]]))
    [(group, text, broadens)] = _on_policy(lines)
    name = writers[0].workload
    assert group == "workloads" and not broadens
    assert text.endswith(f": follows {name}'s loader change (read on {name}'s own lines)")
    assert not any("expression" in line.text or "validations" in line.text for line in lines)


def test_paths_and_writers_in_another_order_are_no_change(base: Objects) -> None:
    head = copy.deepcopy(base)
    annotations = head[POLICY_KEY]["metadata"]["annotations"]
    entry = json.loads(annotations[HOST_PATHS_ANNOTATION])
    assert len(entry["writers"]) > 1
    entry["writers"].reverse()
    entry["paths"] = {ns: list(reversed(found)) for ns, found in reversed(list(entry["paths"].items()))}
    annotations[HOST_PATHS_ANNOTATION] = json.dumps(entry)
    assert _lines(base, head) == []


def test_a_path_slipped_into_the_expression_fails_closed(base: Objects) -> None:
    """The attack: ``/`` added to the CEL by hand, the annotation left as it was."""
    head = copy.deepcopy(base)
    validation = next(v for v in head[POLICY_KEY]["spec"]["validations"]
                      if "v.hostPath.path in" in v["expression"])
    validation["expression"] = validation["expression"].replace("v.hostPath.path in", "v.hostPath.path == '/' || "
                                                                "v.hostPath.path in", 1)
    on_policy = _on_policy(_lines(base, head))
    assert ("exposure", k8s.UNREADABLE_HOST_PATH_POLICY, True) in on_policy
    assert any("validations" in text for _, text, _ in on_policy)  # the raw change, as before


def test_an_annotation_that_claims_less_than_the_expression_fails_closed(base: Objects) -> None:
    paths, writers = _read(base)
    head = copy.deepcopy(_with_policy(base, {**paths, "team-x": ["/"]}, writers))
    head[POLICY_KEY]["metadata"]["annotations"] = base[POLICY_KEY]["metadata"]["annotations"]
    assert ("exposure", k8s.UNREADABLE_HOST_PATH_POLICY, True) in _on_policy(_lines(base, head))


@pytest.mark.parametrize("value", [None, "", "[]", "{}", '{"paths": 3, "writers": []}',
                                   '{"paths": {"a": "/x"}, "writers": []}', '{"paths": [], "writers": [{}]}'])
def test_a_missing_or_malformed_annotation_fails_closed(base: Objects, value: str | None) -> None:
    head = copy.deepcopy(base)
    if value is None:
        del head[POLICY_KEY]["metadata"]["annotations"]
    else:
        head[POLICY_KEY]["metadata"]["annotations"][HOST_PATHS_ANNOTATION] = value
    assert ("exposure", k8s.UNREADABLE_HOST_PATH_POLICY, True) in _on_policy(_lines(base, head))


def test_the_policy_removed_broadens(base: Objects) -> None:
    head = {key: obj for key, obj in base.items() if key != POLICY_KEY}
    [(group, text, broadens)] = _on_policy(_lines(base, head))
    assert group == "exposure" and broadens and text.startswith("removed: pods of the namespaces it bound may mount "
                                                                "any host path")


def test_a_new_policy_counts_what_it_allows_and_names_each_path_and_writer(base: Objects) -> None:
    """As the token policy's: each path and writer is new (a namespace gains host paths: it becomes privileged)."""
    paths, writers = _read(base)
    head_only = {key: obj for key, obj in base.items() if key != POLICY_KEY}
    (group, text, broadens), *each = _on_policy(_lines(head_only, base))
    count = sum(len(found) for found in paths.values())
    assert (group, broadens) == ("exposure", False)
    assert text == f"new: host paths only the {count} planned model cache path(s), written only by their " \
                   f"{len(writers)} planned loader(s)"
    assert len(each) == count + len(writers) and all(broadens for _, _, broadens in each)


def test_a_policy_of_paths_for_any_namespace_reads_too() -> None:
    writer = CacheWriter.of(host_path="/opt/cache/a", namespace="ns", service_account=None, volume="cache",
                            container={"name": "loader", "image": "example.invalid/loader:1"})
    before = {POLICY_KEY: host_path_policy(["/opt/cache/a"], [writer])[0]}
    after = {POLICY_KEY: host_path_policy(["/opt/cache/a", "/var/log"], [writer])[0]}
    assert _on_policy(_lines(before, after)) == [
        ("exposure", "host path allowed: /var/log in any namespace the policy binds (pods there may mount it "
         "read-only)", True)]


def test_an_unrelated_label_on_the_policy_is_read_as_any_object_s(base: Objects) -> None:
    head = copy.deepcopy(base)
    head[POLICY_KEY]["metadata"]["labels"] = {"team": "platform"}
    assert _on_policy(_lines(base, head)) == [("other", "metadata.labels.team: platform (new)", False)]
