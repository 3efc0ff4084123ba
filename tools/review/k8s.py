"""Kubernetes objects of two synths, compared by kind, namespace and name, field by field, and read for
what a reviewer asks: capture tiers, sampling and payload caps (data governance); images, service
accounts and their roles, replicas, autoscaling and model sources (workloads); Service type, load
balancer scheme and source ranges, network policies (exposure); TLS, DNS names (DNS and TLS); the capture
sidecar's budgets, their alerts and its usage settings (budgets and costs, in words by ``budgets.py``); the
token-audience admission policy by its holders, and admission policy bindings (identity); the host-path admission
policy by its paths and writers (exposure).

The objects come from ``dist/`` (``*.k8s.yaml``; ``helm/*.yaml`` as Helm releases) and from the
cluster stack's kubectl manifests and Helm charts, which the app renders from the same plan; a change
seen in both is one line with both places."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hyperpod_inference_iac.charts.pod_security import (
    HOST_PATH_POLICY,
    HOST_PATHS_ANNOTATION,
    CacheWriter,
    HostPaths,
    host_path_policy,
    host_paths_of_annotation,
)
from hyperpod_inference_iac.charts.token_policy import (
    HOLDERS_ANNOTATION,
    TOKEN_AUDIENCE_POLICY,
    TokenHolder,
    holders_of_annotation,
    token_audience_policy,
)
from tools.review import budgets
from tools.review.flat import changed, collapse, flatten, render, whole_item
from tools.review.model import MISSING, Line, change, increases, listing, short
from tools.review.rules import Rules

Key = tuple[str, str, str]  # kind, namespace, name
OPERATOR_KINDS = {"InferenceEndpointConfig", "JumpStartModel"}
POD_OWNERS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet"}
PRUNE_LABEL = "aws.cdk.eks/prune-"
BINDINGS = {"RoleBinding", "ClusterRoleBinding"}
RBAC = {"Role", "ClusterRole"} | BINDINGS
ADMISSION_POLICY = "ValidatingAdmissionPolicy"
ADMISSION_BINDING = "ValidatingAdmissionPolicyBinding"


def key_of(obj: dict[str, Any]) -> Key:
    metadata = obj.get("metadata") or {}
    return (str(obj.get("kind", "?")), str(metadata.get("namespace", "") or ""), str(metadata.get("name", "?")))


def label(key: Key) -> str:
    kind, namespace, name = key
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def helm_release(release: str, namespace: str, chart: Any, repository: Any, version: Any, values: Any
                 ) -> dict[str, Any]:
    """A Helm release as an object of kind ``HelmRelease`` (the same shape from dist/helm and from the stack)."""
    return {"kind": "HelmRelease", "metadata": {"name": release, "namespace": namespace},
            "spec": {"chart": chart, "repository": repository, "version": version, "values": values or {}}}


def strip_cdk_labels(obj: dict[str, Any]) -> dict[str, Any]:
    """The kubectl provider's prune label is the CDK's bookkeeping, not the object's."""
    labels = (obj.get("metadata") or {}).get("labels")
    if isinstance(labels, dict) and any(name.startswith(PRUNE_LABEL) for name in labels):
        kept = {name: value for name, value in labels.items() if not name.startswith(PRUNE_LABEL)}
        metadata = dict(obj["metadata"])
        if kept:
            metadata["labels"] = kept
        else:
            metadata.pop("labels")
        obj = {**obj, "metadata": metadata}
    return obj


