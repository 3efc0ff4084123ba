"""No test asserts a duration, a rate or a ratio (issue 30, item 1): an ordering comparison (``<``, ``<=``, ``>``,
``>=``) inside an ``assert`` over a clock reading (``time.monotonic()``, ``time.time()``, ``time.perf_counter()``...)
or over a name assigned from a difference of them. Waiting is bounded by a safety timeout instead
(``tests/support/waiting.py``), and figures live in ``benchmarks/`` with their command. A clock value used as a
timestamp (a token's ``exp``) is not a duration and is not flagged."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.synth import REPO

CLOCKS = {"monotonic", "monotonic_ns", "time", "time_ns", "perf_counter", "perf_counter_ns", "process_time"}
ORDERING = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _is_clock(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CLOCKS
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "time")


def timing_assertions(source: str) -> list[int]:
    """The line of every assert in ``source`` that orders a duration."""
    tree = ast.parse(source)
    durations = {target.id for node in ast.walk(tree) if isinstance(node, ast.Assign | ast.AnnAssign)
                 and node.value is not None and isinstance(node.value, ast.BinOp)
                 and any(_is_clock(part) for part in ast.walk(node.value))
                 for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                 if isinstance(target, ast.Name)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assert):
            continue
        for compare in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
            if not any(isinstance(op, ORDERING) for op in compare.ops):
                continue
            parts = [part for operand in (compare.left, *compare.comparators) for part in ast.walk(operand)]
            if any(_is_clock(part) or (isinstance(part, ast.Name) and part.id in durations) for part in parts):
                found.append(node.lineno)
                break
    return found


def test_no_test_orders_a_duration() -> None:
    found = [f"{path.relative_to(REPO)}:{line}" for path in sorted((REPO / "tests").rglob("*.py"))
             for line in timing_assertions(path.read_text(encoding="utf-8"))]
    assert found == [], "a test asserts a duration (move it to benchmarks/, or bound the wait with a safety timeout)"


def test_the_check_finds_the_shapes_it_forbids_and_passes_a_timestamp() -> None:
    """A control: what the check must find, and what it must leave alone."""
    forbidden = ("import time\n"
                 "started = time.monotonic()\n"
                 "assert time.monotonic() - started < 5\n"
                 "took = time.perf_counter() - started\n"
                 "assert 0.1 <= took\n"
                 "assert (time.time() - started) / 2 > 0.15\n")
    assert timing_assertions(forbidden) == [3, 5, 6]
    allowed = ("import time\n"
               "assert verify(exp=int(time.time()) - 10) == 'alice'\n"
               "assert eventually(lambda: ready(), safety_timeout=60)\n"
               "assert count < 5\n")
    assert timing_assertions(allowed) == []


def test_the_check_reads_every_test_file() -> None:
    assert len(list((REPO / "tests").rglob("test_*.py"))) > 100  # (the path is right: not an empty glob)
    assert Path(__file__).name == "test_no_timing_assertions.py"
