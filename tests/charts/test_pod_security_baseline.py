"""The host-path admission policy holds pods to all of Pod Security's baseline level where it stands in for it: the
upstream package's own fixtures for the level (kubernetes/pod-security-admission, test/testdata/baseline/v1.37,
vendored in fixtures/ with SOURCES.md), every pass pod admitted and every fail pod refused by the rule of its
check, the policy's CEL evaluated as the API server would (tests/charts/admission_cel.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hyperpod_inference_iac.charts.pod_security import BASELINE_VERSION, HOST_PATH_POLICY
from tests.charts.test_admission_policy import Policy, _objects, _plan

FIXTURES = Path(__file__).parent / "fixtures" / f"pod_security_baseline_{BASELINE_VERSION}.json"
CASES: list[dict[str, Any]] = json.loads(FIXTURES.read_text())["cases"]
# Which of the policy's rules refuses each upstream check (the fixture's file name, less its number).
RULE_OF_CHECK = {
    "apparmorprofile": ("no AppArmor annotation", "AppArmor profile"),
    "capabilities_baseline": ("no capability beyond baseline's",),
    "hostnamespaces": ("no host network, PID or IPC namespace",),
    "hostpathvolumes": ("host paths are the planned model caches",),
    "hostports": ("no host port",),
    "hostprobesandhostlifecycle": ("no probe or lifecycle handler with a host",),
    "privileged": ("no privileged container",),
    "procmount": ("the default /proc mount only",),
    "seccompprofile_baseline": ("seccomp profile RuntimeDefault or Localhost only",),
    "selinuxoptions": ("SELinux type",),
    "sysctls": ("safe sysctls only",),
    "windowshostprocess": ("no Windows HostProcess",),
}


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy(_objects(_plan())[("ValidatingAdmissionPolicy", HOST_PATH_POLICY)])


def test_every_baseline_check_has_fixtures_and_a_rule() -> None:
    checks = {Path(case["file"]).stem.rstrip("0123456789") for case in CASES if case["expect"] == "fail"}
    assert checks == set(RULE_OF_CHECK)
    assert {case["expect"] for case in CASES} == {"pass", "fail"} and len(CASES) == 49


@pytest.mark.parametrize("case", CASES, ids=lambda case: "/".join(case["file"].split("/")[-2:]))
def test_the_upstream_baseline_fixture(policy: Policy, case: dict[str, Any]) -> None:
    failed = policy.failures(case["pod"])
    if case["expect"] == "pass":
        assert failed == []
    else:
        rules = RULE_OF_CHECK[Path(case["file"]).stem.rstrip("0123456789")]
        # The check's own rule refuses it (a Windows HostProcess pod also needs hostNetwork, refused as well).
        assert any(f.startswith(rules) for f in failed), failed
