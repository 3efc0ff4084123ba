"""Every public construct and chart has its page, and the page names every constructor parameter: a
parameter added without its documentation fails here."""

from __future__ import annotations

import inspect
import re

import pytest
from constructs import Construct

import hyperpod_inference_iac
from hyperpod_inference_iac import charts
from tests.support.synth import REPO


def _page_name(name: str) -> str:
    """CaptureStorage -> capture-storage, HyperPodCluster -> hyperpod-cluster (the pages' file names)."""
    name = name.replace("HyperPod", "Hyperpod").replace("GitHub", "Github")
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "-", name).lower()
    return words


def _constructs() -> list[tuple[str, type]]:
    found = []
    for module, folder in ((hyperpod_inference_iac, "constructs"), (charts, "charts")):
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.isclass(value) and issubclass(value, Construct):
                found.append((folder, value))
    return found


PAGES_OF_CHARTS = {"InferenceChart": "inference-chart", "PortableModelServerChart": "portable-model-server-chart"}


@pytest.mark.parametrize(("folder", "cls"), _constructs(), ids=lambda v: getattr(v, "__name__", v))
def test_each_construct_page_names_every_parameter(folder: str, cls: type) -> None:
    page_name = PAGES_OF_CHARTS.get(cls.__name__, _page_name(cls.__name__))
    page = REPO / "docs" / folder / f"{page_name}.md"
    assert page.is_file(), f"{cls.__name__} has no page {page.relative_to(REPO)}"
    text = page.read_text()
    parameters = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "scope", "id")]
    missing = [p for p in parameters if f"`{p}`" not in text]
    assert not missing, f"{page.relative_to(REPO)} does not name {missing}"
