"""The test harness itself: ``xdist_group`` marks keep a group on one worker (tests/support/xdist_groups.py), and
what is built once per run is built once (tests/support/shared.py), under ``pytest -n 2 --dist loadgroup`` as
``make test`` runs it. Each case runs a small suite of its own in a pytest of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path

import pytest

from tests.support.synth import REPO

pytestmark = pytest.mark.slow  # pytest in a process of its own, with two workers

CONFTEST = '''
import json, os, pathlib, pytest

pytest_plugins = {plugins!r}


def pytest_collection_modifyitems(items):  # a folder-wide group added by a conftest, as tests/platform had
    for item in items:
        if item.path.name == "test_by_conftest.py":
            item.add_marker(pytest.mark.xdist_group("by-conftest"))


@pytest.fixture(autouse=True)
def record(request):
    yield
    with open(os.environ["RECORD"], "a") as out:
        out.write(json.dumps([request.node.name, os.environ.get("PYTEST_XDIST_WORKER")]) + "\\n")
'''

TESTS = {
    "test_by_mark.py": '''
        import time, pytest
        pytestmark = pytest.mark.xdist_group("by-mark")

        @pytest.mark.parametrize("n", range(6))
        def test_marked(n):
            time.sleep(0.1)
    ''',
    "test_by_conftest.py": '''
        import time, pytest

        @pytest.mark.parametrize("n", range(6))
        def test_grouped_by_conftest(n):
            time.sleep(0.1)
    ''',
    "test_free.py": '''
        import time, pytest

        @pytest.mark.parametrize("n", range(12))
        def test_free(n):
            time.sleep(0.1)
    ''',
    "test_built_once.py": '''
        import pytest
        from tests.support.shared import built_once

        def build(folder):
            (folder / "built-by").write_text(__import__("os").environ["PYTEST_XDIST_WORKER"])
            with open(__import__("os").environ["BUILDS"], "a") as out:
                out.write("built\\n")

        @pytest.mark.parametrize("n", range(2))
        @pytest.mark.xdist_group("once-a")
        def test_uses_it_on_one_worker(n, tmp_path_factory):
            assert (built_once(tmp_path_factory, "thing", build) / "built-by").read_text()

        @pytest.mark.parametrize("n", range(2))
        @pytest.mark.xdist_group("once-b")
        def test_uses_it_on_the_other(n, tmp_path_factory):
            assert (built_once(tmp_path_factory, "thing", build) / "built-by").read_text()
    ''',
}


def run_suite(tmp_path: Path, plugins: list[str]) -> tuple[dict[str, set[str]], int]:
    """Which workers ran each test function (parameters merged), and how many times ``thing`` was built."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(CONFTEST.format(plugins=plugins))
    for name, body in TESTS.items():
        (suite / name).write_text(textwrap.dedent(body))
    record, builds = tmp_path / "record.jsonl", tmp_path / "builds"
    env = {**os.environ, "PYTHONPATH": str(REPO), "RECORD": str(record), "BUILDS": str(builds)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider", "-q",
         "--rootdir", str(suite), "--basetemp", str(tmp_path / "basetemp"), str(suite)],
        cwd=suite, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    workers: dict[str, set[str]] = defaultdict(set)
    for line in record.read_text().splitlines():
        name, worker = json.loads(line)
        workers[name.split("[")[0]].add(worker)
    return workers, len(builds.read_text().splitlines())


def test_a_group_runs_on_one_worker_and_a_shared_build_happens_once(tmp_path: Path) -> None:
    workers, builds = run_suite(tmp_path, ["tests.support.xdist_groups"])
    assert set().union(*workers.values()) == {"gw0", "gw1"}  # both workers ran tests
    assert len(workers["test_marked"]) == 1, workers
    assert len(workers["test_grouped_by_conftest"]) == 1, workers
    assert workers["test_uses_it_on_one_worker"] != workers["test_uses_it_on_the_other"]  # two workers need it...
    assert builds == 1  # ...and it was built once


def test_the_control_without_the_plugin_the_marks_are_ignored(tmp_path: Path) -> None:
    """pytest 9.2 with pytest-xdist 3.8: without the plugin the groups are split across workers. Should this
    fail, xdist groups by itself again and tests/support/xdist_groups.py can go."""
    workers, _ = run_suite(tmp_path, [])
    assert len(workers["test_marked"]) == 2 or len(workers["test_grouped_by_conftest"]) == 2, workers
