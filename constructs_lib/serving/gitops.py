"""The GitOps hand-off: a folder (``dist/``) that Argo CD or Flux can apply, rendered from the same
:class:`~hyperpod_inference_iac.charts.plan.WorkloadPlan` the CDK app applies.

It holds every object a workload needs on the cluster, or says plainly what must exist first:

* ``namespace.k8s.yaml``, then one ``<chart>.k8s.yaml`` per workload (``model-*``, ``portable-*``);
* ``<name>.k8s.yaml`` for supporting objects (the Hugging Face token sync: ServiceAccount, SecretStore,
  ExternalSecret);
* ``helm/<release>.yaml`` for each Helm release the workloads rely on (chart, repository, pinned version,
  namespace, values), the same definitions the CDK app installs;
* ``README.md``: the order to apply them in, the prerequisites that are not Kubernetes objects (EKS add-ons,
  AWS resources), one check command for each, and the manifests left out until a deploy.

Staging also compares each operator custom resource with the one the folder held before
(:attr:`StagedManifests.replacements`): a change the operator cannot apply in place (intelligent routing is
set once, at creation) is named, so the app can warn before the change reaches a cluster.

A manifest never holds a CDK token: a value known only after ``cdk deploy`` leaves the manifests that
need it out, named in the README with the stack outputs that complete them. The folder is staged
beside the target and replaces it in one step (:meth:`StagedManifests.commit`), so a failed run leaves
the previous one untouched.
"""

from __future__ import annotations

import enum
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cdk8s
import yaml
from aws_cdk import Token

from hyperpod_inference_iac.charts.crd_schema import is_operator_object
from hyperpod_inference_iac.charts.plan import WorkloadPlan
from hyperpod_inference_iac.charts.render import NAMESPACE_CHART, render_workloads
from hyperpod_inference_iac.charts.routing import routing_replacement_reasons
from hyperpod_inference_iac.foundation.helm import HelmRelease
from hyperpod_inference_iac.foundation.platform_values import AwaitingDeploy, PlatformValues
from hyperpod_inference_iac.foundation.validation import ConfigError, Problem


class WorkloadOwner(enum.Enum):
    """Who applies the workloads: ``CDK`` (:class:`~hyperpod_inference_iac.InferenceWorkloads` applies them; the
    folder is for review) or ``GITOPS`` (the folder is the hand-off; CDK applies none of them). One owner: two would
    undo each other's changes."""

    CDK = "cdk"
    GITOPS = "gitops"


@dataclass(frozen=True)
class Prerequisite:
    """Something that must exist before the manifests apply, and how to check it does."""

    what: str
    check: str