def load_dist(directory: Path) -> dict[Key, tuple[dict[str, Any], str]]:
    """Every object of a dist/ folder: key -> (object, file relative to the folder's parent)."""
    found: dict[Key, tuple[dict[str, Any], str]] = {}
    if not directory.is_dir():
        return found
    for path in sorted(directory.glob("*.k8s.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict):
                found[key_of(doc)] = (doc, f"dist/{path.name}")
    for path in sorted((directory / "helm").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        if isinstance(doc, dict) and "chart" in doc:
            obj = helm_release(str(doc.get("release", path.stem)), str(doc.get("namespace", "")), doc.get("chart"),
                               doc.get("repository"), doc.get("version"), doc.get("values"))
            found[key_of(obj)] = (obj, f"dist/helm/{path.name}")
    return found


# ---- rules ------------------------------------------------------------------------------------------


@dataclass
class Context:
    key: Key
    old_obj: dict[str, Any] | None
    new_obj: dict[str, Any] | None
    old: dict[tuple[str, ...], Any]
    new: dict[tuple[str, ...], Any]
    # A NetworkPolicy new in a namespace that had none: pods no policy selects admit everything, so it can only
    # restrict; beside other policies it may admit more (policies add up) and is read rule by rule.
    first_policy: bool = False

    @property
    def kind(self) -> str:
        return self.key[0]

    @property
    def name(self) -> str:
        return self.key[2]

    def get(self, side: str, path: str) -> Any:
        flat = self.old if side == "old" else self.new
        for candidate, value in flat.items():
            if render(candidate) == path:
                return value
        return MISSING

    def has_prefix(self, side: str, path: str) -> bool:
        flat = self.old if side == "old" else self.new
        return any(render(candidate).startswith(path) for candidate in flat)


Said = tuple[str, str, str, bool]  # group, subject, text, broadens
# A handler says one thing or several (a list: the budget settings read together), or None: not its field.
Handler = Callable[[re.Match[str], Any, Any, Context], "Said | list[Said] | None"]
_RULES: Rules[Handler] = Rules()


def rule(kinds: set[str] | None, pattern: str) -> Callable[[Handler], Handler]:
    """A rule for objects of these kinds (None: any kind)."""
    return _RULES.add(lambda kind: kinds is None or kind in kinds, pattern)


def _on(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() == "true")


def _tier_enabled(ctx: Context, side: str, tier: str) -> bool:
    return _on(ctx.get(side, f"spec.dataCapture.{tier}.enabled"))


def _onoff(value: Any) -> Any:
    return MISSING if value is MISSING else ("on" if _on(value) else "off")


@rule(OPERATOR_KINDS, r"^spec\.dataCapture\.(?P<tier>\w+)\.enabled$")
def _tier(m, old, new, ctx):
    words = change("capture", _onoff(old), _onoff(new))
    if _on(new) and ctx.get("new", f"spec.dataCapture.{m['tier']}.initialSamplingPercentage") is MISSING:
        words += ", sampling 100 % (the CRD's default)"
    return ("data_governance", f"{ctx.name}/{m['tier']}", words, _on(new) and not _on(old))


@rule(OPERATOR_KINDS, r"^spec\.dataCapture\.(?P<tier>\w+)\.initialSamplingPercentage$")
def _sampling(m, old, new, ctx):
    tier = m["tier"]
    # Absent means the CRD's default, 100 % when the tier is on; a tier that is off captures nothing.
    before = (100 if old is MISSING else old) if _tier_enabled(ctx, "old", tier) else 0
    after = (100 if new is MISSING else new) if _tier_enabled(ctx, "new", tier) else 0
    return ("data_governance", f"{ctx.name}/{tier}", change("sampling", old, new, " %"),
            increases(before, after))


@rule(OPERATOR_KINDS, r"^spec\.dataCapture\.(?P<tier>\w+)\.payloadConfig\.maxPayloadSizeKB$")
def _payload(m, old, new, ctx):
    unlimited = float("inf")
    return ("data_governance", f"{ctx.name}/{m['tier']}", change("payload cap", old, new, " KB"),
            increases(old, new, absent=unlimited, zero_is=unlimited))


def _modes(value: Any, default: str = "Input,Output") -> set[str]:
    if value is MISSING or value is None:
        value = default
    if isinstance(value, str):
        return {part.strip() for part in value.split(",") if part.strip()}
    return {str(item.get("captureMode")) if isinstance(item, dict) else str(item) for item in value}


@rule(OPERATOR_KINDS, r"^spec\.dataCapture\.(?P<tier>\w+)\.captureOptions$")
def _capture_options(m, old, new, ctx):
    before, after = _modes(old), _modes(new)
    return ("data_governance", f"{ctx.name}/{m['tier']}",
            change("capture modes", listing(sorted(before)), listing(sorted(after))), bool(after - before))


@rule(OPERATOR_KINDS, r"^spec\.dataCapture\.(?P<tier>\w+)\.kmsKeyId$")
def _capture_key(m, old, new, ctx):
    return ("encryption", f"{ctx.name}/{m['tier']}", change("capture key", old, new), new is MISSING)


def _bucket(uri: Any) -> str | None:
    return uri.split("/")[2] if isinstance(uri, str) and uri.startswith("s3://") and uri.count("/") >= 2 else None


@rule(OPERATOR_KINDS, r"^spec\.dataCapture\.s3Uri$")
def _capture_uri(m, old, new, ctx):
    return ("data_governance", ctx.name, change("capture destination", old, new),
            old is not MISSING and _bucket(old) != _bucket(new))


@rule(OPERATOR_KINDS, r"^spec\.dataCapture\.(?P<tier>\w+)\.(?P<field>.+)$")
def _capture_other(m, old, new, ctx):
    return ("data_governance", f"{ctx.name}/{m['tier']}", change(m["field"], old, new), False)


_CONTAINER = r"^spec\.template\.spec\.(?:initContainers|containers)\[(?P<c>[^\]]+)\]"


@rule(POD_OWNERS, _CONTAINER + r"\.env\[(?P<var>SAMPLING_PERCENTAGE|MAX_PAYLOAD_SIZE_KB|CAPTURE_MODES|"
      r"CAPTURE_S3_URI|KMS_KEY_ID|BATCH_SIZE|FLUSH_INTERVAL_SECONDS)\]\.value$")
def _sidecar_env(m, old, new, ctx):
    subject = f"{ctx.name}/{m['c']}"
    # A capture container that did not exist captured nothing; one that is gone captures nothing.
    existed = ctx.has_prefix("old", f"spec.template.spec.initContainers[{m['c']}]") or ctx.has_prefix(
        "old", f"spec.template.spec.containers[{m['c']}]")
    exists = ctx.has_prefix("new", f"spec.template.spec.initContainers[{m['c']}]") or ctx.has_prefix(
        "new", f"spec.template.spec.containers[{m['c']}]")
    var = m["var"]
    if var == "SAMPLING_PERCENTAGE":
        before = (100 if old is MISSING else old) if existed else 0
        after = (100 if new is MISSING else new) if exists else 0
        return ("data_governance", subject, change("sampling", old, new, " %"), increases(before, after))
    if var == "MAX_PAYLOAD_SIZE_KB":
        unlimited = float("inf")
        broadens = exists and (not existed or increases(old, new, absent=unlimited, zero_is=unlimited))
        return ("data_governance", subject, change("payload cap", old, new, " KB"), broadens)
    if var == "CAPTURE_MODES":
        before, after = (_modes(old) if existed else set()), (_modes(new) if exists else set())
        return ("data_governance", subject, change("capture modes", old, new), bool(after - before))
    if var == "CAPTURE_S3_URI":
        return ("data_governance", subject, change("capture destination", old, new),
                old is not MISSING and new is not MISSING and _bucket(old) != _bucket(new))
    if var == "KMS_KEY_ID":
        return ("encryption", subject, change("capture key", old, new), new is MISSING and exists)
    return ("data_governance", subject, change(var.lower().replace("_", " "), old, new), False)


def caller_limits_change(var: str, old: Any, new: Any, subject: str = "") -> tuple[str, str, str, bool]:
    """A change of the capture sidecar's per-caller limits or their store (docs/usage-and-budgets.md): a limit raised
    or gone, or the store's failure mode turned open, lets callers use more than before (broadening)."""
    group, text, broadens = (budgets.caller_limits_words(old, new) if var == "CALLER_LIMITS"
                             else budgets.setting_change(var, old, new))
    return (group, subject, text, broadens)


_USAGE_VARS = "|".join(budgets.SIDECAR_VARS)


@rule(POD_OWNERS, _CONTAINER + rf"\.env\[(?P<var>{_USAGE_VARS})\]\.value$")
def _usage_env(m, old, new, ctx):
    """The sidecar's budgets and their alerts, read together: the alerts are each day or month budget's levels, so a
    change of either CALLER_LIMITS or BUDGET_ALERT_PERCENTS is read as the alerts gained and lost (once: by the
    levels' line when both changed)."""
    subject, var = f"{ctx.name}/{m['c']}", m["var"]
    prefix = m.string[: m.start("var")]

    def both(name: str) -> tuple[Any, Any]:
        path = f"{prefix}{name}].value"
        return ctx.get("old", path), ctx.get("new", path)

    limits, percents = both("CALLER_LIMITS"), both("BUDGET_ALERT_PERCENTS")
    said: list[tuple[str, str, bool]] = []
    if var == "CALLER_LIMITS":
        said.append(budgets.caller_limits_words(old, new))
    elif var != "BUDGET_ALERT_PERCENTS":
        said.append(budgets.setting_change(var, old, new, has_limits=limits[1] is not MISSING))
    if var == "BUDGET_ALERT_PERCENTS" or (var == "CALLER_LIMITS" and percents[0] == percents[1]):
        said += budgets.alerts_change(limits[0], limits[1], percents[0], percents[1])
    return [(group, subject, text, broadens) for group, text, broadens in said]


# A caller's lines in a synced keys file's template (``SecretSync``): ``<caller>:{{ ... }}``.
_KEYS_FILE_CALLER = re.compile(r"(?:^|\n|}})([A-Za-z0-9][A-Za-z0-9._-]{0,63}):{{")


def keys_file_callers(template: Any) -> set[str]:
    """The caller ids a keys file's template writes lines for (none when absent or not a template)."""
    return set(_KEYS_FILE_CALLER.findall(template)) if isinstance(template, str) else set()


@rule({"ExternalSecret"}, r"^spec\.target\.template\.data\.api-keys$")
def _api_key_callers(m, old, new, ctx):
    """The callers whose API keys a server accepts (docs/secrets.md): one added (or un-revoked) is someone more who
    can call the server (broadening); one removed or revoked narrows."""
    before, after = keys_file_callers(old), keys_file_callers(new)
    if before == after:
        return None  # (the same callers, written another way: the single key's form migrated to callers)
    words = [f"+ {caller}" for caller in sorted(after - before)] + [f"- {caller}" for caller in sorted(before - after)]
    return ("identity", ctx.name, "API key callers: " + listing(words), bool(after - before))


@rule(POD_OWNERS, _CONTAINER + r"\.env\[MODEL_SOURCE_S3_URI\]\.value$")
def _model_uri(m, old, new, ctx):
    return ("workloads", f"{ctx.name}/{m['c']}", change("model source", old, new), False)


def _image_words(old: Any, new: Any) -> str:
    if isinstance(old, str) and isinstance(new, str):
        repo_old, _, tag_old = old.rpartition(":")
        repo_new, _, tag_new = new.rpartition(":")
        if repo_old and repo_old == repo_new and "/" not in tag_old and "/" not in tag_new:
            return f"image {short(repo_new)} tag {short(tag_old)} → {short(tag_new)}"
    return change("image", old, new)


@rule(None, r"(?:^|\.)(?:containers|initContainers)\[(?P<c>[^\]]+)\]\.image$")
def _container_image(m, old, new, ctx):
    return ("workloads", f"{ctx.name}/{m['c']}", _image_words(old, new), False)


@rule(None, r"^spec\.(?:worker\.)?image$|(?:^|\.)image(?:\.tag|\.repository)?$")
def _image(m, old, new, ctx):
    return ("workloads", ctx.name, _image_words(old, new), False)


@rule(None, r"^spec\.(?P<f>replicas|InitialReplicaCount|minReplicas|maxReplicas)$")
def _replicas(m, old, new, ctx):
    return ("workloads", ctx.name, change(m["f"].removeprefix("Initial").lower(), old, new), False)


@rule(OPERATOR_KINDS, r"^spec\.autoScalingSpec\.(?P<f>.+)$")
def _autoscaling(m, old, new, ctx):
    return ("workloads", ctx.name, change(f"autoscaling {m['f']}", old, new), False)


@rule(OPERATOR_KINDS, r"^spec\.modelSourceConfig\.(?P<f>.+)$")
def _model_source(m, old, new, ctx):
    field = m["f"]
    if ctx.old_obj is None and not field.endswith(("commitSHA", "modelId", "s3Uri", "bucketName")):
        return None
    if field.endswith("commitSHA"):
        words = change("pinned revision", old, "(unpinned)" if new is MISSING else new)
        return ("workloads", ctx.name, words, False)
    return ("workloads", ctx.name, change(f"model source {field}", old, new), False)


@rule({"JumpStartModel"}, r"^spec\.model\.(?P<f>.+)$")
def _jumpstart_model(m, old, new, ctx):
    if ctx.old_obj is None and m["f"] not in ("modelId", "modelVersion"):
        return None
    return ("workloads", ctx.name, change(f"model {m['f']}", old, new), False)


@rule(OPERATOR_KINDS, r"^spec\.(?P<f>instanceType|instanceTypes|server\.instanceType|modelName|modelVersion)$")
def _capacity(m, old, new, ctx):
    return ("workloads", ctx.name, change(m["f"].removeprefix("server."), old, new), False)


@rule(None, r"(?:^|\.)serviceAccountName$|^spec\.server\.executionRole$")
def _service_account(m, old, new, ctx):
    what = "execution role" if "executionRole" in m.group(0) else "service account"
    return ("workloads", ctx.name, change(what, old, new), False)


@rule({"ServiceAccount"}, r"^metadata\.annotations\.eks\.amazonaws\.com/role-arn$")
def _sa_role(m, old, new, ctx):
    return ("workloads", f"service account {ctx.key[1]}/{ctx.name}", change("role", old, new), False)


@rule(None, r"(?:^|\.)automountServiceAccountToken$")
def _automount(m, old, new, ctx):
    broadens = (_on(new) and not _on(old)) or (new is MISSING and old is not MISSING and not _on(old))
    return ("workloads", ctx.name, change("automountServiceAccountToken", old, new), broadens)


_LOOSER = {"privileged": True, "allowPrivilegeEscalation": True, "runAsNonRoot": False,
           "readOnlyRootFilesystem": False, "hostNetwork": True, "hostPID": True, "hostIPC": True}


@rule(None, r"(?:^|\.)securityContext\.(?P<f>privileged|allowPrivilegeEscalation|runAsNonRoot|"
      r"readOnlyRootFilesystem|capabilities\.add|capabilities\.drop|runAsUser)$")
def _security_context(m, old, new, ctx):
    field = m["f"]
    if ctx.old_obj is None and field not in ("privileged", "allowPrivilegeEscalation", "capabilities.add"):
        return None  # a new workload's posture: its dangerous settings only
    if field in _LOOSER:
        looser = _LOOSER[field]
        broadens = (new == looser) or (new is MISSING and old != looser and field != "runAsNonRoot")
    elif field == "capabilities.add":
        broadens = bool(set(new or []) - set(old or [])) if new is not MISSING else False
    elif field == "capabilities.drop":
        broadens = bool(set(old or []) - set(new if new is not MISSING else []))
    else:
        broadens = new in (0, "0")
    container = re.search(r"\[(?P<c>[^\]]+)\]\.securityContext", m.string)
    subject = f"{ctx.name}/{container['c']}" if container else ctx.name
    return ("workloads", subject, change(f"securityContext.{field}", old, new), broadens)


@rule(None, r"^spec\.template\.spec\.(?P<f>hostNetwork|hostPID|hostIPC)$")
def _host_namespaces(m, old, new, ctx):
    return ("exposure", ctx.name, change(m["f"], old, new), _on(new) and not _on(old))


@rule(None, r"(?:containers|initContainers)\[(?P<c>[^\]]+)\]\.ports\[(?P<p>[^\]]+)\]\.hostPort$")
def _host_port(m, old, new, ctx):
    return ("exposure", f"{ctx.name}/{m['c']}", change(f"hostPort of {m['p']}", old, new), new is not MISSING)


@rule(None, r"(?:containers|initContainers)\[(?P<c>[^\]]+)\]\.resources\.(?P<f>.+)$")
def _resources(m, old, new, ctx):
    return ("workloads", f"{ctx.name}/{m['c']}", change(f"resources {m['f']}", old, new), False)


_EXPOSING = {"LoadBalancer": 2, "NodePort": 1}


@rule({"Service"}, r"^spec\.type$")
def _service_type(m, old, new, ctx):
    rank = _EXPOSING.get(str(new), 0) > _EXPOSING.get(str(old), 0)
    return ("exposure", label(ctx.key), change("type", old, new), rank)


@rule({"Service", "Ingress"}, r"^metadata\.annotations\.(?:service\.beta\.kubernetes\.io/aws-load-balancer-scheme|"
      r"alb\.ingress\.kubernetes\.io/scheme)$")
def _scheme(m, old, new, ctx):
    return ("exposure", label(ctx.key), change("load balancer scheme", old, new),
            new == "internet-facing" or (new is MISSING and old == "internal"))


def _ranges(value: Any) -> set[str]:
    if value is MISSING or value is None:
        return set()
    if isinstance(value, str):
        return {part.strip() for part in value.split(",") if part.strip()}
    return {str(item) for item in value}


@rule({"Service", "Ingress"}, r"^(?:spec\.loadBalancerSourceRanges|metadata\.annotations\."
      r"(?:service\.beta\.kubernetes\.io/load-balancer-source-ranges|alb\.ingress\.kubernetes\.io/inbound-cidrs))$")
def _source_ranges(m, old, new, ctx):
    before, after = _ranges(old), _ranges(new)
    # No ranges admit every source: a first list narrows; a range added to a list, or the list dropped, widens.
    broadens = bool(before) and (bool(after - before) or not after)
    return ("exposure", label(ctx.key), change("source ranges", listing(sorted(before)) if before else MISSING,
                                               listing(sorted(after)) if after else MISSING), broadens)


@rule({"Service"}, r"^spec\.ports\[(?P<p>[^\]]+)\]\.(?P<f>port|nodePort|targetPort|protocol)$")
def _service_port(m, old, new, ctx):
    exposed = _EXPOSING.get(str(ctx.get("new", "spec.type")), 0) > 0
    return ("exposure", label(ctx.key), change(f"port {m['p']} {m['f']}", old, new),
            exposed and old is MISSING and m["f"] == "port")


@rule({"NetworkPolicy"}, r"^spec\.(?P<f>.+)$")
def _network_policy(m, old, new, ctx):
    field = m["f"]
    if ctx.first_policy:
        return ("exposure", label(ctx.key), change(field, old, new), False)
    if field in ("ingress", "egress"):
        before = [json.dumps(item, sort_keys=True) for item in (old if isinstance(old, list) else [])]
        after = [json.dumps(item, sort_keys=True) for item in (new if isinstance(new, list) else [])]
        return ("exposure", label(ctx.key), f"{field} rules {len(before)} → {len(after)}"
                + (f" (+ {listing(sorted(set(after) - set(before)), 3)})" if set(after) - set(before) else ""),
                bool(set(after) - set(before)) or (old is not MISSING and new is MISSING))
    if field.startswith("policyTypes"):
        return ("exposure", label(ctx.key), change("policy types", old, new),
                bool(set(old or []) - set(new if new is not MISSING else [])))
    return ("exposure", label(ctx.key), change(field, old, new), True)


def _items(value: Any) -> set[str]:
    return {json.dumps(item, sort_keys=True) for item in value} if isinstance(value, list) else set()


@rule({"Role", "ClusterRole"}, r"^(?P<f>rules|aggregationRule.*)$")
def _rbac_rules(m, old, new, ctx):
    gained, lost = _items(new) - _items(old), _items(old) - _items(new)
    words = "; ".join(filter(None, [f"rules + {listing(sorted(gained), 3)}" if gained else "",
                                    f"rules - {listing(sorted(lost), 3)}" if lost else ""])) or change(m["f"], old, new)
    return ("identity", label(ctx.key), words, bool(gained) or m["f"] != "rules")


@rule(BINDINGS, r"^(?P<f>subjects|roleRef\..+)$")
def _rbac_binding(m, old, new, ctx):
    if m["f"] == "subjects":
        gained, lost = _items(new) - _items(old), _items(old) - _items(new)
        words = "; ".join(filter(None, [f"subjects + {listing(sorted(gained), 3)}" if gained else "",
                                        f"subjects - {listing(sorted(lost), 3)}" if lost else ""]))
        return ("identity", label(ctx.key), words, bool(gained))
    return ("identity", label(ctx.key), change(m["f"], old, new), True)


@rule({ADMISSION_BINDING}, r"^spec\.(?P<f>.+)$")
def _admission_binding(m, old, new, ctx):
    """An admission policy's binding: losing ``Deny`` (to ``Warn``/``Audit`` only) lets the pods it refused run; any
    other change (another policy, other namespaces, parameters) is not read here, so it counts as broadening."""
    field = m["f"]
    if field == "validationActions":
        def actions(value: Any) -> set[str]:
            return {str(item) for item in value} if isinstance(value, list) else set()
        return ("identity", label(ctx.key), change("validationActions", old, new),
                "Deny" in actions(old) and "Deny" not in actions(new))
    return ("identity", label(ctx.key), change(field, old, new), ctx.old_obj is not None)


@rule(OPERATOR_KINDS, r"^spec\.loadBalancer\.(?P<f>.+)$")
def _operator_lb(m, old, new, ctx):
    return ("exposure", ctx.name, change(f"load balancer {m['f']}", old, new), False)


@rule(OPERATOR_KINDS, r"^spec\.(?P<f>tlsConfig|dnsConfig)(?:\.(?P<rest>.+))?$")
def _tls_dns(m, old, new, ctx):
    field = m["f"] + (f".{m['rest']}" if m["rest"] else "")
    broadens = m["f"] == "tlsConfig" and new is MISSING and not ctx.has_prefix("new", "spec.tlsConfig")
    return ("dns_tls", ctx.name, change(field, old, new), broadens)


@rule(None, r"^metadata\.annotations\.external-dns\.alpha\.kubernetes\.io/(?P<f>hostname|ttl)$")
def _hostname(m, old, new, ctx):
    return ("dns_tls", label(ctx.key), change(m["f"], old, new), False)


@rule({"Ingress"}, r"^spec\.(?P<f>rules|tls).*$")
def _ingress(m, old, new, ctx):
    return ("dns_tls", label(ctx.key), change(m.group(0), old, new), m["f"] == "tls" and new is MISSING)


@rule({"HelmRelease"}, r"^spec\.(?P<f>chart|repository|version)$")
def _chart(m, old, new, ctx):
    return ("workloads", f"Helm release {ctx.name}", change(f"chart {m['f']}", old, new), False)


@rule({"HelmRelease"}, r"^spec\.values\.(?P<f>.*(?:domainFilters|zoneIdFilters|policy|txtOwnerId)|"
      r"extraArgs)$")
def _dns_values(m, old, new, ctx):
    return ("dns_tls", f"Helm release {ctx.name}", change(f"values {m['f']}", old, new), False)


@rule({"HelmRelease"}, r"^spec\.values\.(?P<f>.*serviceAccount.*)$")
def _helm_sa(m, old, new, ctx):
    return ("workloads", f"Helm release {ctx.name}", change(f"values {m['f']}", old, new), False)


@rule(OPERATOR_KINDS, r"^spec\.(?P<f>.+)$")
def _operator_spec(m, old, new, ctx):
    """Whatever else an operator resource's spec says is the workload's definition."""
    return ("workloads", ctx.name, change(m["f"], old, new), False)


@rule(POD_OWNERS, r"^spec\.(?:template\.spec\.)?(?P<f>.+)$")
def _pod_spec(m, old, new, ctx):
    field = m["f"]
    container = re.match(r"(?:initContainers|containers)\[(?P<c>[^\]]+)\]\.(?P<rest>.+)$", field)
    if container:
        return ("workloads", f"{ctx.name}/{container['c']}", change(container["rest"], old, new), False)
    return ("workloads", ctx.name, change(field, old, new), False)


# ---- objects ------------------------------------------------------------------------------------------


def _summary(obj: dict[str, Any]) -> str:
    spec = obj.get("spec") or {}
    kind = obj.get("kind")
    if kind == "HelmRelease":
        return f"chart {spec.get('chart')} {spec.get('version')} from {spec.get('repository')}"
    if kind == "Service":
        ports = [str(p.get("port")) for p in spec.get("ports") or [] if isinstance(p, dict)]
        return f"type {spec.get('type', 'ClusterIP')}" + (f", ports {listing(ports)}" if ports else "")
    if kind in POD_OWNERS:
        pod = (spec.get("template") or {}).get("spec") or {}
        return f"replicas {spec.get('replicas', 1)}, service account {pod.get('serviceAccountName', 'default')}"
    if kind == "InferenceEndpointConfig":
        account = (spec.get("kubernetes") or {}).get("serviceAccountName")
        parts = [spec.get("instanceType"), f"replicas {spec.get('replicas', 1)}",
                 f"service account {account}" if account else None]
        return ", ".join(str(part) for part in parts if part)
    if kind == "JumpStartModel":
        model = spec.get("model") or {}
        return (f"model {model.get('modelId')} {model.get('modelVersion', '')}".rstrip()
                + f" on {(spec.get('server') or {}).get('instanceType')}")
    if kind in BINDINGS:
        ref = obj.get("roleRef") or {}
        subjects = [f"{s.get('kind')} {s.get('namespace', '') + '/' if s.get('namespace') else ''}{s.get('name')}"
                    for s in obj.get("subjects") or [] if isinstance(s, dict)]
        return f"{ref.get('kind')} {ref.get('name')} to {listing(subjects) if subjects else 'nobody'}"
    if kind == "ServiceAccount":
        role = ((obj.get("metadata") or {}).get("annotations") or {}).get("eks.amazonaws.com/role-arn")
        return f"role {role}" if role else "no IAM role"
    return ""


_OBJECT_GROUP = {"NetworkPolicy": "exposure", "Service": "exposure", "Ingress": "exposure", "Certificate": "dns_tls",
                 "Namespace": "other", "ConfigMap": "other"} | dict.fromkeys(RBAC, "identity")


# ---- the token-audience admission policy, by its holders ------------------------------------------------------

HolderKey = tuple[str, str, str, str, str]  # namespace, service account, audience, container name, workload
UNREADABLE_TOKEN_POLICY = ("its expression is not the one token_audience_policy makes of its holders annotation ("
               f"{HOLDERS_ANNOTATION}: absent, edited by hand, or another generator): the change cannot be read "
               "by holder, so it counts as broadening")


def _annotations(obj: dict[str, Any]) -> dict[str, Any]:
    annotations = (obj.get("metadata") or {}).get("annotations")
    return annotations if isinstance(annotations, dict) else {}


def is_token_policy(key: Key, obj: dict[str, Any] | None) -> bool:
    """The library's token-audience policy: by its name, or any admission policy carrying the holders annotation."""
    return key[0] == ADMISSION_POLICY and (key[2] == TOKEN_AUDIENCE_POLICY or (
        obj is not None and HOLDERS_ANNOTATION in _annotations(obj)))


def policy_holders(obj: dict[str, Any]) -> dict[HolderKey, set[str]] | None:
    """The holders of a token-audience policy (key -> its containers as JSON), read from its annotation and trusted
    only when its spec is exactly what :func:`token_audience_policy` makes of them; None: it cannot be read so."""
    value = _annotations(obj).get(HOLDERS_ANNOTATION)
    if not isinstance(value, str):
        return None
    try:
        holders = holders_of_annotation(value)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if obj.get("spec") != token_audience_policy(holders)[0]["spec"]:
        return None
    found: dict[HolderKey, set[str]] = {}
    for holder in holders:
        found.setdefault(_holder_key(holder), set()).add(holder.container_json)
    return found


def _holder_key(holder: TokenHolder) -> HolderKey:
    return (holder.namespace, holder.service_account, holder.audience, str(holder.container.get("name", "?")),
            holder.workload)


def _holder_words(key: HolderKey) -> str:
    namespace, account, audience, container, workload = key
    return f"{namespace}/{account}, audience {audience}, container {container}" + (
        f" of {workload}" if workload else "")


def _planned_containers(subject: str, old: Mapping[Any, set[str]], new: Mapping[Any, set[str]],
                        places: tuple[str, ...], *, group: str, what: str, words: Callable[[Any], str], gained: str,
                        change: str) -> list[Line]:
    """The planned containers of a policy read by its annotation (each key -> its containers as JSON; the key's last
    item the workload): one added broadens, one removed narrows, one whose container changed follows its workload."""
    lines = [Line(group, subject, f"{what} added: {words(key)} ({gained})", True, places)
             for key in sorted(set(new) - set(old))]
    lines += [Line(group, subject, f"{what} removed: {words(key)}", False, places)
              for key in sorted(set(old) - set(new))]
    for kept in sorted(set(old) & set(new)):
        if old[kept] != new[kept]:
            workload = kept[-1] or "its workload"
            lines.append(Line("workloads", subject, f"{what} {words(kept)}: follows {workload}'s {change} change "
                              f"(read on {workload}'s own lines)", False, places))
    return lines


def token_policy_lines(key: Key, before: dict[str, Any] | None, after: dict[str, Any] | None,
                       places: tuple[str, ...]) -> list[Line] | None:
    """The token-audience policy read by its holders (docs/review.md): a holder added broadens, one removed narrows,
    one whose container changed follows its workload (one neutral line); None when a side cannot be read so."""
    old = policy_holders(before) if before is not None else {}
    new = policy_holders(after) if after is not None else {}
    if old is None or new is None:
        return None
    subject = label(key)
    if after is None:
        return [Line("identity", subject, "removed: a platform token may be projected into any pod (no admission "
                     "check of its container)", True, places)]
    lines = []
    if before is None:
        lines.append(Line("identity", subject, f"new: a platform token only into its {len(new)} planned holder(s)",
                          False, places))
    lines += _planned_containers(subject, old, new, places, group="identity", what="token holder",
                                 words=_holder_words, gained="one more place a platform token may be projected",
                                 change="container")
    if before is not None:
        lines += _rest_of_policy(key, before, after, HOLDERS_ANNOTATION, places)
    return lines


# ---- the host-path admission policy, by its paths and writers ----------------------------------------------------

WriterKey = tuple[str, str, str, str, str, str]  # host path, namespace, service account, volume, container, workload
UNREADABLE_HOST_PATH_POLICY = (
    "its expression is not the one host_path_policy makes of its host-paths annotation ("
    f"{HOST_PATHS_ANNOTATION}: absent, edited by hand, or another generator): the change cannot be read by host "
    "path and writer, so it counts as broadening")
ANY_NAMESPACE = "*"  # the paths of a policy that allows them in every namespace it binds


def is_host_path_policy(key: Key, obj: dict[str, Any] | None) -> bool:
    """The library's host-path policy: by its name, or any admission policy carrying the host-paths annotation."""
    return key[0] == ADMISSION_POLICY and (key[2] == HOST_PATH_POLICY or (
        obj is not None and HOST_PATHS_ANNOTATION in _annotations(obj)))


@dataclass(frozen=True)
class HostPathReading:
    """A host-path policy read by its annotation: the (namespace, path) pairs allowed, and each writer's container."""

    paths: frozenset[tuple[str, str]]
    writers: dict[WriterKey, set[str]]


def _path_pairs(paths: HostPaths) -> frozenset[tuple[str, str]]:
    if isinstance(paths, dict):
        return frozenset((namespace, path) for namespace, found in paths.items() for path in found)
    return frozenset((ANY_NAMESPACE, path) for path in paths)


def _writer_key(writer: CacheWriter) -> WriterKey:
    return (writer.host_path, writer.namespace, writer.service_account, writer.volume,
            str(writer.container.get("name", "?")), writer.workload)


def read_host_path_policy(obj: dict[str, Any]) -> HostPathReading | None:
    """The paths and writers of a host-path policy, read from its annotation and trusted only when its spec is exactly
    what :func:`host_path_policy` makes of them; None: it cannot be read so."""
    value = _annotations(obj).get(HOST_PATHS_ANNOTATION)
    if not isinstance(value, str):
        return None
    try:
        paths, writers = host_paths_of_annotation(value)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if obj.get("spec") != host_path_policy(paths, writers)[0]["spec"]:
        return None
    found: dict[WriterKey, set[str]] = {}
    for writer in writers:
        found.setdefault(_writer_key(writer), set()).add(writer.container_json)
    return HostPathReading(_path_pairs(paths), found)


def _path_words(pair: tuple[str, str]) -> str:
    namespace, path = pair
    return f"{path} in {'any namespace the policy binds' if namespace == ANY_NAMESPACE else 'namespace ' + namespace}"


def _writer_words(key: WriterKey) -> str:
    path, namespace, account, volume, container, workload = key
    return (f"{path} by container {container}" + (f" of {workload}" if workload else "")
            + f" in {namespace}/{account} (volume {volume})")


def host_path_policy_lines(key: Key, before: dict[str, Any] | None, after: dict[str, Any] | None,
                           places: tuple[str, ...]) -> list[Line] | None:
    """The host-path policy read by its paths and writers (docs/review.md): a path or a writer added broadens, one
    removed narrows, a writer whose container changed follows its workload (one neutral line); None when a side
    cannot be read so."""
    empty = HostPathReading(frozenset(), {})
    old = read_host_path_policy(before) if before is not None else empty
    new = read_host_path_policy(after) if after is not None else empty
    if old is None or new is None:
        return None
    subject = label(key)
    if after is None:
        return [Line("exposure", subject, "removed: pods of the namespaces it bound may mount any host path, writable "
                     "(the privileged level's one exception is no longer checked)", True, places)]
    lines = []
    if before is None:
        lines.append(Line("exposure", subject, f"new: host paths only the {len(new.paths)} planned model cache "
                          f"path(s), written only by their {len(new.writers)} planned loader(s)", False, places))
    for gained in sorted(new.paths - old.paths):
        lines.append(Line("exposure", subject, f"host path allowed: {_path_words(gained)} (pods there may mount it "
                          "read-only)", True, places))
    for lost in sorted(old.paths - new.paths):
        lines.append(Line("exposure", subject, f"host path no longer allowed: {_path_words(lost)}", False, places))
    lines += _planned_containers(subject, old.writers, new.writers, places, group="exposure",
                                 what="host path writer", words=_writer_words,
                                 gained="one more container that may write on the node", change="loader")
    if before is not None:
        lines += _rest_of_policy(key, before, after, HOST_PATHS_ANNOTATION, places)
    return lines


def _rest_of_policy(key: Key, before: dict[str, Any], after: dict[str, Any], annotation: str,
                    places: tuple[str, ...]) -> list[Line]:
    """Anything of a policy read by its annotation but its spec and that annotation (labels, other annotations), as
    any object's."""
    rest = [{**obj, "spec": None, "metadata": {**(obj.get("metadata") or {}), "annotations": {
        name: value for name, value in _annotations(obj).items() if name != annotation}}}
        for obj in (before, after)]
    return diff_objects({key: rest[0]}, {key: rest[1]}, lambda _: places, read_policies=False)


def diff_objects(old: dict[Key, dict[str, Any]], new: dict[Key, dict[str, Any]],
                 where: Callable[[Key], tuple[str, ...]], *, read_policies: bool = True) -> list[Line]:
    """Lines for every object added, removed or changed between two sets of objects (``read_policies``: the
    admission policies of :data:`_READ_POLICIES` by their annotation; off for the rest of such a policy)."""
    lines: list[Line] = []
    policed = {key[1] for key in old if key[0] == "NetworkPolicy"}  # namespaces with policies (Context.first_policy)
    for key in sorted(set(old) | set(new)):
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        places = where(key)
        reader = next((r for r in _READ_POLICIES if r[0](key, before) or r[0](key, after)), None) \
            if read_policies else None
        if reader is not None:
            _, read_lines, group, unreadable = reader
            read = read_lines(key, before, after, places)
            if read is not None:
                lines += read
                continue
            lines.append(Line(group, label(key), unreadable, True, places))
        flat_old = flatten(before) if before is not None else {}
        flat_new = flatten(after) if after is not None else {}
        ctx = Context(key, before, after, flat_old, flat_new,
                      first_policy=before is None and key[0] == "NetworkPolicy" and key[1] not in policed)
        group = _OBJECT_GROUP.get(key[0], "workloads")
        if before is None or after is None:
            verb = "new" if before is None else "removed"
            obj = after if after is not None else before
            summary = _summary(obj)
            if ctx.first_policy:
                verb, summary = "new (the namespace had no policy: restricts the pods it selects)", ""
            broadens = (after is None and key[0] in ("NetworkPolicy", ADMISSION_POLICY, ADMISSION_BINDING)) or (
                after is not None and key[0] in BINDINGS) or (
                after is not None and key[0] == "Service" and _EXPOSING.get(str((obj.get("spec") or {}).get(
                    "type")), 0) > 0)
            lines.append(Line(group, label(key), f"{verb}{': ' + summary if summary else ''}", broadens, places))
        unexplained: list[str] = []
        explained: list[tuple[tuple[str, ...], Any, Any, Line]] = []
        for path, was, now in changed(flat_old, flat_new):
            text = render(path)
            found = _apply_rules(key, text, was, now, ctx, places)
            if found:
                explained += [(path, was, now, line) for line in found]
            elif found is None and before is not None and after is not None:
                whole = whole_item(path, flat_old, flat_new)
                if whole is not None:
                    item = render(whole)
                    words = f"{item} {'added' if any(p[:len(whole)] == whole for p in flat_new) else 'removed'}"
                    if words not in unexplained:
                        unexplained.append(words)
                else:
                    unexplained.append(f"{text}: {change('', was, now).strip()}")
        lines += collapse(explained, flat_old, flat_new)
        for words in unexplained:
            lines.append(Line("other", label(key), words, False, places))
    return lines


# Admission policies read by their annotation: is it one, its lines (None: a side cannot be read so), the group and
# the line when a side cannot be read.
_READ_POLICIES: tuple[tuple[Callable[[Key, dict[str, Any] | None], bool],
                            Callable[[Key, dict[str, Any] | None, dict[str, Any] | None, tuple[str, ...]],
                                     list[Line] | None], str, str], ...] = (
    (is_token_policy, token_policy_lines, "identity", UNREADABLE_TOKEN_POLICY),
    (is_host_path_policy, host_path_policy_lines, "exposure", UNREADABLE_HOST_PATH_POLICY),
)


def _apply_rules(key: Key, path: str, old: Any, new: Any, ctx: Context, places: tuple[str, ...]
                 ) -> list[Line] | None:
    """The lines of the first rule that reads this field ([]: read, nothing to say), or None: no rule reads it."""
    for match, handler in _RULES.matching(key[0], path):
        found = handler(match, old, new, ctx)
        if found is None:
            continue
        if ctx.new_obj is None:
            return []  # a removed object is one line
        lines = []
        for group, subject, text, broadens in found if isinstance(found, list) else [found]:
            if ctx.old_obj is None and handler not in _DESCRIBE_NEW and not (broadens and handler not in _SAID_BY_NEW):
                continue  # of a new object, what identifies it and what broadens; not its whole spec
            lines.append(Line(group, subject, text, bool(broadens), places))
        return lines
    return None


# What a new object's lines say about it besides what broadens (the rest would repeat its spec).
_DESCRIBE_NEW = {_container_image, _image, _model_source, _jumpstart_model, _model_uri, _hostname, _scheme,
                 _source_ranges, _rbac_rules}
# Already said by the object's own line ("new: type LoadBalancer, ports ...").
_SAID_BY_NEW = {_service_type, _service_port, _sa_role, _service_account, _rbac_binding}
