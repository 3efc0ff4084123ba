"""The package roots are lazy (PEP 562, foundation/lazy.py): the command modules start without the CDK, and every
public name still resolves, for ``import *``, ``dir()`` and the type checker alike (issue 30, item 2).

The import check runs in a fresh interpreter (this one has long loaded the CDK); no test here measures time:
the figures are in docs/testing.md with their commands.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import textwrap
from types import ModuleType

import pytest

import hyperpod_inference_iac
import hyperpod_inference_iac.charts
from hyperpod_inference_iac.foundation.lazy import exported_modules

ROOTS = [hyperpod_inference_iac, hyperpod_inference_iac.charts]
CDK_MODULES = ("aws_cdk", "jsii", "cdk8s", "cdk8s_plus_", "cdk_nag", "constructs")

# A fresh interpreter per import, so that one module's imports do not hide another's.
PROBE = textwrap.dedent("""
    import importlib, json, sys
    for statement in sys.argv[1:]:
        exec(statement)
    print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0].startswith({prefixes!r}))))
""").format(prefixes=CDK_MODULES)


def loaded_after(*statements: str) -> list[str]:
    result = subprocess.run([sys.executable, "-c", PROBE, *statements], capture_output=True, text=True, timeout=300,
                            check=True)
    modules: list[str] = json.loads(result.stdout.splitlines()[-1])
    return modules


@pytest.mark.slow  # (a Python process each)
@pytest.mark.parametrize("module", ["preflight", "capture_table_ops", "weights_manifest", "charts.crd_schema"])
def test_the_command_modules_load_no_cdk(module: str) -> None:
    """preflight reaches the charts' CRD schemas through ``cluster.prose_fields``, weights_manifest the NVMe cache's
    chart module: with eager roots that was all of cdk8s and, through the package root, aws-cdk-lib, cdk-nag and the
    jsii kernel; the foundation's token checks import aws-cdk-lib only once something else has."""
    loaded = loaded_after(f"import hyperpod_inference_iac.{module}")
    assert loaded == [], f"hyperpod_inference_iac.{module} loads {loaded[:8]}"


@pytest.mark.slow
def test_control_a_construct_of_the_root_loads_the_cdk() -> None:
    """The same probe sees the CDK when it is there (and the root alone does not load it)."""
    assert loaded_after("import hyperpod_inference_iac") == []
    loaded = loaded_after("import hyperpod_inference_iac", "hyperpod_inference_iac.CaptureStorage")
    assert {"aws_cdk", "jsii", "constructs"} <= set(loaded)


@pytest.mark.parametrize("root", ROOTS, ids=lambda m: m.__name__)
def test_all_names_the_type_checking_block_and_nothing_else(root: ModuleType) -> None:
    """``__all__`` (what ``import *`` and mypy read) and the ``TYPE_CHECKING`` imports (where the lazy map comes
    from) are the same names: a name added to one only fails here, not in a consumer's import."""
    assert root.__spec__ is not None and root.__spec__.loader is not None
    source = root.__spec__.loader.get_source(root.__name__)  # type: ignore[attr-defined]
    origins = exported_modules(source)
    assert sorted(origins) == sorted(root.__all__)
    assert len(root.__all__) == len(set(root.__all__))


@pytest.mark.parametrize("root", ROOTS, ids=lambda m: m.__name__)
def test_every_public_name_resolves_and_is_listed(root: ModuleType) -> None:
    listed = set(dir(root))
    for name in root.__all__:
        value = getattr(root, name)
        assert name in listed
        defined_in = getattr(value, "__module__", None)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert defined_in is not None and defined_in.startswith(root.__name__.split(".")[0]), name


@pytest.mark.parametrize("root", ROOTS, ids=lambda m: m.__name__)
def test_import_star_gives_every_public_name(root: ModuleType) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {root.__name__} import *", namespace)
    assert set(root.__all__) <= set(namespace)
    assert all(namespace[name] is getattr(root, name) for name in root.__all__)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'CaptureStorag'"):
        hyperpod_inference_iac.CaptureStorag  # noqa: B018 (the access under test)
    assert not hasattr(hyperpod_inference_iac.charts, "_private")


def test_version_and_submodules_as_with_eager_imports() -> None:
    assert isinstance(hyperpod_inference_iac.__version__, str) and hyperpod_inference_iac.__version__[0].isdigit()
    assert getattr(hyperpod_inference_iac, "serving").__name__ == "hyperpod_inference_iac.serving"  # noqa: B009


def test_a_construct_resolved_from_the_root_has_its_real_signature() -> None:
    """``props.real_signature`` gives each construct class its constructor's signature (tests/unit/test_consumer_docs.py
    checks each construct's parameters)."""
    parameters = inspect.signature(hyperpod_inference_iac.CaptureTables).parameters
    assert "kwargs" not in parameters and list(parameters)[:2] == ["scope", "id"]


@pytest.mark.slow  # (a Python process)
def test_every_construct_has_its_real_signature_from_its_own_module() -> None:
    """Imported from the module that defines it, before the root ever resolves it (a fresh process): what an IDE or
    ``help()`` shows a consumer who imports ``hyperpod_inference_iac.capture.capture_tables`` directly."""
    check = textwrap.dedent("""
        import importlib, inspect, sys
        from hyperpod_inference_iac.foundation.lazy import exported_modules
        root = importlib.util.find_spec("hyperpod_inference_iac")
        origins = exported_modules(root.loader.get_source("hyperpod_inference_iac"))
        wrong = []
        for name, (module, attribute) in sorted(origins.items()):
            value = getattr(importlib.import_module(module), attribute)
            if isinstance(value, type) and hasattr(value, "PROPS"):
                parameters = list(inspect.signature(value).parameters)
                if "kwargs" in parameters or "args" in parameters:
                    wrong.append(f"{module}.{attribute}: {parameters}")
        assert "CaptureTables" not in vars(sys.modules["hyperpod_inference_iac"]), "the root resolved it"
        print("\\n".join(wrong) or "ok")
    """)
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok", result.stdout


def test_exported_modules_reads_only_the_type_checking_block() -> None:
    source = textwrap.dedent("""
        from typing import TYPE_CHECKING
        import typing
        from pkg.eager import not_exported
        if TYPE_CHECKING:
            from pkg.a import One, two
            from pkg.b import Three as Four
        if typing.TYPE_CHECKING:
            from pkg.c import five
        if OTHER:
            from pkg.d import six
    """)
    assert exported_modules(source) == {
        "One": ("pkg.a", "One"), "two": ("pkg.a", "two"), "Four": ("pkg.b", "Three"), "five": ("pkg.c", "five")}


@pytest.mark.slow
def test_the_token_check_loads_the_cdk_only_for_what_may_be_a_token() -> None:
    """``is_unresolved`` of plain values leaves aws-cdk-lib unloaded; a string that looks like a token is still judged
    by aws-cdk-lib (imported then), as a config value written as ``${Token[...]}`` always was."""
    check = "from hyperpod_inference_iac.foundation.validation import is_unresolved as u"
    plain = f"{check}; assert not (u('abc') or u(1.5) or u(['a', 2.0]) or u(3))"
    assert loaded_after(plain) == []
    assert "aws_cdk" in loaded_after(f"{check}; assert u('${{Token[TOKEN.1]}}') and u(['#{{Token[TOKEN.2]}}'])")
