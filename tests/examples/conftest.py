"""The consumer (the wheel in a fresh venv) and the examples synthesized with it: each once per test run, whichever
worker asks first (tests/support/consumer.py, tests/support/shared.py)."""

from __future__ import annotations

import pytest

from tests.support.consumer import Consumer, ExamplesSynth, consumer_for, examples_synth_for


@pytest.fixture(scope="session")
def consumer(tmp_path_factory: pytest.TempPathFactory) -> Consumer:
    """One wheel and one venv per test run (tests/support/consumer.py)."""
    return consumer_for(tmp_path_factory)


@pytest.fixture(scope="session")
def examples_synth(tmp_path_factory: pytest.TempPathFactory) -> ExamplesSynth:
    """Every example in both variants, synthesized once per test run with the installed wheel."""
    return examples_synth_for(tmp_path_factory)
