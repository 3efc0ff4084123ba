"""The library's layout is its architecture, and imports run one way (docs/architecture.md).

Layers, lowest first: ``foundation`` <- ``charts`` <- ``security`` <- ``cluster`` | ``capture`` | ``serving`` <-
``observability`` <- the package root and its command modules. A module may import its own subpackage and any
lower layer; the three middle parts never import each other. No import cycle, type-only imports (under
``TYPE_CHECKING``) and imports inside functions counted. The runtime code the constructs deploy (the capture
processor and key rotation Lambdas, the capture sidecar image) imports no CDK, cdk8s or jsii module and nothing of
the library.

The graph is read from the sources with ``ast`` (nothing is imported), so the test also holds for a module no test
imports; the control tests feed the same checks a graph with one edge added and expect exactly that edge named.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "hyperpod_inference_iac"
LAYERS: dict[str, int] = {
    "foundation": 0, "charts": 1, "security": 2, "cluster": 3, "capture": 3, "serving": 3, "observability": 4,
}
TOP = 5  # the package root and its command modules (capture_table_ops, weights_manifest, preflight, ...)
# deployed code: its own top-level names at run time
RUNTIME = {"capture_processor", "api_key_rotation", "sidecar"}
FORBIDDEN_AT_RUNTIME = ("aws_cdk", "constructs", "cdk8s", "cdk8s_plus_34", "jsii", PACKAGE)


def _package_dirs() -> dict[str, Path]:
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {package: REPO / folder for package, folder in setuptools["package-dir"].items()}


def library_modules() -> dict[str, Path]:
    """Every module of the wheel by its import name (the package-dir mapping of pyproject.toml)."""
    modules: dict[str, Path] = {}
    for package, folder in _package_dirs().items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join((package, *parts))] = path
    return modules


def imports_of(path: Path, module: str) -> Iterator[str]:
    """Every module ``path`` imports (absolute names; relative imports resolved against ``module``)."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)  # `from pkg import module`


def import_graph(modules: Mapping[str, Path]) -> dict[str, set[str]]:
    """Library module -> the library modules it imports (a name that is an attribute, not a module, is dropped)."""
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        graph[module] = {name for name in imports_of(path, module) if name in modules and name != module}
    return graph


def part_of(module: str) -> str | None:
    """The library part (subpackage) a module belongs to; None for the root and its command modules."""
    parts = module.split(".")
    if parts[0] != PACKAGE or len(parts) < 2:
        return None
    return parts[1] if parts[1] in LAYERS else ("runtime" if parts[1] in RUNTIME else None)


def layer_violations(graph: Mapping[str, set[str]]) -> list[str]:
    found = []
    for module, imported in sorted(graph.items()):
        here = part_of(module)
        if here == "runtime":
            continue
        for other in sorted(imported):
            there = part_of(other)
            if there in (None, "runtime") or there == here:
                if there is None and here is not None:
                    found.append(f"{module} -> {other}: the package root or a command module, above every part")
                continue
            mine = TOP if here is None else LAYERS[here]
            if LAYERS[there] > mine or (LAYERS[there] == mine):
                found.append(f"{module} ({here or 'root'}) -> {other} ({there}): imports run the other way")
    return found


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def without_package_roots(graph: Mapping[str, set[str]]) -> dict[str, set[str]]:
    """The graph less the edges a package's ``__init__`` re-export makes: importing ``a.b.c`` runs ``a.b``'s
    ``__init__``, and a package that re-exports its modules would otherwise be in a cycle with each of them."""
    packages = {module for module in graph if any(other.startswith(module + ".") for other in graph)}
    return {module: {other for other in imported if other not in packages}
            for module, imported in graph.items() if module not in packages}


def runtime_leaks(modules: Mapping[str, Path]) -> list[str]:
    found = []
    for module, path in sorted(modules.items()):
        if part_of(module) != "runtime":
            continue
        own = ".".join(module.split(".")[:2])  # its relative imports resolve under the wheel's name
        for top in sorted({name.split(".")[0] for name in imports_of(path, module) if not name.startswith(own)}):
            if top in FORBIDDEN_AT_RUNTIME:
                found.append(f"{module} imports {top}")
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(library_modules())


def test_every_library_module_is_in_a_part_or_the_root() -> None:
    folders = {path.parent.name for path in library_modules().values()}
    lib = _package_dirs()[PACKAGE]
    flat = sorted(p.stem for p in lib.glob("*.py") if p.stem != "__init__")
    assert folders >= set(LAYERS) - {"charts"}
    # The root holds only command modules (each runs as `python -m hyperpod_inference_iac.<name>`).
    for name in flat:
        assert 'if __name__ == "__main__"' in (lib / f"{name}.py").read_text(), f"{name}.py: put it in a part"


def test_imports_run_one_way(graph: dict[str, set[str]]) -> None:
    assert layer_violations(graph) == []


def test_no_import_cycle(graph: dict[str, set[str]]) -> None:
    assert cycles(without_package_roots(graph)) == []


def test_runtime_code_imports_no_cdk_and_nothing_of_the_library() -> None:
    assert runtime_leaks(library_modules()) == []


# -- controls: the same checks find an edge that breaks them ------------------------------------------------------
def test_control_an_upward_import_is_named(graph: dict[str, set[str]]) -> None:
    broken = {module: set(imported) for module, imported in graph.items()}
    broken[f"{PACKAGE}.foundation.props"].add(f"{PACKAGE}.capture.capture_storage")
    broken[f"{PACKAGE}.cluster.network"].add(f"{PACKAGE}.serving.gitops")
    assert layer_violations(broken) == [
        f"{PACKAGE}.cluster.network (cluster) -> {PACKAGE}.serving.gitops (serving): imports run the other way",
        f"{PACKAGE}.foundation.props (foundation) -> {PACKAGE}.capture.capture_storage (capture): imports run the "
        "other way",
    ]


def test_control_a_cycle_is_named(graph: dict[str, set[str]]) -> None:
    broken = {module: set(imported) for module, imported in graph.items()}
    broken[f"{PACKAGE}.foundation.patterns"].add(f"{PACKAGE}.foundation.validation")  # validation imports patterns
    found = cycles(without_package_roots(broken))
    assert [f"{PACKAGE}.foundation.patterns", f"{PACKAGE}.foundation.validation"] in found
    assert len(found) == len(cycles(without_package_roots(graph))) + 1


def test_control_a_cdk_import_in_runtime_code_is_named(tmp_path: Path) -> None:
    leaky = tmp_path / "leaky.py"
    leaky.write_text("import json\nfrom aws_cdk import Stack\n")
    assert runtime_leaks({f"{PACKAGE}.sidecar.leaky": leaky}) == [f"{PACKAGE}.sidecar.leaky imports aws_cdk"]
