"""The tests' fast CEL evaluator (cel-expr-python, Google's cel-cpp) against the reference (cel-python): the same
outcome (every match condition, every variable's value, every validation's result or error) for every pod the policy
tests evaluate, for hostile pods made here, and for the planned pods in the fast loop too. tests/charts/admission_cel.py
says why there are two."""

from __future__ import annotations

import copy
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cel_expr_python import cel

from hyperpod_inference_iac.charts.pod_security import BASELINE_VERSION, HOST_PATH_POLICY
from tests.charts import admission_cel, samples
from tests.charts.admission_cel import ERROR, Disagreement, Outcome, PolicyText, agreed_outcome, typed
from tests.charts.test_admission_policy import _objects, _plan
from tests.charts.test_token_policy import rendered_policy_and_pods

REPO = Path(__file__).resolve().parents[2]
POLICY_TESTS = ("tests/charts/test_admission_policy.py", "tests/charts/test_token_policy.py",
                "tests/charts/test_pod_security_baseline.py")
BASELINE = Path(__file__).parent / "fixtures" / f"pod_security_baseline_{BASELINE_VERSION}.json"
Pod = dict[str, Any]


@pytest.fixture(scope="module")
def world() -> dict[str, Any]:
    rendered = rendered_policy_and_pods()
    return {"host-path": PolicyText.of(_objects(_plan())[("ValidatingAdmissionPolicy", HOST_PATH_POLICY)]),
            "token": PolicyText.of(rendered["policy"]),
            "pods": [rendered["portable"], rendered["operator"]]}


def _request(namespace: str) -> dict[str, Any]:
    return {"namespace": namespace, "operation": "CREATE"}


def test_the_planned_pods_get_the_same_outcome_from_both_evaluators(world: dict[str, Any]) -> None:
    """In the fast loop too, so that a change of a policy that the two read differently fails there: one pod each
    (cel-python takes 0.2-1.5 s of CPU for one; the token policy least for the operator's pod)."""
    portable, operator = world["pods"]
    for policy, pod, namespace, admitted in [("host-path", portable, samples.NAMESPACE, True),
                                             ("token", operator, "tenant-b", False)]:
        outcome = agreed_outcome(world[policy], {"metadata": {}, **pod}, _request(namespace))
        assert outcome.matched and ERROR not in outcome.validations
        assert all(outcome.validations) is admitted, (policy, namespace, outcome)


class _Flipped:
    """The fast evaluator with its last validation's result turned over: the control of the comparison."""

    name = "flipped"

    def outcome(self, policy: PolicyText, obj: Any, request: Any) -> Outcome:
        real = admission_cel.evaluators()["fast"].outcome(policy, obj, request)
        return Outcome(matched=real.matched, conditions=real.conditions, variables=real.variables,
                       validations=(*real.validations[:-1], not real.validations[-1]))


