"""``python -m tools.props_docs``: rewrite the properties table of every construct page from its props class.

A page marks the table with ``<!-- props:<ClassName> -->`` and ``<!-- /props -->``; what is between them is
:func:`hyperpod_inference_iac.props.props_table` of that class. A config page marks a config file's view of one with
``<!-- config:<ClassName> <key path> -->`` (:func:`~hyperpod_inference_iac.props.config_table`), optionally
``leave_out=<key>,<key>`` for keys the file places elsewhere. The classes are the library's and those of the app's
config model (``platform_config.model``: a construct's options with the app's own keys). ``--check`` only
reports stale pages (exit 1), as ``tests/unit/test_props.py`` does.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import hyperpod_inference_iac
import platform_config.model as platform_model
from hyperpod_inference_iac.props import Props, config_table, props_table

REPO = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(<!-- (?P<kind>props|config):(?P<name>\w+)(?: (?P<base>[^\s=]+))?"
                   r"(?: leave_out=(?P<leave_out>\S+))? -->\n)(?P<table>.*?)(<!-- /(?P=kind) -->)", re.S)


def props_classes() -> dict[str, type[Props]]:
    """Every props class the library exports, and those of the app's config model, by name."""
    return {name: value for module in (hyperpod_inference_iac, platform_model) for name in module.__all__
            if isinstance(value := getattr(module, name), type) and issubclass(value, Props)
            and (module is hyperpod_inference_iac or value.__module__ == module.__name__)}  # (the model's own)


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


def main(argv: list[str]) -> int:
    classes = props_classes()
    stale = stale_pages()
    if "--check" in argv:
        for page in stale:
            print(f"{page.relative_to(REPO)}: the properties table is stale (python -m tools.props_docs)")
        return 1 if stale else 0
    for page in stale:
        page.write_text(render(page.read_text(), classes))
        print(f"rewrote {page.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
