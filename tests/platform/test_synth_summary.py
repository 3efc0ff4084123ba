"""The synth summary of the default platform's real synth (issue 26, 7): every stack of the cloud assembly with
exactly its templates' resource count, every file of dist/, and the steps left (read only: the shared assembly is not
written to)."""

from __future__ import annotations

from tests.support.synth import REPO, Assembly
from tools import synth_summary


def test_the_summary_of_the_default_platform_counts_what_the_templates_hold(assembly: Assembly) -> None:
    summary = synth_summary.summarize(assembly.directory, assembly.directory / "dist",
                                      str(REPO / "config" / "default.yaml"))
    counted = {stack.name: stack.resources for stack in summary.stacks}
    assert counted == {name: len(template["Resources"]) for name, template in assembly.templates.items()}
    assert {stack.region for stack in summary.stacks} == {"us-west-2"}
    assert {file.path for file in summary.dist} >= {f"{name}" for name in assembly.manifests}
    assert sum(sum(f.kinds.values()) for f in summary.dist) >= sum(len(docs) for docs in assembly.manifests.values())
    titles = [step.title for step in summary.steps]
    assert [t.split(" ")[0] for t in titles] == ["Bootstrap", "Make", "Publish", "Run"]
    text = synth_summary.render_text(summary, assembly.directory / "dist")
    assert all(stack.name in text for stack in summary.stacks)
