"""Pod Security of the inference namespaces: the strictest level each namespace's pods allow, and where that level
must be ``privileged``, an admission policy that puts back everything but the one exception.

Levels (``pod-security.kubernetes.io/enforce``), decided per namespace from what its workloads need
(:func:`namespace_security`):

* ``privileged``, only where a workload mounts the node-local NVMe model cache: a ``hostPath`` volume, which
  ``baseline`` already forbids (and with it every other host path). Pod Security Admission has no finer setting,
  so the :data:`HOST_PATH_POLICY` ValidatingAdmissionPolicy takes over there: every other check of the upstream
  ``baseline`` level (:func:`baseline_validations`, :data:`BASELINE_VERSION`) and, for host paths, exactly the cache
  directories the plan names for the namespace, mounted read-only by every container except each path's planned
  loader. A pod creator in the namespace therefore cannot mount the node, run privileged, or write the cache with a
  command, environment or mount of their own.
* ``baseline`` otherwise: the model servers (vLLM, TGI, SGLang images, and the operator's workers) and the metrics
  agent run as root, which ``restricted`` forbids.
* ``restricted`` for a namespace whose pods all run as non-root without host paths (none of the platform's own
  workloads does today: it is there for a namespace you add).

``warn`` and ``audit`` are always ``restricted``, so whoever creates a pod that falls short of the strictest level
is told, and the API server's audit log names it.

The policy denies in every namespace with a cache, also where the operator creates pods (its custom resources).
Decided in issue 28: warning there left any pod creator a ``privileged`` namespace (``hostPath: /``, a privileged
pod); a denied pod is an endpoint that does not start, with the policy's message in the ReplicaSet's events. The
operator's pod template is not its API: a release that mounts the cache writable in its worker, or changes the
loader it copies from ``spec.kubernetes.initContainers``, is stopped at admission instead of running unguarded.

Each cache path has one writer (:class:`CacheWriter`): the loader of its workload, an init container in its
namespace, under its service account, exactly as planned (image, command, env, mounts, security context; nothing
added such as ``args``, ``envFrom``, ``stdin``, ``tty``, ``restartPolicy``), in a pod that does not share its process
namespace and that no debug container joins. Host paths are allowed per namespace (``request.namespace``).

The policy carries its paths and writers in the annotation :data:`HOST_PATHS_ANNOTATION` (JSON,
:func:`host_paths_annotation`), written from the same plan as the expression, so a review (``make review``,
``tools/review/k8s.py``) reads a change of the policy as host paths and writers added, removed or following their
workload's loader, after checking that the policy is the one :func:`host_path_policy` makes of them.
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
# HOST_PATH_POLICY's host paths and writers, machine-readable (JSON: {"paths": ..., "writers": [...]}).
HOST_PATHS_ANNOTATION = "hyperpod-inference-iac/host-paths"
# The upstream baseline level these constants follow: kubernetes/pod-security-admission, policy/check_*.go, as its
# own test fixtures for the level (test/testdata/baseline/v1.37, vendored in tests/charts/fixtures) exercise it.
BASELINE_VERSION = "v1.37"
# Capabilities baseline allows a container to add (check_capabilities_baseline.go).
BASELINE_CAPABILITIES = ("AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT")
# Sysctls baseline allows, the "safe" set (check_sysctls.go, v1.37).
BASELINE_SYSCTLS = ("kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                    "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",
                    "net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_notsent_lowat")
# SELinux types baseline allows (check_seLinuxOptions.go, v1.31 and later); user and role must be unset.
BASELINE_SELINUX_TYPES = ("", "container_t", "container_init_t", "container_kvm_t", "container_engine_t")
# Seccomp and AppArmor profile types baseline allows (check_seccompProfile_baseline.go, check_appArmorProfile.go).
BASELINE_PROFILE_TYPES = ("RuntimeDefault", "Localhost")
APPARMOR_ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/"
# Container fields the API server or a LimitRange may set on the writer without the plan saying so (any value).
DEFAULTED_CONTAINER_FIELDS = ("imagePullPolicy", "resources", "terminationMessagePath", "terminationMessagePolicy")


class PodSecurityLevel(enum.StrEnum):
    PRIVILEGED = "privileged"
    BASELINE = "baseline"
    RESTRICTED = "restricted"


class HostPathAction(enum.StrEnum):
    DENY = "deny"  # the namespace's pods are all the platform's own
    WARN = "warn"  # the operator makes pods here: warn and audit


@dataclass(frozen=True)
class CacheWriter:
    """The one container that may write one host path: the loader of one workload, exactly as planned.

    ``container_json``: the planned init container (core/v1 Container as JSON, keys sorted); admission compares a
    pod's writer with it field by field (image, command, env, mounts, security context; no field it does not
    have, such as ``args``, ``envFrom``, ``stdin``, ``tty``, ``restartPolicy`` or ``lifecycle``), in ``namespace``,
    under ``service_account``, with ``volume`` the pod's hostPath volume of ``host_path``."""

    host_path: str
    namespace: str
    service_account: str
    volume: str
    container_json: str
    workload: str = ""  # the object that plans the pod, for a reader only (the expression does not use it)

    @classmethod
    def of(cls, *, host_path: str, namespace: str, service_account: str | None, volume: str,
           container: Mapping[str, Any], workload: str = "") -> CacheWriter:
        return cls(host_path, namespace, service_account or "default", volume, json.dumps(container, sort_keys=True),
                   workload)

    @property
    def container(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.container_json)
        return loaded

    @property
    def sort_key(self) -> tuple[str, str, str, str, str, str]:
        return (self.host_path, self.namespace, self.service_account, self.volume, self.container_json, self.workload)

    def to_json(self) -> dict[str, Any]:
        """The writer as an entry of :data:`HOST_PATHS_ANNOTATION`."""
        entry: dict[str, Any] = {"hostPath": self.host_path, "namespace": self.namespace,
                                 "serviceAccount": self.service_account, "volume": self.volume,
                                 "container": self.container}
        if self.workload:
            entry["workload"] = self.workload
        return entry

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> CacheWriter:
        """An entry of :data:`HOST_PATHS_ANNOTATION` (``KeyError``/``TypeError`` when it is not one)."""
        if not isinstance(entry.get("container"), Mapping):
            raise TypeError("container is not an object")
        return cls.of(host_path=str(entry["hostPath"]), namespace=str(entry["namespace"]),
                      service_account=str(entry["serviceAccount"]), volume=str(entry["volume"]),
                      container=entry["container"], workload=str(entry.get("workload", "")))


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
    denying, also where the operator makes pods), root needs ``baseline``, else ``restricted``."""
    del operator_pods  # the policy denies where the operator makes pods too (module docstring)
    if host_paths:
        action = HostPathAction.DENY
        return NamespaceSecurity(
            PodSecurityLevel.PRIVILEGED, action,
            "enforce is privileged, not baseline: the node-local NVMe model cache is a hostPath volume, which "
            f"baseline forbids; the ValidatingAdmissionPolicy {HOST_PATH_POLICY} ({action.value}) holds pods here to "
            f"every other rule of baseline ({BASELINE_VERSION}) and to the planned cache paths of the namespace, "
            "read-only except for each path's planned loader")
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
    @default security: ``privileged`` with the host-path policy denying (a namespace of unknown pods with caches)"""
    security = security or namespace_security(host_paths=True, operator_pods=True, root_pods=True)
    metadata: dict[str, Any] = {"name": name, "labels": {**security.labels(), **(labels or {})}}
    if security.reason:
        metadata["annotations"] = {POD_SECURITY_EXCEPTION_ANNOTATION: security.reason}
    return metadata


