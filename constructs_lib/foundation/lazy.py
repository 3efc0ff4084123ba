"""Lazy package roots (PEP 562): a public name is imported from its module when it is first used.

``hyperpod_inference_iac`` and ``hyperpod_inference_iac.charts`` re-export some 250 names from 40 modules; imported
eagerly, they load aws-cdk-lib, cdk8s and cdk-nag (a Node.js kernel through jsii, about 3 s of CPU) into every
process that imports any module of the package, the command modules that use none of them
(``capture_table_ops``, ``preflight``) among them. A lazy root imports nothing until a name is read.

One source for the names: the root keeps its re-exports as ordinary ``from module import name`` statements under
``if TYPE_CHECKING:``, where mypy and IDEs read them; :func:`lazy_exports` reads the same statements from the root's
own source (``ast``, once, at import) and builds the name -> module map from them, so no second list is kept by
hand. The root's literal ``__all__`` (what ``import *`` and mypy's re-export rules read) must name the same names:
tests/unit/test_lazy_roots.py checks it.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping
from typing import Any


def exported_modules(source: str) -> dict[str, tuple[str, str]]:
    """Public name -> (the module it comes from, its name there), read from the ``from m import a, b as c``
    statements under the module-level ``if TYPE_CHECKING:`` of ``source`` (a package root's text)."""
    found: dict[str, tuple[str, str]] = {}
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.If) and _is_type_checking(node.test)):
            continue
        for statement in node.body:
            if isinstance(statement, ast.ImportFrom) and statement.module and not statement.level:
                for alias in statement.names:
                    found[alias.asname or alias.name] = (statement.module, alias.name)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def lazy_exports(
    name: str,
    namespace: dict[str, Any],
    *,
    computed: Mapping[str, Callable[[], Any]] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the package root ``name`` (whose globals are ``namespace``).

    A re-exported name is imported from its module on first access and stored in ``namespace``, so the next access
    is a plain global (a construct class has its real signature from its own module: ``props.real_signature``).
    ``computed`` names (``__version__``) are called on every access. Any other name that is a submodule of the
    package is imported (``pkg.charts`` works after a bare ``import pkg``, as with eager imports)."""
    module = sys.modules[name]
    spec = module.__spec__
    loader = spec.loader if spec is not None else None
    source = loader.get_source(name) if loader is not None and hasattr(loader, "get_source") else None
    if source is None:
        raise ImportError(f"{name}: the package root's source is needed to read its lazy exports")
    origins = exported_modules(source)
    extra = dict(computed or {})

    def __getattr__(attribute: str) -> Any:
        origin = origins.get(attribute)
        if origin is not None:
            value = getattr(importlib.import_module(origin[0]), origin[1])
            namespace[attribute] = value
            return value
        if attribute in extra:
            return extra[attribute]()
        if not attribute.startswith("_") and importlib.util.find_spec(f"{name}.{attribute}") is not None:
            return importlib.import_module(f"{name}.{attribute}")
        raise AttributeError(f"module {name!r} has no attribute {attribute!r}")

    def __dir__() -> list[str]:
        return sorted({*namespace, *origins, *extra})

    return __getattr__, __dir__
