"""Shared fixtures. Every test runs with fake credentials and a fixed region, so nothing can
reach a real AWS account by accident.

Which tests are ``slow`` (left out of ``make test-fast``) is decided here, in one place (docs/testing.md): every
test in a folder that runs the CDK CLI, a venv or servers throughout, and every test that uses a fixture starting
a server or needing the CLI's synth; single tests elsewhere that start such a process carry the mark themselves.
A test without the mark that still starts one fails (``fast_tests_start_no_heavy_process``), so the fast loop
stays fast as tests are added. Slow tests are also collected first, so that under xdist the long ones start
early and the many short ones fill the workers at the end."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.s3server import moto_server

# xdist_group marks that really group (pytest 9.2 with pytest-xdist 3.8 ignored them): tests/support/xdist_groups.py
pytest_plugins = ["tests.support.xdist_groups"]

# Set at import time (before any boto3 client or jsii process starts).
os.environ.update(
    {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "CDK_DISABLE_VERSION_CHECK": "true",
    }
)
os.environ.pop("AWS_PROFILE", None)

TESTS = Path(__file__).parent
# Folders whose every test runs the CDK CLI, builds a venv or talks to servers.
SLOW_FOLDERS = {
    "examples": "the wheel, a fresh venv and the CDK CLI",
    "platform": "the CDK CLI's synth of the default platform",
    "rehearsal": "the CDK CLI's synth, moto's server, sidecar processes, the AWS CLI",
}
# Fixtures that start a server or need the CLI's synth: any test using one (directly or not) is slow.
SLOW_FIXTURES = {
    "moto_endpoint": "moto's server on loopback",
    "standin_port": "the stand-in model server",
    "start_sidecar": "capture sidecar processes",
    "start_module_sidecar": "capture sidecar processes",
    "store_url": "redis-server (the budget store) on loopback",
    "assembly": "the CDK CLI's synth",
}


def is_slow(item: pytest.Item) -> bool:
    folder = Path(item.path).relative_to(TESTS).parts[0]
    return folder in SLOW_FOLDERS or bool(SLOW_FIXTURES.keys() & set(getattr(item, "fixturenames", ())))


# Fixtures built once per run (tests/support/shared.py) and the folders whose tests need them: the xdist controller
# starts building them as soon as a worker has collected such a test.
SHARED_BUILDS = {"assembly": ("tests/platform/", "tests/rehearsal/", "tests/review/test_review.py"),
                 "consumer": ("tests/examples/",), "examples_synth": ("tests/examples/",)}


def run_order(item: pytest.Item) -> int:
    """Slow tests first, those that need no shared build before those that do (which the controller is building
    meanwhile), then the many short ones, which even out the workers at the end."""
    if item.get_closest_marker("slow") is None:
        return 2
    return 1 if SHARED_BUILDS.keys() & set(getattr(item, "fixturenames", ())) else 0


@pytest.hookimpl(tryfirst=True)  # before -m deselects by mark
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if not item.get_closest_marker("slow") and is_slow(item):
            item.add_marker(pytest.mark.slow)
    # Stable: each module's tests stay together and in their order. The scheduler keeps this order (below).
    items.sort(key=run_order)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """In-process apps whose CloudFormation validation could only warn are built without it (once aws-cdk-lib is
    imported: the test modules that build apps import it at collection): tests/support/cdk_validation.py."""
    from tests.support.cdk_validation import validate_only_where_it_can_fail

    validate_only_where_it_can_fail()


def pytest_configure(config: pytest.Config) -> None:
    # xdist's scheduler would put its groups first, the largest first (--loadscope-reorder, its default): keep
    # run_order instead.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection built (the test modules, the libraries, aws-cdk-lib's and cdk8s's Python classes: most of a
    worker's objects) lives to the end of the run: ``gc.freeze`` leaves it out of every later garbage collection,
    which then walks only what the tests make (about 1 s of CPU less per process, the final collections included)."""
    import gc

    gc.freeze()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: object, ids: list[str]) -> None:
    """In the xdist controller: start the shared builds the collected tests need."""
    from functools import partial

    from tests.support.consumer import NAME, SYNTH_NAME, build_consumer, build_examples_synth
    from tests.support.shared import prefetch
    from tests.support.synth import DEFAULT_PLATFORM, build_default_platform

    factory = node.config._tmp_path_factory  # type: ignore[attr-defined]
    builds = {"assembly": (DEFAULT_PLATFORM, build_default_platform), "consumer": (NAME, build_consumer),
              "examples_synth": (SYNTH_NAME, partial(build_examples_synth, factory))}
    for fixture, folders in SHARED_BUILDS.items():
        if any(nodeid.startswith(folders) for nodeid in ids):
            prefetch(factory, *builds[fixture])


def pytest_unconfigure(config: pytest.Config) -> None:
    from tests.support.shared import join_prefetches

    join_prefetches()


# Programs a test not marked slow must not start (the fast loop runs none): the CDK CLI and Node.js (but the jsii
# kernel every in-process CDK test uses), Python itself (a subprocess that imports the CDK, a server), scanners.
HEAVY_PROGRAMS = ("cdk", "node", "checkov", "zizmor", "check-jsonschema", "moto_server", "aws")


def _heavy(argv: object) -> str | None:
    args = [str(a) for a in argv] if isinstance(argv, list | tuple) else [str(argv)]
    if not args or any("jsii-runtime" in a for a in args):
        return None
    program = os.path.basename(args[0].split()[0]) if args[0].strip() else ""
    if program in HEAVY_PROGRAMS or program.startswith("python") or args[0] == sys.executable:
        return " ".join(args)[:200]
    return None


@pytest.fixture(autouse=True)
def fast_tests_start_no_heavy_process(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that is not ``slow`` starts no CDK CLI, no Python, no scanner: it fails saying which one it started."""
    if request.node.get_closest_marker("slow"):
        yield
        return
    started: list[str] = []
    original = subprocess.Popen.__init__

    def watched(self, args, *rest, **kwargs):  # type: ignore[no-untyped-def]
        heavy = _heavy(args)
        if heavy:
            started.append(heavy)
        original(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = watched  # type: ignore[method-assign]
    try:
        yield
    finally:
        subprocess.Popen.__init__ = original  # type: ignore[method-assign]
    if started:
        pytest.fail(f"{request.node.nodeid} is not marked slow but started {started}: mark it "
                    "@pytest.mark.slow (tests/conftest.py says what is slow)", pytrace=False)


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """URL of a moto server (S3, SQS, ...) on loopback, shared by the whole session."""
    with moto_server() as url:
        yield url
