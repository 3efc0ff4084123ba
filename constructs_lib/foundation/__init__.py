"""The foundation: what every other part of the library speaks, and nothing else.

Declared properties and their checks (``props``, ``validation``: one error per mistake, with a stable code and the
property's or the config key's path), naming rules and patterns (``patterns``, ``tags``, ``regions``), values known
only after a deploy (``platform_values``), the operator's version table (``operator_versions``), instance facts
(``instance_store``), what autoscaling reads (``scaling_metrics``), the catalogue of risky choices (``risks``),
cdk-nag acknowledgments (``nag``), small CDK helpers (``cdk_types``, ``helm``, ``log_retention``), the package's
data files (``_package_data``) and the lazy package roots' mechanism (``lazy``).

Layering (tests/unit/test_layering.py): the foundation imports no other part of the library; every other part may
import it.
"""
