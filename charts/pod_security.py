"""Pod Security of the inference namespaces: the strictest level each namespace's pods allow, and where that level
must be ``privileged``, an admission policy that puts back everything but the one exception.

Levels (``pod-security.kubernetes.io/enforce``), decided per namespace from what its workloads need
(:func:`namespace_security`):

* ``privileged``, only where a workload mounts the node-local NVMe model cache: a ``hostPath`` volume, which
  ``baseline`` already forbids (and with it every other host path). Pod Security Admission has no finer setting,
  so the :data:`HOST_PATH_POLICY` ValidatingAdmissionPolicy takes over there: ``baseline``'s rules (no privileged
  container, host namespace, host port, added capability beyond baseline's, unconfined seccomp or unsafe sysctl)
  and, for host paths, exactly the cache directories the plan names, mounted read-only by every container except
  the platform's loader, which must run the planned image with the planned script. A pod creator in the namespace
  therefore cannot mount the node, run privileged, or write the cache with a command of their own.
* ``baseline`` otherwise: the model servers (vLLM, TGI, SGLang images, and the operator's workers) and the metrics
  agent run as root, which ``restricted`` forbids.
* ``restricted`` for a namespace whose pods all run as non-root without host paths (none of the platform's own
  workloads does today: it is there for a namespace you add).

``warn`` and ``audit`` are always ``restricted``, so whoever creates a pod that falls short of the strictest level
is told, and the API server's audit log names it.

The policy denies in a namespace whose pods are all the platform's own (portable servers); where the operator
creates pods (its custom resources), it warns and audits instead: the operator's pod template is not part of its
API (it may add volumes or mounts of its own), and a denied pod is an endpoint that does not start.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

POD_SECURITY_EXCEPTION_ANNOTATION = "hyperpod-inference-iac/pod-security-exception"
HOST_PATH_POLICY = "hyperpod-inference-iac-host-path"
# The namespace label that binds HOST_PATH_POLICY, with the action its value names.
HOST_PATH_POLICY_LABEL = "hyperpod-inference-iac/host-path-policy"
# Capabilities baseline allows a container to add (Pod Security Standards, "Capabilities").
BASELINE_CAPABILITIES = ("AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT")
# Sysctls baseline allows (the "safe" set).
BASELINE_SYSCTLS = ("kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                    "net.ipv4.tcp_keepalive_probes")


class PodSecurityLevel(enum.StrEnum):
    PRIVILEGED = "privileged"
    BASELINE = "baseline"
    RESTRICTED = "restricted"


class HostPathAction(enum.StrEnum):
    DENY = "deny"  # the namespace's pods are all the platform's own
    WARN = "warn"  # the operator makes pods here: warn and audit


@dataclass(frozen=True)
class CacheWriter:
    """The one container that may write a host path: the loader, with its image and its command."""

    container: str
    image: str
    command: tuple[str, ...]


@dataclass(frozen=True)
class NamespaceSecurity:
    """What one inference namespace's pods need: its level, and for ``privileged`` the host-path policy's action."""

    level: PodSecurityLevel
    host_path_action: HostPathAction | None = None
    reason: str = ""

    def labels(self) -> dict[str, str]:
        labels = {"pod-security.kubernetes.io/enforce": self.level.value,
                  "pod-security.kubernetes.io/warn": PodSecurityLevel.RESTRICTED.value,
                  "pod-security.kubernetes.io/audit": PodSecurityLevel.RESTRICTED.value}
        if self.host_path_action is not None:
            labels[HOST_PATH_POLICY_LABEL] = self.host_path_action.value
        return labels


def namespace_security(*, host_paths: bool, operator_pods: bool, root_pods: bool) -> NamespaceSecurity:
    """The strictest level a namespace's pods allow: host paths need ``privileged`` (with the host-path policy,
    denying unless the operator makes pods there), root needs ``baseline``, else ``restricted``."""
    if host_paths:
        action = HostPathAction.WARN if operator_pods else HostPathAction.DENY
        return NamespaceSecurity(
            PodSecurityLevel.PRIVILEGED, action,
            "enforce is privileged, not baseline: the node-local NVMe model cache is a hostPath volume, which baseline "
            f"forbids; the ValidatingAdmissionPolicy {HOST_PATH_POLICY} ({action.value}) holds pods here to baseline's "
            "other rules and to the planned cache paths, read-only except for the loader")
    if root_pods:
        return NamespaceSecurity(PodSecurityLevel.BASELINE, None,
                                 "enforce is baseline, not restricted: the model servers run as root")
    return NamespaceSecurity(PodSecurityLevel.RESTRICTED)


# The labels of a namespace whose workloads mount the NVMe cache (kept for consumers of 0.2.0, which exported them).
POD_SECURITY_LABELS: Mapping[str, str] = namespace_security(host_paths=True, operator_pods=True,
                                                            root_pods=True).labels()


def namespace_metadata(name: str, labels: Mapping[str, str] | None = None,
                       security: NamespaceSecurity | None = None) -> dict[str, Any]:
    """Metadata of an inference Namespace: the Pod Security labels, then ``labels`` (which win: an explicit choice
    of the caller), and the reason for any level short of restricted in an annotation.
    @default security: ``privileged`` with the host-path policy warning (a namespace of unknown pods with caches)"""
    security = security or namespace_security(host_paths=True, operator_pods=True, root_pods=True)
    metadata: dict[str, Any] = {"name": name, "labels": {**security.labels(), **(labels or {})}}
    if security.reason:
        metadata["annotations"] = {POD_SECURITY_EXCEPTION_ANNOTATION: security.reason}
    return metadata


def _cel(value: Any) -> str:
    """A CEL literal of a string or a list of strings (JSON's escapes are CEL's for these)."""
    if isinstance(value, str):
        return json.dumps(value)
    return "[" + ", ".join(_cel(item) for item in value) + "]"


def _every_container(condition: str) -> str:
    """``condition`` (over ``c``) for containers and init containers, and for ephemeral (debug) containers."""
    return f"variables.containers.all(c, {condition}) && variables.ephemeral.all(c, {condition})"


def host_path_policy(cache_paths: Sequence[str], writers: Sequence[CacheWriter]) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its two bindings (deny, warn and audit), selecting namespaces by
    :data:`HOST_PATH_POLICY_LABEL`. ``cache_paths``: every host path a planned pod may mount; ``writers``: the
    containers that may mount one writable."""
    not_set = "!has({0}) || !{0}"
    writer_terms = " || ".join(
        f"(c.name == {_cel(w.container)} && c.image == {_cel(w.image)} && has(c.command) && "
        f"c.command == {_cel(list(w.command))} && !has(c.args))" for w in writers) or "false"
    read_only_mount = "!(m.name in variables.hostVolumeNames) || (has(m.readOnly) && m.readOnly)"
    validations = [
        ("!(has(object.spec.hostNetwork) && object.spec.hostNetwork) && !(has(object.spec.hostPID) && "
         "object.spec.hostPID) && !(has(object.spec.hostIPC) && object.spec.hostIPC)",
         "no host network, PID or IPC namespace (baseline)"),
        (_every_container(f"!has(c.securityContext) || ({not_set.format('c.securityContext.privileged')})"),
         "no privileged container (baseline)"),
        (_every_container("!has(c.securityContext) || !has(c.securityContext.capabilities) || "
                          "!has(c.securityContext.capabilities.add) || "
                          f"c.securityContext.capabilities.add.all(x, x in {_cel(BASELINE_CAPABILITIES)})"),
         f"no capability beyond baseline's ({', '.join(BASELINE_CAPABILITIES)})"),
        (_every_container("!has(c.ports) || c.ports.all(p, !has(p.hostPort) || p.hostPort == 0)"),
         "no host port (baseline)"),
        ("(!has(object.spec.securityContext) || !has(object.spec.securityContext.seccompProfile) || "
         "object.spec.securityContext.seccompProfile.type != 'Unconfined') && "
         + _every_container("!has(c.securityContext) || !has(c.securityContext.seccompProfile) || "
                            "c.securityContext.seccompProfile.type != 'Unconfined'"),
         "no Unconfined seccomp profile (baseline)"),
        (_every_container("!has(c.securityContext) || !has(c.securityContext.procMount) || "
                          "c.securityContext.procMount == 'Default'"),
         "the default /proc mount only (baseline)"),
        ("!has(object.spec.securityContext) || !has(object.spec.securityContext.sysctls) || "
         f"object.spec.securityContext.sysctls.all(s, s.name in {_cel(BASELINE_SYSCTLS)})",
         "safe sysctls only (baseline)"),
        (f"variables.hostVolumes.all(v, v.hostPath.path in {_cel(sorted(set(cache_paths)))})",
         f"host paths are the planned model caches only ({', '.join(sorted(set(cache_paths))) or 'none'})"),
        (f"variables.containers.all(c, !has(c.volumeMounts) || c.volumeMounts.all(m, {read_only_mount} || "
         f"{writer_terms})) && variables.ephemeral.all(c, !has(c.volumeMounts) || "
         f"c.volumeMounts.all(m, {read_only_mount}))",
         "a model cache is mounted read-only, except by the platform's loader running its planned image and "
         "script"),
    ]
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": HOST_PATH_POLICY},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                "resources": ["pods", "pods/ephemeralcontainers"]}]},
            "variables": [
                {"name": "containers", "expression": "object.spec.containers + (has(object.spec.initContainers) ? "
                                                     "object.spec.initContainers : [])"},
                {"name": "ephemeral", "expression": "has(object.spec.ephemeralContainers) ? "
                                                    "object.spec.ephemeralContainers : []"},
                {"name": "hostVolumes", "expression": "has(object.spec.volumes) ? "
                                                      "object.spec.volumes.filter(v, has(v.hostPath)) : []"},
                {"name": "hostVolumeNames", "expression": "variables.hostVolumes.map(v, v.name)"},
            ],
            "validations": [{"expression": expression, "message": f"{HOST_PATH_POLICY}: {message}"}
                            for expression, message in validations],
        },
    }
    bindings = [{
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": f"{HOST_PATH_POLICY}-{action.value}"},
        "spec": {
            "policyName": HOST_PATH_POLICY,
            "validationActions": ["Deny"] if action is HostPathAction.DENY else ["Warn", "Audit"],
            "matchResources": {"namespaceSelector": {"matchLabels": {HOST_PATH_POLICY_LABEL: action.value}}},
        },
    } for action in HostPathAction]
    return [policy, *bindings]
