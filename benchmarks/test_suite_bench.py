"""How long the test suite takes: ``make test``'s pytest command (the whole suite) and ``make test-fast``'s (every
test not marked slow), with the load average before and after each run, on this machine.

    .venv/bin/python benchmarks/test_suite_bench.py [--runs 3] [--what both|suite|fast] [--workers 2]
        [--checkout PATH ...] [--json results.json]

Each ``--checkout`` (default: this one) is a checkout with its own ``.venv`` and ``node_modules`` (``make setup``);
with several, runs alternate between them, so that each meets the same conditions (compare a branch with the
commit it started from: ``git worktree add /tmp/base <commit>``, then symlink or set up its .venv and
node_modules). Timings on a shared machine are noisy: each line says the load average (1 min) before and after,
and the CPU seconds the run used (its processes and their children), which depend less on the other load.
Nothing here is a test: the suite's own assertions are not timed.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import statistics
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMMANDS = {
    "suite": ["-n", "{workers}", "--dist", "loadgroup"],  # make test
    "fast": ["-n", "{workers}", "--dist", "loadgroup", "-m", "not slow"],  # make test-fast
}
SUMMARY = re.compile(r"^=*\s*(?P<counts>\d+ (?:passed|failed|error).*?) in (?P<seconds>[\d.]+)s", re.M)


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(checkout: Path, what: str, workers: int) -> dict[str, object]:
    args = [arg.format(workers=workers) for arg in COMMANDS[what]]
    command = [str(checkout / ".venv" / "bin" / "python"), "-m", "pytest", *args, "-q", "-p", "no:cacheprovider"]
    load_before, cpu_before, started = load_average(), children_cpu(), time.perf_counter()
    result = subprocess.run(command, cwd=checkout, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    summaries = list(SUMMARY.finditer(result.stdout))
    summary = summaries[-1] if summaries else None
    return {
        "checkout": str(checkout), "what": what, "workers": workers, "wall_s": round(wall, 1),
        "pytest_s": float(summary["seconds"]) if summary else None,
        "cpu_s": round(children_cpu() - cpu_before, 1), "load_before": load_before, "load_after": load_average(),
        "result": summary["counts"] if summary else f"exit {result.returncode}", "exit": result.returncode,
    }


def _median(values: list[object]) -> str:
    numbers = [float(v) for v in values if isinstance(v, int | float)]
    return f"{statistics.median(numbers):.1f}" if numbers else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--what", choices=("both", "suite", "fast"), default="both")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--checkout", type=Path, action="append", help="default: this checkout")
    parser.add_argument("--json", type=Path, help="also write every run here")
    options = parser.parse_args()
    checkouts = [c.resolve() for c in options.checkout or [REPO]]
    kinds = ["suite", "fast"] if options.what == "both" else [options.what]
    runs = []
    for index in range(options.runs):
        for what in kinds:
            for checkout in checkouts:
                run = run_once(checkout, what, options.workers)
                runs.append(run)
                print(f"run {index + 1} {what:5} {checkout.name}: {run['wall_s']} s wall, pytest {run['pytest_s']} s, "
                      f"{run['cpu_s']} CPU s, load {run['load_before']} -> {run['load_after']}: {run['result']}",
                      flush=True)
    print("\nmedians (wall s, pytest s, CPU s):")
    for what in kinds:
        for checkout in checkouts:
            mine = [r for r in runs if r["what"] == what and r["checkout"] == str(checkout)]
            medians = [_median([r[key] for r in mine]) for key in ("wall_s", "pytest_s", "cpu_s")]
            loads = ", ".join(f"{r['load_before']}-{r['load_after']}" for r in mine)
            print(f"  {what:5} {checkout.name}: {' / '.join(medians)} (load {loads})")
    if options.json:
        options.json.write_text(json.dumps(runs, indent=1) + "\n")


if __name__ == "__main__":
    main()
