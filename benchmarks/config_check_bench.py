"""CPU of one config check (``platform_config.parse_config``) of a config file, warm, in one process: this process's
own CPU and that of its live descendants (the jsii kernel, whose round trips a check makes), per check.

    .venv/bin/python -m benchmarks.config_check_bench [--config config/default.yaml] [--checks 30] [--rounds 5]

Prints the least and the median of the rounds (docs/testing.md, Figures). Nothing here is a test.
"""

from __future__ import annotations

import argparse
import copy
import time
from pathlib import Path

import yaml

from benchmarks.cpu_profile import _descendants_cpu
from platform_config import parse_config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=Path("config/default.yaml"))
    parser.add_argument("--checks", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    data = yaml.safe_load(args.config.read_text())
    parse_config(copy.deepcopy(data))  # warm: imports, the kernel's first calls
    rounds: list[tuple[float, float]] = []
    for _ in range(args.rounds):
        own, kernel = time.process_time(), _descendants_cpu()
        for _ in range(args.checks):
            parse_config(copy.deepcopy(data))
        rounds.append(((time.process_time() - own) / args.checks, (_descendants_cpu() - kernel) / args.checks))
    rounds.sort(key=sum)
    least, median = rounds[0], rounds[len(rounds) // 2]
    print(f"one config check of {args.config}: least {least[0]:.4f} s Python + {least[1]:.4f} s kernel, "
          f"median {median[0]:.4f} + {median[1]:.4f} s of CPU ({args.rounds} rounds of {args.checks})")


if __name__ == "__main__":
    main()
