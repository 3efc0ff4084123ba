"""The reasons of the acknowledged cdk-nag findings, once each (the template snapshots refer to them).

cdk-nag records every acknowledgment in the metadata of each resource it covers, the whole reason each time; the
template snapshots replace each by ``<reason REF>`` (tests/support/synth.py ``snapshot_view``) and this snapshot
holds each reason once: rewording one changes one line here, not dozens in the templates. That every
acknowledgment has a reason, and that the library's are the reviewed ones of
``hyperpod_inference_iac.foundation.nag``, is
checked here and by test_quality_gates.py."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from syrupy.extensions.json import JSONSnapshotExtension

from hyperpod_inference_iac.foundation.nag import REASONS
from tests.support.synth import Assembly, acknowledgments, reason_refs, snapshot_view


def test_reasons_snapshot(acknowledgment_refs: dict[tuple[str, str], str], snapshot: Any) -> None:
    table = {ref: f"{rule}: {reason}" for (rule, reason), ref in sorted(acknowledgment_refs.items(),
                                                                          key=lambda item: item[1])}
    assert table == snapshot(extension_class=JSONSnapshotExtension)


def test_every_acknowledgment_has_a_reason_and_one_reference(assembly: Assembly,
                                                              acknowledgment_refs: dict[tuple[str, str], str]) -> None:
    found = [(where, rule, reason) for template in assembly.templates.values()
             for where, rule, reason in acknowledgments(template)]
    assert found, "no acknowledgment recorded: did cdk-nag run?"
    assert not [(where, rule) for where, rule, reason in found if not (isinstance(reason, str) and reason.strip())]
    assert len(set(acknowledgment_refs.values())) == len(acknowledgment_refs), "two reasons, one reference"
    library = {ref for (rule, _), ref in acknowledgment_refs.items() if rule.startswith("AwsSolutions-")}
    assert library <= set(REASONS), f"acknowledged with a reason that is not a reviewed one: {library - set(REASONS)}"


def test_rewording_a_reason_changes_its_line_of_the_table_and_nothing_in_the_templates(
        assembly: Assembly, monkeypatch: pytest.MonkeyPatch) -> None:
    templates = assembly.templates
    refs = reason_refs(templates.values())
    counts = Counter((rule, reason) for template in templates.values() for _, rule, reason in acknowledgments(template))
    (rule, reason), used = counts.most_common(1)[0]
    assert used > 10 and refs[(rule, reason)] in REASONS  # one of the library's, written many times
    reworded = reason + " (Reworded.)"
    monkeypatch.setitem(REASONS, refs[(rule, reason)], (rule, reworded))
    text = json.dumps(templates)
    assert text.count(json.dumps(reason)) == used
    changed = json.loads(text.replace(json.dumps(reason), json.dumps(reworded)))
    new_refs = reason_refs(changed.values())
    for name, template in templates.items():
        assert snapshot_view(changed[name], new_refs) == snapshot_view(template, refs)
    table, new_table = ({ref: reason for (_, reason), ref in r.items()} for r in (refs, new_refs))
    assert {ref for ref in table if table[ref] != new_table[ref]} == {refs[(rule, reason)]}