def cel_literal(value: Any) -> str:
    """A CEL literal of a JSON value: string, bool, integer, null, list or map with string keys (JSON's string
    escapes are CEL's)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (str, int)):
        return json.dumps(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{json.dumps(key)}: {cel_literal(item)}" for key, item in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(cel_literal(item) for item in value) + "]"
    raise TypeError(f"no CEL literal for {value!r}")


_cel = cel_literal


def _every_container(condition: str) -> str:
    """``condition`` (over ``c``) for containers and init containers, and for ephemeral (debug) containers (a list
    of another type: the API server's typed CEL does not concatenate the two)."""
    return f"variables.containers.all(c, {condition}) && variables.ephemeral.all(c, {condition})"


def _unset_or(field: str, condition: str) -> str:
    """``field`` (a dotted path) absent at any step, or ``condition``."""
    parts = field.split(".")
    absent = " || ".join(f"!has({'.'.join(parts[:i])})" for i in range(2, len(parts) + 1))
    return f"({absent} || {condition})"


def _security_context_rules(scope: str, what: str) -> list[tuple[str, str]]:
    """Baseline's rules on one security context (``scope``: ``object.spec.securityContext`` or
    ``c.securityContext``), over both the pod's and each container's where upstream checks both."""
    profile, empty = _cel(BASELINE_PROFILE_TYPES), _cel("")
    return [
        (_unset_or(f"{scope}.seccompProfile.type", f"{scope}.seccompProfile.type in {profile}"),
         f"seccomp profile RuntimeDefault or Localhost only, {what} (baseline)"),
        (_unset_or(f"{scope}.appArmorProfile.type", f"{scope}.appArmorProfile.type in {profile}"),
         f"AppArmor profile RuntimeDefault or Localhost only, {what} (baseline)"),
        (" && ".join([
            _unset_or(f"{scope}.seLinuxOptions.type", f"{scope}.seLinuxOptions.type in {_cel(BASELINE_SELINUX_TYPES)}"),
            *(_unset_or(f"{scope}.seLinuxOptions.{field}", f"{scope}.seLinuxOptions.{field} == {empty}")
              for field in ("user", "role"))]),
         f"SELinux type {', '.join(t or '(unset)' for t in BASELINE_SELINUX_TYPES)} only, no user or role, "
         f"{what} (baseline)"),
        (_unset_or(f"{scope}.windowsOptions.hostProcess", f"!{scope}.windowsOptions.hostProcess"),
         f"no Windows HostProcess, {what} (baseline)"),
    ]


def baseline_validations() -> list[tuple[str, str]]:
    """Every check of the upstream baseline level but host paths, as (CEL expression, message): the rules
    :data:`HOST_PATH_POLICY` keeps where Pod Security must be ``privileged``. Over ``object`` (the Pod) and
    ``variables.containers`` and ``variables.ephemeral``."""
    pod = "object.spec.securityContext"
    probe_hosts = " && ".join(
        _unset_or(f"c.{handler}.{kind}.host", f"c.{handler}.{kind}.host == {_cel('')}")
        for handler in ("livenessProbe", "readinessProbe", "startupProbe", "lifecycle.postStart", "lifecycle.preStop")
        for kind in ("httpGet", "tcpSocket"))
    apparmor_values = (f"object.metadata.annotations[k] == {_cel('')} || "
                       f"object.metadata.annotations[k] == {_cel('runtime/default')} || "
                       f"object.metadata.annotations[k].startsWith({_cel('localhost/')})")
    rules = [
        ("!(has(object.spec.hostNetwork) && object.spec.hostNetwork) && !(has(object.spec.hostPID) && "
         "object.spec.hostPID) && !(has(object.spec.hostIPC) && object.spec.hostIPC)",
         "no host network, PID or IPC namespace (baseline)"),
        (_every_container(_unset_or("c.securityContext.privileged", "!c.securityContext.privileged")),
         "no privileged container (baseline)"),
        (_every_container(_unset_or("c.securityContext.capabilities.add",
                                    f"c.securityContext.capabilities.add.all(x, x in {_cel(BASELINE_CAPABILITIES)})")),
         f"no capability beyond baseline's ({', '.join(BASELINE_CAPABILITIES)})"),
        (_every_container("!has(c.ports) || c.ports.all(p, !has(p.hostPort) || p.hostPort == 0)"),
         "no host port (baseline)"),
        (_every_container(probe_hosts), "no probe or lifecycle handler with a host (baseline)"),
        ("(has(object.spec.hostUsers) && !object.spec.hostUsers) || "
         + _every_container(_unset_or("c.securityContext.procMount", "c.securityContext.procMount == 'Default'")),
         "the default /proc mount only, unless the pod has its own user namespace (baseline)"),
        (_unset_or(f"{pod}.sysctls", f"{pod}.sysctls.all(s, s.name in {_cel(BASELINE_SYSCTLS)})"),
         "safe sysctls only (baseline)"),
        (f"!has(object.metadata.annotations) || object.metadata.annotations.all(k, "
         f"!k.startsWith({_cel(APPARMOR_ANNOTATION_PREFIX)}) || {apparmor_values})",
         "no AppArmor annotation other than runtime/default or localhost/<profile> (baseline)"),
    ]
    rules += _security_context_rules(pod, "pod")
    for expression, message in _security_context_rules("c.securityContext", "containers"):
        rules.append((_every_container(expression), message))
    return rules


def _writer_term(writer: CacheWriter, read_only_mount: str) -> str:
    """An init container ``c`` with a writable host mount is ``writer``: in its namespace, under its service
    account, every field of the container the planned one (none added but the defaulted), and its one writable
    host mount the volume of its path."""
    terms = [f"request.namespace == {_cel(writer.namespace)}",
             f"variables.serviceAccount == {_cel(writer.service_account)}",
             "!(has(object.spec.shareProcessNamespace) && object.spec.shareProcessNamespace)",
             f"variables.hostVolumes.exists(v, v.name == {_cel(writer.volume)} && "
             f"v.hostPath.path == {_cel(writer.host_path)})",
             f"c.volumeMounts.all(m, {read_only_mount} || m.name == {_cel(writer.volume)})",
             *exactly_planned("c", writer.container)]
    return "(" + " && ".join(terms) + ")"


# The fields of the core/v1 types a planned container is compared on (Kubernetes 1.35), so that "no other field" is
# said field by field: the API server's CEL is typed, and neither iterates an object's fields nor compares an object
# with a map literal.
_FIELDS: Mapping[str, tuple[str, ...]] = {
    "Container": ("args", "command", "env", "envFrom", "image", "imagePullPolicy", "lifecycle", "livenessProbe", "name",
                  "ports", "readinessProbe", "resizePolicy", "resources", "restartPolicy", "restartPolicyRules",
                  "securityContext", "startupProbe", "stdin", "stdinOnce", "terminationMessagePath",
                  "terminationMessagePolicy", "tty", "volumeDevices", "volumeMounts", "workingDir"),
    "EnvVar": ("name", "value", "valueFrom"),
    "VolumeMount": ("mountPath", "mountPropagation", "name", "readOnly", "recursiveReadOnly", "subPath", "subPathExpr"),
    "SecurityContext": ("allowPrivilegeEscalation", "appArmorProfile", "capabilities", "privileged", "procMount",
                        "readOnlyRootFilesystem", "runAsGroup", "runAsNonRoot", "runAsUser", "seLinuxOptions",
                        "seccompProfile", "windowsOptions"),
    "Capabilities": ("add", "drop"),
}
_FIELD_TYPES = {"env": "EnvVar", "volumeMounts": "VolumeMount", "securityContext": "SecurityContext",
                "capabilities": "Capabilities"}


def _exactly(expression: str, value: Any, kind: str | None) -> list[str]:
    """Typed-CEL terms: ``expression`` (known to be set) equals the JSON ``value``; an object of a known ``kind`` has
    none of that kind's other fields."""
    if isinstance(value, Mapping):
        terms = [f"!has({expression}.{field})" for field in _FIELDS.get(kind or "", ()) if field not in value]
        for key in sorted(value):
            terms.append(f"has({expression}.{key})")
            terms += _exactly(f"{expression}.{key}", value[key], _FIELD_TYPES.get(key))
        return terms
    if isinstance(value, (list, tuple)) and any(isinstance(item, Mapping) for item in value):
        terms = [f"{expression}.size() == {len(value)}"]
        for index, item in enumerate(value):
            terms += _exactly(f"{expression}[{index}]", item, kind)
        return terms
    return [f"{expression} == {cel_literal(value)}"]


def exactly_planned(variable: str, planned: Mapping[str, Any]) -> list[str]:
    """CEL terms: the container ``variable`` has every field of ``planned`` with its value, and no other field of a
    core/v1 Container but those the API server or a LimitRange default (:data:`DEFAULTED_CONTAINER_FIELDS`, any
    value)."""
    compared = {key: value for key, value in planned.items() if key not in DEFAULTED_CONTAINER_FIELDS}
    terms = [f"!has({variable}.{field})" for field in _FIELDS["Container"]
             if field not in planned and field not in DEFAULTED_CONTAINER_FIELDS]
    for key in sorted(compared):
        terms.append(f"has({variable}.{key})")
        terms += _exactly(f"{variable}.{key}", compared[key], _FIELD_TYPES.get(key))
    return terms


def pod_policy(name: str, variables: Sequence[Mapping[str, str]], validations: Sequence[tuple[str, str]],
               match_conditions: Sequence[Mapping[str, str]] = ()) -> dict[str, Any]:
    """A ValidatingAdmissionPolicy on pods (created, updated, or given a debug container), failing closed, with the
    variables every policy here uses (``containers``: containers and init containers; ``initContainers``;
    ``ephemeral``; ``serviceAccount``), then ``variables``; each message is prefixed with ``name``."""
    spec: dict[str, Any] = {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [{
            "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
            "resources": ["pods", "pods/ephemeralcontainers"]}]},
    }
    if match_conditions:
        spec["matchConditions"] = [dict(condition) for condition in match_conditions]
    spec["variables"] = [
        {"name": "initContainers", "expression": "has(object.spec.initContainers) ? object.spec.initContainers : []"},
        {"name": "ephemeral", "expression": "has(object.spec.ephemeralContainers) ? "
                                            "object.spec.ephemeralContainers : []"},
        {"name": "containers", "expression": "object.spec.containers + variables.initContainers"},
        {"name": "serviceAccount", "expression": "has(object.spec.serviceAccountName) ? "
                                                 "object.spec.serviceAccountName : 'default'"},
        *(dict(variable) for variable in variables),
    ]
    spec["validations"] = [{"expression": expression, "message": f"{name}: {message}"}
                           for expression, message in validations]
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name}, "spec": spec}


