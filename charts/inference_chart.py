"""The chart that carries the operator's custom resources and the identities they run under.

YAML users and Python users meet the same checks: the config loader calls :func:`parse_models`
on the ``models:`` list; a Python user builds the dataclasses; :class:`InferenceChart` validates
whatever it is given with the same rules before it emits anything.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import cdk8s
from constructs import Construct

from hyperpod_inference_iac.charts._spec_fields import WRONG_TYPE, SpecBlock, crd_field
from hyperpod_inference_iac.charts.endpoint_blocks import IAM_ROLE_ARN_PATTERN
from hyperpod_inference_iac.charts.inference_endpoint import InferenceEndpointConfig
from hyperpod_inference_iac.charts.jumpstart import JumpStartModel
from hyperpod_inference_iac.validation import DNS1123_LABEL, DNS1123_SUBDOMAIN, Problems, join_path

Workload = InferenceEndpointConfig | JumpStartModel

USER_ASSIGNABLE_LABEL = "sagemaker.amazonaws.com/user-assignable"
IRSA_ROLE_ANNOTATION = "eks.amazonaws.com/role-arn"
_KINDS: dict[str, type[InferenceEndpointConfig] | type[JumpStartModel]] = {
    InferenceEndpointConfig.KIND: InferenceEndpointConfig,
    JumpStartModel.KIND: JumpStartModel,
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkloadServiceAccount(SpecBlock):
    """A service account one workload runs under, bound to its own IAM role through IRSA.

    ``role_arn`` is a plain string: the app derives it from account and role name, so the
    manifest holds no unresolved CDK token.
    """

    name: str = crd_field(code="ServiceAccount.NameInvalid", pattern=DNS1123_SUBDOMAIN.pattern, max_length=253)
    role_arn: str = crd_field(code="ServiceAccount.RoleArnInvalid", pattern=IAM_ROLE_ARN_PATTERN)


def parse_model(data: Any, path: str, problems: Problems) -> Workload | None:
    """One ``models:`` entry: ``kind`` picks the class, the rest is that class's ``from_dict``."""
    if not isinstance(data, Mapping):
        problems.add(WRONG_TYPE, path, "must be a mapping", data)
        return None
    kind = data.get("kind")
    model_class = _KINDS.get(kind) if isinstance(kind, str) else None
    if model_class is None:
        problems.add("Model.KindInvalid", join_path(path, "kind"), f"must be one of {', '.join(_KINDS)}", kind)
        return None
    return model_class.from_dict({k: v for k, v in data.items() if k != "kind"}, path, problems)


def parse_models(
    data: Any, *, path: str = "models", problems: Problems, custom_service_accounts_enabled: bool
) -> list[Workload]:
    """The config loader's entry point: every entry parsed and validated, problems collected."""
    if not isinstance(data, list):
        problems.add(WRONG_TYPE, path, "must be a list of model entries", data)
        return []
    parsed = [(join_path(path, i), parse_model(entry, join_path(path, i), problems)) for i, entry in enumerate(data)]
    entries = [(entry_path, model) for entry_path, model in parsed if model is not None]
    check_across_models(entries, problems=problems, custom_service_accounts_enabled=custom_service_accounts_enabled)
    return [model for _, model in entries]


