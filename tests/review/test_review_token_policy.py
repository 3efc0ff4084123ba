"""`make review` reads the token-audience admission policy by its holders (docs/review.md): the policy's expression
holds each holder's container whole, so without this a sidecar's environment change also showed as a raw, cut CEL
line on the policy. Inputs are the charts' own objects (a portable server and an operator model rendered, no
platform synth), changed as a change of the plan would change them, and compared by ``k8s.diff_objects``."""

from __future__ import annotations

import copy
import json
from typing import Any

import cdk8s
import pytest

from hyperpod_inference_iac.charts.render import render_workloads
from hyperpod_inference_iac.charts.token_policy import (
    HOLDERS_ANNOTATION,
    TOKEN_AUDIENCE_POLICY,
    TokenHolder,
    holders_of_annotation,
    holders_of_pod,
    token_audience_policy,
)
from tests.charts import samples
from tests.charts.test_admission_policy import _plan
from tools.review import k8s
from tools.review.model import Line

Objects = dict[k8s.Key, dict[str, Any]]
POLICY_KEY: k8s.Key = ("ValidatingAdmissionPolicy", "", TOKEN_AUDIENCE_POLICY)
BINDING_KEY: k8s.Key = ("ValidatingAdmissionPolicyBinding", "", f"{TOKEN_AUDIENCE_POLICY}-deny")
POLICY_LABEL = k8s.label(POLICY_KEY)