def test_control_a_disagreement_fails_and_the_comparison_tells_types_apart(world: dict[str, Any],
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(admission_cel.evaluators(), "flipped", _Flipped())
    pod = {"metadata": {}, **world["pods"][0]}
    with pytest.raises(Disagreement, match="fast vs flipped"):
        agreed_outcome(world["token"], pod, _request(samples.NAMESPACE), chosen=("fast", "flipped"))
    assert typed(True) != typed(1) and typed(0) != typed(0.0) and typed([1]) != typed({"1": 1})
    assert typed({"a": [True]}) == typed({"a": [True]})


def test_a_request_with_a_nul_is_evaluated_by_the_reference(world: dict[str, Any]) -> None:
    """cel-expr-python 0.1.3 cuts a string at a NUL (a canary: when an upgrade stops doing so, the fallback of
    ``FastEvaluator`` can go); the fast evaluator hands such a request to cel-python, which refuses the cache path."""
    raw = cel.NewEnv(variables={"object": cel.Type.DYN}).compile('object.path == "/opt/dlami/nvme/qwen3-8b"')
    assert raw.eval(data={"object": {"path": "/opt/dlami/nvme/qwen3-8b\x00"}}).value() is True
    pod = copy.deepcopy({"metadata": {}, **world["pods"][0]})
    for volume in pod["spec"]["volumes"]:
        if "hostPath" in volume:
            volume["hostPath"]["path"] += "\x00"
    fast = admission_cel.evaluators()["fast"].outcome(world["host-path"], pod, _request(samples.NAMESPACE))
    reference = admission_cel.evaluators()["reference"].outcome(world["host-path"], pod, _request(samples.NAMESPACE))
    host_paths = next(i for i, v in enumerate(world["host-path"].validations) if "v.hostPath.path in" in v)
    assert typed(fast) == typed(reference) and fast.validations[host_paths] is False
    assert admission_cel.has_nul({"a": [{"b\x00": 1}]}) and not admission_cel.has_nul({"a": ["b", 0, None]})


def test_the_evaluator_is_chosen_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    for chosen in ("", "fast", "reference", "differential"):
        monkeypatch.setenv(admission_cel.MODE_VARIABLE, chosen)
        assert admission_cel.mode() == (chosen or "fast")
    monkeypatch.setenv(admission_cel.MODE_VARIABLE, "cel-go")
    with pytest.raises(ValueError, match="HYPERPOD_TEST_CEL='cel-go': one of fast, reference, differential"):
        admission_cel.mode()


@pytest.mark.slow
def test_every_pod_the_policy_tests_evaluate_gets_the_same_outcome_from_both_evaluators(tmp_path: Path) -> None:
    """The three policy test modules run with both evaluators (``differential``): each evaluation compares them,
    and each test's assertions hold for the agreed outcome. About 40 s of CPU, most of it cel-python's."""
    env = {**os.environ, admission_cel.MODE_VARIABLE: "differential", "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-m", "pytest", "-n", "0", "-p", "no:cacheprovider", "-q",
                             "--basetemp", str(tmp_path / "basetemp"), *POLICY_TESTS],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=1800, check=False)
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in summary and not any(word in summary for word in ("skipped", "deselected", "xfail")), summary


# Values an attacker would try where the policies compare strings and numbers: near misses of what they allow (case,
# a look-alike letter, a trailing space or slash, a path that climbs out), the allowed values themselves, and sizes.
HOSTILE_STRINGS = ["", " ", "Default", "default", "DEFAULT", "D\u0435fault", "Unmasked", "RuntimeDefault",
                   "RuntimeDefault ", "Localhost", "Unconfined", "runtime/default", "localhost/", "localhost/x",
                   "localhost/../../etc", "unconfined", "container_t", "spc_t", "system_u", "/", "/etc",
                   "/mnt/k8s-disks/0/models/qwen3-8b", "/mnt/k8s-disks/0/models/qwen3-8b/",
                   "/mnt/k8s-disks/0/models/qwen3-8b/../../..", "/opt/dlami/nvme/qwen3-8b",
                   "/opt/dlami/nvme/qwen3-8b\x00", "nvme-weights-loader", "model-weights", "capture-sidecar",
                   "qwen3-8b", "default", "inference", "hyperpod-inference-iac/capture-sidecar",
                   "hyperpod-inference-iac/weights-loader", "hyperpod-inference-iac/weights-loader ",
                   "sts.amazonaws.com", "SYS_ADMIN", "CHOWN", "kernel.shm_rmid_forced", "kernel.core_pattern",
                   "169.254.169.254", "container.apparmor.security.beta.kubernetes.io/model-server",
                   "\u202eedoc", "\U0001f642", "x" * 5000]
HOSTILE_INTS = [0, 1, -1, 22, 65535, 2**31 - 1, -(2**63), 2**63 - 1]
POD_BOOLS = ["hostNetwork", "hostPID", "hostIPC", "hostUsers", "shareProcessNamespace"]
SECURITY_STRINGS = [("procMount",), ("seccompProfile", "type"), ("appArmorProfile", "type"),
                    ("seLinuxOptions", "type"), ("seLinuxOptions", "user"), ("seLinuxOptions", "role")]