HostPaths = list[str] | dict[str, list[str]]  # every namespace's paths, or the paths of each namespace


def _ordered_paths(cache_paths: Sequence[str] | Mapping[str, Sequence[str]]) -> HostPaths:
    if isinstance(cache_paths, Mapping):
        return {str(namespace): sorted({str(path) for path in paths})
                for namespace, paths in sorted(cache_paths.items())}
    return sorted({str(path) for path in cache_paths})


def _ordered_writers(writers: Sequence[CacheWriter]) -> list[CacheWriter]:
    return sorted(set(writers), key=lambda writer: writer.sort_key)


def host_paths_annotation(cache_paths: Sequence[str] | Mapping[str, Sequence[str]],
                          writers: Sequence[CacheWriter]) -> str:
    """The value of :data:`HOST_PATHS_ANNOTATION`: the paths (each namespace's, sorted) and each writer once,
    sorted, as compact JSON."""
    return json.dumps({"paths": _ordered_paths(cache_paths),
                       "writers": [writer.to_json() for writer in _ordered_writers(writers)]},
                      sort_keys=True, separators=(",", ":"))


def host_paths_of_annotation(value: str) -> tuple[HostPaths, list[CacheWriter]]:
    """The paths and writers an annotation value names (``ValueError``, ``KeyError`` or ``TypeError`` when it names
    none)."""
    entry = json.loads(value)
    if not isinstance(entry, dict) or not isinstance(entry.get("writers"), list):
        raise TypeError("not an object of paths and writers")
    paths = entry["paths"]
    if isinstance(paths, dict):
        if not all(isinstance(found, list) for found in paths.values()):
            raise TypeError("a namespace's paths are not a list")
        return _ordered_paths(paths), [CacheWriter.from_json(writer) for writer in entry["writers"]]
    if not isinstance(paths, list):
        raise TypeError("paths are neither a list nor an object of lists")
    return _ordered_paths(paths), [CacheWriter.from_json(writer) for writer in entry["writers"]]


