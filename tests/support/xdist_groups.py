"""``xdist_group`` marks that really group tests on one worker under ``pytest -n 2 --dist loadgroup``.

pytest-xdist (3.8) tells its scheduler a test's group through the test's node id: its worker appends ``@group``
by setting ``item._nodeid``. pytest 9.2 keeps node ids structured (``item._id``, a ``NodeId``) and no longer reads
``_nodeid``: the suffix never reached the scheduler, every mark was ignored, and each group's shared set-up ran
once per worker. This plugin appends the suffix where pytest 9.2 reads it, on the workers only, after every
conftest has added its marks (``trylast``); an id that already ends with its suffix is left alone, so it stays
right should xdist do it again itself. tests/unit/test_test_harness.py proves the scheduler honours the groups.
"""

from __future__ import annotations

import pytest
from _pytest.nodeid import NodeId


def group_suffix(item: pytest.Item) -> str:
    """``@name`` (``@a_b`` for several, as xdist writes them), or "" for a test in no group."""
    names = {str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
             for mark in item.iter_markers("xdist_group")}
    return f"@{'_'.join(sorted(names))}" if names else ""


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not getattr(config.option, "loadgroup", False):  # xdist sets it on its workers under --dist loadgroup
        return
    for item in items:
        suffix = group_suffix(item)
        if not suffix or item.nodeid.endswith(suffix):
            continue
        if not isinstance(getattr(item, "_id", None), NodeId):
            raise pytest.UsageError("tests/support/xdist_groups.py: pytest keeps node ids elsewhere now; "
                                    "xdist_group marks would be ignored (see its docstring)")
        item._id = NodeId.parse(item.nodeid + suffix)