def _set(target: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target[path[-1]] = value


def _containers(pod: Pod, rng: random.Random) -> list[dict[str, Any]]:
    kind = rng.choice(["containers", "containers", "initContainers", "ephemeralContainers"])
    containers: list[dict[str, Any]] = pod["spec"].setdefault(kind, [])
    if not containers or rng.random() < 0.2:
        containers.append({"name": rng.choice(HOSTILE_STRINGS), "image": rng.choice(HOSTILE_STRINGS)})
    return containers


def _mutate(pod: Pod, rng: random.Random) -> None:
    """One change an attacker (or an odd but valid pod) could make."""
    spec = pod["spec"]
    container = rng.choice(_containers(pod, rng))
    text, number = rng.choice(HOSTILE_STRINGS), rng.choice(HOSTILE_INTS)
    volume_names = [v.get("name", "") for v in spec.get("volumes", [])] + [text]
    choice = rng.randrange(16)
    if choice == 0:
        spec[rng.choice(POD_BOOLS)] = rng.random() < 0.5
    elif choice == 1:
        _set(spec, ("securityContext", *rng.choice(SECURITY_STRINGS)), text)
    elif choice == 2:
        _set(container, ("securityContext", *rng.choice(SECURITY_STRINGS)), text)
    elif choice == 3:
        _set(container, ("securityContext", rng.choice(["privileged", "allowPrivilegeEscalation"])), rng.random() < .5)
        _set(container if rng.random() < 0.5 else spec, ("securityContext", "windowsOptions", "hostProcess"),
             rng.random() < 0.5)
    elif choice == 4:
        _set(container, ("securityContext", "capabilities", "add"), rng.sample(HOSTILE_STRINGS, rng.randrange(3)))
    elif choice == 5:
        container.setdefault("ports", []).append({"containerPort": abs(number) % 65536 or 1, "hostPort": number})
    elif choice == 6:
        probe = rng.choice(["livenessProbe", "readinessProbe", "startupProbe"])
        _set(container, (probe, rng.choice(["httpGet", "tcpSocket"]), "host"), text)
    elif choice == 7:
        mount = {"name": rng.choice(volume_names), "mountPath": "/m"}
        if rng.random() < 0.6:
            mount["readOnly"] = rng.random() < 0.5
        container.setdefault("volumeMounts", []).append(mount)
    elif choice == 8:
        container.setdefault("env", []).append({"name": text, "value": rng.choice(HOSTILE_STRINGS)})
    elif choice == 9:
        container[rng.choice(["command", "args"])] = rng.sample(HOSTILE_STRINGS, rng.randrange(3))
        container[rng.choice(["image", "name", "restartPolicy", "targetContainerName"])] = text
    elif choice == 10:
        spec.setdefault("volumes", []).append({"name": rng.choice(volume_names), "hostPath": {"path": text}})
    elif choice == 11:
        for volume in spec.get("volumes", []):
            if "hostPath" in volume:
                volume["hostPath"]["path"] = text
    elif choice == 12:
        token = {"serviceAccountToken": {"audience": text, "path": "token"}}
        spec.setdefault("volumes", []).append({"name": rng.choice(volume_names), "projected": {"sources": [token]}})
    elif choice == 13:
        _set(spec, ("securityContext", "sysctls"), [{"name": s, "value": "1"} for s in rng.sample(HOSTILE_STRINGS, 2)])
    elif choice == 14:
        pod["metadata"] = {"annotations": {rng.choice([text, f"container.apparmor.security.beta.kubernetes.io/{text}"]):
                                           rng.choice(HOSTILE_STRINGS)}}
    else:
        spec["serviceAccountName"] = text
        victim = rng.choice(spec.get("initContainers") or spec["containers"])
        spec.setdefault(rng.choice(["containers", "initContainers"]), []).append(copy.deepcopy(victim))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_hostile_pods_get_the_same_outcome_from_both_evaluators(world: dict[str, Any], seed: int) -> None:
    """Pods the policy tests do not make: the planned pods and Pod Security's own fixtures, each changed in one to
    four ways an attacker could (seeded, so a failure is repeatable), in the planned namespace and another; both
    policies. Every outcome agrees, and most of these pods are refused by one rule or another."""
    rng = random.Random(seed)
    bases = world["pods"] + [case["pod"] for case in json.loads(BASELINE.read_text())["cases"]]
    refused = 0
    for _ in range(12):
        pod = copy.deepcopy(rng.choice(bases))
        pod.setdefault("metadata", {})
        pod.setdefault("spec", {}).setdefault("containers", [])
        for _ in range(rng.randint(1, 4)):
            _mutate(pod, rng)
        request = _request(rng.choice([samples.NAMESPACE, "tenant-b"]))
        for policy in ("host-path", "token"):
            outcome = agreed_outcome(world[policy], pod, request)
            assert ERROR not in outcome.validations, (policy, pod, outcome)  # every pod here has the Pod's types
            refused += outcome.matched and not all(outcome.validations)
    assert refused >= 6
