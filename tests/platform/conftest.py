"""One real `cdk synth` per test session, shared by every platform test.

All tests in this folder run in one xdist group, so the app is synthesized once, not once
per worker."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.synth import Assembly, run_cdk_synth


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(item.fspath).is_relative_to(here):
            item.add_marker(pytest.mark.xdist_group("cdk-synth"))


@pytest.fixture(scope="session")
def assembly(tmp_path_factory: pytest.TempPathFactory) -> Assembly:
    outdir = tmp_path_factory.mktemp("cdk.out")
    result = run_cdk_synth(outdir)
    assert result.returncode == 0, f"cdk synth failed:\n{result.stdout}\n{result.stderr}"
    return Assembly(outdir)
