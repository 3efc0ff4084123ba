"""The network of an inference namespace: nothing in or out unless a policy lists it.

Every inference namespace gets, from :func:`namespace_policies`:

* ``default-deny``: selects every pod, ingress and egress, allows nothing. A pod the platform does not know of
  (a debugging pod, a workload added by hand) can neither be reached nor reach anything.
* ``allow-dns``: every pod may ask the cluster's DNS (``kube-system``, ``k8s-app: kube-dns``, port 53).
* ``operator-workloads`` (when the namespace has operator custom resources): the pods the inference operator
  creates for them. Their pod labels are not part of the operator's API, so they are selected as the pods the
  platform did not make (no ``hyperpod-inference-iac/workload`` label); their ports are the operator's to choose,
  so ingress is open from the VPC (its load balancers and the kubelet's probes) and from the operator's namespace,
  and between themselves (the router and its workers).

* ``gateway-schedulers`` (when an Inference Gateway lives in the namespace): its endpoint pickers run there, among
  the operator's pods, selected by :data:`GATEWAY_POD_LABEL` (the gateway's ``podDefaults.labels``; the model servers
  do not have it), and watch the model pods through the Kubernetes API: HTTPS to the VPC, where the cluster's
  private API endpoint has its addresses (which NetworkPolicy cannot name more narrowly: they are the control
  plane's network interfaces, and they change).
Each platform workload adds its own (the portable server's, the metrics agent's). Egress to AWS APIs (S3, STS,
CloudWatch) is HTTPS to addresses outside the VPC and never the link-local range: NetworkPolicy names addresses,
not services, and S3's and STS's addresses are neither fixed nor few (``aws_api_egress``). Pods can therefore not
reach other pods, other Services in the VPC, or the instance metadata service, except where a rule says so.

What NetworkPolicy cannot say: "S3 only" (an egress proxy or a CNI with FQDN policies can); anything about traffic
inside a pod (the model server and its sidecar share one network namespace). The VPC CNI enforces these policies
only with ``enableNetworkPolicy`` (``InferenceCluster(enforce_network_policies=True)``, the default).
"""

from __future__ import annotations

from typing import Any

DEFAULT_DENY = "default-deny"
ALLOW_DNS = "allow-dns"
OPERATOR_WORKLOADS = "operator-workloads"
GATEWAY_SCHEDULERS = "gateway-schedulers"
# On the platform's own pods (never in a selector): what the namespace's policies tell them from the operator's by.
WORKLOAD_LABEL = "hyperpod-inference-iac/workload"
# On an Inference Gateway's pods (its podDefaults.labels, which the operator applies to the BBR and endpoint picker pods
# only), naming the gateway: what gateway-schedulers selects, so no model server gets the pickers' API access.
GATEWAY_POD_LABEL = "hyperpod-inference-iac/gateway"
OPERATOR_NAMESPACE = "hyperpod-inference-system"
LINK_LOCAL = "169.254.0.0/16"  # the instance metadata service (and the Pod Identity agent's address)
HTTPS = 443


def tcp(port: int) -> dict[str, Any]:
    return {"protocol": "TCP", "port": port}


def policy(name: str, namespace: str, spec: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = labels
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": metadata, "spec": spec}


def aws_api_egress(vpc_cidr: str | None) -> dict[str, Any]:
    """HTTPS to AWS's public endpoints (S3 through the VPC's gateway endpoint, STS, CloudWatch): every address
    except the VPC's own and the link-local range, so never another pod, a node or the metadata service."""
    excluded = [cidr for cidr in (vpc_cidr, LINK_LOCAL) if cidr]
    return {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": excluded}}], "ports": [tcp(HTTPS)]}


def namespace_policies(namespace: str, *, vpc_cidr: str | None, operator_workloads: bool,
                       gateway_schedulers: bool = False) -> list[dict[str, Any]]:
    """The namespace's own policies: default deny, DNS, the operator's pods when it has any, and the API access of an
    Inference Gateway's endpoint pickers when it has one."""
    policies = [
        policy(DEFAULT_DENY, namespace, {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
        policy(ALLOW_DNS, namespace, {
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [{
                "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
                "ports": [{"protocol": "UDP", "port": 53}, tcp(53)],
            }],
        }),
    ]
    operator_pods = {"matchExpressions": [{"key": WORKLOAD_LABEL, "operator": "DoesNotExist"}]}
    if operator_workloads:
        sources: list[dict[str, Any]] = [
            {"podSelector": operator_pods},
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": OPERATOR_NAMESPACE}}},
        ]
        if vpc_cidr:
            sources.append({"ipBlock": {"cidr": vpc_cidr}})
        policies.append(policy(OPERATOR_WORKLOADS, namespace, {
            "podSelector": operator_pods,
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": sources}],
            # To each other (router to workers, any port), and to AWS and the Hugging Face Hub over HTTPS.
            "egress": [{"to": [{"podSelector": operator_pods}]}, aws_api_egress(vpc_cidr)],
        }))
    if operator_workloads and gateway_schedulers and vpc_cidr:
        pickers = {"matchExpressions": [{"key": WORKLOAD_LABEL, "operator": "DoesNotExist"},
                                        {"key": GATEWAY_POD_LABEL, "operator": "Exists"}]}
        policies.append(policy(GATEWAY_SCHEDULERS, namespace, {
            "podSelector": pickers,
            "policyTypes": ["Egress"],
            "egress": [{"to": [{"ipBlock": {"cidr": vpc_cidr}}], "ports": [tcp(HTTPS)]}],
        }))
    return policies
