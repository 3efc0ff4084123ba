"""``python -m tools.api_reference``: write docs/api.md, the index of every public name of the library.

One row per name of ``hyperpod_inference_iac.__all__`` and ``hyperpod_inference_iac.charts.__all__``: the name, what
it is (class, construct, props, function, constant), the module that defines it and the first sentence of its
docstring, grouped by the subpackage it lives in (docs/architecture.md), with a link to its construct page where
there is one. ``--check`` only reports a stale page (exit 1), as ``tests/unit/test_api_reference.py`` does.
"""

from __future__ import annotations

import enum
import inspect
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import hyperpod_inference_iac
import hyperpod_inference_iac.charts
from hyperpod_inference_iac.foundation.props import Props

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "api.md"
PARTS = ("foundation", "charts", "security", "cluster", "capture", "serving", "observability")
HEAD = """# API index

Every public name of the library, generated from the code by `python -m tools.api_reference` (a test keeps it
current). Import each from the package root (`from hyperpod_inference_iac import CaptureStorage`) or, for the charts,
from `hyperpod_inference_iac.charts`; the module column says where it is defined. How the parts fit together:
[architecture.md](architecture.md); using the constructs in your own app: [using-the-library.md](using-the-library.md);
each construct's properties: its page under [constructs/](constructs/README.md).
"""


def kind_of(value: Any) -> str:
    if isinstance(value, type):
        if issubclass(value, Props):
            return "props"
        if issubclass(value, enum.Enum):
            return "enumeration"
        if hasattr(value, "PROPS"):
            return "construct"
        return "class"
    if callable(value):
        return "function"
    return "constant"


def summary(value: Any, kind: str) -> str:
    if kind == "constant":
        return f"`{value!r}`" if isinstance(value, (str, int, float)) and len(repr(value)) < 60 else ""
    doc = inspect.getdoc(value) or ""
    if isinstance(value, type) and doc == inspect.getdoc(type(value)):
        doc = ""  # (inherited from the metaclass, says nothing)
    if isinstance(value, type) and doc.startswith(f"{value.__name__}("):
        doc = ""  # (the signature a dataclass writes when it has no docstring)
    first = doc.split("\n\n")[0].replace("\n", " ")
    sentence = re.split(r"(?<=\.)\s", first, maxsplit=1)[0]
    if len(sentence) > 240:
        sentence = sentence[:240].rsplit(" ", 1)[0] + " \N{HORIZONTAL ELLIPSIS}"
    return sentence.replace("|", "\\|")


def construct_pages() -> dict[str, str]:
    """Class name -> its page under docs/constructs/ (a page whose props table or title names it)."""
    pages = {}
    for page in sorted((REPO / "docs" / "constructs").glob("*.md")):
        for name in re.findall(r"^# `?(\w+)`?", page.read_text(), flags=re.MULTILINE)[:1]:
            pages[name] = f"constructs/{page.name}"
    return pages


def rows(module: ModuleType) -> list[tuple[str, str, str, str, str]]:
    """(part, name, kind, defining module, summary) of each public name of ``module``."""
    found = []
    for name in module.__all__:
        value = getattr(module, name)
        defined = getattr(value, "__module__", None) if isinstance(value, type) or callable(value) else None
        defined = defined or module.__name__
        parts = defined.split(".")
        part = parts[1] if len(parts) > 1 and parts[1] in PARTS else "root"
        kind = kind_of(value)
        found.append((part, name, kind, defined, summary(value, kind)))
    return found


def render() -> str:
    pages = construct_pages()
    every = rows(hyperpod_inference_iac) + rows(hyperpod_inference_iac.charts)
    out = [HEAD]
    for part in (*PARTS, "root"):
        mine = sorted((row for row in every if row[0] == part), key=lambda row: row[1].lower())
        if not mine:
            continue
        title = "the package root" if part == "root" else f"`hyperpod_inference_iac.{part}`"
        out += [f"## {title}", "", "| name | kind | defined in | what it is |", "|---|---|---|---|"]
        for _, name, kind, defined, text in mine:
            shown = f"[`{name}`]({pages[name]})" if name in pages else f"`{name}`"
            out.append(f"| {shown} | {kind} | `{defined}` | {text} |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not PAGE.exists() or PAGE.read_text() != text:
            print("docs/api.md is stale: python -m tools.api_reference")
            return 1
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