def host_path_policy(cache_paths: Sequence[str] | Mapping[str, Sequence[str]],
                     writers: Sequence[CacheWriter]) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its two bindings (deny, warn and audit), selecting namespaces by
    :data:`HOST_PATH_POLICY_LABEL`. ``cache_paths``: every host path a planned pod of each namespace may mount (a
    plain list: any namespace); ``writers``: the one planned writer of each path."""
    paths = _ordered_paths(cache_paths)
    if isinstance(paths, dict):
        by_namespace = paths
        allowed = f"(request.namespace in {_cel(by_namespace)} ? {_cel(by_namespace)}[request.namespace] : [])"
        every_path = sorted({path for paths in by_namespace.values() for path in paths})
    else:
        every_path = paths
        allowed = _cel(every_path)
    writers = _ordered_writers(writers)
    read_only_mount = "!(m.name in variables.hostVolumeNames) || (has(m.readOnly) && m.readOnly)"
    # One term per distinct writer: the same loader planned by two workloads is one term.
    writer_terms = " || ".join(dict.fromkeys(_writer_term(w, read_only_mount) for w in writers)) or "false"
    writer_names = sorted({w.container["name"] for w in writers})
    validations = [
        *baseline_validations(),
        (f"variables.hostVolumes.all(v, v.hostPath.path in {allowed})",
         f"host paths are the planned model caches of the namespace only ({', '.join(every_path) or 'none'})"),
        (f"object.spec.containers.all(c, !has(c.volumeMounts) || c.volumeMounts.all(m, {read_only_mount})) && "
         f"variables.ephemeral.all(c, !has(c.volumeMounts) || c.volumeMounts.all(m, {read_only_mount})) && "
         f"variables.initContainers.all(c, !has(c.volumeMounts) || c.volumeMounts.all(m, {read_only_mount}) || "
         f"{writer_terms})",
         "a model cache is mounted read-only, except by its planned loader (an init container: its namespace, "
         "service account, image, command, environment and mounts exactly)"),
        (f"variables.ephemeral.all(c, !has(c.targetContainerName) || !(c.targetContainerName in "
         f"{_cel(writer_names)}))",
         "no debug container joins the loader's processes"),
    ]
    policy = pod_policy(HOST_PATH_POLICY, [
        {"name": "hostVolumes", "expression": "has(object.spec.volumes) ? "
                                              "object.spec.volumes.filter(v, has(v.hostPath)) : []"},
        {"name": "hostVolumeNames", "expression": "variables.hostVolumes.map(v, v.name)"},
    ], validations)
    policy["metadata"]["annotations"] = {HOST_PATHS_ANNOTATION: host_paths_annotation(paths, writers)}
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
