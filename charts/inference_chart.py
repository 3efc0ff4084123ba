"""The chart that carries the operator's custom resources and the identities they run under.

YAML users and Python users meet the same checks: a config loader calls :func:`parse_models` on a
``models:`` list (shape and types only) and plans the result (``plan_workloads``); a Python user
builds the dataclasses; :class:`InferenceChart` applies the same rules before it emits
anything, unless its models come from a plan that already did.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import cdk8s
from constructs import Construct

from hyperpod_inference_iac.charts._spec_fields import SpecBlock, crd_field
from hyperpod_inference_iac.charts.inference_endpoint import InferenceEndpointConfig
from hyperpod_inference_iac.charts.jumpstart import JumpStartModel
from hyperpod_inference_iac.charts.plan import Workload, check_workload_set, named
from hyperpod_inference_iac.charts.pod_security import namespace_metadata, namespace_security
from hyperpod_inference_iac.charts.weights_cache import ModelWeightsCacheConfig
from hyperpod_inference_iac.foundation.patterns import DNS1123_SUBDOMAIN, IAM_ROLE_ARN
from hyperpod_inference_iac.foundation.platform_values import PlatformValues
from hyperpod_inference_iac.foundation.validation import WRONG_TYPE, Problems, join_path, wrong_type

USER_ASSIGNABLE_LABEL = "sagemaker.amazonaws.com/user-assignable"
IRSA_ROLE_ANNOTATION = "eks.amazonaws.com/role-arn"
_KINDS: dict[str, type[Workload]] = {
    InferenceEndpointConfig.KIND: InferenceEndpointConfig,
    JumpStartModel.KIND: JumpStartModel,
    ModelWeightsCacheConfig.KIND: ModelWeightsCacheConfig,
}
# What a models: entry may hold besides its kind's own fields (the config loader's platform shortcut).
ENTRY_SHORTCUTS = ("endpointDomain", "namespace", "gateway")


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkloadServiceAccount(SpecBlock):
    """A service account one workload runs under, bound to its own IAM role through IRSA.

    ``role_arn`` is a plain string (derived from account and role name), so the manifest holds no
    unresolved CDK token. ``None``: no role on the account, so no container gets one from it (a workload whose only
    AWS caller, its NVMe loader, holds a token of its own: :mod:`charts.pod_credentials`).
    """

    name: str = crd_field(code="ServiceAccount.NameInvalid", pattern=DNS1123_SUBDOMAIN.pattern, max_length=253)
    role_arn: str | None = crd_field(code="ServiceAccount.RoleArnInvalid", pattern=IAM_ROLE_ARN.pattern)


def parse_model(data: Any, path: str, problems: Problems) -> Workload | None:
    """One ``models:`` entry (without its shortcuts): ``kind`` picks the class, the rest is its ``from_dict``.
    Shape and types only; the values are checked once, by the plan (or the chart)."""
    if not isinstance(data, Mapping):
        problems.add(WRONG_TYPE, path, wrong_type("a mapping", data), data)
        return None
    kind = data.get("kind")
    model_class = _KINDS.get(kind) if isinstance(kind, str) else None
    if model_class is None:
        problems.add("Model.KindInvalid", join_path(path, "kind"), f"must be one of {', '.join(_KINDS)}", kind)
        return None
    fields = {k: v for k, v in data.items() if k != "kind" and k not in ENTRY_SHORTCUTS}
    return model_class.from_dict(fields, path, problems)


def parse_models(data: Any, *, path: str = "models", problems: Problems) -> list[tuple[str, Workload]]:
    """Every entry of a ``models:`` list parsed, with its key path (entries that fail to parse are left out,
    their problems recorded)."""
    if not isinstance(data, list):
        problems.add(WRONG_TYPE, path, wrong_type("a list of model entries", data), data)
        return []
    parsed = [(join_path(path, i), parse_model(entry, join_path(path, i), problems)) for i, entry in enumerate(data)]
    return [(entry_path, model) for entry_path, model in parsed if model is not None]


class InferenceChart(cdk8s.Chart):
    """Operator custom resources for one namespace, plus the service accounts they reference.

    Checks everything first and raises one :class:`~hyperpod_inference_iac.foundation.validation.ConfigError`
    listing every problem. Objects: optional Namespace, one ServiceAccount per custom identity
    (``.service_accounts``), one custom resource per model (``.resources``, keyed by name; each an
    ``ApiObject`` that takes ``add_json_patch``).

    :param namespace: where the resources live.
    :param models: the custom resources (typed).
    :param service_accounts: the service accounts the models name, each with its role. @default none
    :param custom_service_accounts_enabled: whether the operator add-on allows them. @default False
    :param create_namespace: also emit the Namespace. @default False
    :param labels: labels on every object. @default none
    :param values: resolves the platform values a planned model refers to. @default none (plain values only)
    :param checked: the models come from a :class:`~hyperpod_inference_iac.charts.plan.WorkloadPlan`, which
        already checked them (skips checking twice). @default False
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        namespace: str,
        models: Sequence[Workload],
        service_accounts: Sequence[WorkloadServiceAccount] = (),
        custom_service_accounts_enabled: bool = False,
        create_namespace: bool = False,
        labels: Mapping[str, str] | None = None,
        values: PlatformValues | None = None,
        checked: bool = False,
    ) -> None:
        if not checked:
            _check(id, namespace, models, service_accounts, custom_service_accounts_enabled)
        values = values or PlatformValues({})
        # No chart-level namespace: cdk8s would also stamp it on the cluster-scoped Namespace.
        super().__init__(scope, id, disable_resource_name_hashes=True, labels=labels)
        self.namespace_object: cdk8s.ApiObject | None = None
        if create_namespace:
            self.namespace_object = cdk8s.ApiObject(
                self, "namespace", api_version="v1", kind="Namespace",
                metadata=namespace_metadata(namespace, security=namespace_security(
                    host_paths=any(getattr(model, "nvme_cache", None) is not None for model in models),
                    operator_pods=True, root_pods=True))
            )
        self.service_accounts: dict[str, cdk8s.ApiObject] = {
            account.name: self._service_account(account, namespace) for account in service_accounts
        }
        self.resources: dict[str, cdk8s.ApiObject] = {}
        for model in models:
            manifest = values.resolve(model.manifest(namespace=namespace))
            resource = cdk8s.ApiObject(
                self,
                f"{model.KIND}-{model.name}",
                api_version=manifest["apiVersion"],
                kind=manifest["kind"],
                metadata=manifest["metadata"],
            )
            # ApiObject's Python props take no body; the spec goes in as the first patch, so a
            # user's own add_json_patch calls apply on top of it.
            resource.add_json_patch(cdk8s.JsonPatch.add("/spec", manifest["spec"]))
            self.resources[model.name] = resource

    def _service_account(self, account: WorkloadServiceAccount, namespace: str) -> cdk8s.ApiObject:
        # Plain ApiObject: the operator creates the pods, so kplus's pod-side defaults do not apply. No Kubernetes
        # API token in the model pods (automountServiceAccountToken: false): a model server never calls the API,
        # and IRSA and the loader's own token are projected by themselves.
        service_account = cdk8s.ApiObject(
            self,
            f"ServiceAccount-{account.name}",
            api_version="v1",
            kind="ServiceAccount",
            metadata={
                "name": account.name,
                "namespace": namespace,
                # Only labelled accounts may be named in spec.kubernetes.serviceAccountName.
                "labels": {USER_ASSIGNABLE_LABEL: "true"},
                **({"annotations": {IRSA_ROLE_ANNOTATION: account.role_arn}} if account.role_arn else {}),
            },
        )
        service_account.add_json_patch(cdk8s.JsonPatch.add("/automountServiceAccountToken", False))
        return service_account


