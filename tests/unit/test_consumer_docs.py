"""What a consumer sees where they work: each construct's real signature (``help()``, ``inspect``), each property's
meaning and default in the constructor's docstring (what an editor shows on hover), every public name in the API
index, and all of it current with the code (issue 30, deliverable 6)."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import hyperpod_inference_iac
import hyperpod_inference_iac.charts
from tools import api_reference, props_docs

CONSTRUCTS = props_docs.documented_constructs()


def test_there_are_constructs_to_document() -> None:
    assert len(CONSTRUCTS) >= 20 and hyperpod_inference_iac.CaptureStorage in CONSTRUCTS


@pytest.mark.parametrize("construct", CONSTRUCTS, ids=lambda c: c.__name__)
def test_the_signature_is_the_constructor_s_with_the_props_defaults(construct: type) -> None:
    """jsii's metaclass made it ``(*args, **kwargs)``; the package root gives each construct its real one."""
    parameters = inspect.signature(construct).parameters
    assert "self" not in parameters and "kwargs" not in parameters
    keywords = {name: p for name, p in parameters.items() if name not in ("scope", "id")}  # (an aspect has neither)
    fields = {field.name: field for field in construct.PROPS.fields()}  # type: ignore[attr-defined]
    assert set(keywords) == set(fields)
    for name, field in fields.items():
        if field.default is not dataclasses.MISSING:
            assert keywords[name].default == field.default, name


@pytest.mark.parametrize("construct", CONSTRUCTS, ids=lambda c: c.__name__)
def test_help_shows_every_property_with_its_meaning(construct: type) -> None:
    doc = inspect.getdoc(construct.__init__) or ""
    for field in construct.PROPS.fields():  # type: ignore[attr-defined]
        assert f":param {field.name}:" in doc, field.name


def test_the_docstrings_and_pages_are_current() -> None:
    assert props_docs.stale_sources() == [], "run: python -m tools.props_docs"


def test_every_public_name_is_in_the_api_index() -> None:
    page = api_reference.PAGE.read_text()
    for module in (hyperpod_inference_iac, hyperpod_inference_iac.charts):
        missing = [name for name in module.__all__ if f"`{name}`" not in page]
        assert missing == [], f"{module.__name__}: run python -m tools.api_reference"
    assert api_reference.main(["--check"]) == 0, "docs/api.md is stale: python -m tools.api_reference"
