"""The library as another team gets it (tests/examples): the wheel built from a copy of this checkout's sources,
installed with its dependencies into a fresh venv outside the repository; once per test run."""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.shared import built_once
from tests.support.synth import REPO, cli_env

NAME = "consumer"  # its folder in the run's base temp folder


@dataclass(frozen=True)
class Consumer:
    venv: Path
    wheel: Path

    def env(self) -> dict[str, str]:
        env = cli_env()
        env["PATH"] = f"{self.venv / 'bin'}:{REPO / 'node_modules' / '.bin'}:/usr/bin:/bin"
        env.pop("PYTHONPATH", None)
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # the first example compiles what it imports, for the others
        return env


def build_consumer(root: Path) -> None:
    """The wheel, built from a copy of the sources (the repository is left untouched), and a fresh venv with it
    (and cdk-nag, which consumers bring themselves) installed from the package registry.

    ``--no-compile``: pip would byte-compile all of site-packages (about 20 s of CPU, most of it aws-cdk-lib's
    modules no example imports); Python compiles what the examples import on first use instead, and writes it
    (``Consumer.env``), once for all of them."""
    source = root / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for name in ("constructs_lib", "charts", "lambda", "sidecar"):
        shutil.copytree(REPO / name, source / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(root / "wheel"),
                    str(source)], check=True, capture_output=True, text=True, timeout=300)
    (wheel,) = (root / "wheel").glob("*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    install = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "--no-compile", "-c", str(REPO / "constraints.txt"), str(wheel), "cdk-nag"],
        capture_output=True, text=True, timeout=1200, check=False)
    assert install.returncode == 0, install.stderr[-3000:]


def consumer_for(factory: pytest.TempPathFactory) -> Consumer:
    """The run's one consumer (tests/support/shared.py): built by the first worker that asks, or already by the
    controller, which starts it as soon as a worker has collected an example's test (tests/conftest.py)."""
    root = built_once(factory, NAME, build_consumer)
    (wheel,) = (root / "wheel").glob("*.whl")
    return Consumer(root / "venv", wheel)
