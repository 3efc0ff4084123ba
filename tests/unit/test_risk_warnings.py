"""Risky but legal choices, as the constructs say them at synth (issue 17): each warned with its id under the
property that makes it, acknowledgeable with ``Annotations.acknowledge_warning``; a break-glass role of another
account refused; every warning the library raises is in its catalogue (``risks.WARNINGS``) and documented."""

from __future__ import annotations

import re

import pytest
from aws_cdk import Annotations as CdkAnnotations
from aws_cdk import App, Environment, Stack
from aws_cdk.assertions import Annotations, Match

from hyperpod_inference_iac import WARNINGS, CapturePipeline, CaptureStorage, ConfigError, RiskWarnings
from hyperpod_inference_iac.foundation.risks import is_private_range, role_account
from tests.support.synth import REPO

ACCOUNT = "111122223333"
FOREIGN = "arn:aws:iam::444455556666:role/"
OURS = "@hyperpod-inference-iac/"


def _stack(*, env: bool = True) -> Stack:
    return Stack(App(), "Risky", env=Environment(account=ACCOUNT, region="us-west-2") if env else None)


def _warnings(stack: Stack, name: str) -> list[str]:
    return [str(w.entry.data) for w in Annotations.from_stack(stack).find_warning(
        "*", Match.string_like_regexp(f".*\\[ack: {OURS}{name}\\]$"))]


def _storage(stack: Stack, **props: object) -> CaptureStorage:
    return CaptureStorage(stack, "Storage", capture_bucket_name=f"captures-{ACCOUNT}", key_alias="alias/c", **props)


def _pipeline(stack: Stack, **props: object) -> CapturePipeline:
    storage = _storage(stack)
    return CapturePipeline(stack, "Pipeline", bucket=storage.capture_bucket, encryption_key=storage.key, **props)


def test_redaction_off_is_warned_at_redact() -> None:
    stack = _stack()
    _pipeline(stack, redact=[])
    (warning,) = _warnings(stack, "CapturePipeline:redactionOff")
    assert warning.startswith("redact: redaction is off: curated/, what readers and monitors read, holds prompts")
    quiet = _stack()
    _pipeline(quiet)  # the default rules
    assert _warnings(quiet, "CapturePipeline:redactionOff") == []


def test_redaction_off_is_acknowledged_with_a_reason() -> None:
    stack = _stack()
    CdkAnnotations.of(stack).acknowledge_warning(OURS + "CapturePipeline:redactionOff",
                                                 "synthetic load-test traffic only, nothing personal")
    _pipeline(stack, redact=[])
    assert _warnings(stack, "CapturePipeline:redactionOff") == []


@pytest.mark.parametrize(("prop", "name"), [("reader_role_arns", "readerInOtherAccount"),
                                            ("raw_reader_role_arns", "rawReaderInOtherAccount")])
def test_a_reader_role_of_another_account_is_warned_with_both_accounts(prop: str, name: str) -> None:
    stack = _stack()
    _storage(stack, **{prop: [f"arn:aws:iam::{ACCOUNT}:role/ours", FOREIGN + "theirs"]})
    (warning,) = _warnings(stack, f"CaptureStorage:{name}")
    assert warning.startswith(f"{prop}[1]: {FOREIGN}theirs is a role of account 444455556666, not of this one "
                              f"({ACCOUNT})")
    acknowledged = _stack()
    CdkAnnotations.of(acknowledged).acknowledge_warning(OURS + f"CaptureStorage:{name}", "the data lake account")
    _storage(acknowledged, **{prop: [FOREIGN + "theirs"]})
    assert _warnings(acknowledged, f"CaptureStorage:{name}") == []


def test_reader_roles_are_not_judged_in_a_stack_without_an_account() -> None:
    stack = _stack(env=False)
    _storage(stack, reader_role_arns=[FOREIGN + "a"], raw_reader_role_arns=[FOREIGN + "b"],
             break_glass_role_arns=[FOREIGN + "c"])
    assert not Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp(".*OtherAccount.*"))


def test_a_break_glass_role_of_another_account_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        _storage(_stack(), break_glass_role_arns=[f"arn:aws:iam::{ACCOUNT}:role/ours", FOREIGN + "responders"])
    ((code, path),) = [(p.code, p.path) for p in caught.value.problems]
    assert (code, path) == ("CaptureStorage.BreakGlassOtherAccount", "break_glass_role_arns[1]")


def test_ranges_and_accounts() -> None:
    assert is_private_range("10.1.0.0/16") and is_private_range("fd12::/16") and is_private_range("100.64.1.0/24")
    assert not is_private_range("8.0.0.0/8") and not is_private_range("0.0.0.0/0")
    assert is_private_range("52.10.1.0/24", "52.10.0.0/16") and not is_private_range("52.11.0.0/24", "52.10.0.0/16")
    assert role_account(FOREIGN + "x") == "444455556666" and role_account("x") is None


def test_a_warning_must_be_in_the_catalogue() -> None:
    with pytest.raises(ValueError, match=r"not in risks\.WARNINGS"):
        RiskWarnings().add("CaptureStorage:somethingNew", "x", "y")


def _raised_ids() -> set[str]:
    """Every warning id the library's source raises: full ids written out, and names given to RiskWarnings.add."""
    found = set()
    for path in [*(REPO / "constructs_lib").rglob("*.py"), *(REPO / "charts").glob("*.py")]:
        if path.name == "risks.py":
            continue
        text = path.read_text()
        found |= {OURS + name for name in re.findall(r'"@hyperpod-inference-iac/([A-Za-z_]+:[A-Za-z]+)"', text)}
        # (names given to RiskWarnings.add, inline or from a table: "Construct:name")
        found |= {OURS + name for name in re.findall(r'"([A-Z][A-Za-z]+:[a-z][A-Za-z]+)"', text)}
    return found


def test_the_catalogue_lists_exactly_the_warnings_the_library_raises() -> None:
    assert _raised_ids() == set(WARNINGS)


def test_every_warning_is_documented_with_its_id() -> None:
    docs = "\n".join(p.read_text() for p in [REPO / "docs" / "configuration.md",
                                             *(REPO / "docs" / "constructs").glob("*.md")])
    missing = [warning for warning in WARNINGS if warning.removeprefix(OURS) not in docs]
    assert not missing, f"warnings no page names: {missing}"