def check_across_models(
    entries: Sequence[tuple[str, Workload]],
    *,
    problems: Problems,
    custom_service_accounts_enabled: bool,
    service_accounts: Sequence[WorkloadServiceAccount] | None = None,
) -> None:
    """Rules between entries, and between entries and the cluster's settings.

    ``service_accounts`` is known only to the chart; the config loader passes ``None``.
    """
    seen_names: dict[str, str] = {}
    account_users: dict[str, str] = {}
    for entry_path, model in entries:
        if model.name in seen_names:
            problems.add(
                "Model.DuplicateName",
                join_path(entry_path, "name"),
                f"is already used by {seen_names[model.name]}; names are unique within a namespace",
                model.name,
            )
        seen_names.setdefault(model.name, entry_path)
        account = model.service_account_name
        if account is None:
            continue
        account_path = join_path(entry_path, "spec.kubernetes.serviceAccountName")
        if not custom_service_accounts_enabled:
            problems.add(
                "ServiceAccount.CustomAccountsDisabled",
                account_path,
                "the cluster's inference operator has enableCustomServiceAccounts off; enable it in the "
                "add-on configuration or remove serviceAccountName",
                account,
            )
        if account in account_users:
            problems.add(
                "ServiceAccount.Shared",
                account_path,
                f"is already used by {account_users[account]}; give each workload its own service account "
                "so each role stays scoped to one model's weights",
                account,
            )
        account_users.setdefault(account, entry_path)
    if service_accounts is None:
        return
    declared = {account.name for account in service_accounts}
    for account, entry_path in account_users.items():
        if account not in declared:
            problems.add(
                "ServiceAccount.RoleMissing",
                join_path(entry_path, "spec.kubernetes.serviceAccountName"),
                "names a service account the chart was not given a role for (service_accounts)",
                account,
            )
    for index, account in enumerate(service_accounts):
        if account.name not in account_users:
            problems.add(
                "ServiceAccount.Unused",
                join_path(join_path("serviceAccounts", index), "name"),
                "no model names this service account in spec.kubernetes.serviceAccountName",
                account.name,
            )


class InferenceChart(cdk8s.Chart):
    """Operator custom resources for one namespace, plus the service accounts they reference.

    Validates everything first and raises one :class:`~constructs_lib.validation.ConfigError`
    listing every problem. Objects: optional Namespace, one ServiceAccount per custom identity
    (``.service_accounts``), one custom resource per model (``.resources``, keyed by name; each
    an ``ApiObject`` that takes ``add_json_patch``).
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
    ) -> None:
        problems = Problems()
        if not DNS1123_LABEL.match(namespace) or len(namespace) > 63:
            problems.add("Chart.NamespaceInvalid", "namespace", "must be a DNS-1123 label", namespace)
        entries = [(join_path("models", i), model) for i, model in enumerate(models)]
        for entry_path, model in entries:
            model.validate(entry_path, problems)
        for index, account in enumerate(service_accounts):
            account.validate(join_path("serviceAccounts", index), problems)
        check_across_models(
            entries,
            problems=problems,
            custom_service_accounts_enabled=custom_service_accounts_enabled,
            service_accounts=service_accounts,
        )
        problems.raise_if_any(source=f"InferenceChart {id}")

        # No chart-level namespace: cdk8s would also stamp it on the cluster-scoped Namespace.
        super().__init__(scope, id, disable_resource_name_hashes=True, labels=labels)
        self.namespace_object: cdk8s.ApiObject | None = None
        if create_namespace:
            self.namespace_object = cdk8s.ApiObject(
                self, "namespace", api_version="v1", kind="Namespace", metadata={"name": namespace}
            )
        self.service_accounts: dict[str, cdk8s.ApiObject] = {
            account.name: self._service_account(account, namespace) for account in service_accounts
        }
        self.resources: dict[str, cdk8s.ApiObject] = {}
        for model in models:
            manifest = model.manifest(namespace=namespace)
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
        # Plain ApiObject: the operator creates the pods, so kplus's pod-side defaults do not apply.
        return cdk8s.ApiObject(
            self,
            f"ServiceAccount-{account.name}",
            api_version="v1",
            kind="ServiceAccount",
            metadata={
                "name": account.name,
                "namespace": namespace,
                # Only labelled accounts may be named in spec.kubernetes.serviceAccountName.
                "labels": {USER_ASSIGNABLE_LABEL: "true"},
                "annotations": {IRSA_ROLE_ANNOTATION: account.role_arn},
            },
        )
