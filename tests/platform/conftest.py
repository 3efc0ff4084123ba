"""The default platform's real `cdk synth`, once per test run, shared by every platform test (and by the rehearsal):
tests/support/synth.py ``default_assembly``, built by whichever xdist worker asks first, the other one waiting."""

from __future__ import annotations

import pytest

from tests.support.synth import Assembly, default_assembly, reason_refs


@pytest.fixture(scope="session")
def assembly(tmp_path_factory: pytest.TempPathFactory) -> Assembly:
    return default_assembly(tmp_path_factory)


@pytest.fixture(scope="session")
def acknowledgment_refs(assembly: Assembly) -> dict[tuple[str, str], str]:
    """How the template snapshots refer to each acknowledgment's reason (tests/support/synth.py)."""
    return reason_refs(assembly.templates.values())