def _check(chart_id: str, namespace: str, models: Sequence[Workload],
           service_accounts: Sequence[WorkloadServiceAccount], custom_service_accounts_enabled: bool) -> None:
    problems = Problems()
    entries = [(join_path("models", i), model) for i, model in enumerate(models)]
    for entry_path, model in entries:
        model.validate(entry_path, problems)
    for index, account in enumerate(service_accounts):
        account.validate(join_path("serviceAccounts", index), problems)
    check_workload_set([named(path, model) for path, model in entries], namespace=namespace,
                       custom_service_accounts_enabled=custom_service_accounts_enabled, problems=problems)
    declared = {account.name for account in service_accounts}
    used = {model.service_account_name: path for path, model in entries if model.service_account_name is not None}
    for name, entry_path in used.items():
        if name not in declared:
            problems.add("ServiceAccount.RoleMissing", join_path(entry_path, "spec.kubernetes.serviceAccountName"),
                         "names a service account the chart was not given a role for (service_accounts)", name)
    for index, account in enumerate(service_accounts):
        if account.name not in used:
            problems.add("ServiceAccount.Unused", join_path(join_path("serviceAccounts", index), "name"),
                         "no model names this service account in spec.kubernetes.serviceAccountName", account.name)
    problems.raise_if_any(source=f"InferenceChart {chart_id}")