@dataclass
class StagedManifests:
    """A rendered ``dist/`` folder waiting to replace ``target``."""

    target: Path
    staging: Path
    written: list[str] = field(default_factory=list)
    waiting: dict[str, AwaitingDeploy] = field(default_factory=dict)
    # Chart id -> why its custom resource, as rendered now, cannot replace the previous rendering in place.
    replacements: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def commit(self) -> None:
        """Replace ``target`` with the staged folder (the previous one is removed only now)."""
        if self.target.exists():
            retired = self.target.with_name(f".{self.target.name}.old")
            shutil.rmtree(retired, ignore_errors=True)
            self.target.rename(retired)
            self.staging.rename(self.target)
            shutil.rmtree(retired, ignore_errors=True)
        else:
            self.target.parent.mkdir(parents=True, exist_ok=True)
            self.staging.rename(self.target)

    def discard(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


def stage_manifests(
    plan: WorkloadPlan,
    *,
    outdir: Path,
    values: PlatformValues,
    supporting: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    helm_releases: Sequence[HelmRelease] = (),
    prerequisites: Sequence[Prerequisite] = (),
    namespace_labels: Mapping[str, str] | None = None,
    complete_with: str = "",
    owner: WorkloadOwner | None = None,
) -> StagedManifests:
    """Render everything into a folder beside ``outdir``; nothing in ``outdir`` changes until ``commit``.

    :param supporting: extra objects by file name (without ``.k8s.yaml``), e.g. the token sync.
    :param helm_releases: releases the workloads rely on, written to ``helm/``.
    :param prerequisites: what must exist first that is not in this folder, each with its check.
    :param complete_with: the command that renders the waiting manifests after a deploy (for the README).
    :param owner: who applies the workloads, said at the top of the README (none: not said).
    """
    outdir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{outdir.name}.", dir=outdir.parent))
    staged = StagedManifests(outdir, staging)
    try:
        app = cdk8s.App(outdir=str(staging), yaml_output_type=cdk8s.YamlOutputType.FILE_PER_CHART)
        rendered = render_workloads(app, plan, values, namespace_labels=namespace_labels)
        staged.waiting.update(rendered.waiting)
        app.synth()
        staged.written = [f"{NAMESPACE_CHART}.k8s.yaml", *(f"{chart}.k8s.yaml" for chart in rendered.charts)]
        staged.replacements = _replacements(outdir, staging, rendered.charts)
        for name, objects in sorted((supporting or {}).items()):
            try:
                documents = [values.resolve(obj) for obj in objects]
            except AwaitingDeploy as awaiting:
                staged.waiting[name] = awaiting
                continue
            _write(staging / f"{name}.k8s.yaml", documents)
            staged.written.append(f"{name}.k8s.yaml")
        for release in helm_releases:
            try:
                description = values.resolve(release.describe())
            except AwaitingDeploy as awaiting:
                staged.waiting[f"helm/{release.release}"] = awaiting
                continue
            _write(staging / "helm" / f"{release.release}.yaml", [description])
            staged.written.append(f"helm/{release.release}.yaml")
        _refuse_tokens(staging)
        (staging / "README.md").write_text(_readme(plan, staged, helm_releases, prerequisites, complete_with,
                                                               owner),
                                           encoding="utf-8")
    except BaseException:
        staged.discard()
        raise
    return staged


def _operator_specs(path: Path) -> dict[tuple[str, str], Any]:
    if not path.is_file():
        return {}
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: the previous dist/ is read every synth
    documents = [d for d in yaml.load_all(path.read_text(encoding="utf-8"), Loader=loader) if isinstance(d, dict)]
    return {(d["kind"], d["metadata"]["name"]): d.get("spec", {}) for d in documents if is_operator_object(d)}


def _replacements(previous: Path, staging: Path, charts: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """Each chart whose custom resource changed in a way the operator refuses to apply in place."""
    found: dict[str, tuple[str, ...]] = {}
    for chart in charts:
        before = _operator_specs(previous / f"{chart}.k8s.yaml")
        after = _operator_specs(staging / f"{chart}.k8s.yaml")
        reasons = tuple(reason for key in sorted(before.keys() & after.keys())
                        for reason in routing_replacement_reasons(before[key], after[key]))
        if reasons:
            found[chart] = reasons
    return found


def _write(path: Path, documents: Sequence[Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False, default_flow_style=False), encoding="utf-8")


def _refuse_tokens(folder: Path) -> None:
    """The promise of this folder, checked on what was written: no CDK token anywhere."""
    for path in sorted(folder.rglob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        if "${Token[" in text or "#{Token[" in text or Token.is_unresolved(text):
            raise ConfigError([Problem("Manifests.UnresolvedToken", path.name,
                                       "holds a CDK token; give the value a deterministic name or let it wait for "
                                       "stack outputs")])


def _owner_lines(owner: WorkloadOwner | None) -> list[str]:
    if owner is WorkloadOwner.CDK:
        return ["**Do not apply these.** The cluster stack applies them (`InferenceWorkloads`, "
                "`workloads.owner: cdk`); a second owner would undo its changes and fail its next update. They are "
                "here for review; to hand them to GitOps instead, set `workloads.owner: gitops` and deploy "
                "(docs/deploying.md).", ""]
    if owner is WorkloadOwner.GITOPS:
        return ["**Apply these with your GitOps tool** (`workloads.owner: gitops`): the cluster stack creates the "
                "identities, the namespace and the supporting objects, and applies none of the workloads.", ""]
    return []


def _readme(plan: WorkloadPlan, staged: StagedManifests, releases: Sequence[HelmRelease],
            prerequisites: Sequence[Prerequisite], complete_with: str, owner: WorkloadOwner | None = None) -> str:
    namespace = plan.context.namespace
    lines = [
        "# GitOps hand-off",
        "",
        "Rendered by the platform's `cdk synth` from the same plan the CDK app applies; do not edit by hand.",
        "",
        *_owner_lines(owner),
        "## What must exist first",
        "",
        "Not Kubernetes objects of this folder; each with a command that checks it:",
        "",
    ]
    for item in prerequisites:
        lines.append(f"- {item.what}: `{item.check}`")
    for release in releases:
        source = f"{release.chart} {release.version} from {release.repository}"
        lines.append(f"- Helm release `{release.release}` ({source}, namespace `{release.namespace}`; values in "
                     f"`helm/{release.release}.yaml`): {release.purpose}. "
                     f"Check: `helm status {release.release} -n {release.namespace}`")
    lines += ["", "## Apply in this order", ""]
    files = sorted(name for name in staged.written if not name.startswith("helm/"))
    ordered = [f"{NAMESPACE_CHART}.k8s.yaml", *(n for n in files if not n.startswith(("model-", "portable-"))
                                                and n != f"{NAMESPACE_CHART}.k8s.yaml"),
               *(n for n in files if n.startswith(("model-", "portable-")))]
    for index, name in enumerate(ordered, start=1):
        lines.append(f"{index}. `{name}`")
    lines += ["", f"Then check the workloads: `kubectl -n {namespace} get inferenceendpointconfigs,jumpstartmodels,"
              "deployments`", ""]
    if staged.waiting:
        lines += ["## Waiting for values that exist only after `cdk deploy`", ""]
        for name, awaiting in sorted(staged.waiting.items()):
            outputs = ", ".join(f"`{value.output_name}`" for value in awaiting.missing)
            lines.append(f"- `{name}` needs the stack outputs {outputs}")
        if complete_with:
            lines += ["", f"After a deploy that wrote them (`cdk deploy --outputs-file cdk-outputs.json`): "
                      f"`{complete_with}`"]
        lines.append("")
    return "\n".join(lines)
