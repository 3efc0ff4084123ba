"""``python -m tools.props_docs``: rewrite the properties table of every construct page, and the docstring of
every construct's constructor, from its props class.

A page marks the table with ``<!-- props:<ClassName> -->`` and ``<!-- /props -->``; what is between them is
:func:`hyperpod_inference_iac.foundation.props.props_table` of that class. A config page marks a config file's
view of one with ``<!-- config:<ClassName> <key path> -->``
(:func:`~hyperpod_inference_iac.foundation.props.config_table`), optionally ``leave_out=<key>,<key>`` for keys
the file places elsewhere. The classes are the library's (its charts' included) and those of the app's config model
(``platform_config.model``: a construct's options with the app's own keys).

Each exported construct with a ``PROPS`` class gets its ``__init__`` docstring written in its source file: one
``:param name:`` line per property (its meaning and default), so ``help()`` and an editor's hover show what a
property does where the consumer types it. ``--check`` only reports what is stale (exit 1), as
``tests/unit/test_props.py`` does.
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
import textwrap
from pathlib import Path

import hyperpod_inference_iac
import hyperpod_inference_iac.charts as charts
import platform_config.model as platform_model
from hyperpod_inference_iac.foundation.props import Props, config_table, default_text, info_of, props_table

REPO = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(<!-- (?P<kind>props|config):(?P<name>\w+)(?: (?P<base>[^\s=]+))?"
                   r"(?: leave_out=(?P<leave_out>\S+))? -->\n)(?P<table>.*?)(<!-- /(?P=kind) -->)", re.S)


def props_classes() -> dict[str, type[Props]]:
    """Every props class the library exports (its charts' too: the gateway's), and those of the app's config model,
    by name."""
    return {name: value for module in (hyperpod_inference_iac, charts, platform_model) for name in module.__all__
            if isinstance(value := getattr(module, name), type) and issubclass(value, Props)
            and (module is not platform_model or value.__module__ == module.__name__)}  # (the model's own)


def render(text: str, classes: dict[str, type[Props]]) -> str:
    def table(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in classes:
            raise SystemExit(f"no props class {name}")
        cls = classes[name]
        leave_out = match["leave_out"].split(",") if match["leave_out"] else ()
        table = props_table(cls) if match["kind"] == "props" else config_table(cls, match["base"], leave_out=leave_out)
        return f"{match.group(1)}{table}\n{match.group(7)}"

    return BLOCK.sub(table, text)


def stale_pages() -> list[Path]:
    classes = props_classes()
    return [page for page in sorted((REPO / "docs").rglob("*.md")) if render(page.read_text(), classes) !=
            page.read_text()]


DOCSTRING_HEAD = "Create the construct. Its properties (:class:`{props}`, kept as ``self.props``):"
WIDTH = 120


def documented_constructs() -> list[type]:
    """Every exported class with a ``PROPS`` class (the constructs whose constructor takes its properties)."""
    found = []
    for name in hyperpod_inference_iac.__all__:
        value = getattr(hyperpod_inference_iac, name)
        props = getattr(value, "PROPS", None)
        if isinstance(value, type) and isinstance(props, type) and issubclass(props, Props) and "__init__" in vars(
                value):
            found.append(value)
    return found


def constructor_docstring(cls: type, indent: str) -> str:
    """The ``__init__`` docstring of a construct: a ``:param:`` entry per property, wrapped to the line width."""
    props: type[Props] = cls.PROPS  # type: ignore[attr-defined]
    lines = [f'{indent}"""{DOCSTRING_HEAD.format(props=props.__name__)}', ""]
    for field in props.fields():
        text = f":param {field.name}: {info_of(field).doc} Default: {default_text(field).replace('`', '``')}."
        lines += textwrap.wrap(text, WIDTH - len(indent), initial_indent=indent, subsequent_indent=indent + "    ",
                               break_on_hyphens=False, break_long_words=False)
    lines.append(f'{indent}"""')
    if "\\" in "\n".join(lines):  # a pattern in a property's doc: keep its backslashes as written
        lines[0] = lines[0].replace('"""', 'r"""', 1)
    return "\n".join(lines)


def render_docstrings(path: Path, classes: list[type]) -> str:
    """The source of ``path`` with each of ``classes``' ``__init__`` docstrings as :func:`constructor_docstring`
    writes it (inserted where there is none)."""
    text = path.read_text()
    lines = text.split("\n")
    edits: list[tuple[int, int, str]] = []  # (first line, line after, new text), 0-based
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef) or node.name not in {cls.__name__ for cls in classes}:
            continue
        cls = next(c for c in classes if c.__name__ == node.name)
        init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        if init is None:
            continue
        first = init.body[0]
        indent = " " * first.col_offset
        new = constructor_docstring(cls, indent)
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value,
                                                                                                 str):
            edits.append((first.lineno - 1, first.end_lineno or first.lineno, new))
        else:
            edits.append((first.lineno - 1, first.lineno - 1, new))
    for start, end, new in sorted(edits, reverse=True):
        lines[start:end] = new.split("\n")
    return "\n".join(lines)


def stale_sources() -> list[Path]:
    classes = documented_constructs()
    by_file: dict[Path, list[type]] = {}
    for cls in classes:
        by_file.setdefault(Path(inspect.getfile(cls)).resolve(), []).append(cls)
    return [path for path, in_file in sorted(by_file.items()) if render_docstrings(path, in_file) != path.read_text()]


def main(argv: list[str]) -> int:
    classes = props_classes()
    stale = stale_pages()
    sources = stale_sources()
    if "--check" in argv:
        for page in stale:
            print(f"{page.relative_to(REPO)}: the properties table is stale (python -m tools.props_docs)")
        for source in sources:
            print(f"{source.relative_to(REPO)}: a constructor docstring is stale (python -m tools.props_docs)")
        return 1 if stale or sources else 0
    for page in stale:
        page.write_text(render(page.read_text(), classes))
        print(f"rewrote {page.relative_to(REPO)}")
    constructs = documented_constructs()
    for source in sources:
        in_file = [cls for cls in constructs if Path(inspect.getfile(cls)).resolve() == source]
        source.write_text(render_docstrings(source, in_file))
        print(f"rewrote {source.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