@pytest.fixture(scope="module")
def base() -> Objects:
    """The policy, its binding and the portable server's Deployment, as the charts render them."""
    rendered = render_workloads(cdk8s.Testing.app(), _plan(), samples.VALUES)
    objects = [o for o in cdk8s.Testing.synth(rendered.namespace)
               if o["kind"] in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")]
    (chart_id,) = [c for c in rendered.charts if c.startswith("portable-")]
    objects += [m for m in cdk8s.Testing.synth(rendered.charts[chart_id]) if m["kind"] == "Deployment"]
    found = {k8s.key_of(o): o for o in objects}
    assert POLICY_KEY in found and BINDING_KEY in found
    return found


def _deployment(objects: Objects) -> dict[str, Any]:
    (deployment,) = [o for key, o in objects.items() if key[0] == "Deployment"]
    return deployment


def _holders(objects: Objects) -> list[TokenHolder]:
    return holders_of_annotation(objects[POLICY_KEY]["metadata"]["annotations"][HOLDERS_ANNOTATION])


def _with_policy(objects: Objects, holders: list[TokenHolder]) -> Objects:
    """``objects`` with the policy the library makes of ``holders`` (as a change of the plan would render it)."""
    policy, _ = token_audience_policy(holders)
    return {**objects, POLICY_KEY: policy}


def _pod_holders(objects: Objects) -> list[TokenHolder]:
    deployment = _deployment(objects)
    return holders_of_pod(deployment["metadata"]["namespace"], deployment["spec"]["template"]["spec"],
                          deployment["metadata"]["name"])


def _replan(base: Objects, head: Objects) -> Objects:
    """``head`` with the policy re-made after its Deployment changed: the Deployment's holders follow its pod."""
    before = _pod_holders(base)
    kept = [h for h in _holders(base) if h not in before]
    return _with_policy(head, [*kept, *_pod_holders(head)])


def _sidecar(objects: Objects) -> dict[str, Any]:
    pod = _deployment(objects)["spec"]["template"]["spec"]
    return next(c for c in [*pod["containers"], *pod.get("initContainers", [])] if c["name"] == "capture-sidecar")


def _lines(old: Objects, new: Objects) -> list[Line]:
    return k8s.diff_objects(old, new, lambda key: ("dist/x.k8s.yaml",))


def _on_policy(lines: list[Line]) -> list[tuple[str, str, bool]]:
    return [(line.group, line.text, line.broadens) for line in lines if line.subject == POLICY_LABEL]


def test_the_rendered_policy_reads_by_its_holders(base: Objects) -> None:
    holders = k8s.policy_holders(base[POLICY_KEY])
    assert holders is not None
    names = {(key[3], key[4]) for key in holders}
    assert ("capture-sidecar", _deployment(base)["metadata"]["name"]) in names
    assert any(container == "model-loader" or "load" in container for container, _ in names)


def test_a_holder_added_broadens_and_names_it(base: Objects) -> None:
    intruder = TokenHolder.of(namespace="team-x", service_account="runner",
                              audience="hyperpod-inference-iac/capture-sidecar",
                              container={"name": "writer", "image": "example.invalid/writer:1"}, workload="batch")
    head = _with_policy(base, [*_holders(base), intruder])
    assert _on_policy(_lines(base, head)) == [(
        "identity", "token holder added: team-x/runner, audience hyperpod-inference-iac/capture-sidecar, container "
        "writer of batch (one more place a platform token may be projected)", True)]


def test_a_holder_removed_narrows(base: Objects) -> None:
    holders = _holders(base)
    gone = next(h for h in holders if h.container["name"] == "capture-sidecar")
    [(group, text, broadens)] = _on_policy(_lines(base, _with_policy(base, [h for h in holders if h != gone])))
    assert group == "identity" and not broadens
    assert text.startswith(f"token holder removed: {gone.namespace}/{gone.service_account}, audience {gone.audience}")


def test_a_sidecar_environment_change_is_one_neutral_line_not_a_cel_diff(base: Objects) -> None:
    head = copy.deepcopy(base)
    env = _sidecar(head)["env"]
    env[:] = [*(e for e in env if e["name"] != "USAGE_RECORDS"), {"name": "USAGE_RECORDS", "value": "all"}]
    head = _replan(base, head)
    lines = _lines(base, head)
    name = _deployment(base)["metadata"]["name"]
    [(group, text, broadens)] = _on_policy(lines)
    assert group == "workloads" and not broadens
    assert text.endswith(f"container capture-sidecar of {name}: follows {name}'s container change (read on {name}'s "
                         "own lines)")
    assert not any("expression" in line.text or "validations" in line.text for line in lines)
    # The change itself, in words, on the workload.
    assert [line.text for line in lines if line.subject == f"{name}/capture-sidecar"] == [
        "usage records all (new) (a record of the caller, model and tokens of every metered exchange; no prompt)"]


def test_holders_in_another_order_are_no_change(base: Objects) -> None:
    head = copy.deepcopy(base)
    annotations = head[POLICY_KEY]["metadata"]["annotations"]
    entries = json.loads(annotations[HOLDERS_ANNOTATION])
    assert len(entries) > 1
    annotations[HOLDERS_ANNOTATION] = json.dumps(list(reversed(entries)))
    assert _lines(base, head) == []


def test_a_hand_edited_expression_fails_closed(base: Objects) -> None:
    head = copy.deepcopy(base)
    validation = head[POLICY_KEY]["spec"]["validations"][0]
    validation["expression"] = validation["expression"].replace("request.namespace ==", "true || request.namespace ==",
                                                                1)
    on_policy = _on_policy(_lines(base, head))
    assert ("identity", k8s.UNREADABLE_TOKEN_POLICY, True) in on_policy
    assert any("validations" in text for _, text, _ in on_policy)  # the raw change, as before


def test_a_policy_without_its_holders_annotation_fails_closed(base: Objects) -> None:
    head = copy.deepcopy(base)
    del head[POLICY_KEY]["metadata"]["annotations"]
    assert ("identity", k8s.UNREADABLE_TOKEN_POLICY, True) in _on_policy(_lines(base, head))


def test_the_policy_removed_broadens(base: Objects) -> None:
    head = {key: obj for key, obj in base.items() if key != POLICY_KEY}
    [(_, text, broadens)] = _on_policy(_lines(base, head))
    assert broadens and text.startswith("removed")


def test_the_binding_losing_deny_broadens(base: Objects) -> None:
    head = copy.deepcopy(base)
    head[BINDING_KEY]["spec"]["validationActions"] = ["Warn", "Audit"]
    [line] = _lines(base, head)
    assert (line.group, line.text, line.broadens) == ("identity", "validationActions Deny → Warn, Audit", True)
    head[BINDING_KEY]["spec"]["validationActions"] = ["Deny", "Audit"]
    [line] = _lines(base, head)
    assert not line.broadens
    head[BINDING_KEY]["spec"]["policyName"] = "something-else"
    assert any(line.broadens and "policyName" in line.text for line in _lines(base, head))
    assert [line.broadens for line in _lines(base, {k: o for k, o in base.items() if k != BINDING_KEY})] == [True]


def test_an_unrelated_change_says_nothing_on_the_policy(base: Objects) -> None:
    head = copy.deepcopy(base)
    _deployment(head)["spec"]["replicas"] = 7
    head = _replan(base, head)
    lines = _lines(base, head)
    assert lines and _on_policy(lines) == []


def test_an_unrelated_label_on_the_policy_is_read_as_any_object_s(base: Objects) -> None:
    """The rest of the policy (its spec and holders set aside) is diffed as any object's, not read as a policy
    without its annotation."""
    head = copy.deepcopy(base)
    head[POLICY_KEY]["metadata"]["labels"] = {"team": "platform"}
    assert _on_policy(_lines(base, head)) == [("other", "metadata.labels.team: platform (new)", False)]
