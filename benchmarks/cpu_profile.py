"""CPU seconds per test and per file, as a pytest plugin: where the suite's CPU goes, whatever the machine's load.

    .venv/bin/python -m pytest tests/unit -n 0 -q -p benchmarks.cpu_profile [--cpu-profile-out cpu.tsv]

Wall times (``--durations``) on a shared machine say more about the other load than about a test; this counts the
CPU each test used (setup, call and teardown): this process's own, that of the subprocesses it waited for, and that
of its live descendants (the jsii kernel, a moto or sidecar server started by a fixture), read from ``/proc``. A
fixture's cost falls on the first test that uses it. The time this plugin spends reading ``/proc`` is not counted.
Run it with ``-n 0`` (each xdist worker would write its own table). At the end it prints the files that used most
CPU and the most expensive tests; ``--cpu-profile-out`` writes every test's line (nodeid, CPU seconds) as TSV.
Nothing here is a test: it is a measuring tool (docs/testing.md, Figures).
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path

import pytest

_TICKS = os.sysconf("SC_CLK_TCK")


def _descendants_cpu() -> float:
    """CPU seconds (user + system) of this process's live descendants, by their /proc/PID/stat."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        parents[int(entry)] = int(fields[1])
        cpu[int(entry)] = sum(int(f) for f in fields[11:15]) / _TICKS  # its own and its reaped children's
    ours, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - ours
        ours |= frontier
    return sum(cpu[pid] for pid in ours)


class CpuProfile:
    def __init__(self, out: str | None) -> None:
        self.out = out
        self.per_test: dict[str, float] = {}
        self.overhead = 0.0
        self.dead = 0.0  # CPU of descendants that ended between two readings (moved to the reaped count)

    def total(self) -> float:
        started = time.process_time()
        times = os.times()
        value = times.user + times.system + times.children_user + times.children_system + _descendants_cpu()
        self.overhead += time.process_time() - started
        return value - self.overhead

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, None, None]:
        before = self.total()
        yield
        self.per_test[item.nodeid] = max(0.0, self.total() - before)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        by_file: dict[str, float] = defaultdict(float)
        for nodeid, seconds in self.per_test.items():
            by_file[nodeid.split("::")[0]] += seconds
        write = terminalreporter.write_line
        write(f"CPU by file ({sum(by_file.values()):.1f} s in {len(self.per_test)} tests; "
              f"reading /proc took {self.overhead:.1f} s, not counted)")
        for path, seconds in sorted(by_file.items(), key=lambda kv: -kv[1])[:40]:
            write(f"{seconds:8.1f} s  {path}")
        write("CPU by test (top 40)")
        for nodeid, seconds in sorted(self.per_test.items(), key=lambda kv: -kv[1])[:40]:
            write(f"{seconds:8.2f} s  {nodeid}")
        if self.out:
            Path(self.out).write_text("".join(f"{n}\t{s:.3f}\n" for n, s in self.per_test.items()))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-profile-out", default=None, help="write each test's CPU seconds here (TSV)")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(CpuProfile(config.getoption("--cpu-profile-out")), "cpu_profile")
